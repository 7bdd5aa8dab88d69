"""Mode collapse: entropy and output diversity vanishing."""

from __future__ import annotations

import math
import statistics

from rlhflab.doctor import causes
from rlhflab.doctor.rules.registry import (
    GOLD_HELD,
    Detection,
    Threshold,
    crossing,
    evidence,
    persistence,
    rule,
    unless_gold_rises,
)
from rlhflab.doctor.rules.responses import REPEATED_PROMPTS
from rlhflab.doctor.rules.update import LARGE_FIRST_UPDATE, LARGE_UPDATES
from rlhflab.doctor.sample_measures import samples_at
from rlhflab.doctor.signals import baseline, first_where, noise_sigma, resolution, smooth, window
from rlhflab.doctor.table import MetricTable

ENTROPY_FRACTION = Threshold(
    "ENTROPY_FRACTION", 0.3,
    "healthy demo runs keep more than 60% of their starting entropy (docs/benchmarks.md); TRL logging docs: a "
    "healthy run maximises reward while keeping entropy")
DISTINCT2_FRACTION = Threshold(
    "DISTINCT2_FRACTION", 0.5,
    "Li et al. 2016 distinct-n; the pipeline target keeps >= 70% of the stage-1 value")
SELF_BLEU_LIMIT = Threshold(
    "SELF_BLEU_LIMIT", 0.7, "Zhu et al. 2018 (Texygen) self-BLEU; healthy demo runs stay below 0.4")
SELF_BLEU_RISE = Threshold(
    "SELF_BLEU_RISE", 0.3, "a rise of 0.3 over the run's own start, for runs that start above 0.4")
IDENTICAL_LIMIT = Threshold(
    "IDENTICAL_LIMIT", 0.3, "sampling at T=1 from a healthy policy almost never repeats a whole response (demo: < 5%)")

COLLAPSE_CLUES = (causes.ZERO_KL, causes.NEGATIVE_ENTROPY_COEF, causes.CLIP_NEVER_CLIPS, REPEATED_PROMPTS,
                  LARGE_FIRST_UPDATE)


@rule("entropy_collapse", "mode_collapse", requires=("policy/entropy",), thresholds=(ENTROPY_FRACTION, GOLD_HELD),
      causes=(causes.step_size, causes.entropy_term, causes.kl_control, causes.narrow_prompts),
      clues=COLLAPSE_CLUES + (LARGE_UPDATES,), relative=("policy/entropy",))
def entropy_collapse(table: MetricTable) -> Detection | None:
    """Per-token policy entropy falling below a fraction of its starting level."""
    ent = table.get("policy/entropy", any_unit=True)
    start = baseline(ent.values, window(len(ent)))
    fraction = ENTROPY_FRACTION.value
    found = crossing(table, "policy/entropy", lambda v: v < fraction * start,
                     lambda s: f"entropy collapse: policy/entropy fell from {start:.2f} to {s.values[-1]:.2f}",
                     f"smoothed entropy < {fraction} x its starting level {start:.3f}", ENTROPY_FRACTION.source,
                     "high", any_unit=True)
    return unless_gold_rises(table, found, "a sharpening policy, not a collapse")


ENTROPY_FALL_SIGMAS = Threshold(
    "ENTROPY_FALL_SIGMAS", 3.0,
    "sigmas of the gap between two w-point means of the entropy (its step-to-step noise x sqrt(2 / w): the start is "
    "a mean too) plus the log's rounding, below its start for half a window in a row: a fall that is not chance "
    "(about 16 windows a run, so under 2% by chance at 3 sigma before persistence). On the zoo's "
    "entropy_bonus_negative (demo, 3 seeds) the entropy fell 0.24-0.38 nats/token, the healthy seeds' 0.12-0.24; "
    "the rule needs the negative coefficient, so a healthy run's fall is never judged by it")


@rule("entropy_minimised", "mode_collapse", requires=("policy/entropy",), thresholds=(ENTROPY_FALL_SIGMAS,),
      causes=(causes.entropy_term,), clues=(causes.NEGATIVE_ENTROPY_COEF,), relative=("policy/entropy",))
