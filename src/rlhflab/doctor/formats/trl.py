"""TRL's trainers, in the names each generation logs (huggingface/trl):

- PPO since 0.11 (`trl/trainer/ppo_trainer.py`, from 0.20 `trl/experimental/ppo`, last in
  1.12): `objective/*`, `policy/*`, `loss/*`, `val/*`, in `trainer_state.json`;
- PPO before 0.11 (the `step()` API): `ppo/*`, `objective/kl`, `env/reward_mean`, logged
  through accelerate's trackers, so found in TensorBoard events and W&B exports;
- GRPO and RLOO (`grpo_trainer.py`, `rloo_trainer.py`): `reward`, `reward_std`,
  `rewards/<function>/mean`, `kl`, `entropy`, `completions/*`, `frac_reward_zero_std`,
  `clip_ratio/*`, in `trainer_state.json`.

transformers' TensorBoard and W&B callbacks write the same names under `train/`, and
evaluation rows (`eval_*` in `log_history`) under `eval/`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from rlhflab.doctor.formats.launch import KeyList, Launcher, class_fields
from rlhflab.doctor.formats.spec import Column, Dialect
from rlhflab.doctor.metrics import REWARD_FUNCTION_PREFIX
from rlhflab.doctor.samples import Sample, SampleFileError, SampleFormat, SampleSet, number, samples_of_rows
from rlhflab.doctor.table import MetricTable

# Bookkeeping of transformers' Trainer: its end-of-training summary row and counters.
TRAINER_BOOKKEEPING = frozenset({
    "epoch", "step", "total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second",
    "train_loss", "num_input_tokens_seen", "step_time", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
})
LOGGER_PREFIXES = ("train/",)
EVAL_PREFIXES = ("eval_", "eval/")
# The proxy evaluated on held-out prompts (`eval_reward`, `eval_objective/scores`): the
# held-out score a proxy rising on the training prompts alone is read against.
HELD_OUT = (re.compile(r"^eval/reward/proxy_mean$"),)

# --- PPO, 0.11 to 1.12 (`PPOTrainer.train`, its `metrics` dict) ---------------------------
PPO_COLUMNS = {
    "objective/kl": Column("kl/mean", estimator="k1"),  # batch mean of the per-sequence sum of logprob - ref
    # The batch mean of the per-sequence sum of -logprobs; read only when policy/entropy_avg is absent.
    "objective/entropy": Column("policy/entropy", unit="nats/sequence", fallback=True),
    "objective/non_score_reward": Column("reward/kl_penalty_mean"),
    "objective/rlhf_reward": Column("reward/total_mean"),
    "objective/scores": Column("reward/proxy_mean"),
    "policy/approxkl_avg": Column("policy/approxkl"),
    "policy/clipfrac_avg": Column("policy/clipfrac"),
    "policy/entropy_avg": Column("policy/entropy"),
    "loss/policy_avg": Column("policy/loss"),
    "loss/value_avg": Column("value/loss"),
    "val/clipfrac_avg": Column("value/clipfrac"),
    "val/ratio": Column("policy/ratio_mean"),
    "val/ratio_var": Column("policy/ratio_var"),
    # A count of responses that ended (EOS) in the batch; the table divides by the batch size.
    "val/num_eos_tokens": Column("response/eos_rate", unit="count"),
    "learning_rate": Column("lr"),
    "lr": Column("lr"),
}
PPO_VOCABULARY = {
    "kl_coef": "PPOConfig.kl_coef", "kl_estimator": "PPOConfig.kl_estimator", "clip_eps": "PPOConfig.cliprange",
    "value_clip_eps": "PPOConfig.cliprange_value", "lr": "PPOConfig.learning_rate",
    "response_length": "PPOConfig.response_length", "missing_eos_penalty": "PPOConfig.missing_eos_penalty",
    "batch_size": "PPOConfig.per_device_train_batch_size", "reward_epochs": "RewardConfig.num_train_epochs",
}


def _ppo_artefacts(table: MetricTable, names: frozenset[str]) -> None:
    """The KL penalty of TRL's PPO is in the reward, and from 0.11 on its beta is fixed
    (`PPOConfig.kl_coef`; the adaptive controller went with the `step()` API).
    `objective/entropy` goes negative in TRL's PPO: padding logprobs are filled with 1.0
    before the per-sequence sum, so each padding token adds -1. Not an entropy: dropped
    when it was the only entropy read, and said."""
    new_names = any(name.removeprefix("train/") == "objective/rlhf_reward" for name in names)
    fixed = {"kl_controller": "fixed"} if new_names and table.settings.kl_controller is None else {}
    table.settings = replace(table.settings, kl_in_reward=True, **fixed)
    entropy = table.series.get("policy/entropy")
    if "objective/entropy" in names and "policy/entropy_avg" not in names and entropy is not None:
        if min(entropy.values, default=0.0) < 0:
            del table.series["policy/entropy"]
            table.units.pop("policy/entropy", None)
            table.notes.append("objective/entropy is negative, a TRL artefact (padding logprobs are filled with 1.0 "
                               "before the sum), not an entropy: not read")
    elif "objective/entropy" in names:
        table.notes.append("objective/entropy not read: policy/entropy_avg is the per-token entropy (TRL's "
                           "objective/entropy sums logprobs with padding filled by 1.0, and can go negative)")


TRL_PPO = Dialect(
    name="trl-ppo",
    description="TRL PPOTrainer 0.11-1.12 (objective/*, policy/*, loss/*, val/*)",
    handles=("`objective/kl` per-sequence k1; `objective/entropy` goes negative (padding logprobs filled with 1.0 "
             "before the sum): never read as entropy when negative; EOS count / batch size (episodes per step) = EOS "
             "rate (0.11-1.12)"),
    columns=PPO_COLUMNS,
    markers=frozenset({"objective/kl", "objective/entropy", "objective/rlhf_reward", "objective/scores",
                       "objective/non_score_reward",
                       "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
                       "val/num_eos_tokens", "policy/entropy_avg", "val/ratio", "eps"}),
    ignored=TRAINER_BOOKKEEPING | {"eps", "episode"},
    prefixes=LOGGER_PREFIXES,
    eval_prefixes=EVAL_PREFIXES,
    held_out=HELD_OUT,
    vocabulary=PPO_VOCABULARY,
    interpret=_ppo_artefacts,
)

# --- PPO before 0.11 (`PPOTrainer.step` and `record_step_stats`) ---------------------------
PPO_LEGACY_COLUMNS = {
    "objective/kl": Column("kl/mean", estimator="k1"),  # sum over the response of logprob - ref, batch mean
    "objective/kl_coef": Column("kl/coef"),
    # The sum of -logprobs of the sampled tokens (a sampled entropy, per sequence).
    "objective/entropy": Column("policy/entropy", unit="nats/sequence", fallback=True),
    "ppo/policy/entropy": Column("policy/entropy"),  # per-token mean of the full-distribution entropy
    "ppo/mean_scores": Column("reward/proxy_mean"),
    "env/reward_mean": Column("reward/proxy_mean", fallback=True),
    "ppo/std_scores": Column("reward/proxy_std"),
    "env/reward_std": Column("reward/proxy_std", fallback=True),
    "ppo/mean_non_score_reward": Column("reward/kl_penalty_mean"),
    "ppo/policy/approxkl": Column("policy/approxkl"),
    "ppo/policy/clipfrac": Column("policy/clipfrac"),
    "ppo/policy/advantages_mean": Column("adv/mean"),
    "ppo/loss/policy": Column("policy/loss"),
    "ppo/loss/value": Column("value/loss"),
    "ppo/val/clipfrac": Column("value/clipfrac"),
    "ppo/val/var_explained": Column("value/explained_variance"),
    "ppo/learning_rate": Column("lr"),
    "tokens/responses_len_mean": Column("response/length_mean"),
}
PPO_LEGACY_VOCABULARY = {
    "kl_coef": "PPOConfig.init_kl_coef", "kl_target": "PPOConfig.target", "kl_horizon": "PPOConfig.horizon",
    "clip_eps": "PPOConfig.cliprange", "value_clip_eps": "PPOConfig.cliprange_value",
    "lr": "PPOConfig.learning_rate", "batch_size": "PPOConfig.batch_size",
    "response_length": "generation_kwargs max_new_tokens", "kl_estimator": "PPOConfig.kl_penalty",
}

TRL_PPO_LEGACY = Dialect(
    name="trl-ppo-0.x",
    description="TRL PPOTrainer before 0.11 (ppo/*, objective/kl, env/reward_mean), via accelerate's trackers",
    handles=("`ppo/policy/entropy` per token; `objective/entropy` per sequence"),
    columns=PPO_LEGACY_COLUMNS,
    markers=frozenset({"objective/kl", "objective/entropy", "ppo/loss/policy", "ppo/loss/value",
                       "ppo/policy/approxkl", "ppo/mean_scores",
                       "env/reward_mean", "objective/kl_coef", "ppo/val/var_explained", "ppo/learning_rate",
                       "tokens/responses_len_mean", "ppo/mean_non_score_reward", "objective/kl_dist"}),
    ignored=TRAINER_BOOKKEEPING | frozenset({"objective/kl_dist", "objective/logprobs", "objective/ref_logprobs",
                                             "env/reward_dist", "ppo/policy/advantages", "ppo/policy/ratio",
                                             "time/*", "tokens/queries_len_*", "tokens/responses_len_std"}),
    prefixes=LOGGER_PREFIXES,
    vocabulary=PPO_LEGACY_VOCABULARY,
    interpret=_ppo_artefacts,
)

# --- GRPO and RLOO (`_generate_and_score_completions`, `compute_loss`, `log`) ------------
GRPO_COLUMNS = {
    "reward": Column("reward/proxy_mean"),  # the weighted sum of the reward functions
    "reward_std": Column("reward/proxy_std"),
    # `kl`: a per-token mean over completion tokens. GRPO's is exp(ref - logp) - (ref - logp) - 1,
    # the k3 estimator; RLOO's is old logp - ref (k1). Their logs share every name.
    "kl": Column("kl/token_mean", estimator="k3 (GRPO) or k1 (RLOO)"),
    "entropy": Column("policy/entropy"),  # per-token mean over completion tokens
    "completions/mean_length": Column("response/length_mean"),
    "completion_length": Column("response/length_mean", fallback=True),  # TRL < 0.17
    "completions/clipped_ratio": Column("response/truncated_frac"),
    "frac_reward_zero_std": Column("reward/zero_std_frac"),
    "clip_ratio/region_mean": Column("policy/clipfrac"),
    "clip_ratio": Column("policy/clipfrac", fallback=True),  # TRL < 0.19
    "grad_norm": Column("policy/grad_norm"),
    "learning_rate": Column("lr"),
    "loss": Column("policy/loss"),
    # vLLM's logprobs against the trainer's (TRL >= 0.23, trl/trainer/grpo_trainer.py, with
    # vllm_importance_sampling_correction): |difference| per token, and the truncated IS ratio.
    "sampling/sampling_logp_difference/mean": Column("mismatch/logp_abs_diff"),
    "sampling/importance_sampling_ratio/mean": Column("mismatch/is_ratio_mean"),
}
GRPO_VOCABULARY = {
    "kl_coef": "GRPOConfig.beta", "clip_eps": "GRPOConfig.epsilon", "lr": "GRPOConfig.learning_rate",
    "response_length": "GRPOConfig.max_completion_length", "group_size": "GRPOConfig.num_generations",
    "batch_size": "GRPOConfig.per_device_train_batch_size",
    "importance_sampling_correction": "GRPOConfig.vllm_importance_sampling_correction",
}
REWARD_FUNCTION = ("rewards/", "/mean")


def _grpo_interpret(table: MetricTable, names: frozenset[str]) -> None:
    """What a GRPO/RLOO log tells beyond its values: it logs `kl` only when beta != 0, so a
    log without it had no KL penalty; `clip_ratio/*` is exactly 0 when each batch is
    trained on once (the ratio is 1, nothing to clip), which is not a clue of anything;
    each reward function's mean (`rewards/<function>/mean`, `rewards/<function>` before
    TRL 0.17) is kept beside the total."""
    table.settings = replace(table.settings, kl_in_reward=False)  # GRPO's and RLOO's KL is a loss term
    if not any(name.removeprefix("train/") == "kl" for name in names) and table.settings.kl_coef is None:
        table.settings = replace(table.settings, kl_coef=0.0)
        table.notes.append("no kl logged: TRL's GRPO/RLOO log kl only when beta != 0, so this run had no KL "
                           "penalty (beta = 0)")
    clipfrac = table.series.get("policy/clipfrac")
    if clipfrac is not None and all(v == 0.0 for v in clipfrac.values):
        del table.series["policy/clipfrac"]
        table.notes.append("clip_ratio is exactly 0 at every step: each batch is trained on once (on-policy), so "
                           "the ratio is 1 and nothing is clipped; not read as a clip fraction")
    start, end = REWARD_FUNCTION
    for name in sorted(names):
        bare = name.removeprefix("train/")
        if not bare.startswith(start) or name not in table.series:
            continue
        rest = bare[len(start):]
        # `rewards/<function>/mean` since TRL 0.17; `rewards/<function>` in 0.14-0.16 (grpo_trainer.py)
        function = rest[: -len(end)] if rest.endswith(end) else rest if "/" not in rest else None
        if function:
            series = table.series[REWARD_FUNCTION_PREFIX + function] = table.series.pop(name)
            if name in table.unknown:
                table.unknown.remove(name)
            first, last = series.values[0], series.values[-1]
            if len(series) >= 3 and first != 0 and last == 0 and series.values[-2] == 0:
                table.notes.append(f"reward function {function} fell from {first:.3g} to 0 (step {series.steps[0]} to "
                                   f"{series.steps[-1]}): the policy no longer earns it")


TRL_GRPO = Dialect(
    name="trl-grpo",
    description="TRL GRPOTrainer and RLOOTrainer (reward, reward_std, kl, entropy, completions/*, clip_ratio/*)",
    handles=("`kl` per-token k3; no `kl` logged means beta = 0 (no KL penalty: the exploding-KL family does not apply, "
             "said); `clip_ratio/*` exactly 0 on-policy (not read); each reward function kept as "
             "`reward/function/<name>` (GRPO, RLOO)"),
    columns=GRPO_COLUMNS,
    markers=frozenset({"reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio",
                       "clip_ratio/region_mean", "completions/mean_terminated_length", "num_tokens",
                       "completion_length"}),
    ignored=TRAINER_BOOKKEEPING | frozenset({
        "num_tokens", "completions/min_length", "completions/max_length", "completions/mean_terminated_length",
        "completions/min_terminated_length", "completions/max_terminated_length", "rewards/*/std",
        "clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max"}),
    prefixes=LOGGER_PREFIXES,
    eval_prefixes=EVAL_PREFIXES,
    held_out=HELD_OUT,
    vocabulary=GRPO_VOCABULARY,
    interpret=_grpo_interpret,
)

DIALECTS = (TRL_PPO, TRL_PPO_LEGACY, TRL_GRPO)


# --- samples: GRPOTrainer with `log_completions=True` (TRL 0.28 and later) writes
# `OUTPUT_DIR/completions/completions_{global_step:05d}.parquet` at every logging step, columns
# `step, prompt, completion, <one per reward function>, <extras>, advantage` (`GRPOTrainer.log`).
# RLOOTrainer and TRL 1.12's PPOTrainer only print them or send them to W&B (the callback's
# `samples_of` writes them for those).
# Columns of GRPOTrainer's completions table that are not a reward function's.
TRL_NOT_REWARDS = frozenset({"step", "prompt", "completion", "advantage", "image", "images"})


def read_samples(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """GRPOTrainer's `completions/` (or one parquet file of it): the reward is the sum of
    the reward functions' columns (their weights are in GRPOConfig.reward_weights, which
    the files do not hold: 1 each, TRL's default, is assumed and said)."""
    try:
        import pyarrow.parquet as parquet
        from pyarrow import types
    except ImportError:
        raise SampleFileError(f"{path}: reading TRL's parquet completions needs pyarrow (pip install pyarrow)") from None
    files = [path] if path.is_file() else sorted(path.glob("completions_*.parquet"))
    samples: list[Sample] = []
    notes: list[str] = []
    for file in files:
        try:
            frame = parquet.read_table(file)
        except (OSError, ValueError) as err:
            raise SampleFileError(f"{file}: cannot read parquet ({err})") from None
        reward_columns = [f.name for f in frame.schema if f.name not in TRL_NOT_REWARDS
                          and (types.is_integer(f.type) or types.is_floating(f.type))]
        rows = frame.to_pylist()
        for row in rows:
            parts = [number(row[c]) for c in reward_columns]
            row["reward"] = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
        columns = {"step": "step", "prompt": "prompt", "response": "completion", "reward": "reward"}
        samples.extend(samples_of_rows(rows, {**columns, **{o: t for t, o in (mapping or {}).items()}}, str(file)))
        if reward_columns and not notes:
            notes.append(f"{path}: the reward is the sum of {', '.join(reward_columns)} (reward weights "
                         "of 1 assumed: the completions files do not hold GRPOConfig.reward_weights)")
    return SampleSet(samples, str(path), "trl", notes=notes)


