"""Attribution: the causes a finding can have, ranked, each with a fix.

Each rule declares its default ranking of causes (the most common cause of its symptom
first, after Huang et al. 2023 and the TRL docs) and the clues that reorder it
(`rules/`). Ranking a finding then goes, in this order:
1. the checkup clears components whose conclusive probes all passed (they go last);
2. each clue of the rule that holds, in priority order, moves its cause to the front:
   settings outside the range PPO for RLHF is run with (a zero KL coefficient, a
   negative entropy coefficient, a clip range that never clips), large update
   statistics, unnormalised advantages, a reward model that fails its own health
   checks, a batch of repeated prompts;
3. failed checkup probes move their component to the front, the most specific last (at
   equal specificity a failure at the start last, over one seen only in the moved state),
   so a probe that proves a bug outranks any circumstantial evidence; but a failure that
   reads the output of another failing component (the checkup's component graph) goes
   before every failure that does not, so the most upstream failing component ends first
   and the downstream failure is shown as its possible consequence.

A fix names `RunSettings` fields (`settings.py`); each format renders it in its own
trainer's vocabulary (`formats/`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from rlhflab.doctor.findings import Cause, Change, Component, Fix
from rlhflab.doctor.signals import printed_resolution
from rlhflab.doctor.table import MetricTable

CauseMaker = Callable[[MetricTable], Cause]

# The values fixes propose when the log does not suggest better ones.
KL_COEF = 0.2  # per nat on standardised rewards: lm-human-preferences' initial beta, TRL 0.x's init_kl_coef
CLIP_EPS = 0.2  # Schulman et al. 2017 use 0.1-0.3; 0.2 is the common default (TRL, OpenAI baselines)
NEVER_CLIPS = 1.0
# A per-update approx-KL PPO is run at: Spinning Up's target_kl is 0.01-0.05; healthy demo runs' median is 0.01-0.015.
TARGET_APPROXKL = 0.02  # a ratio clip range >= 1 clips only past a 2x ratio change, so never in practice
# Ziegler et al. 2019's smallest reward-model set: 5,000 four-way choices, each 3 pairwise
# preferences of the chosen response; Stiennon et al. 2020 train on 64,832 comparisons, Bai et
# al. 2022 on ~161,000. On the reviews world (demo, 2 epochs) 15,000 pairs give held-out accuracy
# 0.67 and gold agreement 0.70, 120-3,840 pairs 0.54-0.58 (bench/rm_learning_curve.py).
RM_PAIRS_FLOOR = 15_000


@dataclass(frozen=True)
class Clue:
    """Evidence in the metrics or the settings that points at one cause, for the rules that
    list it. Clues are applied in `priority` order, each moving its cause to the front, so
    the highest-priority clue that holds ends up first. A clue's cause without a fix keeps
    the fix of the cause it promotes."""

    name: str
    priority: int
    find: Callable[[MetricTable], Cause | None]
    description: str


def _last(table: MetricTable, metric: str) -> float | None:
    s = table.get(metric)
    return s.values[-1] if s is not None else None


def _peak(table: MetricTable, metric: str) -> float | None:
    s = table.get(metric)
    return max(s.values) if s is not None and len(s.values) else None


# --- the causes, each a function of the table (its settings give the fix's values) -------
def _kl_fix(table: MetricTable) -> Fix:
    coef = table.settings.kl_coef if table.settings.kl_coef is not None else _last(table, "kl/coef")
    if coef is not None and coef > 0:
        return Fix((Change("kl_coef", "set", max(KL_COEF, 2 * coef)),),
                   "a stronger KL penalty keeps the policy near the reference")
    return Fix((Change("kl_coef", "set", KL_COEF),), f"restore a KL penalty ({KL_COEF} per nat on standardised rewards)")


def _lr_factor(table: MetricTable) -> float:
    """How much smaller the learning rate should be: 10x, or more where the first update's
    approx-KL says so. The KL between nearby policies is second order in the step (its
    Fisher-metric expansion, Schulman et al. 2015, TRPO sec. 4), and Adam's step is
    proportional to the learning rate, so scaling it by sqrt(TARGET_APPROXKL / first)
    brings the first update's approx-KL to the target; at most 1000x."""
    approxkl = table.get("policy/approxkl")
    first = approxkl.values[0] if approxkl is not None else 0.0
    if first <= TARGET_APPROXKL:
        return 0.1
    return max(0.001, min(0.1, (TARGET_APPROXKL / first) ** 0.5))


