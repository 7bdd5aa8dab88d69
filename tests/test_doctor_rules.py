"""Every detector on a synthetic trace holding exactly one pathology (it fires, at the
right onset within a tolerance) and on healthy traces (nothing fires)."""

import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlhflab.doctor.causes import CheckupVerdict
from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.findings import Change
from rlhflab.doctor.formats import DIALECTS_BY_NAME, render_change, verify_command
from rlhflab.doctor.formats.build import derive_equivalents
from rlhflab.doctor.rules import RULE_NAMES, RULES
from rlhflab.doctor.rules.kl import KL_EARLY_GROWTH, KL_UNPENALISED_GROWTH
from rlhflab.doctor.settings import RunSettings
from rlhflab.doctor.signals import rolling_median, window
from rlhflab.doctor.table import MetricTable

N = 80


def healthy_records(seed: int = 0, n: int = N, gold: bool = True) -> list[dict]:
    """A trace shaped like a healthy demo run, with noise."""
    rng = random.Random(seed)
    noise = lambda scale: rng.gauss(0, scale)  # noqa: E731
    records = []
    for i in range(n):
        t = i / (n - 1)
        record = {
            "step": i,
            "reward/proxy_mean": 1.5 * (1 - math.exp(-3 * t)) + noise(0.05),
            "reward/proxy_std": 0.8 + noise(0.02),
            "reward/total_mean": 1.2 * t + noise(0.05),
            "kl/mean": 4.0 * t + abs(noise(0.2)),
            "kl/k3_mean": 3.5 * t + abs(noise(0.2)),
            "kl/coef": 0.2,
            "policy/entropy": 2.0 - 0.6 * t + noise(0.03),
            "policy/approxkl": 0.05 + abs(noise(0.01)),
            "policy/clipfrac": 0.1 + abs(noise(0.02)),
            "policy/ratio_mean": 1.0 + noise(0.01),
            "policy/ratio_max": 3.0 + abs(noise(1.0)),
            "policy/loss": noise(0.01),
            "policy/grad_norm": 1.0 + abs(noise(0.2)),
            "value/loss": 0.1 + abs(noise(0.02)),
            "value/clipfrac": 0.05 + abs(noise(0.01)),
            "value/explained_variance": 0.3 + 0.3 * t + noise(0.05),
            "adv/mean": noise(0.05),
            "adv/std": 0.5 + abs(noise(0.05)),
            "response/length_mean": 12 - 3 * t + noise(0.3),
            "response/eos_rate": 1.0,
            "response/distinct_1": 0.3 + noise(0.01),
            "response/distinct_2": 0.8 - 0.1 * t + noise(0.01),
            "response/self_bleu": 0.15 + 0.1 * t + noise(0.01),
            "response/identical_frac": abs(noise(0.01)),
            "prompts/unique_frac": 1.0,
            "lr": 3e-4,
        }
        if gold:
            record["reward/gold_mean"] = -0.1 + 0.55 * (1 - math.exp(-3 * t)) + noise(0.03)
        records.append(record)
    return records


RM_HEALTHY = [
    {"step": 100, "rm/train_loss": 0.5, "rm/train_acc": 0.78},
    {"step": 199, "rm/train_loss": 0.48, "rm/train_acc": 0.79, "rm/val_acc": 0.75, "rm/gold_agreement": 0.78,
     "rm/length_corr": -0.1},
]


# What the rlhflab format reads from a demo run's config.toml.
DEMO = dict(trainer="rlhflab", kl_coef=0.2, kl_estimator="k1", kl_horizon=256, clip_eps=0.2, value_clip_eps=0.2,
            lr=3e-4, entropy_coef=0.0, batch_size=64, response_length=32, normalize_reward=True,
            missing_eos_penalty=1.0, reward_pairs=24000, reward_epochs=2)


def keep_accounts(records: list[dict]) -> list[dict]:
    """The total reward as a trainer logs it, score - beta x KL, from the trace's own values
    (after whatever a test changed): only a test of that identity breaks it."""
    for r in records:
        if {"reward/total_mean", "reward/proxy_mean", "kl/coef", "kl/mean"} <= r.keys():
            r["reward/total_mean"] = r["reward/proxy_mean"] - r["kl/coef"] * r["kl/mean"]
    return records


def table_of(records, rm=RM_HEALTHY, accounts=True, **settings) -> MetricTable:
    records = keep_accounts([dict(r) for r in records]) if accounts else records
    table = MetricTable.from_records(records + rm, source="synthetic")
    table.settings = RunSettings(**settings)
    derive_equivalents(table)  # as every format does: KL per token from KL per sequence and length
    dialect = DIALECTS_BY_NAME.get(table.settings.trainer)
    if dialect is not None:  # fixes and verification as the trainer's format would set them
        table.vocabulary, table.verifiable = dict(dialect.vocabulary), dialect.verify
    return table


def fired(table: MetricTable) -> dict[str, int]:
    return {f.rule: f.onset_step for f in diagnose(table).findings}


@pytest.mark.parametrize("seed", range(6))
def test_healthy_traces_produce_no_finding(seed):
    assert fired(table_of(healthy_records(seed))) == {}
    assert fired(table_of(healthy_records(seed, gold=False))) == {}


def adaptive_coef(records, target, frozen_from=None, horizon=256):
    """kl/coef of a correct adaptive controller (Ziegler et al. 2019), optionally frozen."""
    coef = 0.2
    for r in records:
        r["kl/coef"] = coef  # the beta this batch's penalty used, then the controller's step
        if frozen_from is None or r["step"] < frozen_from:
            coef *= 1 + max(-0.2, min(0.2, r["kl/mean"] / target - 1)) * 64 / horizon
    return records


def test_healthy_trace_with_adaptive_controller_near_target():
    records = adaptive_coef(healthy_records(0), 6.0)
    assert fired(table_of(records, **DEMO, kl_target=6.0)) == {}


def modify(records, start: int, **functions):
    """Replace metrics from step `start` on: functions map metric -> f(k, old) with k = steps since start."""
    for r in records:
        k = r["step"] - start
        if k >= 0:
            for metric, f in functions.items():
                r[metric.replace("__", "/")] = f(k, r.get(metric.replace("__", "/")))
    return records


def crossing(records, metric, predicate):
    return next(r["step"] for r in records if predicate(r[metric]))


@dataclass(frozen=True)
class Trace:
    """A synthetic run holding exactly one pathology: the rule that must fire on it, at
    `onset` within `tolerance`, and the other rules allowed to fire with it."""

    table: MetricTable
    rule: str
    onset: int
    tolerance: int = 6
    allowed: tuple[str, ...] | set[str] = ()


TRACES: dict[str, list] = {}  # rule -> the functions building its firing traces


def firing_trace(rule: str):
    def register(build):
        TRACES.setdefault(rule, []).append(build)
        return build
    return register


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_every_registered_rule_fires_on_its_traces(rule):
    assert TRACES.get(rule), f"rule {rule} has no firing trace in this file"
    for build in TRACES[rule]:
        trace = build()
        assert trace.rule == rule
        assert_fires(trace.table, trace.rule, trace.onset, trace.tolerance, trace.allowed)


def assert_fires(table, rule, expected_onset, tolerance=6, allowed=()):
    found = fired(table)
    assert rule in found, f"{rule} did not fire; fired: {found}"
    assert abs(found[rule] - expected_onset) <= tolerance, (found[rule], expected_onset)
    extra = set(found) - {rule} - set(allowed)
    assert not extra, f"also fired: {extra}"


@firing_trace("kl_explosion")
def kl_explosion_superlinear_growth():
    records = modify(healthy_records(1), 40, kl__mean=lambda k, old: old + 2 * math.exp(0.12 * k) - 2)
    onset = crossing(records, "kl/mean", lambda v: v > 20)
    return Trace(table_of(records), "kl_explosion", onset, tolerance=8)