def _is_trl(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".parquet"
    return path.is_dir() and any(path.glob("completions_*.parquet"))




COMPLETIONS = "completions"


def completions_in(output_dir: Path) -> list[SampleSet]:
    """`completions/` of an output directory, if it has one."""
    return [read_samples(output_dir / COMPLETIONS)] if _is_trl(output_dir / COMPLETIONS) else []


SAMPLES = SampleFormat("trl", "TRL GRPOTrainer completions/completions_*.parquet (log_completions=True)", _is_trl,
                       read_samples, in_output_dir=completions_in)


# --- launching it (an ablation plan for its log: doctor/plan.py) ---------------------------------
TRL_PPO_KEYS = KeyList(
    "TRL 1.12.0 (trl.experimental.ppo; PPO is gone from TRL after 1.12)",
    "trl/experimental/ppo/ppo_config.py, examples/scripts/ppo/ppo.py (HfArgumentParser over ScriptArguments, "
    "PPOConfig, ModelConfig)",
    frozenset({"kl_coef", "kl_estimator", "cliprange", "cliprange_value", "learning_rate", "response_length",
               "missing_eos_penalty", "per_device_train_batch_size", "seed", "output_dir", "vf_coef", "gamma", "lam",
               "num_ppo_epochs", "num_mini_batches", "whiten_rewards", "temperature", "stop_token"}))
TRL_GRPO_KEYS = KeyList(
    "TRL 1.12.0-1.16.0",
    "trl/trainer/grpo_config.py, trl/scripts/grpo.py (`trl grpo`: HfArgumentParser over GRPOScriptArguments, "
    "GRPOConfig, ModelConfig)",
    frozenset({"beta", "epsilon", "learning_rate", "max_completion_length", "num_generations",
               "per_device_train_batch_size", "vllm_importance_sampling_correction", "seed", "output_dir",
               "temperature", "loss_type", "scale_rewards", "num_iterations"}))
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("trl-ppo", ("trl-ppo",), "flags",
             "accelerate launch examples/scripts/ppo/ppo.py --model_name_or_path ... --sft_model_path ... "
             "--reward_model_path ... --dataset_name ...",
             class_fields("PPOConfig"), ("seed",), (("output_dir", "{out}"),), TRL_PPO_KEYS, tee=False,
             notes=("needs TRL <= 1.12 (trl.experimental.ppo); the script deletes its --output_dir when it starts, so "
                    "each run has its own",)),
    Launcher("trl-grpo", ("trl-grpo",), "flags", "trl grpo --model_name_or_path ... --dataset_name ...",
             class_fields("GRPOConfig"), ("seed",), (("output_dir", "{out}"),), TRL_GRPO_KEYS, tee=False),
)