def _lr_fix(table: MetricTable) -> Fix:
    # A logged learning rate follows its schedule (warm-up, then a decay towards 0 in TRL's and
    # most trainers' defaults): the configured rate is its peak, not its last value.
    lr = table.settings.lr if table.settings.lr is not None else _peak(table, "lr")
    factor = _lr_factor(table)
    value = float(f"{lr * factor:.2g}") if lr else 3e-5
    return Fix((Change("lr", "set", value),), f"a {1 / factor:.0f}x smaller learning rate makes each PPO step smaller"
               + (" (the first update's approx-KL, second order in the step, to about "
                  f"{TARGET_APPROXKL:g})" if factor < 0.1 else ""))


def _more_pairs(table: MetricTable) -> Change:
    """Twice the run's comparisons, and at least the fewest a published language reward
    model was trained on (RM_PAIRS_FLOOR): a set 100x too small is not cured by doubling it."""
    pairs = table.settings.reward_pairs
    return Change("reward_pairs", "set", max(2 * pairs, RM_PAIRS_FLOOR)) if pairs else \
        Change("reward_pairs", "increase")


def kl_control(table: MetricTable) -> Cause:
    return Cause("kl_control", "the KL penalty is too weak, off, or of the wrong sign, so nothing holds the policy "
                               "near the reference", _kl_fix(table))


def step_size(table: MetricTable) -> Cause:
    return Cause("ppo_hyperparameters", "steps too large (learning rate, clip range, epochs): the policy moves further "
                                        "per iteration than the penalty can hold", _lr_fix(table))


def reward_scaling(table: MetricTable) -> Cause:
    return Cause("reward_scaling", "rewards are not standardised, so one score dwarfs the KL penalty and the "
                                   "advantages",
                 Fix((Change("normalize_reward", "set", True),),
                     "standardise scores with the reward model's saved mean and std"))


def exploitable_reward_model(table: MetricTable) -> Cause:
    return Cause("reward_model", "the reward model is exploitable (overfit, length-biased, or scoring padding): the "
                                 "policy finds what it over-rates",
                 Fix((_more_pairs(table),), "more comparisons make a harder-to-exploit RM"))


def logprob_bookkeeping(table: MetricTable) -> Cause:
    return Cause("logprob_bookkeeping", "the logprobs PPO uses are not those of the sampled tokens (temperature, an "
                                        "off-by-one shift, dropout, padding, or a reference that is the policy): KL "
                                        "and ratio are wrong", None)


def advantages_values(table: MetricTable) -> Cause:
    return Cause("advantages_values", "advantages or values are mis-computed (GAE direction, masks, whitening, value "
                                      "clipping)", None)


def narrow_prompts(table: MetricTable) -> Cause:
    return Cause("prompt_data", "the prompts are too narrow (few distinct prompts), so the policy fits a handful of "
                                "answers", None)


def entropy_term(table: MetricTable) -> Cause:
    return Cause("ppo_hyperparameters", "the entropy term pushes entropy down, or the learning rate is too high",
                 Fix((Change("entropy_coef", "set", 0.0),), "no entropy term (a positive one would raise entropy)"))


def unended_responses(table: MetricTable) -> Cause:
    return Cause("sampling", "responses stopped ending with EOS (no missing-EOS penalty, or EOS unreachable)",
                 Fix((Change("missing_eos_penalty", "set", 1.0),), "penalise responses that do not end"))


def length_limit(table: MetricTable) -> Cause:
    current = table.settings.response_length
    fix = (Fix((Change("response_length", "set", 2 * current),), "twice the length limit: room for the answers")
           if current else Fix((Change("response_length", "increase"),), "a longer length limit"))
    return Cause("sampling", "the length limit is shorter than the answers take, so most are cut before they end "
                             "(a cut response's score is read at its last token)", fix)


def _rm_data_fix(table: MetricTable) -> Fix:
    return Fix((_more_pairs(table), Change("reward_epochs", "set", 2)), "more comparisons, fewer passes")