@firing_trace("kl_explosion")
def kl_explosion_above_target():
    records = modify(healthy_records(2), 30, kl__mean=lambda k, old: 3 + 0.4 * k)  # 2 x target = 6 at k = 7.5
    records = adaptive_coef(records, 3.0)
    return Trace(table_of(records, **DEMO, kl_target=3.0), "kl_explosion", 38, tolerance=6)


@firing_trace("kl_explosion")
def kl_explosion_per_sequence_without_length():
    # No response length: the per-sequence KL is held to its own early level, not to a number.
    records = modify(healthy_records(3), 40, kl__mean=lambda k, old: old + 2 * math.exp(0.12 * k) - 2)
    records = [{k: v for k, v in r.items() if k != "response/length_mean"} for r in records]
    early = statistics.median(r["kl/mean"] for r in records[window(N):2 * window(N)])
    onset = crossing(records, "kl/mean", lambda v: v > KL_EARLY_GROWTH.value * early)
    return Trace(table_of(records), "kl_explosion", onset, tolerance=8)


@firing_trace("kl_drift_unpenalised")
def kl_drifts_without_a_penalty():
    # beta = 0, per-token KL still under KL_TOKEN_LIMIT, but over 10x its early level by the end.
    records = modify(healthy_records(4, gold=False), 0, kl__coef=lambda k, old: 0.0,
                     kl__mean=lambda k, old: 0.05 + 0.1 * k)
    for r in records:
        r["per_token"] = r["kl/mean"] / r["response/length_mean"]
    early = statistics.median(r["per_token"] for r in records[window(N):2 * window(N)])
    onset = crossing(records, "per_token", lambda v: v > KL_UNPENALISED_GROWTH.value * early)
    for r in records:
        del r["per_token"]
    # A proxy gain bought with that much KL is suspect too.
    return Trace(table_of(records), "kl_drift_unpenalised", onset, tolerance=8, allowed={"reward_hacking_proxy"})


@firing_trace("gold_falling")
def gold_and_proxy_fall_together():
    # Updates that make the policy worse at both: gold falls from step 30, and the proxy with it.
    records = modify(healthy_records(7), 30, reward__gold_mean=lambda k, old: old - 0.012 * k,
                     reward__proxy_mean=lambda k, old: old - 0.01 * k)
    peak = 30 + 2  # the smoothed gold's peak, a few steps into the fall
    onset = crossing(records, "step", lambda step: step > peak + 8)
    return Trace(table_of(records), "gold_falling", onset, tolerance=10, allowed={"no_learning"})


@firing_trace("gold_stalled")
def proxy_climbs_past_the_gold_peak():
    # Gold stops improving at step 40 (easing off within its noise) while the proxy keeps climbing.
    records = modify(healthy_records(5), 40, reward__gold_mean=lambda k, old: 0.35 - 0.001 * k
                     + random.Random(k).gauss(0, 0.03),
                     reward__proxy_mean=lambda k, old: old + 0.03 * k)
    return Trace(table_of(records), "gold_stalled", 40, tolerance=12)


def test_unpenalised_drift_is_a_note_while_the_held_out_score_rises():
    records = modify(healthy_records(4), 0, kl__coef=lambda k, old: 0.0, kl__mean=lambda k, old: 0.05 + 0.1 * k)
    finding = next(f for f in diagnose(table_of(records)).findings if f.rule == "kl_drift_unpenalised")
    assert finding.severity == "low" and "held-out score rose" in finding.title


def test_gold_in_any_unit_is_read_in_its_own_noise():
    # The same over-optimised run with gold in VADER units and in percent of a test set: one finding.
    def run(scale):
        records = modify(healthy_records(6), 30, reward__gold_mean=lambda k, old: old - 0.01 * k,
                         reward__proxy_mean=lambda k, old: old + 0.02 * k)
        return fired(table_of(modify(records, 0, reward__gold_mean=lambda k, old: old * scale)))
    assert run(1.0).get("reward_hacking_gold") == run(100.0).get("reward_hacking_gold") is not None


@firing_trace("kl_negative")
def kl_negative():
    records = modify(healthy_records(3), 20, kl__mean=lambda k, old: -0.1 * k, kl__k3_mean=lambda k, old: 0.1)
    return Trace(table_of(records), "kl_negative", 30, tolerance=6)


def test_kl_controller_moving_the_wrong_way():
    records = healthy_records(4)
    coef = 0.2
    for r in records:
        r["kl/mean"] = 2.0 if r["step"] < 30 else 8.0  # below, then above target
        # An inverted controller: beta falls when KL is above target and rises below.
        coef *= 1 - max(-0.2, min(0.2, r["kl/mean"] / 6.0 - 1)) * 64 / 1000
        r["kl/coef"] = coef
    found = fired(table_of(records, **DEMO, kl_target=6.0))
    assert "kl_controller_wrong_way" in found and found["kl_controller_wrong_way"] <= 5


@firing_trace("kl_controller_wrong_way")
def controller_stuck_off_target():
    records = modify(healthy_records(4), 20, kl__mean=lambda k, old: 12.0)  # 2x target
    records = adaptive_coef(records, 6.0, frozen_from=20)  # beta stops moving at step 20
    # KL at twice the target is also an explosion under the target rule.
    # A frozen adaptive beta is also a coefficient pinned without a fixed controller.
    return Trace(table_of(records, **DEMO, kl_target=6.0), "kl_controller_wrong_way", 21, tolerance=3,
                 allowed={"kl_explosion", "pinned_without_its_condition"})


def test_kl_controller_stuck_off_target():
    records = modify(healthy_records(4), 20, kl__mean=lambda k, old: 12.0)  # 2x target
    records = adaptive_coef(records, 6.0, frozen_from=20)  # beta stops moving at step 20
    found = fired(table_of(records, **DEMO, kl_target=6.0))
    assert "kl_controller_wrong_way" in found and abs(found["kl_controller_wrong_way"] - 21) <= 3


@firing_trace("entropy_collapse")
def entropy_collapse():
    records = modify(healthy_records(5), 30, policy__entropy=lambda k, old: 1.6 * math.exp(-0.1 * k) + 0.05)
    onset = crossing(records, "policy/entropy", lambda v: v < 0.3 * 2.0)
    return Trace(table_of(records), "entropy_collapse", onset, tolerance=6)


@firing_trace("diversity_collapse")
def diversity_collapse():
    records = modify(healthy_records(6), 40, response__distinct_2=lambda k, old: max(0.1, 0.75 - 0.05 * k))
    onset = crossing(records, "response/distinct_2", lambda v: v < 0.4)
    return Trace(table_of(records), "diversity_collapse", onset, tolerance=6)


@firing_trace("identical_responses")
def identical_responses():
    records = modify(healthy_records(7), 50, response__identical_frac=lambda k, old: 0.6)
    return Trace(table_of(records), "identical_responses", 52, tolerance=4)


@firing_trace("template_lock_in")
def template_lock_in():
    """Openings measured from the samples (text/opening_share) locking in from step 50."""
    records = healthy_records(7, gold=False)
    for r in records:
        r["text/opening_share"] = 0.06 + 0.01 * (r["step"] % 3) if r["step"] < 50 else 0.8
    return Trace(table_of(records), "template_lock_in", 52, tolerance=4)


def test_template_lock_in_is_a_note_while_the_held_out_score_rises():
    records = healthy_records(7)  # gold rising to the end
    for r in records:
        r["text/opening_share"] = 0.06 if r["step"] < 50 else 0.8
    found = {f.rule: f for f in diagnose(table_of(records)).findings}
    assert found["template_lock_in"].severity == "low" and "held-out score rose" in found["template_lock_in"].title


