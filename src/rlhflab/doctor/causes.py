"""Attribution: for a detection, the likely components at fault, ranked, each with a fix.

Every rule has a default ranking (the most common cause of that symptom first, after
Huang et al. 2023 and the TRL docs). Then, in this order:
1. the checkup clears components whose conclusive probes all passed (they go last);
2. evidence in the metrics and in the run's config moves a cause to the front: a zero
   KL coefficient, a negative entropy coefficient, a clip range that never clips, large
   update statistics, unnormalised advantages, a reward model that fails its own health
   checks, a batch of repeated prompts;
3. failed checkup probes move their component to the front, the most specific last, so
   a probe that proves a bug outranks any circumstantial evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhflab.doctor.findings import Cause, Component, Fix
from rlhflab.doctor.signals import baseline
from rlhflab.doctor.table import MetricTable

# How specific a failed checkup probe (doctor/probes.py) is: a weak RM fails its health
# probes whatever else is wrong, while a failed mask or GAE probe points at one function.
PROBE_SPECIFICITY = {
    "rm_prefers_chosen": 0, "rm_score_not_mostly_length": 0, "rewards_standardised": 1,
    "kl_zero_before_update": 2, "first_ratio_is_one": 2, "sampled_logprobs_match_training_forward": 2,
    "logprob_padding_invariance": 3, "reward_padding_invariance": 3, "reference_frozen_and_separate": 3,
    "mask_covers_response_through_eos": 3, "gae_matches_naive_loop": 3, "responses_end": 3,
    "prompts_distinct": 3,
}
# Components the checkup can clear: their probes test every way the causes below blame
# them (temperature, shift, dropout, padding; score scaling; prompt variety; EOS), so
# when all of them pass the component is unlikely and goes to the back of the ranking.
# The other components have probes for some of their bugs only (a passed reference probe
# says nothing of the KL coefficient), so passing never clears them.
CONCLUSIVE_PROBES: dict[Component, frozenset[str]] = {
    "logprob_bookkeeping": frozenset({"kl_zero_before_update", "first_ratio_is_one",
                                      "sampled_logprobs_match_training_forward", "logprob_padding_invariance"}),
    "reward_scaling": frozenset({"rewards_standardised"}),
    "prompt_data": frozenset({"prompts_distinct"}),
    "sampling": frozenset({"responses_end"}),
}


@dataclass(frozen=True)
class CheckupVerdict:
    """What a run's checkup says about components: failed probes, and cleared components."""

    failed: dict[str, Component] = field(default_factory=dict)  # probe -> its component
    passed: frozenset[str] = frozenset()  # names of the probes that passed
    records: dict[str, dict] = field(default_factory=dict)  # failed probe -> its checkup.json record

    @property
    def cleared(self) -> frozenset[Component]:
        return frozenset(c for c, probes in CONCLUSIVE_PROBES.items()
                         if probes <= self.passed and c not in self.failed.values())

    @staticmethod
    def from_probes(probes: list[dict]) -> "CheckupVerdict":
        """From checkup.json's probe records (`name`, `component`, `passed`)."""
        failed = [p for p in probes if not p["passed"]]
        return CheckupVerdict({p["name"]: p["component"] for p in failed},
                              frozenset(p["name"] for p in probes if p["passed"]), {p["name"]: p for p in failed})


def _config(table: MetricTable):
    return table.meta.get("config")


def _last(table: MetricTable, metric: str) -> float | None:
    s = table.get(metric)
    return s.values[-1] if s is not None else None


def _mean(table: MetricTable, metric: str) -> float | None:
    s = table.get(metric)
    return sum(s.values) / len(s) if s is not None else None


def _kl_fix(table: MetricTable) -> Fix:
    config = _config(table)
    coef = config.ppo.kl_coef if config is not None else _last(table, "kl/coef")
    if coef is not None and coef > 0:
        return Fix({"ppo.kl_coef": f"{max(0.2, 2 * coef):g}"}, "a stronger KL penalty keeps the policy near the reference")
    return Fix({"ppo.kl_coef": "0.2"}, "restore a KL penalty (0.2 per nat on standardised rewards)")


def _lr_fix(table: MetricTable) -> Fix:
    config = _config(table)
    lr = config.ppo.lr if config is not None else _last(table, "lr")
    value = f"{lr / 10:.2g}" if lr else "3e-5"
    return Fix({"ppo.lr": value}, "a 10x smaller learning rate makes each PPO step smaller")


def _more_pairs(table: MetricTable) -> str:
    config = _config(table)
    return str(2 * config.reward.pairs) if config is not None else "36000"


