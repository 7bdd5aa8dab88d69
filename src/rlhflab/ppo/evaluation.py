"""Held-out comparison of a policy with the reference: proxy reward, KL to the reference
and diversity of samples on prompts never trained on; gold reward and grammaticality
when the prompts come from the embedded world (`world` is None otherwise). Sampled and
scored by the rollout itself (`make_rollout`, the run's components), at the evaluation's
own decoding settings, always by the `sample` component on the trained weights: whatever
samples the rollouts (`rollout.engine`), the evaluation measures the policy itself, so a
weight sync that did not take cannot hide in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlhflab.metrics.diversity import distinct_n, self_bleu
from rlhflab.ppo.rollout import make_rollout
from rlhflab.ppo.samplers import NativeSampler
from rlhflab.seeding import RowStreams

if TYPE_CHECKING:
    from rlhflab.ppo.state import PPOState


@torch.no_grad()
def evaluate_policy(state: PPOState, world, prompts: list[str], response_length: int, temperature: float,
                    streams: RowStreams, batch_size: int = 256) -> dict[str, float]:
    """The held-out metrics of the state's policy as it is now. Every process returns the
    same metrics (the rollout gathers the rows). Prompt i draws from stream i at any
    chunking."""
    gold, proxy, kl, lengths, eos, texts = [], [], [], [], [], []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        rollout, _ = make_rollout(state, chunk, streams.subset(list(range(start, start + len(chunk)))),
                                  response_length, temperature, NativeSampler(state.components.sample))
        kl += (rollout.logprobs - rollout.ref_logprobs).sum(1).tolist()  # both 0 outside the mask
        proxy += rollout.proxy.tolist()
        texts += rollout.responses
        gold += world.gold(chunk, rollout.responses) if world is not None else []
        lengths += rollout.mask.sum(1).tolist()
        eos += rollout.has_eos.tolist()
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