@firing_trace("reward_hacking_gold")
def reward_hacking_with_gold():
    records = healthy_records(8)
    for r in records:
        k = r["step"]
        r["reward/proxy_mean"] = 0.04 * k  # keeps rising
        r["reward/gold_mean"] = 0.01 * k if k <= 40 else 0.4 - 0.03 * (k - 40)  # peaks at 40
    # Smoothed gold is 0.15 below its peak about 5 + window/2 steps after it.
    return Trace(table_of(records), "reward_hacking_gold", 47, tolerance=6)


@firing_trace("reward_hacking_proxy")
def length_drift_without_gold():
    records = modify(healthy_records(9, gold=False), 40, response__length_mean=lambda k, old: 9 + 0.5 * k)
    onset = crossing(records, "response/length_mean", lambda v: v > 1.5 * 12)
    return Trace(table_of(records), "reward_hacking_proxy", onset, allowed={"length_blowup"})


def test_reward_hacking_without_gold_from_length_drift():
    records = modify(healthy_records(9, gold=False), 40, response__length_mean=lambda k, old: 9 + 0.5 * k)
    onset = crossing(records, "response/length_mean", lambda v: v > 1.5 * 12)
    assert_fires(table_of(records), "reward_hacking_proxy", onset, tolerance=6, allowed={"length_blowup"})
    # With gold present, the gold rule decides and a rising gold is no hacking: the
    # longer answers are a note (low severity), not a finding.
    with_gold = diagnose(table_of(modify(healthy_records(9), 40, response__length_mean=lambda k, old: 9 + 0.5 * k)))
    assert [(f.rule, f.severity) for f in with_gold.findings] == [("length_blowup", "low")]
    assert with_gold.healthy


@firing_trace("proxy_out_of_range")
def proxy_beyond_training_range():
    records = modify(healthy_records(10), 0, reward__proxy_mean=lambda k, old: 0.03 * k)
    onset = crossing(records, "reward/proxy_mean", lambda v: v > 1.8)
    return Trace(table_of(records, reward_train_max=1.8), "proxy_out_of_range", onset)


def test_proxy_beyond_reward_model_training_range():
    records = modify(healthy_records(10), 0, reward__proxy_mean=lambda k, old: 0.03 * k)
    onset = crossing(records, "reward/proxy_mean", lambda v: v > 1.8)
    assert_fires(table_of(records, reward_train_max=1.8), "proxy_out_of_range", onset, tolerance=6)
    assert fired(table_of(records, reward_train_max=5.0)) == {}


@firing_trace("ratio_off")
def ratio_far_from_one():
    records = modify(healthy_records(11), 30, policy__ratio_mean=lambda k, old: 1.6)
    return Trace(table_of(records), "ratio_off", 30, tolerance=4)