def reward_model_data(table: MetricTable) -> Cause:
    return Cause("reward_model", "too few or too noisy comparisons, or too many epochs", _rm_data_fix(table))


def reward_model_length(table: MetricTable) -> Cause:
    return Cause("reward_model", "the comparisons reward length, or the score is read at a padding position whose "
                                 "value tracks length", _rm_data_fix(table))


def inverted_controller(table: MetricTable) -> Cause:
    return Cause("kl_control", "the adaptive controller's update has the wrong sign",
                 Fix((Change("kl_target", "set", None), Change("kl_coef", "set", KL_COEF)),
                     "a fixed coefficient until the controller is fixed"))


def penalty_accounting(table: MetricTable) -> Cause:
    return Cause("kl_control", "the KL penalty in the reward is not beta x the KL the log shows: the shaping scales it "
                               "(per sequence on every token, beta applied twice), or takes the KL of another model",
                 None)


def sampler_mismatch(table: MetricTable) -> Cause:
    why = ("the inference engine's logprobs are not the trainer's for the same tokens (the engine's precision or "
           "kernels, weights synced late or not at all, a stale sampler): the update treats off-policy samples as "
           "on-policy")
    if table.settings.importance_sampling_correction:  # already on: only the source is left to find
        return Cause("logprob_bookkeeping", why + "; the run already corrects for it, so the source must be found: "
                                                  "the engine's dtype and kernels, the weight sync", None)
    return Cause("logprob_bookkeeping", why,
                 Fix((Change("importance_sampling_correction", "set", True),),
                     "weight the loss by the trainer/sampler ratio (truncated importance sampling), and find the "
                     "mismatch's source: the engine's dtype and kernels, the weight sync"))


def sampler_settings(table: MetricTable) -> Cause:
    return Cause("sampling", "the sampler draws from another distribution than the trainer scores (its temperature, "
                             "top-k or top-p, a chat template or stop tokens applied on one side only)", None)


def coefficient_ignored(table: MetricTable) -> Cause:
    return Cause("kl_control", "the trainer's KL coefficient is not the configured one: the setting is ignored, or a "
                               "controller that should be fixed moves it", None)


def optimizer_step(table: MetricTable) -> Cause:
    return Cause("ppo_hyperparameters", "the optimiser's step does not reach the policy, or the update's arithmetic is "
                                        "not finite before it ever moved: parameters missing from the optimiser, "
                                        "gradients zeroed or unscaled after backward, a step skipped; a log of 0, a "
                                        "division by a zero std, an overflow in half precision", None)


def reward_not_read(table: MetricTable) -> Cause:
    return Cause("reward_model", "the score PPO is paid is not the reward model's: zeroed, masked out, or read where "
                                 "the model writes nothing", None)


def held_out_evaluation(table: MetricTable) -> Cause:
    return Cause("evaluation", "the held-out evaluation does not score what it samples: its scores zeroed, or taken "
                               "from other responses than the policy's", None)


def gradient_not_applied(table: MetricTable) -> Cause:
    return Cause("ppo_hyperparameters", "the update loop: the gradient norm it logs is not the gradient that moves the "
                                        "policy (measured after the gradients were cleared, or before backward), or "
                                        "its step applies another gradient", None)


def resume_bookkeeping(table: MetricTable) -> Cause:
    return Cause("checkpointing", "a resume that did not restore the run where its checkpoint left it: the lines "
                                  "logged after the checkpoint kept (so its steps are logged twice), and what else "
                                  "it restores (the optimiser's moments, the KL coefficient) suspect", None)


def reference_is_policy(table: MetricTable) -> Cause:
    return Cause("kl_control", "the reference is the policy (the same module, or a copy updated with it), so the KL "
                               "penalty holds nothing back", None)


def schedule_too_short(table: MetricTable) -> Cause:
    return Cause("ppo_hyperparameters", "the learning-rate schedule was sized for fewer steps than the run takes (its "
                                        "length counted in epochs, batches or processes where the optimiser counts "
                                        "its own steps), so it reaches 0 mid-run", None)


