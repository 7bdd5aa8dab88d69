"""Numbers a healthy run cannot produce: a metric that, from how it is computed, cannot be
exactly 0, exactly constant, or other than 1 while the policy moves. Such a number looks
calm on a dashboard (nothing spikes, nothing diverges) and is the trace of a bug that may
cost nothing yet: an optimiser that steps on nothing, a clip that never clips, old logprobs
that are not the policy's, a reference that is the policy.

Every canonical metric is decided here (`PINNED` for those a healthy run cannot pin,
`FREE` with the reason for the others); docs/doctor.md's table is generated from both.

"Exactly" is judged at the log's printed precision: a value printed as 0.000 may be 4e-4,
so exactly 0 is claimed only where the log could have shown the smallest value a healthy
run logs there (each member's floor, from labelled healthy runs, with its margin).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from rlhflab.doctor import causes
from rlhflab.doctor.causes import Clue
from rlhflab.doctor.excuses import EXCUSES, Excuse, at_steps, rises
from rlhflab.doctor.findings import Cause, Evidence
from rlhflab.doctor.metrics import CANONICAL
from rlhflab.doctor.rules.registry import Detection, Threshold, evidence, rule
from rlhflab.doctor.signals import printed_resolution, resolution
from rlhflab.doctor.table import MetricTable, Series

Pin = Literal["exactly 0", "exactly constant", "other than 1"]


@dataclass(frozen=True)
class Pinned:
    """A canonical metric a healthy run cannot pin, and the rule that holds it."""

    metric: str
    pin: Pin
    principle: str  # why a healthy run cannot, from how the number is computed
    rule: str
    floor: Threshold  # the precision the log must have for the pin to be claimed


MIN_STEPS = 3  # steps a pinned value must be seen on before it is a finding
SHARE = Threshold(
    "PINNED_SHARE", 0.5,
    "of the run's second half pinned: the start may be pinned by construction (the KL before the first update is "
    "0, a warmup starts at lr 0); a bug pins most of what follows")


# --- the log's precision ---------------------------------------------------------------------
def zero_visible(table: MetricTable, series: Series, floor: Threshold) -> bool:
    """Whether the log could have shown a healthy run's smallest value as nonzero."""
    return printed_resolution(table, series) < floor.value