def test_ratio_max_fires_when_its_median_stays_high_not_on_single_spikes():
    # Healthy demo runs have single iterations with ratio_max 70-120 (one token among
    # thousands); a lone spike, or two in a row, is not an explosion.
    spiky = healthy_records(14)
    for step in (10, 11, 40, 60):
        spiky[step]["policy/ratio_max"] = 120.0
    assert "ratio_off" not in fired(table_of(spiky))
    records = modify(healthy_records(14), 30, policy__ratio_max=lambda k, old: 200.0)
    # The median over a window crosses once more than half of the window is high.
    assert_fires(table_of(records), "ratio_off", 30 + window(N) // 2, tolerance=1)


@pytest.mark.parametrize("n", [40, 80])
def test_ratio_mean_off_on_one_iteration_is_not_a_finding(n):
    # A healthy 40-iteration run whose first iteration averaged 1.50 (one token's ratio of
    # 538 among thousands) was called ratio_off when a trailing mean carried that value.
    spiky = healthy_records(15, n=n)
    spiky[0]["policy/ratio_mean"] = 1.6
    spiky[n // 2]["policy/ratio_mean"] = 1.9
    assert "ratio_off" not in fired(table_of(spiky))
    records = modify(healthy_records(15, n=n), n // 3, policy__ratio_mean=lambda k, old: 1.6)
    assert "ratio_off" in fired(table_of(records))


def test_rolling_median_ignores_one_outlier_per_window():
    assert rolling_median([1, 100, 2, 3, 4], 3) == [2, 3, 3]
    assert rolling_median([5.0], 3) == []


@firing_trace("clipfrac_high")
def clipfrac_high():
    records = modify(healthy_records(12), 30, policy__clipfrac=lambda k, old: 0.55)
    return Trace(table_of(records), "clipfrac_high", 32, tolerance=4)


@firing_trace("approxkl_high")
def approxkl_high():
    records = modify(healthy_records(13), 30, policy__approxkl=lambda k, old: 0.8)
    return Trace(table_of(records), "approxkl_high", 32, tolerance=4)


@firing_trace("value_explained_variance_low")
def value_explained_variance_negative():
    records = modify(healthy_records(14), 30, value__explained_variance=lambda k, old: -1.5)
    return Trace(table_of(records), "value_explained_variance_low", 32, tolerance=5)


@firing_trace("non_finite")
def non_finite_values():
    records = modify(healthy_records(15), 33, policy__loss=lambda k, old: float("nan") if k < 2 else old)
    return Trace(table_of(records), "non_finite", 33, tolerance=0)


@firing_trace("updates_skipped")
def updates_skipped():
    records = modify(healthy_records(24), 0, guard__skipped_updates=lambda k, old: 0.0)
    records = modify(records, 45, guard__skipped_updates=lambda k, old: 4.0 if k < 3 else 0.0)
    return Trace(table_of(records), "updates_skipped", 45, tolerance=0)


@firing_trace("grad_norm_spikes")
def grad_norm_spikes():
    records = modify(healthy_records(16), 40, policy__grad_norm=lambda k, old: 50.0 if k % 10 == 0 else old)
    return Trace(table_of(records), "grad_norm_spikes", 40, tolerance=0)


@firing_trace("responses_never_end")
def responses_never_end():
    records = modify(healthy_records(18), 30, response__eos_rate=lambda k, old: 0.0,
                     response__length_mean=lambda k, old: 32.0)
    # The EOS rate falls 1 -> 0 at step 30: the 3-point mean is below 0.5 from step 31.
    return Trace(table_of(records), "responses_never_end", 31, tolerance=2,
                 allowed={"reward_hacking_proxy", "length_blowup"})


@firing_trace("truncation_saturated")
def responses_cut_at_the_limit():
    records = modify(healthy_records(21), 30, response__truncated_frac=lambda k, old: 0.95)
    records = modify(records, 0, response__truncated_frac=lambda k, old: old if old is not None else 0.01)
    return Trace(table_of(records), "truncation_saturated", 31, tolerance=2)


@firing_trace("length_collapse")
def answers_shrink_to_a_few_tokens():
    # Gold falls with the length: the TRL GRPO run of ../shared/real_logs, in small.
    records = modify(healthy_records(22, gold=False), 40, response__length_mean=lambda k, old: max(1.0, 11 - 0.5 * k))
    onset = crossing(records, "response/length_mean", lambda v: v < 0.3 * 12)
    # The trace keeps its 4 nats per sequence as the answers shrink to a token or two: a KL
    # per token that high is the policy far from the reference, and the doctor says so too.
    return Trace(table_of(records), "length_collapse", onset, allowed={"reward_hacking_proxy", "kl_explosion"})


@firing_trace("length_blowup")
def answers_grow_without_gold():
    records = modify(healthy_records(23, gold=False), 30, response__length_mean=lambda k, old: 9 + 0.4 * k)
    onset = crossing(records, "response/length_mean", lambda v: v > 1.6 * 12)
    return Trace(table_of(records), "length_blowup", onset, allowed={"reward_hacking_proxy"})


@firing_trace("reward_spread_collapse")
def groups_score_alike():
    records = modify(healthy_records(24), 0, reward__zero_std_frac=lambda k, old: 0.1)
    records = modify(records, 50, reward__zero_std_frac=lambda k, old: 0.95)
    return Trace(table_of(records), "reward_spread_collapse", 51, tolerance=3)


@firing_trace("dead_gradients")
def gradients_vanish():
    records = modify(healthy_records(25), 45, policy__grad_norm=lambda k, old: 0.0)
    return Trace(table_of(records), "dead_gradients", 45, tolerance=0)


@firing_trace("prompts_narrow")
def prompts_narrow():
    records = modify(healthy_records(19), 0, prompts__unique_frac=lambda k, old: 1 / 64)
    return Trace(table_of(records), "prompts_narrow", 0, tolerance=2)


def rm_trace(rule: str, rm_end: dict, train_acc: float | None = None) -> Trace:
    rm = [dict(RM_HEALTHY[0]), dict(RM_HEALTHY[1])]
    if train_acc is not None:
        rm[0]["rm/train_acc"] = rm[1]["rm/train_acc"] = train_acc
    rm[1].update(rm_end)
    return Trace(table_of(healthy_records(17), rm=rm), rule, 0, tolerance=0)


# Weak everywhere (not overfit); overfit; scoring length.
firing_trace("rm_weak")(lambda: rm_trace("rm_weak", {"rm/val_acc": 0.52, "rm/gold_agreement": 0.55}, 0.55))
firing_trace("rm_overfit")(lambda: rm_trace("rm_overfit", {"rm/val_acc": 0.70}, 0.97))
firing_trace("rm_length_bias")(lambda: rm_trace("rm_length_bias", {"rm/length_corr": 0.8}))


def test_clue_priorities_are_unique_so_their_order_is_defined():
    clues = {c.name: c for rule in RULES for c in rule.clues}.values()
    priorities = [c.priority for c in clues]
    assert len(priorities) == len(set(priorities)), sorted((c.priority, c.name) for c in clues)


def test_missing_metrics_are_reported_not_guessed():
    records = [{k: v for k, v in r.items() if not k.startswith("response/")} for r in healthy_records(0)]
    diagnosis = diagnose(table_of(records, rm=[]))
    assert diagnosis.skipped["diversity_collapse"] == ["response/distinct_2"]
    assert "rm_weak" in diagnosis.skipped


def test_kl_explosion_blames_a_zero_coefficient_first():
    records = modify(healthy_records(1), 0, kl__coef=lambda k, old: 0.0)
    records = modify(records, 40, kl__mean=lambda k, old: old + 2 * math.exp(0.12 * k) - 2)
    diagnosis = diagnose(table_of(records, trainer="rlhflab"))
    finding = next(f for f in diagnosis.findings if f.rule == "kl_explosion")
    assert finding.causes[0].component == "kl_control"
    assert finding.fix.changes == (Change("kl_coef", "set", 0.2),)
    assert verify_command(diagnosis, finding) == "rlhflab verify synthetic --fix ppo.kl_coef=0.2"
    # The same finding in another trainer's log speaks that trainer's language.
    diagnosis = diagnose(table_of(records, trainer="trl-ppo"))
    finding = next(f for f in diagnosis.findings if f.rule == "kl_explosion")
    assert render_change(diagnosis.vocabulary, finding.fix.changes[0]) == "PPOConfig.kl_coef=0.2"
    assert verify_command(diagnosis, finding).startswith("rerun with PPOConfig.kl_coef=0.2")


def test_large_steps_are_blamed_on_hyperparameters():
    records = modify(healthy_records(1), 40, kl__mean=lambda k, old: old + 2 * math.exp(0.12 * k) - 2)
    records = modify(records, 0, policy__approxkl=lambda k, old: 0.5, policy__clipfrac=lambda k, old: 0.4)
    finding = next(f for f in diagnose(table_of(records, **DEMO)).findings if f.rule == "kl_explosion")
    assert finding.causes[0].component == "ppo_hyperparameters"
    assert finding.fix.changes == (Change("lr", "set", 3e-5),)  # the run's 3e-4, 10x smaller


def test_the_smaller_learning_rate_is_a_tenth_of_the_schedules_peak_not_of_its_last_value():
    # No configured rate in the log (a TRL trainer_state.json): the logged rate warms up, then
    # decays linearly towards 0, as TRL's default schedule does; the configured rate is its peak.
    records = modify(healthy_records(1), 40, kl__mean=lambda k, old: old + 2 * math.exp(0.12 * k) - 2)
    records = modify(records, 0, policy__approxkl=lambda k, old: 0.5, policy__clipfrac=lambda k, old: 0.4)
    for i, r in enumerate(records):
        r["lr"] = 3e-4 * min((i + 1) / 5, (len(records) - i) / (len(records) - 4))
    settings = {k: v for k, v in DEMO.items() if k != "lr"}
    finding = next(f for f in diagnose(table_of(records, **settings)).findings if f.rule == "kl_explosion")
    assert max(r["lr"] for r in records) == 3e-4 and records[-1]["lr"] < 1e-5
    assert finding.fix.changes == (Change("lr", "set", 3e-5),)


def test_settings_outside_the_usual_range_are_blamed_with_their_fix():
    # A negative entropy coefficient explains a collapse of diversity, not the KL controller.
    records = modify(healthy_records(20), 40, response__identical_frac=lambda k, old: 0.6)
    settings = DEMO | {"entropy_coef": -0.05}
    finding = next(f for f in diagnose(table_of(records, **settings)).findings if f.rule == "identical_responses")
    assert finding.causes[0].component == "ppo_hyperparameters"
    assert finding.fix.changes == (Change("entropy_coef", "set", 0.0),)
    # A clip range that never clips explains a ratio far from 1.
    records = modify(healthy_records(21), 30, policy__ratio_mean=lambda k, old: 1.6)
    finding = next(f for f in diagnose(table_of(records, **DEMO | {"clip_eps": 1000.0})).findings
                   if f.rule == "ratio_off")
    assert finding.causes[0].component == "ppo_hyperparameters"
    assert finding.fix.changes == (Change("clip_eps", "set", 0.2),)
    assert render_change(DIALECTS_BY_NAME["rlhflab"].vocabulary, finding.fix.changes[0]) == "ppo.clip_eps=0.2"
    # With the usual settings the default ranking stands.
    finding = next(f for f in diagnose(table_of(records, **DEMO)).findings if f.rule == "ratio_off")
    assert finding.causes[0].component == "logprob_bookkeeping"


def test_a_checkup_that_clears_a_component_moves_it_last_and_a_failed_probe_becomes_a_finding():
    records = modify(healthy_records(22), 30, policy__ratio_mean=lambda k, old: 1.6)
    cleared = CheckupVerdict(cleared=frozenset({"logprob_bookkeeping"}))
    causes = [c.component for c in diagnose(table_of(records), checkup=cleared).findings[0].causes]
    assert causes == ["ppo_hyperparameters", "advantages_values", "logprob_bookkeeping"]
    # A checkup that cleared nothing leaves the ranking as it was.
    assert diagnose(table_of(records), checkup=CheckupVerdict()).findings[0].causes[0].component == "logprob_bookkeeping"
    # A failed probe is a finding of its own, even on a run whose metrics look healthy.
    record = {"name": "gae_matches_naive_loop", "component": "advantages_values", "passed": False, "measured": 0.7,
              "tolerance": "<= 0.0001", "detail": "max |gae() - loop|"}
    findings = diagnose(table_of(healthy_records(23)), checkup=CheckupVerdict.from_probes([record])).findings
    assert [(f.rule, f.causes[0].component) for f in findings] == [("checkup_probe_failed", "advantages_values")]
    assert "gae_matches_naive_loop" in findings[0].title
    assert findings[0].evidence[0].observed == {"measured": 0.7}


def test_rolling_median_equals_the_median_of_each_window():
    import statistics

    from rlhflab.doctor.signals import rolling_median

    rng = random.Random(3)
    values = [rng.choice([rng.random(), 1.0, 0.5]) for _ in range(200)]  # ties included
    for width in (1, 2, 3, 8, 13, 200, 201):
        naive = [statistics.median(values[i - width + 1:i + 1]) for i in range(width - 1, len(values))]
        assert rolling_median(values, width) == naive


def test_running_medians_equal_the_median_of_each_prefix():
    from rlhflab.doctor.signals import running_medians

    rng = random.Random(4)
    values = [rng.choice([rng.random(), 2.0, 0.0]) for _ in range(150)]
    assert running_medians(values) == [sorted(values[:i])[i // 2] for i in range(1, len(values))]
    assert running_medians([]) == [] and running_medians([1.0]) == []


@firing_trace("no_learning")
def proxy_flat_while_the_policy_moves():
    records = modify(healthy_records(26, gold=False), 0, reward__proxy_mean=lambda k, old: 0.3 + 0.05 * math.sin(k))
    return Trace(table_of(records), "no_learning", N - N // 16, tolerance=0)


def inverted_coef(records, target, horizon=64):
    """kl/coef of a controller whose update has the wrong sign."""
    coef = 0.2
    for r in records:
        coef *= 1 - max(-0.2, min(0.2, r["kl/mean"] / target - 1)) * 64 / horizon
        r["kl/coef"] = coef
    return records


@firing_trace("kl_controller_wrong_way")
def controller_against_kl_without_a_target_in_the_log():
    # As the zoo's inverted controller: KL under target, so beta climbs, and the higher beta
    # pushes KL further down.
    records = inverted_coef(modify(healthy_records(27), 0, kl__mean=lambda k, old: 4.0 * math.exp(-k / 20)), 6.0)
    return Trace(table_of(records), "kl_controller_wrong_way", 1, tolerance=0)


def test_a_correct_controller_without_a_target_in_the_log_is_not_blamed():
    records = adaptive_coef(modify(healthy_records(28), 0, kl__mean=lambda k, old: 2.0 + 3 * math.sin(k / 5) ** 2),
                            6.0, horizon=32)
    assert "kl_controller_wrong_way" not in fired(table_of(records))


@firing_trace("clip_never_clips")
def the_clip_range_is_off():
    records = modify(healthy_records(29), 0, policy__clipfrac=lambda k, old: 0.0,
                     policy__approxkl=lambda k, old: 0.02 + 0.001 * (k % 3))
    return Trace(table_of(records), "clip_never_clips", 0, tolerance=0)


def test_a_silent_clip_with_a_clip_range_that_never_clips_proposes_the_usual_range():
    records = modify(healthy_records(29), 0, policy__clipfrac=lambda k, old: 0.0,
                     policy__approxkl=lambda k, old: 0.02 + 0.001 * (k % 3))
    settings = {**DEMO, "clip_eps": 1000.0, "value_clip_eps": 1000.0}
    finding = next(f for f in diagnose(table_of(records, **settings)).findings if f.rule == "clip_never_clips")
    assert [(c.setting, c.value) for c in finding.fix.changes] == [("clip_eps", 0.2), ("value_clip_eps", 0.2)]
    # without the settings, the rule's own ranking: the step size first
    plain = next(f for f in diagnose(table_of(records)).findings if f.rule == "clip_never_clips")
    assert plain.fix.changes[0].setting == "lr"

@firing_trace("entropy_minimised")
def a_negative_entropy_coefficient_with_entropy_falling():
    # The healthy trace's entropy falls 0.0076 nats a step under noise 0.03: with w = 5 its
    # smoothed level leaves the start's 3-sigma band (0.04) within the first dozen steps.
    return Trace(table_of(healthy_records(30), **DEMO | {"entropy_coef": -0.05}), "entropy_minimised", 8)


def test_entropy_minimised_needs_the_negative_coefficient_and_a_fall_beyond_noise():
    falling = healthy_records(30)
    assert "entropy_minimised" not in fired(table_of(falling, **DEMO))  # coefficient 0: a healthy fall
    for seed in range(31, 41):  # a flat, noisy entropy: its windows differ by chance only
        noise = random.Random(seed)
        flat = modify(healthy_records(seed), 0, policy__entropy=lambda k, old, noise=noise: 2.0 + noise.gauss(0, 0.05))
        assert "entropy_minimised" not in fired(table_of(flat, **DEMO | {"entropy_coef": -0.05})), seed
    finding = next(f for f in diagnose(table_of(falling, **DEMO | {"entropy_coef": -0.05})).findings
                   if f.rule == "entropy_minimised")
    assert finding.severity == "medium"
    assert finding.fix.changes == (Change("entropy_coef", "set", 0.0),)


def test_more_pairs_is_at_least_the_smallest_published_reward_model_set():
    from rlhflab.doctor.causes import RM_PAIRS_FLOOR

    weak = [{"step": 199, "rm/train_acc": 1.0, "rm/val_acc": 0.55, "rm/gold_agreement": 0.53}]
    for pairs, expected in ((120, RM_PAIRS_FLOOR), (24000, 48000)):
        finding = next(f for f in diagnose(table_of(healthy_records(32), rm=weak, **DEMO | {"reward_pairs": pairs}))
                       .findings if f.rule == "rm_weak")
        # the demo's reward model already trains 2 epochs: that half of the fix is in place, not proposed
        assert finding.fix.changes == (Change("reward_pairs", "set", expected),)
        assert finding.causes[0].in_place == ("reward_epochs=2",)


# --- log identities: each with a firing trace, and healthy traces that keep their accounts -----
@firing_trace("kl_penalty_mismatch")
def penalty_a_sequence_length_times_the_kl():
    """A penalty charged per token with each sequence's whole KL: about 12x beta x KL."""
    records = keep_accounts(healthy_records(4))
    for r in records:
        r["reward/total_mean"] = r["reward/proxy_mean"] - 12 * r["kl/coef"] * r["kl/mean"]
    return Trace(table_of(records, accounts=False, **DEMO), "kl_penalty_mismatch", 1, tolerance=3,
                 allowed={"gold_stalled"})


@firing_trace("kl_penalty_mismatch")
def verl_penalty_twice_the_per_token_kl_times_length():
    """A veRL-style log (per-token KL, mean length, three printed decimals) whose penalty is
    3x beta x KL: outside the product-of-means factor 2."""
    records = []
    for r in healthy_records(5):
        kl_token = r["kl/mean"] / r["response/length_mean"]
        records.append({"step": r["step"], "reward/proxy_mean": round(r["reward/proxy_mean"], 3),
                        "kl/token_mean": round(kl_token, 3), "response/length_mean": round(r["response/length_mean"], 3),
                        "kl/coef": 0.2, "reward/total_mean": round(r["reward/proxy_mean"] - 3 * 0.2 * r["kl/mean"], 3)})
    return Trace(table_of(records, rm=[], accounts=False, kl_in_reward=True), "kl_penalty_mismatch", 5, tolerance=6,
                 allowed={"kl_explosion", "kl_drift_unpenalised"})


def test_penalty_identity_holds_on_healthy_exact_rounded_and_product_logs():
    for seed in range(4):
        assert "kl_penalty_mismatch" not in fired(table_of(healthy_records(seed), **DEMO))
    rounded = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
               for r in keep_accounts(healthy_records(1))]  # a console that prints 3 decimals
    assert "kl_penalty_mismatch" not in fired(table_of(rounded, accounts=False, **DEMO))
    # per-token KL x mean length: the product of means, within its factor
    product = [{"step": r["step"], "reward/proxy_mean": r["reward/proxy_mean"], "kl/coef": 0.2,
                "kl/token_mean": 1.3 * r["kl/mean"] / r["response/length_mean"], "response/length_mean":
                r["response/length_mean"], "reward/total_mean": r["reward/proxy_mean"] - 0.2 * r["kl/mean"]}
               for r in keep_accounts(healthy_records(2))]
    assert "kl_penalty_mismatch" not in fired(table_of(product, rm=[], accounts=False))
    # a KL that is a loss term (GRPO, veRL's use_kl_loss) is not in the reward: no identity
    records = keep_accounts(healthy_records(4))
    for r in records:
        r["reward/total_mean"] = r["reward/proxy_mean"]
    assert "kl_penalty_mismatch" not in fired(table_of(records, accounts=False, kl_in_reward=False))


def test_penalty_identity_says_how_many_times_the_kl_the_penalty_is():
    finding = next(f for f in diagnose(penalty_a_sequence_length_times_the_kl().table).findings
                   if f.rule == "kl_penalty_mismatch")
    assert finding.evidence[0].observed["times_the_kl"] == pytest.approx(12, rel=1e-6)
    assert "12x" in finding.title and finding.causes[0].component == "kl_control"


@firing_trace("first_ratio_not_one")
def first_ratio_off():
    records = healthy_records(6)
    for r in records:
        r["policy/ratio_first"] = 1.0 + 0.02 * (1 + r["step"] % 3)  # old logprobs of another forward
    return Trace(table_of(records, **DEMO), "first_ratio_not_one", 0, tolerance=0)


def test_first_ratio_identity_holds_at_float_rounding_and_reads_single_step_runs():
    records = healthy_records(6)
    for r in records:
        r["policy/ratio_first"] = 1.0 + random.Random(r["step"]).choice([-1, 1]) * 2e-6  # fp32's last bits
    assert "first_ratio_not_one" not in fired(table_of(records, **DEMO))
    # one epoch of one minibatch: the logged ratio is the first minibatch's
    off = modify(healthy_records(6), 0, policy__ratio_mean=lambda k, old: 1.03)
    assert "first_ratio_not_one" in fired(table_of(off, **(DEMO | {"epochs": 1, "minibatches": 1})))
    assert "first_ratio_not_one" not in fired(table_of(off, **(DEMO | {"epochs": 2, "minibatches": 4})))


@firing_trace("kl_coef_not_configured")
def beta_drifting_under_a_fixed_controller():
    records = healthy_records(7)
    for r in records:
        r["kl/coef"] = 0.2 * (1 + 0.001 * r["step"])  # an adaptive controller built for a fixed beta
    return Trace(table_of(records, **(DEMO | {"kl_controller": "fixed"})), "kl_coef_not_configured", 1, tolerance=0)


@firing_trace("kl_coef_not_configured")
def beta_not_the_configured_one():
    records = modify(healthy_records(7), 0, kl__coef=lambda k, old: 0.05)  # the setting ignored, a default used
    return Trace(table_of(records, **DEMO), "kl_coef_not_configured", 0, tolerance=0)


def test_beta_identity_lets_an_adaptive_controller_move_after_its_first_step():
    records = adaptive_coef(healthy_records(0), 6.0)
    assert "kl_coef_not_configured" not in fired(table_of(records, **(DEMO | {"kl_controller": "adaptive"}),
                                                          kl_target=6.0))
    assert "kl_coef_not_configured" not in fired(table_of(healthy_records(0), **(DEMO | {"kl_controller": "fixed"})))


def test_negative_kl_within_its_noise_is_chance_and_beyond_it_is_a_finding():
    rng = random.Random(0)
    near_zero = [dict(r, **{"kl/mean": rng.gauss(0.0, 0.05)}) for r in healthy_records(8)]  # beta huge: KL ~ 0
    assert "kl_negative" not in fired(table_of(near_zero))
    below = [dict(r, **{"kl/mean": rng.gauss(-0.2, 0.05)}) for r in healthy_records(8)]
    finding = next(f for f in diagnose(table_of(below)).findings if f.rule == "kl_negative")
    assert finding.severity == "medium"  # below its noise, above -1 nat


REAL_VERL = Path(__file__).resolve().parents[2] / "shared" / "real_logs" / "verl_ppo_qwen2.5-0.5b_gsm8k_resp256.log"


@pytest.mark.skipif(not REAL_VERL.is_file(), reason="../shared/real_logs is not present")
def test_the_real_verl_penalty_is_beta_x_kl_x_length_within_the_product_of_means_bound():
    from rlhflab.doctor.diagnose import read_and_diagnose
    from rlhflab.doctor.rules.identities import PRODUCT_OF_MEANS, penalty_terms

    table, diagnosis = read_and_diagnose(REAL_VERL)
    terms = penalty_terms(table)
    assert not terms.exact and "kl_penalty_mismatch" not in {f.rule for f in diagnosis.findings}
    ratios = [terms.penalty[s] / (terms.beta[s] * terms.kl[s]) for s in terms.penalty.keys() & terms.kl.keys()
              if terms.beta[s] * terms.kl[s] > 0.005]
    assert len(ratios) > 400 and 1 / PRODUCT_OF_MEANS.value < min(ratios) and max(ratios) < PRODUCT_OF_MEANS.value


def test_the_penalty_identity_holds_exactly_in_a_log_written_by_trl_ppo():
    """tests/fixtures/logs/trl_ppo was written by TRL 1.12's PPOTrainer (kl_coef 0.05): its
    objective/non_score_reward is exactly -0.05 x objective/kl; told another beta, the
    identity breaks and says by how much."""
    from dataclasses import replace

    from rlhflab.doctor.formats import read_log

    table = read_log(Path(__file__).parent / "fixtures" / "logs" / "trl_ppo")
    assert table.settings.kl_controller == "fixed" and table.settings.kl_in_reward
    table.settings = replace(table.settings, kl_coef=0.05)
    assert "kl_penalty_mismatch" not in fired(table)
    table.settings = replace(table.settings, kl_coef=0.1)
    finding = next(f for f in diagnose(table).findings if f.rule == "kl_penalty_mismatch")
    assert finding.evidence[0].observed["times_the_kl"] == pytest.approx(0.5, rel=1e-4)


# --- training-inference mismatch --------------------------------------------------------------
def with_mismatch(records, metric, healthy, bad=None, start=40, seed=0):
    """`metric` at its healthy level with 10% noise on its distance from a perfect match (1
    for a ratio, else 0), and `bad(k)` from `start` on when given."""
    rng = random.Random(seed)
    perfect = 1.0 if metric in ("mismatch/prob_ratio_error", "mismatch/is_ratio_mean") else 0.0
    for r in records:
        k = r["step"] - start
        r[metric] = bad(k) if bad is not None and k >= 0 else perfect + (healthy - perfect) * (1 + 0.1 * rng.gauss(0, 1))
    return records


@firing_trace("sampler_mismatch")
def verl_probability_difference_past_its_faq_limit():
    """veRL's FAQ: training/rollout_probs_diff_mean below 0.005 normally, above 0.01 a precision issue."""
    records = with_mismatch(healthy_records(3), "mismatch/prob_abs_diff", 0.003, lambda k: 0.004 + 0.001 * k)
    return Trace(table_of(records, trainer="verl"), "sampler_mismatch", 46, tolerance=8)


@firing_trace("sampler_mismatch")
def nemo_rl_multiplicative_error_past_105():
    records = with_mismatch(healthy_records(4), "mismatch/prob_ratio_error", 1.01, lambda k: 1.02 + 0.004 * k)
    return Trace(table_of(records, trainer="nemo-rl"), "sampler_mismatch", 48, tolerance=8)


@firing_trace("sampler_mismatch")
def verl_importance_weights_far_below_one():
    records = with_mismatch(healthy_records(5), "mismatch/is_ratio_mean", 1.0, lambda k: max(0.2, 0.95 - 0.02 * k))
    return Trace(table_of(records, trainer="verl"), "sampler_mismatch", 64, tolerance=8)


@pytest.mark.parametrize("trainer, metric, level", [
    ("verl", "mismatch/prob_abs_diff", 0.003),  # under the FAQ's normal 0.005
    ("verl", "mismatch/kl", 0.002), ("verl", "mismatch/is_ratio_mean", 1.0),
    ("nemo-rl", "mismatch/prob_ratio_error", 1.02),  # NeMo-RL's table of observed values: 1.01-1.04
    ("nemo-rl", "mismatch/kl", 3e-4), ("slime", "mismatch/logp_abs_diff", 0.02),
    ("trl-grpo", "mismatch/logp_abs_diff", 0.03),  # below ln 1.05 nats
    ("skyrl", "mismatch/logp_abs_diff", 0.03), ("rlhflab", "mismatch/logp_abs_diff", 0.03),
])
def test_a_mismatch_within_its_trainers_published_limit_is_no_finding(trainer, metric, level):
    records = with_mismatch(healthy_records(6), metric, level)
    assert "sampler_mismatch" not in fired(table_of(records, trainer=trainer))


def test_a_single_spike_past_the_limit_is_not_a_finding_and_the_fix_is_in_the_trainers_keys():
    spike = with_mismatch(healthy_records(7), "mismatch/prob_ratio_error", 1.01)
    spike[50]["mismatch/prob_ratio_error"] = 1.2  # NeMo-RL: investigate spikes; a trend is the problem
    assert "sampler_mismatch" not in fired(table_of(spike, trainer="nemo-rl"))
    table = verl_probability_difference_past_its_faq_limit().table
    finding = next(f for f in diagnose(table).findings if f.rule == "sampler_mismatch")
    assert finding.severity == "high" and finding.causes[0].component == "logprob_bookkeeping"
    from rlhflab.doctor.formats import render_fix
    assert render_fix(table.vocabulary, finding.fix)["changes"] == ["algorithm.rollout_correction.rollout_is=token"]


@firing_trace("sampler_mismatch")
def a_trl_logprob_gap_constant_from_the_start():
    """TRL publishes no limit, but a sampler 0.4 nats per token from the trainer from the first
    step is beyond NeMo-RL's ln 1.05 and slime's 0.1 nats for a logprob gap: a finding at the
    first smoothed step, not only once it grows (it never does)."""
    records = with_mismatch(healthy_records(9), "mismatch/logp_abs_diff", 0.4)
    return Trace(table_of(records, trainer="trl-grpo"), "sampler_mismatch", 0, tolerance=1)


@pytest.mark.parametrize("trainer", ["trl-grpo", "skyrl", "slime", "rlhflab"])
def test_a_constant_logprob_gap_past_the_published_limits_is_high_for_every_trainer_that_logs_it(trainer):
    records = with_mismatch(healthy_records(10), "mismatch/logp_abs_diff", 0.4)
    finding = next(f for f in diagnose(table_of(records, trainer=trainer)).findings if f.rule == "sampler_mismatch")
    assert finding.severity == "high" and finding.onset_step <= 1
    assert "0.1" in finding.evidence[0].threshold  # the higher of the two limits it crosses
    # between the two limits: beyond ln 1.05 (0.049 nats), within slime's 0.1
    between = with_mismatch(healthy_records(10), "mismatch/logp_abs_diff", 0.07)
    finding = next(f for f in diagnose(table_of(between, trainer=trainer)).findings if f.rule == "sampler_mismatch")
    assert "0.04879" in finding.evidence[0].threshold


@firing_trace("sampler_mismatch")
def a_sampler_whose_weights_were_never_synced():
    """Shaped like bench/mismatch_calibration.py's never-synced runs: float noise at first,
    then growing with the policy's drift by 0.08 nats a step. The gap passes NeMo-RL's ln 1.05
    nats at once: the 5-step trailing mean is 0.048 at step 4 and 0.096 at step 5."""
    records = with_mismatch(healthy_records(8), "mismatch/logp_abs_diff", 4.5e-7,
                            lambda k: 4.5e-7 + 0.08 * k, start=2)
    return Trace(table_of(records), "sampler_mismatch", 5, tolerance=2)


@firing_trace("sampler_mismatch")
def a_sampler_lagging_below_the_published_limits():
    """A gap that grows slowly and ends below ln 1.05 nats (0.033): the relative rule. Its
    early level, the median of steps 5-9, is 0.004; 4x that, 0.016, is reached at step 37,
    and by the 5-step trailing mean 2 steps later."""
    records = with_mismatch(healthy_records(8), "mismatch/logp_abs_diff", 0.002, lambda k: 0.002 + 0.0004 * k,
                            start=2)
    return Trace(table_of(records), "sampler_mismatch", 39, tolerance=4)


@pytest.mark.parametrize("seed", range(3))
def test_a_sampler_that_is_the_trainer_is_float_noise_and_no_finding(seed):
    records = with_mismatch(healthy_records(seed), "mismatch/logp_abs_diff", 4.5e-7, seed=seed)
    assert "sampler_mismatch" not in fired(table_of(records, trainer="rlhflab"))


# --- several rewards -----------------------------------------------------------------------------
def with_reward(records, name, level, seed=0, rise=0.0):
    """`name` logged beside the run's rewards: `level` plus `rise` x the run's progress, with noise."""
    rng = random.Random(seed)
    for r in records:
        r[name] = level + rise * r["step"] / (len(records) - 1) + rng.gauss(0, 0.02)
    return records


@firing_trace("rewards_disagree")
def a_loop_logging_a_second_reward_that_stays_flat():
    """The proxy climbs from about 0.1 to 1.5 with noise 0.05 while a reward of the loop's own
    (`reward_judge`, no canonical name) stays at 0.5: the proxy passes its first window's level
    plus 3 sigma (about 0.25) near step 5, its 5-step trailing mean two or three steps later."""
    records = with_reward(healthy_records(11, gold=False), "reward_judge", 0.5)
    return Trace(table_of(records), "rewards_disagree", 8, tolerance=4)


def test_rewards_that_climb_together_or_are_defined_from_one_another_do_not_disagree():
    # a second reward that follows the proxy
    follows = with_reward(healthy_records(12, gold=False), "reward_judge", 0.3, rise=0.8)
    assert "rewards_disagree" not in fired(table_of(follows))
    # the KL-penalised total and the EOS-penalised score are defined from the proxy
    defined = healthy_records(13, gold=False)
    for r in defined:
        r["reward/score_mean"], r["reward/total_mean"] = r["reward/proxy_mean"] - 0.1, 0.2
    assert "rewards_disagree" not in fired(table_of(defined))
    # reward functions that both climb, and the reward their sum
    functions = with_reward(with_reward(healthy_records(14, gold=False), "reward/function/format", 0.1, 1, 0.6),
                            "reward/function/accuracy", 0.0, 2, 0.8)
    for r in functions:
        r["reward/proxy_mean"] = r["reward/function/format"] + r["reward/function/accuracy"]
    assert "rewards_disagree" not in fired(table_of(functions))


def test_a_reward_that_is_a_weighted_sum_of_others_is_no_second_opinion():
    from rlhflab.doctor.rules.hacking import independent_rewards, is_combination
    from rlhflab.doctor.table import Series

    rng = random.Random(0)
    steps = tuple(range(40))
    f = Series(steps, tuple(rng.random() * 0.01 for _ in steps))
    g = Series(steps, tuple(0.2 + 0.01 * s + rng.gauss(0, 0.02) for s in steps))
    total = Series(steps, tuple(100 * a + b for a, b in zip(f.values, g.values)))
    assert is_combination(total, [f, g]) and not is_combination(g, [f])
    assert set(independent_rewards({"reward/f": f, "reward/g": g, "reward/mean": total})) == {"reward/f", "reward/g"}
    assert set(independent_rewards({"reward/g": g, "reward/mean": g})) == {"reward/g"}  # one equal to another


@pytest.mark.parametrize("log, fires", [("tinker_leetcode_llama3.2-3b_g-compilable_easy.jsonl", True),
                                         ("tinker_leetcode_llama3.2-3b_100f+g_easy.jsonl", False)])
def test_the_researchers_loop_with_two_rewards_reads_as_its_manifest_says(log, fires):
    """../shared/real_logs/MANIFEST.md: the trained reward g climbs while the hidden-test reward
    f stays near 0 (reward hacking); its control (reward 100 f + g) is healthy."""
    from pathlib import Path

    from rlhflab.doctor.formats import read_log

    path = Path(__file__).resolve().parents[2] / "shared" / "real_logs" / log
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    findings = {f.rule: f for f in diagnose(read_log(path)).findings}
    assert ("rewards_disagree" in findings) == fires
    if fires:
        assert "reward/g climbed" in findings["rewards_disagree"].title
        assert "--map reward/f=reward/gold_mean" in findings["rewards_disagree"].title


# --- numbers a healthy run cannot produce (rules/impossible.py) ----------------------------------
@firing_trace("updates_do_not_move")
def the_optimizer_steps_on_nothing():
    records = modify(healthy_records(40), 30, policy__approxkl=lambda k, old: 0.0, policy__clipfrac=lambda k, old: 0.0)
    return Trace(table_of(records, epochs=2, minibatches=4), "updates_do_not_move", 40, tolerance=0)


def test_one_step_per_batch_is_at_approxkl_zero_by_construction():
    records = modify(healthy_records(40), 0, policy__approxkl=lambda k, old: 0.0, policy__clipfrac=lambda k, old: 0.0)
    assert "updates_do_not_move" not in fired(table_of(records, epochs=1, minibatches=1))
    assert "updates_do_not_move" not in fired(table_of(records))  # the log does not say how many steps


@firing_trace("kl_stuck_at_zero")
def the_reference_is_the_policy():
    records = modify(healthy_records(41), 0, kl__mean=lambda k, old: 0.0, kl__k3_mean=lambda k, old: 0.0)
    return Trace(table_of(records, **DEMO), "kl_stuck_at_zero", 40, tolerance=0)


def test_a_zero_kl_is_not_held_where_nothing_penalises_it_or_the_policy_does_not_move():
    records = modify(healthy_records(41), 0, kl__mean=lambda k, old: 0.0, kl__k3_mean=lambda k, old: 0.0)
    assert "kl_stuck_at_zero" not in fired(table_of(records, **DEMO | {"kl_coef": 0.0}))
    still = modify([dict(r) for r in records], 0, policy__approxkl=lambda k, old: 0.0,
                   policy__clipfrac=lambda k, old: 0.0, lr=lambda k, old: 0.0)
    assert "kl_stuck_at_zero" not in fired(table_of(still, **DEMO))


@firing_trace("critic_fits_itself")
def the_critic_regresses_onto_itself():
    records = modify(healthy_records(42), 20, value__loss=lambda k, old: 0.0)
    return Trace(table_of(records), "critic_fits_itself", 40, tolerance=0)


@firing_trace("advantages_vanish")
def the_advantages_are_zeroed():
    records = modify(healthy_records(43), 0, adv__std=lambda k, old: 0.0, adv__mean=lambda k, old: 0.0)
    # Their mean, exactly 0 without whitening, is the same zeroing seen again.
    return Trace(table_of(records), "advantages_vanish", 40, tolerance=0, allowed={"pinned_without_its_condition"})


@firing_trace("steps_logged_twice")
def a_resume_that_kept_its_lines():
    table = table_of(healthy_records(45))
    # What the rlhflab reader sets on a run whose metrics hold steps 40-49 twice
    # (tests/test_excuses.py reads such a run).
    table.repeated_steps, table.one_line_per_step = 10, True
    return Trace(table, "steps_logged_twice", 0, tolerance=0)


@firing_trace("pinned_without_its_condition")
def the_ratio_is_one_after_several_steps():
    records = modify(healthy_records(44), 40, policy__ratio_mean=lambda k, old: 1.0)
    return Trace(table_of(records, **DEMO, epochs=2, minibatches=4), "pinned_without_its_condition", 40, tolerance=0)


def test_zero_advantages_of_rewards_that_do_not_vary_are_not_a_bug():
    records = modify(healthy_records(43), 0, adv__std=lambda k, old: 0.0, reward__proxy_std=lambda k, old: 0.0)
    assert "advantages_vanish" not in fired(table_of(records))


@firing_trace("lr_schedule_ends_early")
def the_schedule_ends_mid_run():
    records = modify(healthy_records(44), 30, lr=lambda k, old: 0.0)
    return Trace(table_of(records), "lr_schedule_ends_early", 40, tolerance=0, allowed={"no_learning"})


def test_a_schedule_that_reaches_zero_at_its_last_step_is_healthy():
    records = healthy_records(44)
    for r in records:
        r["lr"] = 3e-4 * (1 - r["step"] / (N - 1))
    assert fired(table_of(records)) == {}


@firing_trace("entropy_frozen")
def the_entropy_is_a_constant():
    records = modify(healthy_records(45), 0, policy__entropy=lambda k, old: 1.8125)
    return Trace(table_of(records), "entropy_frozen", 40, tolerance=0)


def test_an_entropy_printed_too_coarsely_to_move_is_not_frozen():
    records = modify(healthy_records(45), 0, policy__entropy=lambda k, old: 1.8)
    for r in records:  # every number printed to one decimal: healthy step-to-step changes round away
        for key, value in r.items():
            if key != "step" and isinstance(value, float):
                r[key] = round(value, 1)
    assert "entropy_frozen" not in fired(table_of(records))


def test_the_doctor_never_proposes_a_setting_the_run_already_has():
    """A fix the run's settings already hold is taken out and named (`in_place`); a fix wholly in
    place leaves its cause without one, so the finding's proposed fix is the next cause's, and
    an ablation says why it is no arm."""
    from rlhflab.doctor import causes
    from rlhflab.doctor.findings import Finding

    makers = (causes.reward_scaling, causes.unended_responses, causes.step_size)
    has_both = table_of(healthy_records(0), **{**DEMO, "normalize_reward": True, "missing_eos_penalty": 1.0})
    ranked = causes.rank_causes(makers, (), has_both)
    assert [c.fix for c in ranked[:2]] == [None, None]
    assert ranked[0].in_place == ("normalize_reward=True",) and ranked[1].in_place == ("missing_eos_penalty=1.0",)
    finding = Finding("some_rule", "reward_hacking", "high", "t", 0, (), tuple(ranked))
    assert finding.fix == ranked[2].fix and ranked[2].fix is not None
    lacks = table_of(healthy_records(0), **{**DEMO, "normalize_reward": False})
    assert causes.rank_causes(makers, (), lacks)[0].fix.changes[0].setting == "normalize_reward"