# --- clues in the run's settings --------------------------------------------------------
def kl_penalty_off(table: MetricTable) -> bool:
    """Whether the run has no KL penalty: a coefficient of 0 (from the settings, else the
    last logged `kl/coef`) and no adaptive target to raise it."""
    settings = table.settings
    coef = settings.kl_coef if settings.kl_coef is not None else _last(table, "kl/coef")
    return coef == 0.0 and not settings.adaptive_kl


def _zero_kl(table: MetricTable) -> Cause | None:
    if kl_penalty_off(table):
        return Cause("kl_control", "the KL coefficient is 0: nothing holds the policy near the reference",
                     _kl_fix(table))
    return None


def _negative_entropy_coef(table: MetricTable) -> Cause | None:
    coef = table.settings.entropy_coef
    if coef is None or coef >= 0:
        return None
    # Schulman et al. 2017 eq. 9 adds +c2 * entropy to the objective; c2 < 0 minimises it.
    return Cause("ppo_hyperparameters", f"the entropy coefficient {coef:g} is negative: the loss pushes entropy down",
                 Fix((Change("entropy_coef", "set", 0.0),), "no entropy term (a positive one raises entropy)"))


def _clip_never_clips(table: MetricTable) -> Cause | None:
    settings = table.settings
    wide = {name: value for name, value in (("clip_eps", settings.clip_eps), ("value_clip_eps", settings.value_clip_eps))
            if value is not None and value >= NEVER_CLIPS}
    if not wide:
        return None
    return Cause("ppo_hyperparameters", ", ".join(f"{k} = {v:g}" for k, v in wide.items())
                 + " never clips: an update can move the policy arbitrarily far from the sampler",
                 Fix(tuple(Change(name, "set", CLIP_EPS) for name in wide),
                     "the usual clip range (Schulman et al. 2017)"))


ZERO_KL = Clue("zero_kl_coef", 0, _zero_kl, "the KL coefficient is 0 without an adaptive target (from the "
               "settings, else the last `kl/coef`)")
NEGATIVE_ENTROPY_COEF = Clue("negative_entropy_coef", 1, _negative_entropy_coef,
                             "the entropy coefficient is negative (Schulman et al. 2017 eq. 9 adds +c2 x entropy)")
CLIP_NEVER_CLIPS = Clue("clip_never_clips", 2, _clip_never_clips,
                        "a policy or value clip range >= 1 (Schulman et al. 2017 use 0.1-0.3)")


def _never_moved(table: MetricTable) -> Cause | None:
    """A non-finite gradient norm in a run whose KL to the reference (or approx-KL) is
    exactly 0 wherever it is finite: the policy never moved, so no reward, however scaled,
    reached it; the arithmetic or the optimiser broke first."""
    if "policy/grad_norm" not in table.non_finite and "policy/loss" not in table.non_finite:
        return None
    kls = [table.get(name, any_unit=True) for name in ("kl/mean", "kl/token_mean", "kl/k3_mean", "policy/approxkl")]
    logged = [s for s in kls if s is not None and len(s)]
    if not logged or any(v != 0.0 for s in logged for v in s.values):
        return None
    # Exactly 0 only in a log that writes every digit: a console's 0.000 may be an early 4e-4.
    if any(printed_resolution(table, s) > 0.0 for s in logged):
        return None
    return Cause(optimizer_step(table).component, "the gradient is not finite while the policy never moved (its KL "
                                                  "exactly 0 wherever logged): the update's arithmetic or the "
                                                  "optimiser, not the reward's scale", None)


NEVER_MOVED = Clue("never_moved", 9, _never_moved, "a NaN or Inf gradient norm or loss while every logged KL (to the "
                   "reference, or approx-KL) is exactly 0, in a log that writes every digit: the policy never moved")