def entropy_minimised(table: MetricTable) -> Detection | None:
    """A negative entropy coefficient and an entropy that fell beyond its noise: the loss
    minimises entropy (Schulman et al. 2017 eq. 9 adds +c2 x entropy to the objective) and
    nothing in it resists the fall. Medium even while the held-out score holds: the pull
    grows with the learning rate and the run's length and ends in entropy_collapse, so the
    sign is a bug before it does harm."""
    coef = table.settings.entropy_coef
    if coef is None or coef >= 0:
        return None
    ent = table.get("policy/entropy", any_unit=True)
    n = len(ent)
    w = window(n)
    if n < 2 * w:
        return None
    start = baseline(ent.values, w)
    tolerance = ENTROPY_FALL_SIGMAS.value * noise_sigma(ent.values) * math.sqrt(2 / w) + resolution(ent.values)
    onset = first_where(smooth(ent.values, w), lambda v: v < start - tolerance, persistence(n))
    if onset is None:
        return None
    end = statistics.fmean(ent.values[-w:])
    return Detection(
        f"entropy minimised: the entropy coefficient is {coef:g}, and policy/entropy fell from {start:.3g} to "
        f"{end:.3g}", "medium", ent.steps[onset],
        (evidence("policy/entropy", ent, onset, f"smoothed entropy < its start {start:.3g} - "
                  f"{ENTROPY_FALL_SIGMAS.value:g} sigma of its noise ({tolerance:.3g}), with a negative entropy "
                  "coefficient", ENTROPY_FALL_SIGMAS.source, entropy_coef=coef),),
    )


@rule("diversity_collapse", "mode_collapse", requires=("response/distinct_2",),
      thresholds=(DISTINCT2_FRACTION, SELF_BLEU_LIMIT, SELF_BLEU_RISE),
      causes=(causes.kl_control, causes.step_size, causes.narrow_prompts, causes.exploitable_reward_model),
      clues=COLLAPSE_CLUES + (LARGE_UPDATES,))
def diversity_collapse(table: MetricTable) -> Detection | None:
    """Distinct-2 collapsing, or self-BLEU rising towards 1: the responses look alike."""
    found, onsets = [], []
    d2 = table.get("response/distinct_2")
    if d2 is not None:
        w = window(len(d2))
        start = baseline(d2.values, w)
        limit = DISTINCT2_FRACTION.value * start
        onset = first_where(smooth(d2.values, w), lambda v: v < limit, persistence(len(d2)))
        if onset is not None:
            onsets.append(d2.steps[onset])
            found.append(evidence("response/distinct_2", d2, onset,
                                  f"smoothed distinct-2 < {DISTINCT2_FRACTION.value} x its start {start:.3f}",
                                  DISTINCT2_FRACTION.source))
    bleu = table.get("response/self_bleu")
    if bleu is not None:
        w = window(len(bleu))
        start = baseline(bleu.values, w)
        limit = max(SELF_BLEU_LIMIT.value, start + SELF_BLEU_RISE.value)
        onset = first_where(smooth(bleu.values, w), lambda v: v > limit, persistence(len(bleu)))
        if onset is not None:
            onsets.append(bleu.steps[onset])
            found.append(evidence("response/self_bleu", bleu, onset,
                                  f"smoothed self-BLEU > max({SELF_BLEU_LIMIT.value}, start + {SELF_BLEU_RISE.value})"
                                  f" = {limit:.3g}", SELF_BLEU_LIMIT.source))
    if not found:
        return None
    return Detection("diversity collapse: responses are becoming alike", "high", min(onsets), tuple(found))


@rule("identical_responses", "mode_collapse", requires=("response/identical_frac",), thresholds=(IDENTICAL_LIMIT,),
      causes=(causes.narrow_prompts, causes.kl_control, causes.step_size), clues=COLLAPSE_CLUES)
def identical_responses(table: MetricTable) -> Detection | None:
    """Many responses in a batch identical to another response."""
    return crossing(table, "response/identical_frac", lambda v: v > IDENTICAL_LIMIT.value,
                    lambda s: f"identical responses: {s.values[-1]:.0%} of a batch duplicate another",
                    f"smoothed fraction > {IDENTICAL_LIMIT.value}", IDENTICAL_LIMIT.source, "high")