def _causes_for(rule: str, table: MetricTable) -> list[Cause]:
    """The default ranking of a rule's causes (before evidence moves them)."""
    kl_control = Cause("kl_control", "the KL penalty is too weak, off, or of the wrong sign, so nothing "
                                      "holds the policy near the reference", _kl_fix(table))
    hyper = Cause("ppo_hyperparameters", "steps too large (learning rate, clip range, epochs): the policy "
                                         "moves further per iteration than the penalty can hold", _lr_fix(table))
    scaling = Cause("reward_scaling", "rewards are not standardised, so one score dwarfs the KL penalty and the "
                                      "advantages", Fix({"ppo.normalize_reward": "true"}, "standardise scores with the "
                                                        "reward model's saved mean and std"))
    rm = Cause("reward_model", "the reward model is exploitable (overfit, length-biased, or scoring padding): "
                               "the policy finds what it over-rates", Fix({"reward.pairs": _more_pairs(table)},
                                                                          "more comparisons make a harder-to-exploit RM"))
    bookkeeping = Cause("logprob_bookkeeping", "the logprobs PPO uses are not those of the sampled tokens "
                                               "(temperature, an off-by-one shift, dropout, padding, or a reference "
                                               "that is the policy): KL and ratio are wrong", None)
    advantages = Cause("advantages_values", "advantages or values are mis-computed (GAE direction, masks, "
                                            "whitening, value clipping)", None)
    prompts = Cause("prompt_data", "the prompts are too narrow (few distinct prompts), so the policy "
                                   "fits a handful of answers", None)
    entropy = Cause("ppo_hyperparameters", "the entropy term pushes entropy down, or the learning rate is too high",
                    Fix({"ppo.entropy_coef": "0.0"}, "no entropy term (a positive one would raise entropy)"))
    eos = Cause("sampling", "responses stopped ending with EOS (no missing-EOS penalty, or EOS unreachable)",
                Fix({"ppo.missing_eos_penalty": "1.0"}, "penalise responses that do not end"))
    rm_data = Cause("reward_model", "too few or too noisy comparisons, or too many epochs",
                    Fix({"reward.pairs": _more_pairs(table), "reward.epochs": "2"},
                        "more comparisons, fewer passes"))
    table_of = {
        "kl_explosion": [kl_control, hyper, scaling, rm, bookkeeping],
        "kl_negative": [bookkeeping, kl_control, advantages],
        "kl_controller_wrong_way": [Cause("kl_control", "the adaptive controller's update has the wrong sign",
                                          Fix({"ppo.kl_target": "none", "ppo.kl_coef": "0.2"},
                                              "a fixed coefficient until the controller is fixed")), bookkeeping],
        "entropy_collapse": [hyper, entropy, kl_control, prompts],
        "diversity_collapse": [kl_control, hyper, prompts, rm],
        "identical_responses": [prompts, kl_control, hyper],
        "reward_hacking_gold": [kl_control, rm, hyper],
        "reward_hacking_proxy": [kl_control, rm, eos, hyper],
        "proxy_out_of_range": [kl_control, rm],
        "responses_never_end": [eos, rm],
        "prompts_narrow": [prompts],
        "checkup_probe_failed": [],  # the failed probe's component is promoted in
        "ratio_off": [bookkeeping, hyper, advantages],
        "clipfrac_high": [hyper, scaling, bookkeeping],
        "approxkl_high": [hyper, scaling, bookkeeping],
        "value_explained_variance_low": [advantages, scaling, hyper],
        "non_finite": [scaling, hyper, bookkeeping],
        "updates_skipped": [scaling, hyper, bookkeeping],
        "grad_norm_spikes": [scaling, hyper],
        "rm_weak": [rm_data],
        "rm_overfit": [rm_data],
        "rm_length_bias": [Cause("reward_model", "the comparisons reward length, or the score is read at a "
                                                 "padding position whose value tracks length", rm_data.fix)],
    }
    return list(table_of.get(rule, [hyper]))


def _promote(causes: list[Cause], component: Component, explanation: str | None = None,
             fix: Fix | None = None) -> list[Cause]:
    """Move the first cause of `component` to the front (inserting one if absent), with a
    new explanation and fix when given."""
    for i, cause in enumerate(causes):
        if cause.component == component:
            chosen = Cause(component, explanation or cause.explanation, fix or cause.fix)
            return [chosen] + causes[:i] + causes[i + 1 :]
    return [Cause(component, explanation or component, fix)] + causes


def _demote(causes: list[Cause], cleared: frozenset[Component]) -> list[Cause]:
    """Causes of cleared components to the back, each order otherwise kept."""
    return [c for c in causes if c.component not in cleared] + [c for c in causes if c.component in cleared]


# Rules whose symptom a given misconfiguration produces.
_RUNAWAY = frozenset({"kl_explosion", "reward_hacking_gold", "reward_hacking_proxy", "diversity_collapse",
                      "entropy_collapse", "identical_responses", "proxy_out_of_range"})