def second_half(series: Series) -> range:
    return range(len(series) // 2, len(series))


def pinned_at_zero(table: MetricTable, series: Series | None, floor: Threshold,
                   share: Threshold = SHARE) -> list[int] | None:
    """The second-half indices where `series` is exactly 0, when they are more than `share`
    of it and the log's precision could have shown a healthy value; else None. The zeros
    are counted first: the precision is read only for a series that has them."""
    if series is None or len(series) < 2 * MIN_STEPS:
        return None
    zeros = [i for i in second_half(series) if series.values[i] == 0.0]
    if len(zeros) < MIN_STEPS or len(zeros) <= share.value * len(second_half(series)):
        return None
    return zeros if zero_visible(table, series, floor) else None


def policy_moves(table: MetricTable) -> str | None:
    """The log's evidence that the updates move the policy, in words, or None: a nonzero
    approx-KL or clip fraction on most steps, or a nonzero gradient at a nonzero learning
    rate (an optimiser that steps on a gradient moves what it optimises)."""
    for name in ("policy/approxkl", "policy/clipfrac"):
        series = table.get(name)
        if series is not None and len(series) >= MIN_STEPS and statistics.median(series.values) > 0:
            return f"median {name} {statistics.median(series.values):.3g} > 0"
    grad, lr = table.get("policy/grad_norm"), table.get("lr")
    if grad is not None and lr is not None and statistics.median(grad.values) > 0 \
            and statistics.median(lr.values) > 0:
        return f"median grad norm {statistics.median(grad.values):.3g} at lr {statistics.median(lr.values):.3g}"
    return None


def _pinned_finding(table: MetricTable, metric: str, series: Series, pinned: list[int], title: str,
                    condition: str, floor: Threshold, severity: str = "medium", **extra: float) -> Detection:
    first = pinned[0]
    return Detection(title, severity, series.steps[first],
                     (evidence(metric, series, first, condition + f"; printed to "
                               f"{printed_resolution(table, series):.2g}, below the floor {floor.value:g}",
                               floor.source, pinned_steps=float(len(pinned)), **extra),))


# --- exactly 0 ---------------------------------------------------------------------------------
GRAD_NORM_FLOOR = Threshold(
    "GRAD_NORM_FLOOR", 0.01,
    "smallest policy gradient norm a healthy run logs: 0.63 (TRL GRPO at beta 0.04) (bench/impossible_numbers.py, "
    "healthy labelled runs, second half); a margin of 63x")
DEAD_GRAD_FRACTION = Threshold(
    "DEAD_GRAD_FRACTION", 0.5,
    "of the run's second half with a gradient norm of exactly 0: an optimiser that steps on nothing; healthy "
    "labelled runs have none (bench/impossible_numbers.py), the TRL GRPO run whose answers collapsed has 0.89")


def _moves_without_gradient(table: MetricTable) -> Cause | None:
    """A gradient norm exactly 0 on the steps where the policy moves (an approx-KL above 0,
    or a KL to the reference that rises over them): a policy moves only by a gradient, so
    the norm logged is not the gradient applied, and the update loop that computes and
    applies it is at fault, not the reward."""
    grad = table.get("policy/grad_norm")
    dead = pinned_at_zero(table, grad, GRAD_NORM_FLOOR, DEAD_GRAD_FRACTION)
    if dead is None:
        return None
    steps = [grad.steps[i] for i in dead]
    approxkl = at_steps(table, "policy/approxkl", steps)
    found = logged_kl(table)
    kl = at_steps(table, found[0], steps, any_unit=True) if found is not None else None
    if (approxkl is not None and statistics.median(approxkl) > 0) or (kl is not None and rises(kl)):
        return causes.gradient_not_applied(table)
    return None


MOVES_WITHOUT_GRADIENT = Clue("moves_without_gradient", 10, _moves_without_gradient,
                              "the policy moves (approx-KL above 0, or a KL to the reference that rises) on the "
                              "steps whose gradient norm is exactly 0")


@rule("dead_gradients", "ppo_instability", requires=("policy/grad_norm",),
      thresholds=(DEAD_GRAD_FRACTION, GRAD_NORM_FLOOR), causes=(causes.exploitable_reward_model, causes.step_size),
      clues=(MOVES_WITHOUT_GRADIENT,))
def dead_gradients(table: MetricTable) -> Detection | None:
    """Gradient norm exactly 0 on most late steps: no learning signal reaches the policy
    (every advantage 0: a group whose answers are all alike, a reward that no longer
    varies), or, where the policy moves on those steps, the norm logged is not the gradient
    that moves it (the update loop)."""
    g = table.get("policy/grad_norm")
    dead = pinned_at_zero(table, g, GRAD_NORM_FLOOR, DEAD_GRAD_FRACTION)
    if dead is None:
        return None
    half = len(second_half(g))
    return _pinned_finding(table, "policy/grad_norm", g, dead,
                           f"dead gradients: grad_norm is 0 on {len(dead)} of the last {half} steps",
                           f"grad_norm == 0 on more than {DEAD_GRAD_FRACTION.value:.0%} of the run's second half",
                           GRAD_NORM_FLOOR, dead_steps=float(len(dead)))


CLIP_SILENT_SHARE = Threshold(
    "CLIP_SILENT_SHARE", 0.9,
    "of the run's steps with a clip fraction of exactly 0; fitted on the zoo read from metrics alone "
    "(bench/impossible_numbers.py): the disabled clip 1.0, every other run 0.56 at most (lr_100x, whose policy stopped "
    "moving), healthy seeds 0. Checked on TRL 1.12 PPO runs it was not fitted on: healthy 0.69-0.70 (at a median "
    "approx-KL under CLIP_MOVING_APPROXKL, so not held to it), the margin is thin")
CLIP_MOVING_APPROXKL = Threshold(
    "CLIP_MOVING_APPROXKL", 0.005,
    "median approx-KL per update above which a working clip range of about 0.2 clips some tokens: at 0.0125-0.0143 "
    "healthy demo runs clip 3% (Schulman et al. 2017: the clipped objective removes the incentive to move a token's "
    "ratio outside [1 - eps, 1 + eps])")
CLIPFRAC_FLOOR = Threshold(
    "CLIPFRAC_FLOOR", 5e-4,
    "smallest clip fraction a healthy run logs: 0.003 (veRL PPO on GSM8K, printed to 3 decimals) "
    "(bench/impossible_numbers.py, healthy labelled runs, second half); a margin of 6x")


@rule("clip_never_clips", "ppo_instability", requires=("policy/clipfrac", "policy/approxkl"),
      thresholds=(CLIP_SILENT_SHARE, CLIP_MOVING_APPROXKL, CLIPFRAC_FLOOR),
      causes=(causes.step_size, causes.logprob_bookkeeping), clues=(causes.CLIP_NEVER_CLIPS,))
def clip_never_clips(table: MetricTable) -> Detection | None:
    """Updates that move the policy while not one token is ever clipped: the clip range is off."""
    clipfrac, approxkl = table.get("policy/clipfrac"), table.get("policy/approxkl")
    if len(clipfrac) < 10 or statistics.median(approxkl.values) <= CLIP_MOVING_APPROXKL.value:
        return None
    silent = sum(1 for v in clipfrac.values if v == 0.0) / len(clipfrac)
    if silent < CLIP_SILENT_SHARE.value or not zero_visible(table, clipfrac, CLIPFRAC_FLOOR):
        return None
    return Detection(
        f"the clip never clips: policy/clipfrac is 0 on {silent:.0%} of updates while approx-KL is "
        f"{statistics.median(approxkl.values):.3f}", "medium", clipfrac.steps[0],
        (evidence("policy/clipfrac", clipfrac, 0, f"clipfrac == 0 on >= {CLIP_SILENT_SHARE.value:.0%} of updates",
                  CLIP_SILENT_SHARE.source, silent_share=silent),
         evidence("policy/approxkl", approxkl, 0, f"median approx-KL > {CLIP_MOVING_APPROXKL.value}",
                  CLIP_MOVING_APPROXKL.source)),
    )


APPROXKL_FLOOR = Threshold(
    "APPROXKL_FLOOR", 1e-9,
    "smallest approx-KL a healthy run logs: 1.4e-8 (TRL 1.12 PPO at lr 1.7e-6) (bench/impossible_numbers.py, healthy "
    "labelled runs, second half); a margin of 13x. A console printing 3 decimals cannot show it: veRL's healthy GSM8K "
    "run prints 0.000 on 387 of 435 steps")


@rule("updates_do_not_move", "ppo_instability", requires=("policy/approxkl", "policy/grad_norm"),
      thresholds=(SHARE, APPROXKL_FLOOR), causes=(causes.optimizer_step, causes.logprob_bookkeeping))
def updates_do_not_move(table: MetricTable) -> Detection | None:
    """Approx-KL exactly 0 on most late updates of a run that takes several optimiser steps
    per batch, on a nonzero gradient at a nonzero learning rate: the steps do not reach the
    policy (parameters missing from the optimiser, a step skipped or zeroed), or the
    approx-KL compares the old logprobs with themselves. The first step of a batch is at
    approx-KL 0 by construction, so a run of one step per batch is not held to it."""
    settings = table.settings
    if not settings.epochs or not settings.minibatches or settings.epochs * settings.minibatches < 2:
        return None
    approxkl, grad, lr = table.get("policy/approxkl"), table.get("policy/grad_norm"), table.get("lr")
    if statistics.median(grad.values) <= 0 or (lr is not None and statistics.median(lr.values) <= 0):
        return None
    still = pinned_at_zero(table, approxkl, APPROXKL_FLOOR)
    if still is None:
        return None
    return _pinned_finding(
        table, "policy/approxkl", approxkl, still,
        f"the updates do not move the policy: approx-KL is 0 on {len(still)} of the last "
        f"{len(second_half(approxkl))} updates at a gradient norm of {statistics.median(grad.values):.3g}",
        f"approx-KL == 0 on more than {SHARE.value:.0%} of the second half, {settings.epochs} epochs x "
        f"{settings.minibatches} minibatches per batch", APPROXKL_FLOOR, severity="high")


KL_FLOORS = {
    "kl/token_mean": Threshold(
        "KL_TOKEN_FLOOR", 1e-3,
        "smallest per-token KL to the reference a healthy run logs: 0.22 (TRL GRPO at beta 0.04) "
        "(bench/impossible_numbers.py, healthy labelled runs, second half); a margin of 217x"),
    "kl/mean": Threshold(
        "KL_SEQUENCE_FLOOR", 0.01,
        "smallest per-sequence KL to the reference a healthy run logs: 0.62 (TRL 1.12 PPO) "
        "(bench/impossible_numbers.py, healthy labelled runs, second half); a margin of 62x"),
}
KL_FLOORS["kl/k3_mean"] = KL_FLOORS["kl/mean"]


def logged_kl(table: MetricTable) -> tuple[str, Series, Threshold] | None:
    """The KL to the reference as the log wrote it (not a twin derived from it)."""
    for name, floor in KL_FLOORS.items():
        series = table.get(name, any_unit=True)
        if series is not None and name not in table.derived:
            return name, series, floor
    return None


@rule("kl_stuck_at_zero", "component_bug", thresholds=(SHARE, *dict.fromkeys(KL_FLOORS.values())),
      causes=(causes.reference_is_policy, causes.logprob_bookkeeping))
def kl_stuck_at_zero(table: MetricTable) -> Detection | None:
    """The KL to the reference exactly 0 on most late steps while the updates move the
    policy: the reference is the policy (the same module, or a copy updated with it), or
    the KL is taken between a model's logprobs and themselves. A run with no KL penalty
    may not compute it, so it is not held to it."""
    found = logged_kl(table)
    moving = policy_moves(table)
    if found is None or moving is None or causes.kl_penalty_off(table):
        return None
    name, series, floor = found
    stuck = pinned_at_zero(table, series, floor)
    if stuck is None:
        return None
    return _pinned_finding(table, name, series, stuck,
                           f"the KL to the reference is 0 on {len(stuck)} of the last {len(second_half(series))} "
                           f"steps while the policy moves ({moving}): the reference is the policy",
                           f"{name} == 0 on more than {SHARE.value:.0%} of the second half while {moving}", floor,
                           severity="high")


VALUE_LOSS_FLOOR = Threshold(
    "VALUE_LOSS_FLOOR", 1e-4,
    "smallest value loss a healthy run logs: 0.018 (TRL 1.12 PPO) (bench/impossible_numbers.py, healthy labelled runs, "
    "second half); a margin of 181x")
ADV_STD_FLOOR = Threshold(
    "ADV_STD_FLOOR", 0.01,
    "smallest advantage std a healthy run logs: 0.38 (rlhflab; only rlhflab logs it) (bench/impossible_numbers.py, "
    "healthy labelled runs, second half); a margin of 38x")


def _zero_while_rewards_vary(table: MetricTable, metric: str, floor: Threshold, what: str,
                             severity: str = "medium") -> Detection | None:
    """`metric` exactly 0 on most of the second half while the step's rewards vary."""
    series, spread = table.get(metric), table.get("reward/proxy_std")
    if spread is None or statistics.median(spread.values) <= 0:
        return None
    pinned = pinned_at_zero(table, series, floor)
    if pinned is None:
        return None
    return _pinned_finding(table, metric, series, pinned,
                           f"{what} on {len(pinned)} of the last {len(second_half(series))} steps while the rewards "
                           "vary", f"{metric} == 0 on more than {SHARE.value:.0%} of the second half, median "
                           "reward/proxy_std > 0", floor, severity=severity)


@rule("critic_fits_itself", "component_bug", requires=("value/loss", "reward/proxy_std"),
      thresholds=(SHARE, VALUE_LOSS_FLOOR), causes=(causes.advantages_values,))
def critic_fits_itself(table: MetricTable) -> Detection | None:
    """The value loss exactly 0 on most late steps while the rewards vary: a critic
    regressed onto noisy returns cannot fit them exactly, so its targets are its own
    predictions (returns computed from values with zero advantages, or the loss taken
    between a tensor and itself)."""
    return _zero_while_rewards_vary(table, "value/loss", VALUE_LOSS_FLOOR,
                                    "the critic's targets are its own predictions: the value loss is 0")


@rule("advantages_vanish", "component_bug", requires=("adv/std", "reward/proxy_std"),
      thresholds=(SHARE, ADV_STD_FLOOR), causes=(causes.advantages_values,))
def advantages_vanish(table: MetricTable) -> Detection | None:
    """The advantages' std exactly 0 on most late steps while the rewards vary: the rewards
    do not reach the advantages (masked out, overwritten, or whitened per token)."""
    return _zero_while_rewards_vary(table, "adv/std", ADV_STD_FLOOR, "the advantages are all 0", severity="high")


LR_FLOOR = Threshold(
    "LR_FLOOR", 1e-8,
    "smallest learning rate a healthy run logs: 5e-7 (TRL, a schedule decaying to its last step) "
    "(bench/impossible_numbers.py, healthy labelled runs, second half); a margin of 50x")


@rule("lr_schedule_ends_early", "ppo_instability", requires=("lr",), thresholds=(SHARE, LR_FLOOR),
      causes=(causes.schedule_too_short,))
def lr_schedule_ends_early(table: MetricTable) -> Detection | None:
    """The learning rate exactly 0 on most of the run's second half: a schedule that decays
    to 0 reaches it at its last step, so one that sits there was sized for fewer steps than
    the run takes, and the rest of the run trains nothing."""
    lr = table.get("lr")
    done = pinned_at_zero(table, lr, LR_FLOOR)
    if done is None:
        return None
    return _pinned_finding(table, "lr", lr, done,
                           f"the learning rate is 0 on {len(done)} of the last {len(second_half(lr))} steps: the "
                           "schedule ended before the run", f"lr == 0 on more than {SHARE.value:.0%} of the second "
                           "half", LR_FLOOR)


# --- exactly constant --------------------------------------------------------------------------
ENTROPY_STEP_FLOOR = Threshold(
    "ENTROPY_STEP_FLOOR", 1e-3,
    "smallest median step-to-step change of the policy's entropy a healthy run logs: 0.003 (veRL PPO on GSM8K, printed "
    "to 3 decimals) (bench/impossible_numbers.py, healthy labelled runs, second half); a margin of 3x: new samples each"
    " step move a sampled entropy even when the policy does not")


@rule("entropy_frozen", "component_bug", requires=("policy/entropy",), thresholds=(ENTROPY_STEP_FLOOR,),
      causes=(causes.logprob_bookkeeping,))
def entropy_frozen(table: MetricTable) -> Detection | None:
    """The policy's entropy exactly the same number on every step of the second half: an
    entropy over new samples each step varies even when the policy does not, so this one
    is not measured on the samples (a frozen model's, a cached value, a constant)."""
    entropy = table.get("policy/entropy")
    late = [entropy.values[i] for i in second_half(entropy)]
    if len(late) < 2 * MIN_STEPS or len(set(late)) > 1 \
            or printed_resolution(table, entropy) >= ENTROPY_STEP_FLOOR.value:
        return None
    first = len(entropy) // 2
    return Detection(f"the entropy is {late[0]:.4g} on every one of the last {len(late)} steps: it is not measured "
                     "on the samples", "medium", entropy.steps[first],
                     (evidence("policy/entropy", entropy, first, "the same value on every step of the second half; "
                               f"printed to {printed_resolution(table, entropy):.2g}", ENTROPY_STEP_FLOOR.source,
                               constant_steps=float(len(late))),))


# --- other than 1 -------------------------------------------------------------------------------
FIRST_RATIO = Threshold(
    "FIRST_RATIO", 1e-5,
    "|ratio - 1| of the first minibatch before any step: the checkup's first_ratio_is_one tolerance (fp32 healthy "
    "runs measure <= 2.1e-6; the ratio is exp(0) when the old logprobs are the policy's own)")


@rule("first_ratio_not_one", "component_bug", thresholds=(FIRST_RATIO,),
      causes=(causes.logprob_bookkeeping, causes.advantages_values))
def first_ratio_not_one(table: MetricTable) -> Detection | None:
    """The ratio pi / pi_old of the first minibatch, before any step, is not 1 where the log
    holds it (rlhflab's `policy/ratio_first`, or the ratio of a run that takes one step per
    batch): on most steps, beyond rounding."""
    series = table.get("policy/ratio_first")
    settings = table.settings
    if series is None and settings.epochs == 1 and settings.minibatches == 1:
        series = table.get("policy/ratio_mean")
    if series is None or len(series) < MIN_STEPS:
        return None
    limit = FIRST_RATIO.value + resolution(series.values)
    off = [i for i, v in enumerate(series.values) if abs(v - 1.0) > limit]
    if len(off) < max(MIN_STEPS, len(series) / 2):
        return None
    worst = max(series.values, key=lambda v: abs(v - 1.0))
    return Detection(f"the first minibatch's ratio is not 1 (up to {worst:.4g}): the old logprobs are not the policy's",
                     "high", series.steps[off[0]],
                     (Evidence("policy/ratio_first", series.steps[off[0]],
                               {"at_onset": series.values[off[0]], "worst": worst, "steps_off": float(len(off))},
                               f"|ratio - 1| > {limit:.3g} on at least half of the {len(series)} steps",
                               FIRST_RATIO.source),))


# --- a step logged twice ---------------------------------------------------------------------------
@rule("steps_logged_twice", "component_bug", causes=(causes.resume_bookkeeping,))
def steps_logged_twice(table: MetricTable) -> Detection | None:
    """Steps logged more than once by a trainer whose writer logs each step once, across
    resumes too (one process writes; a resume drops what was logged after its checkpoint):
    the resume kept lines it should have dropped, or restored the run at another step than
    where its checkpoint left it. The reader keeps each step's last values."""
    if not table.one_line_per_step or not table.repeated_steps:
        return None
    steps = table.steps_read or table.repeated_steps
    return Detection(f"{table.repeated_steps} step(s) logged twice: a resume kept the lines logged after its "
                     "checkpoint", "medium", 0,
                     (Evidence("step", 0, {"repeated_steps": float(table.repeated_steps), "steps": float(steps)},
                               "a step logged more than once by a writer that logs each step once",
                               "rlhflab/checkpoint.py: a resume truncates the metrics and samples to the lines its "
                               "checkpoint counted"),))


# --- pinned without the condition that would allow it ------------------------------------------
EXACT_FLOOR = Threshold(
    "EXACT_FLOOR", 1e-6,
    "the printed precision at which a number computed in floating point from sampled data shows its noise: a log "
    "writing every digit (rlhflab's JSON, veRL's and OpenRLHF's consoles at 4-6 digits of small values) is held, a "
    "console rounding to 3-4 decimals is not")
TARGETS = {"exactly 0": 0.0, "exactly 1": 1.0}


def pinned_steps(table: MetricTable, series: Series | None, pin: str) -> list[int] | None:
    """The second-half indices where `series` is pinned (`pin`), when they are more than
    SHARE of it and the log prints the digits where a computed number's noise shows."""
    if series is None or len(series) < 2 * MIN_STEPS:
        return None
    half = second_half(series)
    if pin == "exactly constant":
        hits = list(half) if len({series.values[i] for i in half}) == 1 else []
    else:
        hits = [i for i in half if series.values[i] == TARGETS[pin]]
    if len(hits) < MIN_STEPS or len(hits) <= SHARE.value * len(half):
        return None
    return hits if printed_resolution(table, series) < EXACT_FLOOR.value else None


def unexcused(table: MetricTable, metric: str, excuse: Excuse) -> tuple[list[int], str] | None:
    """The pinned indices of `metric` and why its excuse fails there, or None."""
    series = table.get(metric)
    pinned = pinned_steps(table, series, excuse.pin)
    if pinned is None:
        return None
    holds, why = excuse.holds(table, [series.steps[i] for i in pinned])
    return (pinned, why) if holds is False else None


def _clue(order: int, metric: str, excuse: Excuse) -> Clue:
    def find(table: MetricTable) -> Cause | None:
        return excuse.computed_by(table) if unexcused(table, metric, excuse) is not None else None

    # The first metric of the registry's order that is pinned speaks last, so it ranks first;
    # above every other clue's priority, so each is unique.
    return Clue(f"unexcused_{metric}", 100 + len(EXCUSES) - order, find,
                f"{metric} {excuse.pin} while its condition does not hold: the component that computes it")


@rule("pinned_without_its_condition", "component_bug", thresholds=(SHARE, EXACT_FLOOR),
      causes=tuple(dict.fromkeys(e.computed_by for e in EXCUSES.values())),
      clues=tuple(_clue(i, metric, e) for i, (metric, e) in enumerate(EXCUSES.items())))
def pinned_without_its_condition(table: MetricTable) -> Detection | None:
    """A number a healthy run logs exactly 0, exactly 1 or exactly constant only under a
    condition (a sparse reward, one optimiser step per batch, a fixed coefficient, every
    response cut at the limit; doctor/excuses.py), pinned on most late steps of a run where
    the log shows that condition does not hold: the component that computes it is wrong."""
    found = []
    for metric, excuse in EXCUSES.items():
        hit = unexcused(table, metric, excuse)
        if hit is not None:
            found.append((metric, excuse, *hit))
    if not found:
        return None
    metric, excuse, pinned, why = found[0]
    series = table.get(metric)
    return Detection(
        f"{metric} is {excuse.pin.removeprefix('exactly ')} on {len(pinned)} of the last "
        f"{len(second_half(series))} steps without the condition that allows it: {why}"
        + (f" (and {', '.join(m for m, *_ in found[1:])})" if len(found) > 1 else ""),
        "medium", series.steps[pinned[0]],
        tuple(evidence(m, table.get(m), p[0], f"{m} {e.pin} on more than {SHARE.value:.0%} of the second half; "
                       f"{w}", e.reason, pinned_steps=float(len(p))) for m, e, p, w in found))


# --- the decisions, one per canonical metric ------------------------------------------------------
PINNED: tuple[Pinned, ...] = (
    Pinned("policy/grad_norm", "exactly 0", "the gradient of a loss over sampled tokens with any nonzero advantage "
           "is nonzero", "dead_gradients", GRAD_NORM_FLOOR),
    Pinned("policy/clipfrac", "exactly 0", "an update that moves the policy by an approx-KL of 0.005 or more moves "
           "some token's ratio past a clip range of about 0.2", "clip_never_clips", CLIPFRAC_FLOOR),
    Pinned("policy/approxkl", "exactly 0", "after the first of several optimiser steps on a nonzero gradient the "
           "policy differs from the one that sampled", "updates_do_not_move", APPROXKL_FLOOR),
    Pinned("kl/mean", "exactly 0", "a policy that moves differs from its frozen reference", "kl_stuck_at_zero",
           KL_FLOORS["kl/mean"]),
    Pinned("kl/k3_mean", "exactly 0", "as kl/mean", "kl_stuck_at_zero", KL_FLOORS["kl/k3_mean"]),
    Pinned("kl/token_mean", "exactly 0", "as kl/mean", "kl_stuck_at_zero", KL_FLOORS["kl/token_mean"]),
    Pinned("value/loss", "exactly 0", "a critic regressed onto noisy returns cannot fit them exactly",
           "critic_fits_itself", VALUE_LOSS_FLOOR),
    Pinned("adv/std", "exactly 0", "advantages of rewards that vary vary (whitened: std 1)", "advantages_vanish", ADV_STD_FLOOR),
    Pinned("lr", "exactly 0", "a schedule decays to 0 at its last step, not mid-run", "lr_schedule_ends_early", LR_FLOOR),
    Pinned("policy/entropy", "exactly constant", "an entropy over new samples varies from step to step",
           "entropy_frozen", ENTROPY_STEP_FLOOR),
    Pinned("policy/ratio_first", "other than 1", "before any step pi / pi_old = exp(0) = 1", "first_ratio_not_one", FIRST_RATIO),
)
_BOOKKEEPING = "bookkeeping, not the policy's numbers"
_STATES = "a fraction whose ends are both healthy states: "
FREE: dict[str, str | Excuse] = dict(EXCUSES) | {
    "reward/zero_std_frac": _STATES + "0 (every group's rewards vary) and 1 (none do)",
    "response/truncated_frac": _STATES + "0 (every response ends) and 1 (every one is cut)",
    "response/identical_frac": "0 is the healthy state (no two responses the same)",
    "response/distinct_1": "a symptom, judged by the collapse rules", "response/distinct_2":
        "a symptom, judged by the collapse rules", "response/self_bleu": "a symptom, judged by the collapse rules",
    "prompts/unique_frac": "1 is the healthy state (every prompt of a batch distinct)",
    "guard/skipped_updates": "0 is the healthy state (no update skipped)",
    "epoch": _BOOKKEEPING, "time/rollout_s": _BOOKKEEPING, "time/train_s": _BOOKKEEPING,
    "time/score_s": _BOOKKEEPING, "time/advantages_s": _BOOKKEEPING, "tokens/generated": _BOOKKEEPING,
    "memory/peak_gib": _BOOKKEEPING, "time/sync_s": _BOOKKEEPING,
    "rm/train_loss": "stage 2, judged by the reward-model rules", "rm/train_acc": "stage 2 (1.0 on a small set)",
    "rm/val_acc": "stage 2", "rm/gold_agreement": "stage 2", "rm/length_corr": "stage 2",
    "lm/train_loss": "stage 1", "lm/val_loss": "stage 1", "lm/grammatical_rate": "stage 1",
}
FREE |= {name: "measured by the doctor from sample files, not logged by the trainer" for name in CANONICAL
         if name.startswith("text/")}


def decisions() -> list[tuple[str, str, str, str, Threshold | None]]:
    """(metric, what a healthy run cannot log or "-", why, rule or "", its floor) for every
    canonical metric, in the registry's order: the generated table of docs/doctor.md."""
    pinned = {p.metric: p for p in PINNED}
    return [(name, pinned[name].pin, pinned[name].principle, pinned[name].rule, pinned[name].floor)
            if name in pinned else _free_row(name) for name in CANONICAL]


def _free_row(name: str) -> tuple[str, str, str, str, Threshold | None]:
    why = FREE[name]
    if isinstance(why, Excuse):  # held where its condition does not hold
        return name, f"{why.pin} unless its condition holds", why.reason, "pinned_without_its_condition", EXACT_FLOOR
    return name, "-", why, "", None
