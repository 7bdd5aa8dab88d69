"""prime-rl (PrimeIntellect-ai/prime-rl): its trainer and orchestrator each log to W&B with
their own step (`monitors.log(metrics, step=progress.step)`). Trainer names from
`src/prime_rl/trainer/rl/train.py` (stats from `trainer/utils.py`: `/mean`, `/max`; per
environment under `/all/` since v0.6); orchestrator names from
`src/prime_rl/orchestrator/orchestrator.py` (`reward/mean` up to v0.4, `reward/all/mean`
v0.5-0.6).

`mismatch_kl` is the k3 KL of the inference policy to the trainer's (`trainer/rl/loss.py`,
`compute_importance_ratio_and_mismatch_kl`): per sequence up to v0.5, per token since;
prime-rl publishes no limit for it ("a sustained, growing mean is the early-warning sign",
docs/training.md). Its default loss has no KL to a reference and no PPO clip: `kl_tau`
pulls toward the inference policy, so no KL coefficient is written as a fix.
"""

from __future__ import annotations

from rlhflab.doctor.formats.launch import KeyList, Launcher, kebab
from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "mismatch_kl/all/mean": Column("mismatch/kl", estimator="k3"),
    "mismatch_kl/mean": Column("mismatch/kl", estimator="k3", fallback=True),
    "entropy/all/mean": Column("policy/entropy"),
    "entropy/mean": Column("policy/entropy", fallback=True),
    "loss/mean": Column("policy/loss"),
    "optim/grad_norm": Column("policy/grad_norm"),
    "optim/lr": Column("lr"),
    "reward/all/mean": Column("reward/proxy_mean"),
    "reward/mean": Column("reward/proxy_mean", fallback=True),
    "is_truncated/all/mean": Column("response/truncated_frac"),
    "is_truncated/mean": Column("response/truncated_frac", fallback=True),
    "decode_len/all/mean": Column("response/length_mean"),
    "completion_len/mean": Column("response/length_mean", fallback=True),
}
VOCABULARY = {"lr": "trainer.optim.lr", "group_size": "orchestrator.group_size",
              "batch_size": "orchestrator.batch_size"}

DIALECT = Dialect(
    name="prime-rl",
    description="prime-rl trainer and orchestrator (mismatch_kl/*, entropy/*, optim/*, reward/*, is_truncated/*)",
    handles=("`mismatch_kl` the k3 KL of the inference policy to the trainer's (no reference KL, no PPO clip in its "
             "default loss)"),
    columns=COLUMNS,
    # not optim/lr or optim/grad_norm: common spellings, not prime-rl's alone
    markers=frozenset({"mismatch_kl/all/mean", "mismatch_kl/mean", "entropy/all/mean", "kl_ent_ratio/mean",
                       "is_truncated/all/mean", "is_masked/mean", "off_policy/mean", "batch/solve_none",
                       "solve_none/all", "is_truncated/mean"}),
    ignored=frozenset({"perf/*", "time/*", "progress/*", "*/max", "*/min", "*/std", "*/median", "is_masked*",
                       "masked_mismatch_kl/*", "unmasked_mismatch_kl/*", "kl_ent_ratio/*", "dispatcher/*"}),
    vocabulary=VOCABULARY,
)


# --- launching it (an ablation plan for its log: doctor/plan.py) ---------------------------------
PRIME_RL_KEYS = KeyList(
    "prime-rl (main, 2026)",
    "src/prime_rl/rl.py and its pydantic configs (prime-pydantic-config: dotted kebab-case flags)",
    frozenset({"trainer.optim.lr", "orchestrator.group-size", "orchestrator.batch-size", "output-dir", "run.name",
               "inference.vllm.seed", "orchestrator.train.sampling.max-completion-tokens"}))
LAUNCHER = Launcher("prime-rl", ("prime-rl",), "flags", "uv run rl @ ...toml", kebab, ("inference.vllm.seed",),
                   (("output-dir", "{out}"),), PRIME_RL_KEYS, bools="negated",
                   notes=("prime-rl has no trainer seed: the seeds vary the sampler (inference.vllm.seed) only, its data "
                          "order is fixed",))
