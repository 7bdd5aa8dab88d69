"""Names of unknown training loops -> canonical names, by spelling families.

A researcher's own loop logs `train_reward`, `reward/mean`, `policy/entropy`, `grad_norm`,
`eval_reward` and a bare `kl`, with no trainer to tell what they mean. The resolver reads
such a name the way the loops it was built from spell it (each family cites where its
spellings are logged), after taking off what loggers add around a name: a scope in front
(`train/`, `train_`, `policy/`, `actor/`, `objective/`, `losses/`, `charts/`, `rollout/`,
`optim/`; not `critic/`, whose losses, clip fractions and gradients are the value model's),
a statistic behind (`_mean`, `/mean`, `_avg`; `_std` names the spread, `_max`, `_min` and
the like are not read), separators and case; a spelling whose own words end like a
statistic (`frac_reward_zero_std`, `vf_explained_var`) is looked up whole first.

It refuses to guess where a spelling is ambiguous. A bare `kl` is the KL to the reference
in every loop read here (TRL GRPO/RLOO, OpenRLHF, tiny-grpo: a per-token mean) but is the
old-vs-new approx-KL in some hand-made tables; it is read as the KL to the reference only
when the log says so (a neighbour names the old-vs-new KL, or a KL coefficient is logged)
or its level does (it grows tenfold over the run: a KL to the reference accumulates as the
policy moves, while an old-vs-new KL measures one update and does not); otherwise it is
kept apart with its meaning unknown. Evaluation series (`eval*`, `val*`, `test*`) are
kept apart as evaluations: held-out prompts, maybe scored by the same reward model, so
never a gold signal unless a format knows better or `--map` says so.

Every reading is a `Guess` (the name, what it was taken for, why), stated in the terminal
output and diagnosis.json; `--map` overrides any of them.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable

from rlhflab.doctor.formats.spec import Column
from rlhflab.doctor.metrics import EVAL_PREFIX, KNOWN


@dataclass(frozen=True)
class Family:
    """Spellings (normalised: lower case, `_` between words, scope and statistic taken off)
    of one canonical metric, and where each is logged."""

    metric: str
    spellings: frozenset[str]
    sources: str
    column: Column | None = None  # a unit or scale other than the canonical one

    def read_as(self) -> Column:
        return self.column or Column(self.metric)


def _family(metric: str, spellings: str, sources: str, column: Column | None = None) -> Family:
    return Family(metric, frozenset(spellings.split()), sources, column)


# The mean of a batch, by the base of its name.
MEANS: tuple[Family, ...] = (
    _family("reward/proxy_mean", "reward rewards score scores mean_reward mean_scores rollout_scores rm_score "
            "reward_model_score reward_scalar critic_score",
            "huggingface/trl trl/trainer/grpo_trainer.py (`reward`); volcengine/verl verl/trainer/ppo/metric_utils.py "
            "(`critic/score/mean`); OpenRLHF/OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py (`reward`, "
            "`score`); CarperAI/trlx trlx/trainer/accelerate_ppo_trainer.py (`rollout_scores/mean`); "
            "McGill-NLP/nano-aha-moment nano_r1_script.py (`train/rewards`); policy-gradient/GRPO-Zero train.py "
            "(`mean_reward`); PrimeIntellect-ai/prime-rl src/prime_rl/orchestrator/metrics.py (`reward/mean`)"),
    _family("reward/total_mean", "rlhf_reward score_total total_reward shaped_reward",
            "huggingface/trl trl/experimental/ppo/ppo_trainer.py (`objective/rlhf_reward`); "
            "openai/lm-human-preferences lm_human_preferences/train_policy.py (`objective/score_total`)"),
    _family("kl/token_mean", "ref_kl kl_ref kl_to_ref kl_to_reference ref_kl_div kl_penalty reward_kl_penalty kl_loss",
            "McGill-NLP/nano-aha-moment nano_r1_script.py (`train/kl_penalty`, k3 to the reference per token); "
            "volcengine/verl verl/trainer/ppo/ray_trainer.py (`actor/reward_kl_penalty`, `actor/kl_loss`); "
            "hand-made PPO loops (`ref_kl`, `kl_to_ref`)"),
    _family("kl/coef", "kl_coef kl_coeff kl_beta beta kl_ctl_value reward_kl_penalty_coeff kl_coefficient",
            "volcengine/verl verl/trainer/ppo/ray_trainer.py (`actor/reward_kl_penalty_coeff`, `actor/kl_coef`); "
            "CarperAI/trlx trlx/trainer/accelerate_ppo_trainer.py (`kl_ctl_value`); openai/lm-human-preferences "
            "train_policy.py (`objective/kl_coef`)"),
    _family("policy/entropy", "entropy policy_entropy token_entropy ent",
            "huggingface/trl trl/trainer/grpo_trainer.py (`entropy`, 0.20 on); volcengine/verl "
            "verl/workers/actor/dp_actor.py (`actor/entropy`); vwxyzjn/cleanrl cleanrl/ppo.py (`losses/entropy`); "
            "PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/train.py (`entropy/mean`)"),
    _family("policy/approxkl", "approx_kl approxkl ppo_kl policy_kl policykl old_approx_kl approx_kl_old "
            "approx_kl_to_old kl_old_new",
            "vwxyzjn/cleanrl cleanrl/ppo.py (`losses/approx_kl`, `losses/old_approx_kl`); volcengine/verl "
            "verl/workers/actor/dp_actor.py (`actor/ppo_kl`); OpenRLHF/OpenRLHF openrlhf/trainer/ppo_trainer.py "
            "(`ppo_kl`); CarperAI/trlx trlx/models/modeling_ppo.py (`policy/approx_kl`)"),
    _family("policy/clipfrac", "clipfrac clip_frac clip_fraction pg_clipfrac ppo_clip_ratio clipped_frac "
            "clip_ratio_region",
            "vwxyzjn/cleanrl cleanrl/ppo.py (`losses/clipfrac`); volcengine/verl verl/workers/actor/dp_actor.py "
            "(`actor/pg_clipfrac`); OpenRLHF/OpenRLHF (`ppo_clip_ratio`); huggingface/trl grpo_trainer.py "
            "(`clip_ratio/region_mean`); Stable-Baselines3 ppo.py (`train/clip_fraction`)"),
    _family("policy/ratio_mean", "ratio ratio_mean importance_ratio policy_ratio",
            "CarperAI/trlx trlx/models/modeling_ppo.py (`ratio`); hand-made PPO loops (`ratio_mean`)"),
    _family("policy/loss", "policy_loss pg_loss loss_policy actor_loss policy_gradient_loss surrogate_loss",
            "OpenRLHF/OpenRLHF (`policy_loss`); volcengine/verl dp_actor.py (`actor/pg_loss`); vwxyzjn/cleanrl "
            "cleanrl/ppo.py (`losses/policy_loss`); McGill-NLP/nano-aha-moment (`train/policy_loss`)"),
    _family("policy/grad_norm", "grad_norm gradient_norm actor_grad_norm grad_norm_policy policy_grad_norm",
            "huggingface/transformers trainer.py (`grad_norm`); volcengine/verl dp_actor.py (`actor/grad_norm`); "
            "OpenRLHF/OpenRLHF (`actor_grad_norm`); PrimeIntellect-ai/prime-rl (`optim/grad_norm`); "
            "open-thought/tiny-grpo train.py (`grad_norm`)"),
    _family("value/loss", "value_loss vf_loss critic_loss loss_value critic_vf_loss",
            "vwxyzjn/cleanrl cleanrl/ppo.py (`losses/value_loss`); volcengine/verl dp_critic.py (`critic/vf_loss`); "
            "OpenRLHF/OpenRLHF (`critic_loss`)"),
    _family("value/explained_variance", "explained_variance explained_var vf_explained_var var_explained",
            "vwxyzjn/cleanrl cleanrl/ppo.py (`losses/explained_variance`); volcengine/verl metric_utils.py "
            "(`critic/vf_explained_var`); openai/lm-human-preferences (`ppo/val/var_explained`)"),
    _family("value/clipfrac", "vf_clipfrac value_clipfrac",
            "volcengine/verl dp_critic.py (`critic/vf_clipfrac`)"),
    _family("adv/mean", "advantages advantage adv critic_advantages",
            "volcengine/verl metric_utils.py (`critic/advantages/mean`); "
            "hand-made PPO loops (`advantage_mean`)"),
    _family("response/length_mean", "response_length response_len completion_length completion_len "
            "completions_mean_length mean_length mean_response_len response_lengths output_length gen_len "
            "generation_length avg_output_token_lenght avg_output_token_length",
            "huggingface/trl grpo_trainer.py (`completion_length` before 0.17, `completions/mean_length`); "
            "volcengine/verl metric_utils.py (`response_length/mean`); OpenRLHF/OpenRLHF "
            "(`rollout/response_length_mean`); policy-gradient/GRPO-Zero (`mean_response_len`); "
            "McGill-NLP/nano-aha-moment (`train/response_lengths`)", Column("response/length_mean", "tokens")),
    # A count of tokens: per response, or the batch's total; length rules compare it with its own start.
    _family("response/length_mean", "completion_tokens response_tokens num_completion_tokens",
            "OpenAI-style usage counts in hand-made loops (`completion_tokens`): a per-response mean, or a batch total "
            "whose ratio to its start is the same at a fixed batch size", Column("response/length_mean", "tokens",
                                                                                 fallback=True)),
    _family("response/truncated_frac", "truncated_frac truncated_rate truncation_rate truncated_ratio "
            "completions_clipped_ratio response_length_clip_ratio response_clip_ratio non_stop_rate is_truncated",
            "huggingface/trl grpo_trainer.py (`completions/clipped_ratio`); volcengine/verl metric_utils.py "
            "(`response_length/clip_ratio`); OpenRLHF/OpenRLHF (`rollout/truncated_rate`); PrimeIntellect-ai/"
            "prime-rl (`is_truncated/mean`); McGill-NLP/nano-aha-moment (`train/non_stop_rate`)"),
    _family("response/eos_rate", "eos_rate stop_rate", "hand-made loops (`eos_rate`)"),
    _family("lr", "lr learning_rate actor_lr learning_rate_group_0 policy_lr",
            "huggingface/transformers trainer.py (`learning_rate`); vwxyzjn/cleanrl (`charts/learning_rate`); "
            "PrimeIntellect-ai/prime-rl (`optim/lr`); OpenRLHF/OpenRLHF (`actor_lr`); CarperAI/trlx "
            "(`learning_rate_group_0`)"),
    _family("reward/zero_std_frac", "frac_reward_zero_std zero_std_frac zero_std_ratio frac_zero_std",
            "huggingface/trl grpo_trainer.py (`frac_reward_zero_std`, 0.18 on)"),
)
# The spread of a batch (a `_std` name).
SPREADS: tuple[Family, ...] = (
    _family("reward/proxy_std", "reward rewards score scores", "huggingface/trl grpo_trainer.py (`reward_std`); "
            "OpenRLHF/OpenRLHF (`rollout/reward_std`); policy-gradient/GRPO-Zero (`std_reward`)"),
    _family("adv/std", "advantages advantage adv", "hand-made PPO loops (`advantage_std`)"),
)
# Names that read as something else: a square root (trlX), a sum over the batch, a
# per-sequence negative log-likelihood (TRL PPO's `objective/entropy`).
NOT_READ = {
    "sqrt_kl": "the square root of the KL (CarperAI/trlx modeling_ppo.py `policy/sqrt_kl`)",
    "kl_per_token": "the square root of a per-token KL in trlX (`policy/kl_per_token`); elsewhere unclear",
    "returns": "a sum over the batch in open-thought/tiny-grpo, returns-to-go elsewhere",
    "loss": "the total loss (policy + value + penalties), not the policy loss",
    "entropy_loss": None,  # decided by its sign (ENTROPY_LOSS)
}
# Path spellings whose scope changes the meaning (looked up before the scope is taken off).
PATHS: dict[str, tuple[str, str]] = {
    "objective/kl": ("kl/mean", "the per-sequence sum of the KL to the reference in huggingface/trl "
                                "trl/experimental/ppo/ppo_trainer.py and openai/lm-human-preferences train_policy.py"),
    "objective/entropy": ("", "a per-sequence negative log-likelihood sum in TRL PPO, not an entropy"),
}
# Old-vs-new KL spellings: a neighbour that makes a bare `kl` the KL to the reference.
OLD_NEW_KL = next(f for f in MEANS if f.metric == "policy/approxkl").spellings
REFERENCE_KL = next(f for f in MEANS if f.metric == "kl/token_mean").spellings
KL_COEFFICIENT = next(f for f in MEANS if f.metric == "kl/coef").spellings
AMBIGUOUS_KL = frozenset({"kl", "kl_div", "kl_divergence", "mean_kl"})
KL_GROWTH = 10.0  # times its early level: a KL to the reference accumulates, an old-vs-new one does not

SCOPES = frozenset({"train", "training", "policy", "actor", "objective", "losses", "charts", "rollout",
                    "rollouts", "env", "ppo", "optim", "optimizer", "metrics", "stats", "trainer", "agg", "batch",
                    "algo", "rl", "grpo"})
EVALUATION = re.compile(r"^(eval|evaluation|val|valid|validation|test)(?=[/_.\-])", re.IGNORECASE)
# TRL PPO's value-head and ratio statistics live under `val/`: not evaluations.
NOT_EVALUATION = re.compile(r"^(ppo/)?val/(ratio|ratio_var|clipfrac|clipfrac_avg|num_eos_tokens|vpred|error|mean|var)$")
MEAN_SUFFIX = re.compile(r"_(mean|avg|average)$")
MEAN_PREFIX = re.compile(r"^(mean|avg|average)_")
SPREAD_SUFFIX = re.compile(r"_(std|stdev|stddev)$")
SPREAD_PREFIX = re.compile(r"^(std)_")
OTHER_STATISTIC = re.compile(r"_(max|min|sum|median|var|p\d+|count|total)$")


@dataclass(frozen=True)
class Guess:
    """How the resolver read a name: the metric it was taken for (None: kept apart, its
    meaning unknown), why, and the column it is read through."""

    name: str
    metric: str | None
    why: str
    column: Column | None = None


def normalise(name: str) -> tuple[str, str]:
    """(base, statistic) of a name: scopes and separators taken off, lower case; the
    statistic is "mean", "std", "other" (max, min, sum...) or "" (none written)."""
    base = _whole(name)
    for pattern, statistic in ((MEAN_SUFFIX, "mean"), (MEAN_PREFIX, "mean"), (SPREAD_SUFFIX, "std"),
                               (SPREAD_PREFIX, "std")):
        stripped = pattern.sub("", base)
        if stripped != base and stripped:
            return stripped, statistic
    if OTHER_STATISTIC.search(base):
        return base, "other"
    return base, ""


def _whole(name: str) -> str:
    """A name normalised with its scope taken off but not its statistic."""
    parts = [p for p in name.strip().lower().split("/") if p]
    while len(parts) > 1 and parts[0] in SCOPES:
        parts = parts[1:]
    if parts and parts[0].startswith("train_") and len(parts[0]) > len("train_"):
        parts[0] = parts[0][len("train_"):]
    return re.sub(r"_+", "_", re.sub(r"[\s.\-]+", "_", "_".join(parts))).strip("_")


def _lookup(families: tuple[Family, ...], base: str) -> Family | None:
    return next((f for f in families if base in f.spellings), None)


def _growth(values: list[float]) -> float | None:
    """The late level over the early one (medians of the first and last quarters), or
    None for a series too short, with a negative value (a k1 estimate around 0: no level
    to grow from, and not a KL to the reference's k3 either) or an early level of 0."""
    if len(values) < 8 or min(values) < 0:
        return None
    quarter = max(2, len(values) // 4)
    early, late = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
    if early <= 0 or late <= 0:
        return None
    return late / early


def _bare_kl(name: str, bases: dict[str, str], values: list[float]) -> Guess:
    """A bare `kl`: the KL to the reference when a neighbour or its level says so (module
    docstring), else kept apart."""
    to_reference = Column("kl/token_mean", "nats/token")
    old_new = sorted(n for n, b in bases.items() if b in OLD_NEW_KL)
    if old_new:
        return Guess(name, "kl/token_mean", f"its neighbour {old_new[0]} is the old-vs-new approx-KL, so {name} is the "
                     "KL to the reference (a per-token mean, as TRL GRPO/RLOO, OpenRLHF and tiny-grpo log a bare "
                     "`kl`)", to_reference)
    if any(b in REFERENCE_KL for b in bases.values()) or any(n in ("kl/mean", "kl/token_mean", "kl/k3_mean")
                                                              for n in bases):
        return Guess(name, None, f"the log also has a KL to the reference by name, so {name} may be that or the "
                     "old-vs-new approx-KL; name it with --map")
    coefficient = sorted(n for n, b in bases.items() if b in KL_COEFFICIENT)
    if coefficient:
        return Guess(name, "kl/token_mean", f"a KL coefficient ({coefficient[0]}) is logged beside it: the KL its "
                     "penalty weighs, to the reference (read per token)", to_reference)
    growth = _growth(values)
    if growth is not None and growth >= KL_GROWTH:
        return Guess(name, "kl/token_mean", f"it grows {growth:.0f}x over the run: a KL to the reference accumulates as "
                     f"the policy moves, an old-vs-new KL measures one update and does not (read per token)",
                     to_reference)
    return Guess(name, None, "a bare KL can be the KL to the reference or the old-vs-new approx-KL, and nothing in "
                 "this log tells which (no neighbour names either, its level does not grow tenfold); name it with "
                 f"--map {name}=kl/token_mean or --map {name}=policy/approxkl")


def _entropy_loss(name: str, values: list[float]) -> Guess:
    """An `entropy_loss` is the entropy in some loops (veRL before 2025, OpenRLHF) and minus
    it in others (Stable-Baselines3): its sign tells, an entropy being positive."""
    if values and all(v <= 0 for v in values) and any(v < 0 for v in values):
        return Guess(name, "policy/entropy", "all its values are negative: minus the entropy (an entropy bonus "
                     "written as a loss, as Stable-Baselines3 logs it), read negated",
                     Column("policy/entropy", scale=-1.0))
    if values and all(v >= 0 for v in values):
        return Guess(name, "policy/entropy", "its values are positive: the entropy itself (veRL's "
                     "`actor/entropy_loss` before 2025, OpenRLHF's `entropy_loss`)",
                     Column("policy/entropy"))
    return Guess(name, None, "an entropy loss of either sign: the entropy or minus it; name it with --map")


def resolve(names: Iterable[str], values: Callable[[str], list[float]], neighbours: Iterable[str] = ()) -> list[Guess]:
    """A guess for each name that is not canonical: evaluations kept apart, spelling
    families read as their metric, ambiguous names kept apart with their meaning unknown;
    names no family knows get no guess (they stay unknown). `neighbours` are the log's
    other names (canonical, mapped): they tell what an ambiguous name is too."""
    names = sorted(set(names) - KNOWN)
    bases = {name: normalise(name)[0] for name in {*names, *neighbours}}
    guesses = []
    for name in names:
        if EVALUATION.match(name) and not NOT_EVALUATION.match(name.lower()):
            rest = EVALUATION.sub("", name).lstrip("/_.-")
            guesses.append(Guess(name, EVAL_PREFIX + rest, "an evaluation series (eval, val or test): held-out prompts, "
                                 "maybe scored by the same reward model, so kept apart and not a gold signal (name "
                                 f"one the truth with --map {name}=reward/gold_mean)", Column(EVAL_PREFIX + rest)))
            continue
        path = PATHS.get(name.lower())
        if path is not None:
            metric, why = path
            guesses.append(Guess(name, metric or None, why, Column(metric, "nats/sequence") if metric else None))
            continue
        base, statistic = normalise(name)
        whole = _whole(name)
        if _lookup(MEANS, whole) is not None:  # a spelling whose own words end like a statistic
            base, statistic = whole, ""
        if base in AMBIGUOUS_KL and statistic in ("", "mean"):
            guesses.append(_bare_kl(name, bases, values(name)))
            continue
        if base == "entropy_loss" and statistic in ("", "mean"):
            guesses.append(_entropy_loss(name, values(name)))
            continue
        if base in NOT_READ and statistic in ("", "mean"):
            guesses.append(Guess(name, None, f"{NOT_READ[base]}: not read"))
            continue
        families = SPREADS if statistic == "std" else MEANS if statistic in ("", "mean") else ()
        family = _lookup(families, base)
        if family is not None:
            where = family.sources.split("; ")
            more = f" and {len(where) - 1} more" if len(where) > 1 else ""
            guesses.append(Guess(name, family.metric, f"{base!r} spells {family.metric} as in {where[0]}{more}",
                                 family.read_as()))
    return guesses
