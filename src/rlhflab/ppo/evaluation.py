"""Held-out comparison of a policy with the reference: proxy reward, KL to the reference
and diversity of samples on prompts never trained on; gold reward and grammaticality
when the prompts come from the embedded world (`world` is None otherwise)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, ContextManager

import torch

from rlhflab.data.batching import decode_responses, join_prompt_response
from rlhflab.distributed import Cluster
from rlhflab.metrics.diversity import distinct_n, self_bleu
from rlhflab.models.forward import response_logprobs
from rlhflab.models.sampling import sample_responses, sample_share
from rlhflab.seeding import RowStreams


@torch.no_grad()
def evaluate_policy(
    lm, reference, reward, world, tokenizer, prompts: list[str], response_length: int,
    temperature: float, streams: RowStreams, batch_size: int = 256, cluster: Cluster = Cluster.single(),
    full_weights: Callable[[], ContextManager] = nullcontext,
) -> dict[str, float]:
    """The held-out metrics of `lm`. Under several processes each samples and scores its
    share of every chunk of prompts; the per-prompt results are gathered, so every
    process returns the same metrics. Prompt i draws from stream i at any chunking.
    `full_weights()` makes every weight of `lm` present for a chunk's sampling (FSDP2)."""
    lm.eval()
    gold, proxy, kl, lengths, eos, texts = [], [], [], [], [], []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        chunk_streams = streams.subset(list(range(start, start + len(chunk))))
        with full_weights():
            share = sample_share(sample_responses, lm, tokenizer, chunk, response_length, temperature, chunk_streams,
                                 cluster)
            s = share.samples
            ids, mask = join_prompt_response(share.prompt_ids, share.prompt_mask, s.response_ids, s.mask)
            P = share.prompt_ids.shape[1]
            policy_lp = response_logprobs(lm, ids, mask, P, temperature)
            ref_lp = response_logprobs(reference, ids, mask, P, temperature)  # under LoRA, the policy's weights
        responses = decode_responses(tokenizer, s.response_ids, s.mask)
        local_chunk = [chunk[i] for i in share.rows.tolist()]
        rows = {
            "kl": ((policy_lp - ref_lp) * s.mask).sum(1).tolist(),
            "proxy": reward(ids, mask, s.has_eos)[0].tolist(),
            "text": responses,
            "gold": world.gold(local_chunk, responses) if world is not None else [],
            "length": s.mask.sum(1).tolist(),
            "eos": s.has_eos.tolist(),
        }
        parts = cluster.gather_lists([rows])  # one gather a chunk: every process's columns, in rank order
        whole = {name: [value for part in parts for value in part[name]] for name in rows}
        kl += whole["kl"]
        proxy += whole["proxy"]
        texts += whole["text"]
        gold += whole["gold"]
        lengths += whole["length"]
        eos += whole["eos"]
    n = len(prompts)
    full = [f"{p} {r}" for p, r in zip(prompts, texts)]
    known = {"gold_mean": sum(gold) / n, "grammatical_rate": world.grammatical_rate(full)} if world is not None else {}
    return known | {
        "proxy_mean": sum(proxy) / n,
        "kl_mean": sum(kl) / n,
        "distinct_2": distinct_n(texts, 2),
        "self_bleu": self_bleu(texts),
        "length_mean": sum(lengths) / n,
        "eos_rate": sum(eos) / n,
    }
