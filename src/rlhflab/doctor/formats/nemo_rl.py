"""NeMo-RL (NVIDIA-NeMo/RL): the names its GRPO trainer logs to W&B, TensorBoard and
MLflow under `train/` and `validation/` (`nemo_rl/algorithms/grpo.py`, `grpo_train`; the
loss metrics from `ClippedPGLossFn` in `nemo_rl/algorithms/loss_functions.py`).

`kl_penalty` is the per-token mean of the k3 estimator (Schulman 2020) without the
coefficient; `approx_entropy` a per-token entropy estimate; `gen_kl_error` and
`token_mult_prob_error` compare the generation engine's logprobs with the trainer's
(not KL to the reference: `mismatch/*`). `validation/accuracy` is the held-out score.
"""

from __future__ import annotations

from rlhflab.doctor.formats.launch import KeyList, Launcher, dotted
from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "reward": Column("reward/proxy_mean"),
    "kl_penalty": Column("kl/token_mean", estimator="k3"),
    "approx_entropy": Column("policy/entropy"),
    "loss": Column("policy/loss"),
    "grad_norm": Column("policy/grad_norm"),
    "lr": Column("lr"),
    "probs_ratio": Column("policy/ratio_mean"),
    "mean_gen_tokens_per_sample": Column("response/length_mean"),
    "truncation_rate": Column("response/truncated_frac"),
    "accuracy": Column("reward/gold_mean"),  # validation/accuracy
    # the generation engine against the trainer (ClippedPGLossFn): exp|logp_train - logp_gen| per token, the
    # k3 KL of the generation policy to the trainer's, and the IS ratio
    "token_mult_prob_error": Column("mismatch/prob_ratio_error"),
    "gen_kl_error": Column("mismatch/kl", estimator="k3"),
    "sampling_importance_ratio": Column("mismatch/is_ratio_mean"),
}
VOCABULARY = {
    "kl_coef": "loss_fn.reference_policy_kl_penalty", "kl_estimator": "loss_fn.reference_policy_kl_type",
    "clip_eps": "loss_fn.ratio_clip_min/ratio_clip_max", "lr": "policy.optimizer.kwargs.lr",
    "response_length": "policy.generation.max_new_tokens", "group_size": "grpo.num_generations_per_prompt",
    "batch_size": "grpo.num_prompts_per_step",
    "importance_sampling_correction": "loss_fn.use_importance_sampling_correction",
}

DIALECT = Dialect(
    name="nemo-rl",
    description="NeMo-RL GRPO (train/reward, train/kl_penalty, train/approx_entropy, validation/accuracy, ...)",
    handles=("`kl_penalty` per-token k3 without the coefficient"),
    columns=COLUMNS,
    markers=frozenset({"kl_penalty", "approx_entropy", "token_mult_prob_error", "gen_kl_error",
                       "mean_gen_tokens_per_sample", "probs_ratio_clamped", "global_valid_toks", "accuracy"}),
    ignored=frozenset({"timing/*", "ray/*", "probs_ratio_clamped", "probs_ratio_*", "policy_kl_error",
                       "js_divergence_error",
                       "num_valid_samples", "global_valid_seqs", "global_valid_toks", "avg_length"}),
    prefixes=("train/", "validation/"),
    vocabulary=VOCABULARY,
)


# --- launching it (an ablation plan for its log: doctor/plan.py) ---------------------------------
NEMO_RL_KEYS = KeyList(
    "NeMo-RL 0.6",
    "examples/configs/grpo_math_1B.yaml, examples/run_grpo.py (Hydra-style overrides after --config)",
    frozenset({"loss_fn.reference_policy_kl_penalty", "loss_fn.reference_policy_kl_type", "loss_fn.ratio_clip_min",
               "loss_fn.ratio_clip_max", "policy.optimizer.kwargs.lr", "policy.generation.max_new_tokens",
               "grpo.num_generations_per_prompt", "grpo.num_prompts_per_step",
               "loss_fn.use_importance_sampling_correction", "grpo.seed", "logger.log_dir",
               "checkpointing.checkpoint_dir"}))
LAUNCHER = Launcher("nemo-rl", ("nemo-rl",), "overrides", "uv run python examples/run_grpo.py --config ...",
                   dotted, ("grpo.seed",), (("logger.log_dir", "{out}"), ("checkpointing.checkpoint_dir", "{out}/ckpt")),
                   NEMO_RL_KEYS,
                   notes=("grpo.seed seeds the trainer, not vLLM's sampler; runs resume from checkpointing.checkpoint_dir, "
                          "so each run has its own",))
