"""Log identities: the accounting a run's logged numbers must satisfy whoever wrote them.
Each number can look plausible alone while two of them disagree, and the disagreement
names a component: a total reward that is not the score minus beta times the logged KL
(the penalty is not what the log says), a logged beta that is not the configured one. A
first-minibatch ratio that is not 1 is a number no healthy run logs (`impossible`).

Tolerances come from how the numbers were made, not from runs: the decimals the log kept,
float32's rounding of a batch mean, and, where the log gives a per-token KL and a mean
length instead of a per-sequence KL, the bound on a product of means. The on-policy KL's
sign is `kl.kl_negative`, in its own noise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from rlhflab.doctor import causes
from rlhflab.doctor.findings import Evidence
from rlhflab.doctor.rules.registry import Detection, Threshold, rule
from rlhflab.doctor.signals import resolution
from rlhflab.doctor.table import MetricTable, Series

FLOAT32_MEAN = Threshold(
    "FLOAT32_MEAN", 1e-4,
    "relative error of a float32 batch mean over up to ~2000 token terms: at most n x u x sum|x| with u = 6e-8 "
    "(Higham 2002, Accuracy and Stability of Numerical Algorithms, eq. 4.4), 1.2e-4 for n = 2000")
IDENTITY_SIGMAS = Threshold(
    "IDENTITY_SIGMAS", 3.0, "a step breaks an identity when it misses by more than 3x the step's own tolerance")
PRODUCT_OF_MEANS = Threshold(
    "PRODUCT_OF_MEANS", 2.0,
    "factor: a per-token KL mean times the mean length differs from the mean per-sequence KL by cov(length, KL per "
    "token), at most CV(length) x CV(KL per token) of it (Cauchy-Schwarz); within a factor 2 while the product of "
    "the two CVs is under 1. Checked, not fitted, on the real veRL PPO log (GSM8K, 256-token responses): its "
    "penalty is 0.59-1.00x (median 0.94) beta x per-token KL x mean length over the 411 steps where it is above "
    "rounding, 1.18x inside the bound (tests/test_doctor_rules.py)")
MIN_STEPS = 3  # steps an identity must be judged on, and broken on, before it is a finding


def _at(series: Series) -> dict[int, float]:
    return dict(zip(series.steps, series.values))


@dataclass(frozen=True)
class PenaltyTerms:
    """The series a KL-penalty identity reads, and how exact it is."""

    penalty: dict[int, float]  # step -> score - total reward (or the logged penalty, negated)
    penalty_resolution: float
    kl: dict[int, float]  # step -> per-sequence KL the penalty should be beta x
    kl_resolution: float
    kl_name: str
    beta: dict[int, float] | float  # per step when logged, else the configured value
    beta_resolution: float
    magnitude: dict[int, float]  # step -> |score| + |total|: the float32 scale of the penalty
    exact: bool  # False for a per-token KL times the mean length


def _penalty_kl(table: MetricTable) -> tuple[str, Series] | None:
    """The logged KL the penalty must be beta times: the penalty's own estimator where the
    log has it. None for an estimator the log does not hold (k2, abs, mse)."""
    estimator = table.settings.kl_estimator
    if estimator == "k3" and table.get("kl/k3_mean") is not None:
        return "kl/k3_mean", table.get("kl/k3_mean")
    if estimator not in (None, "k1", "k3", "kl"):
        return None
    return ("kl/mean", table.get("kl/mean")) if table.get("kl/mean") is not None else None


def penalty_terms(table: MetricTable) -> PenaltyTerms | None:
    """What the penalty identity reads, or None where the log lacks a part of it (a score,
    a total or a penalty, a KL of the penalty's estimator, beta) or its KL is a loss term."""
    if table.settings.kl_in_reward is False:
        return None
    score = table.get("reward/score_mean") or table.get("reward/proxy_mean")
    total, logged_penalty = table.get("reward/total_mean"), table.get("reward/kl_penalty_mean")
    if score is None or (total is None and logged_penalty is None):
        return None
    if logged_penalty is not None:
        penalty = {s: -v for s, v in _at(logged_penalty).items()}
        penalty_res, magnitude = resolution(logged_penalty.values), {s: abs(v) for s, v in penalty.items()}
    else:
        scores, totals = _at(score), _at(total)
        penalty = {s: scores[s] - totals[s] for s in scores.keys() & totals.keys()}
        penalty_res = resolution(score.values) + resolution(total.values)
        magnitude = {s: abs(scores[s]) + abs(totals[s]) for s in penalty}
    found = _penalty_kl(table)
    if found is not None and found[0] in table.derived:
        found = None  # a per-sequence KL the table made from the per-token one: read as the product it is
    exact = found is not None
    if found is not None:
        kl_name, kl_series = found
        kl, kl_res = _at(kl_series), resolution(kl_series.values)
    else:
        per_token, length = table.get("kl/token_mean"), table.get("response/length_mean")
        if per_token is None or length is None:
            return None
        tokens, lengths = _at(per_token), _at(length)
        kl = {s: tokens[s] * lengths[s] for s in tokens.keys() & lengths.keys()}
        kl_name = "kl/token_mean x response/length_mean"
        kl_res = resolution(per_token.values) * max(lengths.values(), default=0.0) + resolution(length.values) * max(
            (abs(v) for v in tokens.values()), default=0.0)
    coef = table.get("kl/coef")
    if coef is not None:
        beta: dict[int, float] | float = _at(coef)
        beta_res = resolution(coef.values)
    elif table.settings.kl_coef is not None and table.settings.kl_controller == "fixed":
        beta, beta_res = float(table.settings.kl_coef), 0.0
    else:
        return None
    return PenaltyTerms(penalty, penalty_res, kl, kl_res, kl_name, beta, beta_res, magnitude, exact)


@rule("kl_penalty_mismatch", "component_bug", thresholds=(FLOAT32_MEAN, IDENTITY_SIGMAS, PRODUCT_OF_MEANS),
      causes=(causes.penalty_accounting, causes.logprob_bookkeeping))
def kl_penalty_mismatch(table: MetricTable) -> Detection | None:
    """The KL penalty the log accounts for (score - total reward, or the logged penalty) is
    not beta x the logged KL of the penalty's estimator, per sequence: on most steps where
    either is above its tolerance (the log's decimals and float32's rounding; a factor 2
    where the KL is a per-token mean times the mean length). Says how many times the KL
    the penalty is."""
    terms = penalty_terms(table)
    if terms is None:
        return None
    judged, broken, ratios = [], [], []
    for step in sorted(terms.penalty.keys() & terms.kl.keys()):
        beta = terms.beta.get(step) if isinstance(terms.beta, dict) else terms.beta
        if beta is None:
            continue
        penalty, kl = terms.penalty[step], terms.kl[step]
        expected = beta * kl
        tolerance = (terms.penalty_resolution + abs(beta) * terms.kl_resolution + abs(kl) * terms.beta_resolution
                     + FLOAT32_MEAN.value * (terms.magnitude[step] + abs(expected)))
        limit = IDENTITY_SIGMAS.value * tolerance
        if max(abs(penalty), abs(expected)) <= limit:
            continue  # both within rounding of 0: nothing to compare yet
        judged.append(step)
        if expected:
            ratios.append(penalty / expected)
        if terms.exact:
            wrong = abs(penalty - expected) > limit
        else:
            band = PRODUCT_OF_MEANS.value
            wrong = expected == 0 or not (1 / band <= penalty / expected <= band) and abs(penalty - expected) > limit
        if wrong:
            broken.append(step)
    if len(judged) < MIN_STEPS or len(broken) < max(MIN_STEPS, len(judged) / 2):
        return None
    times = statistics.median(ratios) if ratios else math.nan
    how = "exactly" if terms.exact else f"within a factor {PRODUCT_OF_MEANS.value:g}"
    first = broken[0]
    beta_first = terms.beta.get(first) if isinstance(terms.beta, dict) else terms.beta
    observed = {"penalty_at_onset": terms.penalty[first], "beta_x_kl_at_onset": beta_first * terms.kl[first],
                "times_the_kl": times, "steps_judged": float(len(judged)), "steps_broken": float(len(broken))}
    return Detection(
        f"the KL penalty is {times:.3g}x beta x the logged KL ({terms.kl_name}), not 1x", "high", first,
        (Evidence("reward/total_mean", first, observed,
                  f"score - total reward = beta x {terms.kl_name} {how}, on at least half of the {len(judged)} steps "
                  f"where either is above {IDENTITY_SIGMAS.value:g}x its tolerance (broken on {len(broken)})",
                  "Ziegler et al. 2019 eq. 2: R = r - beta log(pi / ref), summed over the response; "
                  + FLOAT32_MEAN.source),))


@rule("kl_coef_not_configured", "component_bug", requires=("kl/coef",), thresholds=(IDENTITY_SIGMAS,),
      causes=(causes.coefficient_ignored,))
def kl_coef_not_configured(table: MetricTable) -> Detection | None:
    """The logged KL coefficient is not the configured one: at the first step (before any
    controller update) for any controller, and at every step for a fixed one (for at least
    3 steps), beyond the log's decimals."""
    configured = table.settings.kl_coef
    coef = table.get("kl/coef")
    if configured is None:
        return None
    limit = resolution(coef.values) + 1e-6 * abs(configured)
    checked = list(range(len(coef))) if table.settings.kl_controller == "fixed" else [0]
    off = [i for i in checked if abs(coef.values[i] - configured) > limit]
    if not off or (len(checked) > 1 and len(off) < MIN_STEPS):
        return None
    i = off[0]
    return Detection(f"beta is {coef.values[i]:.4g} in the log, {configured:g} in the configuration", "high",
                     coef.steps[i],
                     (Evidence("kl/coef", coef.steps[i], {"logged": coef.values[i], "configured": configured,
                                                          "steps_off": float(len(off))},
                               f"logged kl/coef = the configured {configured:g} within {limit:.2g} "
                               + ("at every step (a fixed controller)" if len(checked) > 1 else "at the first step"),
                               "the run's configuration (settings); a fixed controller never moves beta, an adaptive "
                               "one starts from it (Ziegler et al. 2019 sec. 2.2)"),))