# --- ranking ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckupVerdict:
    """What a run's checkup says about components (RUN/checkup.json, written by
    rlhflab/checkup/): its failed probes, each with how specific its failure is (0: fails
    with many bugs ... 3: points at one function), and the components it cleared (every
    probe that clears them ran in a state where it can see their faults and passed, so
    they go to the back of the ranking)."""

    failed: dict[str, Component] = field(default_factory=dict)  # probe -> its component
    cleared: frozenset[Component] = frozenset()
    records: dict[str, dict] = field(default_factory=dict)  # failed probe -> its checkup.json record

    def specificity(self, probe: str) -> int:
        return self.records.get(probe, {}).get("specificity", 1)

    def upstream(self, probe: str) -> list[Component]:
        """The failing components whose output `probe` reads (the checkup's component graph):
        what its failure may be a consequence of."""
        failing = set(self.failed.values()) - {self.failed.get(probe)}
        return [c for c in self.records.get(probe, {}).get("reads", []) if c in failing]

    def weight(self, probe: str) -> tuple[bool, int, bool]:
        """How strongly a failure points at its component: a failure not explained by an
        upstream one over one that is, then by specificity, then a failure at the start over
        one seen only in the moved state (which the run's own, possibly broken, code reached,
        so a failure there may be another component's doing)."""
        return (not self.upstream(probe), self.specificity(probe),
                self.records.get(probe, {}).get("state", "start") == "start")

    def explanation(self, probe: str) -> str:
        upstream = self.upstream(probe)
        why = f"the checkup probe '{probe}' failed"
        return why + (f", which may follow from {' and '.join(upstream)} (whose output it reads and whose own "
                      "probe failed)" if upstream else "")

    @staticmethod
    def from_probes(probes: list[dict], cleared: Iterable[Component] = ()) -> "CheckupVerdict":
        """From checkup.json's probe records (`name`, `component`, `passed`, `specificity`)
        and its `cleared` components."""
        failed = [p for p in probes if not p["passed"]]
        first_failure: dict[str, dict] = {}
        for p in failed:  # a probe run in two states that failed in both: its first failure speaks
            first_failure.setdefault(p["name"], p)
        return CheckupVerdict({name: p["component"] for name, p in first_failure.items()},
                              frozenset(cleared) - {p["component"] for p in failed}, first_failure)


def _promote(causes: list[Cause], promoted: Cause) -> list[Cause]:
    """Move the first cause of `promoted.component` to the front with `promoted`'s
    explanation (and fix, when it has one), inserting `promoted` if absent."""
    for i, cause in enumerate(causes):
        if cause.component == promoted.component:
            chosen = Cause(promoted.component, promoted.explanation, promoted.fix or cause.fix)
            return [chosen] + causes[:i] + causes[i + 1 :]
    return [promoted] + causes


def _demote(causes: list[Cause], cleared: frozenset[Component]) -> list[Cause]:
    """Causes of cleared components to the back, each order otherwise kept."""
    return [c for c in causes if c.component not in cleared] + [c for c in causes if c.component in cleared]


def rank_causes(makers: Iterable[CauseMaker], clues: Iterable[Clue], table: MetricTable,
                checkup: CheckupVerdict | None = None) -> list[Cause]:
    """Ranked causes of a detection on this table: the rule's default ranking, moved by
    the checkup's cleared components, the clues that hold, and the failed probes."""
    checkup = checkup or CheckupVerdict()
    causes = _demote([make(table) for make in makers], checkup.cleared)
    for clue in sorted(clues, key=lambda c: c.priority):
        found = clue.find(table)
        if found is not None:
            causes = _promote(causes, found)
    # Weakest first, so the most specific failed probe's component ends up first.
    for probe, component in sorted(checkup.failed.items(), key=lambda item: checkup.weight(item[0])):
        causes = _promote(causes, Cause(component, checkup.explanation(probe), None))
    return [_fitted(cause, table.settings) for cause in causes]


def _fitted(cause: Cause, settings) -> Cause:
    """`cause` with the changes of its fix that the run already has (its settings, read from
    its config or its trainer's) taken out and named: the doctor never proposes what is in
    place, and a fix wholly in place leaves no fix (the next cause's is proposed)."""
    if cause.fix is None:
        return cause
    held = tuple(c for c in cause.fix.changes
                 if c.direction == "set" and getattr(settings, c.setting, None) is not None
                 and getattr(settings, c.setting) == c.value)
    if not held:
        return cause
    kept = tuple(c for c in cause.fix.changes if c not in held)
    named = tuple(f"{c.setting}={getattr(settings, c.setting)}" for c in held)
    return replace(cause, fix=Fix(kept, cause.fix.text) if kept else None, in_place=named)
