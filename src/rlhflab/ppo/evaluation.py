"""Held-out comparison of a policy with the reference: proxy reward, KL to the reference
and diversity of samples on prompts never trained on; gold reward and grammaticality
when the prompts come from the embedded world (`world` is None otherwise)."""

from __future__ import annotations

import torch

from rlhflab.data.batching import decode_responses, encode_prompts, join_prompt_response
from rlhflab.metrics.diversity import distinct_n, self_bleu
from rlhflab.models.forward import response_logprobs
from rlhflab.models.sampling import sample_responses


@torch.no_grad()
def evaluate_policy(
    lm, reference, reward, world, tokenizer, prompts: list[str], response_length: int,
    temperature: float, generator: torch.Generator, batch_size: int = 256,
) -> dict[str, float]:
    lm.eval()
    gold, proxy, kl, lengths, eos, texts = [], [], [], [], [], []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        prompt_ids, prompt_mask = (t.to(next(lm.parameters()).device) for t in encode_prompts(tokenizer, chunk))
        s = sample_responses(lm, prompt_ids, prompt_mask, response_length, temperature,
                             tokenizer.eos_token_id, tokenizer.pad_token_id, generator)
        ids, mask = join_prompt_response(prompt_ids, prompt_mask, s.response_ids, s.mask)
        P = prompt_ids.shape[1]
        policy_lp = response_logprobs(lm, ids, mask, P, temperature)
        ref_lp = response_logprobs(reference, ids, mask, P, temperature)
        kl += ((policy_lp - ref_lp) * s.mask).sum(1).tolist()
        proxy += reward(ids, mask, s.has_eos)[0].tolist()
        responses = decode_responses(tokenizer, s.response_ids, s.mask)
        texts += responses
        if world is not None:
            gold += world.gold(chunk, responses)
        lengths += s.mask.sum(1).tolist()
        eos += s.has_eos.tolist()
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