_COLLAPSE = frozenset({"entropy_collapse", "diversity_collapse", "identical_responses"})
_LARGE_STEPS = frozenset({"ratio_off", "approxkl_high", "clipfrac_high", "kl_explosion"}) | _COLLAPSE


def config_evidence(table: MetricTable) -> list[tuple[Cause, frozenset[str]]]:
    """Settings outside the range PPO for RLHF is run with, each as the cause it points
    at and the rules whose symptom it explains. Without a config (another trainer's
    log) the KL coefficient is read from the `kl/coef` metric."""
    config = _config(table)
    found: list[tuple[Cause, frozenset[str]]] = []
    coef = config.ppo.kl_coef if config is not None else _last(table, "kl/coef")
    adaptive = config is not None and config.ppo.kl_target is not None
    if coef == 0.0 and not adaptive:
        found.append((Cause("kl_control", "the KL coefficient is 0: nothing holds the policy near the reference",
                            _kl_fix(table)), _RUNAWAY))
    if config is None:
        return found
    ppo = config.ppo
    if ppo.entropy_coef < 0:
        # Schulman et al. 2017 eq. 9 adds +c2 * entropy to the objective; c2 < 0 minimises it.
        found.append((Cause("ppo_hyperparameters", f"ppo.entropy_coef = {ppo.entropy_coef:g} is negative: the "
                                                   "loss pushes entropy down",
                            Fix({"ppo.entropy_coef": "0.0"}, "no entropy term (a positive one raises entropy)")),
                      _COLLAPSE))
    wide = {key: value for key, value in (("ppo.clip_eps", ppo.clip_eps), ("ppo.value_clip_eps", ppo.value_clip_eps))
            if value >= 1.0}
    if wide:
        # Schulman et al. 2017 use 0.1-0.3; at >= 1 a ratio is clipped only past 2x, so never in practice.
        found.append((Cause("ppo_hyperparameters", ", ".join(f"{k} = {v:g}" for k, v in wide.items())
                            + " never clips: an update can move the policy arbitrarily far from the sampler",
                            Fix({key: "0.2" for key in wide}, "the usual clip range (Schulman et al. 2017)")),
                      _LARGE_STEPS))
    return found


def rank_causes(rule: str, table: MetricTable, checkup: CheckupVerdict | None = None) -> list[Cause]:
    """Ranked causes of `rule`'s detection on this table, with the run's checkup if it had one."""
    checkup = checkup or CheckupVerdict()
    causes = _demote(_causes_for(rule, table), checkup.cleared)
    for cause, rules in config_evidence(table):
        if rule in rules:
            causes = _promote(causes, cause.component, cause.explanation, cause.fix)
    approxkl, clipfrac = _mean(table, "policy/approxkl"), _mean(table, "policy/clipfrac")
    if rule in ("kl_explosion", "entropy_collapse", "diversity_collapse") and (
            (approxkl is not None and approxkl > 0.3) or (clipfrac is not None and clipfrac > 0.3)):
        causes = _promote(causes, "ppo_hyperparameters",
                          f"PPO steps are too large (mean approxkl {approxkl or 0:.2f}, clipfrac {clipfrac or 0:.2f})")
    adv_std = _mean(table, "adv/std")
    if rule in ("kl_explosion", "clipfrac_high", "approxkl_high", "value_explained_variance_low", "grad_norm_spikes",
                "non_finite", "updates_skipped") and adv_std is not None and adv_std > 10:
        causes = _promote(causes, "reward_scaling", f"advantages have std {adv_std:.0f} before whitening: "
                                                    "rewards are not standardised")
    unique = table.get("prompts/unique_frac")
    if rule in ("identical_responses", "diversity_collapse", "entropy_collapse") and unique is not None and \
            baseline(unique.values, len(unique)) < 0.5:
        causes = _promote(causes, "prompt_data", f"only {unique.values[-1]:.0%} of each batch's prompts are distinct")
    if rule.startswith("reward_hacking") and _last(table, "rm/length_corr") is not None and \
            abs(_last(table, "rm/length_corr")) > 0.5:
        causes = _promote(causes, "reward_model", "the reward model's score follows length "
                                                  f"(corr {_last(table, 'rm/length_corr'):+.2f})")
    if rule.startswith("reward_hacking") and _last(table, "rm/val_acc") is not None and _last(table, "rm/val_acc") < 0.6:
        causes = _promote(causes, "reward_model", f"the reward model is weak (val acc {_last(table, 'rm/val_acc'):.2f})")
    # Least specific first, so the most specific failed probe's component ends up first.
    for probe, component in sorted(checkup.failed.items(), key=lambda item: PROBE_SPECIFICITY.get(item[0], 1)):
        causes = _promote(causes, component, f"the checkup probe '{probe}' failed")
    return causes