ZERO_STD_LIMIT = Threshold(
    "ZERO_STD_LIMIT", 0.8,
    "share of prompt groups whose rewards are all equal: such a group's advantages are all 0, so it teaches nothing "
    "(Yu et al. 2025, DAPO, dynamic sampling); the TRL GRPO run whose answers collapsed reaches 0.97, RLOO at 30x "
    "the learning rate 0.93, healthy TRL GRPO/RLOO runs on the reviews world 0.04 at most (bench/rule_calibration.py)")


@rule("reward_spread_collapse", "mode_collapse", requires=("reward/zero_std_frac",), thresholds=(ZERO_STD_LIMIT,),
      causes=(causes.step_size, causes.kl_control, causes.exploitable_reward_model))
def reward_spread_collapse(table: MetricTable) -> Detection | None:
    """Most prompt groups scoring all their responses the same (GRPO/RLOO): no learning signal left."""
    return crossing(table, "reward/zero_std_frac", lambda v: v > ZERO_STD_LIMIT.value,
                    lambda s: f"reward spread collapsed: {s.values[-1]:.0%} of prompt groups score all their "
                              "responses alike",
                    f"smoothed reward/zero_std_frac > {ZERO_STD_LIMIT.value}", ZERO_STD_LIMIT.source, "medium")


OPENING_SHARE_LIMIT = Threshold(
    "OPENING_SHARE_LIMIT", 0.16,
    "share of a step's responses opening with its most common first 3 words (smoothed); fitted on rlhflab demo runs "
    "read from their samples (bench/rule_calibration.py; 64 responses a step): healthy seeds peak at 0.028-0.031, "
    "every run not labelled mode_collapse at 0.087 at most (temperature_mismatch), the runs labelled mode_collapse by "
    "their distinct-2 curve at 0.287-1.0 (reward_scale_100x, kl_sign_flipped, lr_100x); 0.16 is the geometric mean "
    "of 0.087 and 0.287, 1.8x from each side. Checked on TRL GRPO/RLOO runs of "
    "the world it was not fitted on (32 responses a step): healthy 0.042-0.062, the runs not labelled mode_collapse "
    "0.094 at most, the one labelled mode_collapse (RLOO at 30x the learning rate) 0.271; and on rlhflab's kl_coef=0 "
    "runs at 3x the iterations (bench/pipeline_targets.py, labelled mode_collapse): 0.29-0.61, "
    "its adaptive-KL runs 0.025-0.031")
OPENING_SHARE_RISE = Threshold(
    "OPENING_SHARE_RISE", 0.13,
    "rise of that share over the run's own start, for runs whose answers already share an opening at the start "
    "(a chat template): fitted on the same rlhflab runs, which rise 0.068 at most when not labelled mode_collapse and "
    "0.271 at least when labelled so (0.13, their geometric mean); TRL runs not fitted on: 0.031 at most, and 0.229")


@rule("template_lock_in", "mode_collapse", requires=("text/opening_share",),
      thresholds=(OPENING_SHARE_LIMIT, OPENING_SHARE_RISE, GOLD_HELD),
      causes=(causes.kl_control, causes.step_size, causes.exploitable_reward_model, causes.narrow_prompts),
      clues=COLLAPSE_CLUES + (LARGE_UPDATES,))
def template_lock_in(table: MetricTable) -> Detection | None:
    """Most responses of a step opening with the same words (read from the sample files): the
    policy has locked into one template, which per-response diversity measures do not see."""
    share = table.get("text/opening_share")
    w = window(len(share))
    start = baseline(share.values, w)
    limit = max(OPENING_SHARE_LIMIT.value, start + OPENING_SHARE_RISE.value)
    onset = first_where(smooth(share.values, w), lambda v: v > limit, persistence(len(share)))
    if onset is None:
        return None
    at_onset = samples_at(table.samples, share.steps[onset], k=1)
    opening = f" (\"{at_onset.openings[0][0]} ...\")" if at_onset is not None and at_onset.openings else ""
    found = Detection(f"template lock-in: {share.values[-1]:.0%} of the responses open with the same words{opening}",
                      "medium", share.steps[onset],
                     (evidence("text/opening_share", share, onset,
                               f"smoothed share of responses opening with the step's most common first 3 words > "
                               f"max({OPENING_SHARE_LIMIT.value}, start + {OPENING_SHARE_RISE.value}) = {limit:.3g}",
                               OPENING_SHARE_LIMIT.source),))
    return unless_gold_rises(table, found, "a format the task rewards, not a collapse")
