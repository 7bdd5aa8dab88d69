"""The logged statistics of one rollout batch against loops over its real tokens (the second
path): a statistic taken over padding, over the wrong rows or with the wrong estimator
differs. The text statistics (distinct-n, self-BLEU) are held by tests/test_metrics.py."""

import math
import statistics

import torch

from rlhflab.metrics.diversity import distinct_n, identical_fraction, self_bleu
from rlhflab.ppo.rollout import Rollout
from rlhflab.ppo.trainer import Advantages, rollout_metrics


def ragged(seed: int = 0, B: int = 5, T: int = 7):
    g = torch.Generator().manual_seed(seed)
    lengths = [7, 3, 5, 1, 6][:B]
    mask = torch.zeros((B, T), dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True

    def noise(*shape):  # what padding holds must not matter: fill it with large numbers
        x = torch.randn(*shape, generator=g)
        return torch.where(mask, x, torch.full_like(x, 1e3)) if shape == (B, T) else x

    rollout = Rollout(prompts=["a", "b", "a", "c", "d"][:B], responses=["x y", "x", "y z w", "", "x y"][:B],
                      prompt_ids=torch.zeros((B, 2), dtype=torch.long), prompt_mask=torch.ones((B, 2), dtype=torch.bool),
                      response_ids=torch.zeros((B, T), dtype=torch.long), mask=mask,
                      sampled_logprobs=noise(B, T) - 2, logprobs=noise(B, T) - 2, ref_logprobs=noise(B, T) - 2,
                      values=noise(B, T), proxy=noise(B), scores=noise(B), has_eos=torch.tensor([1, 1, 0, 1, 0][:B]).bool())
    adv = Advantages(rewards=noise(B, T), kl=noise(B, T), advantages=noise(B, T), raw_advantages=noise(B, T),
                     returns=noise(B, T))
    return rollout, adv, lengths


def test_every_statistic_is_that_of_the_real_tokens():
    rollout, adv, lengths = ragged()
    m = rollout_metrics(rollout, adv, kl_coef=0.05, full_mismatch=True)
    rows = range(len(lengths))

    def real(x, b):
        return [float(x[b, t]) for t in range(lengths[b])]

    k1 = [sum(a - r for a, r in zip(real(rollout.logprobs, b), real(rollout.ref_logprobs, b))) for b in rows]
    k3 = [sum(math.exp(r - a) - (r - a) - 1 for a, r in zip(real(rollout.logprobs, b), real(rollout.ref_logprobs, b)))
          for b in rows]
    raw = [x for b in rows for x in real(adv.raw_advantages, b)]
    returns = [x for b in rows for x in real(adv.returns, b)]
    values = [x for b in rows for x in real(rollout.values, b)]
    residual = [r - v for r, v in zip(returns, values)]
    diffs = [a - s for b in rows for a, s in zip(real(rollout.logprobs, b), real(rollout.sampled_logprobs, b))]
    expected = {
        "reward/proxy_mean": statistics.fmean(rollout.proxy.tolist()),
        "reward/proxy_std": statistics.stdev(rollout.proxy.tolist()),
        "reward/score_mean": statistics.fmean(rollout.scores.tolist()),
        "reward/total_mean": statistics.fmean(sum(real(adv.rewards, b)) for b in rows),
        "kl/mean": statistics.fmean(k1), "kl/k3_mean": statistics.fmean(k3), "kl/coef": 0.05,
        "adv/mean": statistics.fmean(raw), "adv/std": statistics.pstdev(raw),
        "value/explained_variance": 1 - statistics.pvariance(residual) / statistics.pvariance(returns),
        "response/length_mean": statistics.fmean(lengths),
        "reward/length_corr": statistics.correlation(rollout.proxy.tolist(), [float(n) for n in lengths]),
        "response/eos_rate": 3 / 5,
        "response/distinct_1": distinct_n(rollout.responses, 1), "response/distinct_2": distinct_n(rollout.responses, 2),
        "response/self_bleu": self_bleu(rollout.responses),
        "response/identical_frac": identical_fraction(rollout.responses),
        "prompts/unique_frac": 4 / 5, "tokens/generated": float(sum(lengths)),
        "mismatch/logp_abs_diff": statistics.fmean(abs(d) for d in diffs),
        "mismatch/kl": statistics.fmean(math.exp(d) - d - 1 for d in diffs),
        "mismatch/is_ratio_mean": statistics.fmean(math.exp(d) for d in diffs),
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert math.isclose(m[key], value, rel_tol=1e-4, abs_tol=1e-5), (key, m[key], value)


def test_without_a_separate_sampler_only_the_logprob_gap_is_logged():
    rollout, adv, _ = ragged()
    m = rollout_metrics(rollout, adv, kl_coef=0.05)
    assert {k for k in m if k.startswith("mismatch/")} == {"mismatch/logp_abs_diff"}


def test_responses_of_one_length_log_no_length_correlation():
    rollout, adv, _ = ragged()
    full = torch.ones_like(rollout.mask)
    from dataclasses import replace

    m = rollout_metrics(replace(rollout, mask=full), adv, kl_coef=0.05)
    assert "reward/length_corr" not in m


def test_the_reward_is_the_standardised_score_less_the_penalty_of_a_response_without_eos():
    from rlhflab.ppo.components import standardise
    from rlhflab.ppo.reward import RewardFunction

    raw = torch.tensor([1.0, -2.0, 0.5])
    reward = RewardFunction(None, 0.5, 2.0, True, 1.5, lambda model, ids, mask: raw, standardise, None)
    proxy, scores = reward(torch.zeros((3, 4), dtype=torch.long), torch.ones((3, 4), dtype=torch.bool),
                           torch.tensor([True, False, True]))
    assert proxy.tolist() == [0.25, -1.25, 0.0]
    assert scores.tolist() == [0.25, -2.75, 0.0]  # only the response without EOS pays
