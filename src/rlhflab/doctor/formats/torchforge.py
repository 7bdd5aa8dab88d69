"""torchforge (meta-pytorch/torchforge, formerly meta-pytorch/forge): metrics recorded with
`record_metric(key, value, Reduce.X)` (src/forge/observability/metrics.py) and flushed per
training step (apps/grpo/main.py); a key is `<actor>/<endpoint>/<reduce>_<name>`.

The GRPO app logs the reward, the trainer's loss and learning rate and the generator's
token counts; its KL, entropy and gradient-norm metrics are commented out in the trainer
(src/forge/actors/trainer/titan.py), so a torchforge log cannot show an exploding KL or a
collapse of entropy: the doctor says "cannot tell" for those families.
"""

from __future__ import annotations

from rlhflab.doctor.formats.spec import Column, Dialect

COLUMNS = {
    "reward/evaluate_response/avg_total_reward": Column("reward/proxy_mean"),
    "rl_trainer/avg_loss": Column("policy/loss"),
    "rl_trainer/learning_rate": Column("lr"),
    "generator/generate/avg_tokens_generated": Column("response/length_mean"),
}
VOCABULARY = {"lr": "trainer.optimizer.lr", "group_size": "group_size", "response_length": "max_res_tokens",
              "kl_coef": "SimpleGRPOLoss(beta=...) (src/forge/losses/grpo_loss.py)"}

DIALECT = Dialect(
    name="torchforge",
    description="torchforge GRPO (reward/evaluate_response/avg_total_reward, rl_trainer/avg_loss, generator/generate/*)",
    handles=("no KL, entropy or gradient norm logged (commented out in its trainer): \"cannot tell\" for those"),
    columns=COLUMNS,
    markers=frozenset({"reward/evaluate_response/avg_total_reward", "rl_trainer/avg_loss", "rl_trainer/learning_rate",
                       "generator/generate/avg_tokens_generated", "buffer/sample/avg_sampled_policy_age",
                       "generator/generate/count_requests"}),
    ignored=frozenset({"buffer/*", "dataset/*", "main/*", "main_perf/*", "generator_perf/*", "reference_perf/*",
                       "generator/generate/count_*", "generator/generate/sum_*", "generator/update_weights/*",
                       "reward/evaluate_response/count_*", "reward/evaluate_response/sum_*",
                       "reward/evaluate_response/std_*"}),
    vocabulary=VOCABULARY,
)
