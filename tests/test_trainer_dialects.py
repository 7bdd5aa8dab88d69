"""The trainers people run today, each recognised by its names alone: logs written with the
names their logging code uses (the file named beside each), read into canonical metrics,
the training-inference mismatch among them; and the versions whose names or flags changed
(TRL GRPO before 0.17, OpenRLHF's flags since v0.10.2)."""

import json
import math
from pathlib import Path

import pytest

from rlhflab.doctor.diagnose import diagnose, diagnosis_json
from rlhflab.doctor.formats import DIALECTS, read_log

N = 30


def rows(names: dict, step_key: str = "step", n: int = N) -> list[dict]:
    """n rows of `names`, each a function of the step's fraction of the run."""
    return [{step_key: i, **{name: f(i / (n - 1)) for name, f in names.items()}} for i in range(n)]


def jsonl(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


flat = lambda v: (lambda t: v)  # noqa: E731
rising = lambda a, b: (lambda t: a + (b - a) * t)  # noqa: E731

# dialect -> (its names as its logging code writes them, the step key, canonical metrics that must be read)
LOGS = {
    # PrimeIntellect-ai/prime-rl: trainer/rl/train.py (mismatch_kl/all, entropy/all, optim/*) and
    # orchestrator/orchestrator.py (reward/all/mean, is_truncated/all/mean), v0.6
    "prime-rl": ({"mismatch_kl/all/mean": rising(1e-3, 3e-3), "mismatch_kl/all/max": flat(0.05),
                  "entropy/all/mean": rising(0.9, 0.7), "optim/grad_norm": flat(0.3), "optim/lr": flat(1e-6),
                  "loss/mean": flat(0.01), "reward/all/mean": rising(0.2, 0.6), "is_truncated/all/mean": flat(0.02),
                  "kl_ent_ratio/mean": flat(0.002)}, "step",
                 {"mismatch/kl", "policy/entropy", "policy/grad_norm", "lr", "reward/proxy_mean",
                  "response/truncated_frac"}),
    # THUDM/slime: backends/megatron_utils/model.py (train/*), observability/rollout_metrics.py (rollout/*)
    "slime": ({"train/pg_loss": flat(0.01), "train/entropy_loss": rising(0.8, 0.6), "train/pg_clipfrac": flat(0.01),
               "train/ppo_kl": flat(1e-4), "train/kl_loss": rising(0.0, 0.01), "train/grad_norm": flat(0.2),
               "train/train_rollout_logprob_abs_diff": flat(0.02), "rollout/raw_reward": rising(0.1, 0.5),
               "rollout/response_len/mean": flat(300.0), "rollout/truncated_ratio": flat(0.01)}, "train/step",
              {"policy/loss", "policy/entropy", "policy/approxkl", "kl/token_mean", "mismatch/logp_abs_diff",
               "reward/proxy_mean", "response/length_mean", "response/truncated_frac"}),
    # inclusionAI/AReaL: trainer/ppo/actor.py under stats_tracker scopes (`/avg`, `/min`, `/max`)
    "areal": ({"ppo_actor/task_reward/avg": rising(0.2, 0.6), "ppo_actor/task_reward/max": flat(1.0),
               "ppo_actor/no_eos_ratios/avg": flat(0.03), "ppo_actor/seq_len/avg": flat(900.0),
               "ppo_actor/update/entropy/avg": rising(0.7, 0.5), "ppo_actor/update/approx_kl/avg": flat(1e-4),
               "ppo_actor/update/clip_ratio/avg": flat(0.002), "ppo_actor/update/behave_imp_weight/avg": flat(1.0),
               "ppo_actor/update/behave_approx_kl/avg": flat(1e-3), "ppo_actor/update/grad_norm": flat(0.2)},
              "global_step", {"reward/proxy_mean", "response/truncated_frac", "policy/entropy", "policy/approxkl",
                              "mismatch/is_ratio_mean", "mismatch/kl"}),
    # NovaSky-AI/SkyRL: train/trainer.py and the policy worker's status (policy/*)
    "skyrl": ({"policy/policy_loss": flat(0.01), "policy/policy_entropy": rising(0.9, 0.7),
               "policy/response_length": flat(400.0), "policy/policy_lr": flat(1e-6), "policy/policy_kl": rising(0, 0.01),
               "policy/grad_norm": flat(0.3), "policy/rollout_train_logprobs_abs_diff_mean": flat(0.01),
               "reward/avg_raw_reward": rising(0.1, 0.5), "policy/final_loss": flat(0.01)}, "trainer/global_step",
              {"policy/loss", "policy/entropy", "kl/token_mean", "mismatch/logp_abs_diff", "reward/proxy_mean"}),
    # alibaba/ROLL: pipeline/rlvr/rlvr_pipeline.py and the actor worker
    "roll": ({"critic/score/mean": rising(0.2, 0.6), "critic/kl": rising(0.0, 0.01), "critic/kl_coef": flat(0.2),
              "critic/entropy/mean": rising(0.9, 0.7), "tokens/response_length/mean": flat(500.0),
              "actor/pg_loss": flat(0.01), "actor/approxkl": flat(1e-4), "actor/policykl": flat(1e-4),
              "actor/clipfrac": flat(0.01), "actor/ratio_mean": flat(1.0), "actor/train_infer_ratio_token_mean":
              flat(1.0), "actor/grad_norm": flat(0.3)}, "step",
             {"reward/proxy_mean", "kl/token_mean", "kl/coef", "policy/entropy", "policy/approxkl",
              "mismatch/is_ratio_mean"}),
    # meta-pytorch/torchforge: apps/grpo/main.py, actors/trainer/titan.py (no KL or entropy logged)
    "torchforge": ({"reward/evaluate_response/avg_total_reward": rising(0.1, 0.4), "rl_trainer/avg_loss": flat(0.05),
                    "rl_trainer/learning_rate": flat(1e-5), "generator/generate/avg_tokens_generated": flat(200.0),
                    "buffer/sample/avg_sampled_policy_age": flat(1.0)}, "step",
                   {"reward/proxy_mean", "policy/loss", "lr", "response/length_mean"}),
}


@pytest.mark.parametrize("dialect", sorted(LOGS))
def test_each_trainer_is_recognised_by_its_names_and_read(tmp_path, dialect):
    names, step_key, expected = LOGS[dialect]
    table = read_log(jsonl(tmp_path, f"{dialect}.jsonl", rows(names, step_key)))
    assert table.settings.trainer == dialect and table.steps_read == N
    assert expected <= {name for name in table.series if table.get(name) is not None}
    assert not table.guesses  # a known trainer's names are read as it means them, not guessed


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
# dialect -> a committed log its own trainer wrote (or, rlhflab, the tests' smoke run), beside the
# generated ones of LOGS above: every dialect has one of the two.
WRITTEN = {"trl-ppo": "trl_ppo", "trl-ppo-0.x": "trl_ppo_legacy_tensorboard", "trl-grpo": "trl_grpo",
           "verl": "verl_console_late.log", "openrlhf": "openrlhf_wandb.csv", "nemo-rl": "nemo_rl_mlruns",
           "trlx": "trlx_tensorboard", "deepspeed-chat": "dschat_step3.log", "canonical": "own_loop_nano_aha.jsonl"}


def test_every_dialect_has_a_log_in_its_own_names_and_reads_it_as_its_own(smoke_run):
    own = {**{d: FIXTURES / name for d, name in WRITTEN.items()}, "rlhflab": smoke_run.root}
    assert set(own) | set(LOGS) == {d.name for d in DIALECTS}, "a dialect without a log in its own names"
    assert not set(own) & set(LOGS)
    for dialect, path in own.items():
        assert read_log(path).settings.trainer == dialect, path


def test_no_trainer_reads_an_old_vs_new_kl_or_a_sampler_mismatch_as_the_kl_to_the_reference():
    for dialect in DIALECTS:
        for name, column in dialect.columns.items():
            if any(word in name for word in ("ppo_kl", "approx", "policykl", "mismatch", "vllm", "rollout_probs",
                                             "behave", "gen_kl")):
                assert not column.metric.startswith("kl/"), (dialect.name, name)


def test_trl_grpo_before_0_17_names_its_reward_functions_without_mean(tmp_path):
    """trl 0.14-0.16 grpo_trainer.py: `completion_length`, `rewards/<function>`, `reward`, `reward_std`, `kl`."""
    history = [{"step": i, "loss": 0.0, "reward": 0.1 * i, "reward_std": 0.3, "kl": 0.001 * i,
                "completion_length": 80.0 - i, "rewards/accuracy_reward": 0.05 * i, "rewards/format_reward": 0.5,
                "learning_rate": 1e-6, "grad_norm": 0.4, "epoch": i / 30} for i in range(1, 31)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    table = read_log(path)
    assert table.settings.trainer == "trl-grpo" and table.steps_read == 30
    assert table.get("response/length_mean").values[0] == 79.0
    assert {"reward/function/accuracy_reward", "reward/function/format_reward"} <= set(table.series)
    assert not table.unknown


def trl_vllm_log(tmp_path, difference):
    """trl >= 0.23 grpo_trainer.py with vllm_importance_sampling_correction: sampling/* keys."""
    history = [{"step": i, "loss": 0.0, "reward": 0.1, "reward_std": 0.3, "kl": 0.001, "frac_reward_zero_std": 0.1,
                "completions/mean_length": 50.0, "sampling/sampling_logp_difference/mean": difference(i),
                "sampling/sampling_logp_difference/max": 2.0, "sampling/importance_sampling_ratio/mean": 1.0,
                "sampling/importance_sampling_ratio/min": 0.4, "sampling/importance_sampling_ratio/max": 3.0}
               for i in range(1, 41)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    return read_log(path)


def test_trl_grpo_with_vllm_reads_the_sampler_mismatch_and_holds_it_to_its_own_early_level(tmp_path):
    """TRL publishes no limit: a level that stays (vLLM's precision) within the limits published
    for a logprob gap is no finding, one that grows from it as a sampler with lagging weights
    does is one (medium: a relative limit), and one beyond them from the first step is high."""
    steady = trl_vllm_log(tmp_path, lambda i: 0.02 * (1 + 0.05 * math.sin(i)))
    assert steady.get("mismatch/logp_abs_diff").values[0] == pytest.approx(0.02 * (1 + 0.05 * math.sin(1)))
    assert "sampler_mismatch" not in {f.rule for f in diagnose(steady).findings}
    constant = trl_vllm_log(tmp_path, lambda i: 0.4)
    finding = next(f for f in diagnose(constant).findings if f.rule == "sampler_mismatch")
    assert finding.severity == "high" and finding.onset_step <= 2 and "slime" in finding.evidence[0].source
    assert diagnosis_json(diagnose(constant))["findings"][0]["fix"]["changes"] == [
        "GRPOConfig.vllm_importance_sampling_correction=true"]
    drifting = trl_vllm_log(tmp_path, lambda i: 0.002 * (1 + 0.25 * max(0, i - 10)))  # ends at 0.017, below them
    finding = next(f for f in diagnose(drifting).findings if f.rule == "sampler_mismatch")
    assert finding.severity == "medium" and "MISMATCH_GROWTH" not in finding.title
    assert "bench/mismatch_calibration.py" in finding.evidence[0].source
    assert diagnosis_json(diagnose(drifting))["findings"][0]["fix"]["changes"] == [
        "GRPOConfig.vllm_importance_sampling_correction=true"]


def test_a_verl_log_past_its_faqs_mismatch_limit_is_a_finding_fixed_in_verls_keys(tmp_path):
    """volcengine/verl verl/utils/debug/metrics.py (training/rollout_probs_diff_*), written to its file
    logger ({"step": N, "data": {...}}, verl/utils/tracking.py)."""
    records = []
    for i in range(1, 41):
        data = {"critic/score/mean": 0.1 + 0.01 * i, "critic/kl": 0.001, "actor/entropy": 0.5,
                "response_length/mean": 200.0, "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 1e-4,
                "training/rollout_probs_diff_mean": 0.003 if i < 20 else 0.003 + 0.002 * (i - 20),
                "training/rollout_probs_diff_max": 0.5, "training/rollout_probs_diff_valid": 1}
        records.append({"step": i, "data": data})
    table = read_log(jsonl(tmp_path, "verl.jsonl", records))
    finding = next(f for f in diagnose(table).findings if f.rule == "sampler_mismatch")
    assert finding.evidence[0].metric == "mismatch/prob_abs_diff" and "faq.rst" in finding.evidence[0].source
    fix = diagnosis_json(diagnose(table))["findings"]
    assert any("algorithm.rollout_correction.rollout_is=token" in c for f in fix if f["rule"] == "sampler_mismatch"
               for c in f["fix"]["changes"])


def test_nemo_rl_multiplicative_probability_error_past_1_05(tmp_path):
    """NVIDIA-NeMo/RL ClippedPGLossFn metrics logged under train/ by grpo.py."""
    records = [{"step": i, "train/reward": 0.3, "train/kl_penalty": 0.001, "train/approx_entropy": 0.6,
                "train/mean_gen_tokens_per_sample": 300.0, "train/token_mult_prob_error": 1.01 + 0.004 * i,
                "train/gen_kl_error": 2e-4} for i in range(40)]
    table = read_log(jsonl(tmp_path, "nemo.jsonl", records))
    assert table.settings.trainer == "nemo-rl"
    assert "sampler_mismatch" in {f.rule for f in diagnose(table).findings}
    assert math.isclose(table.get("mismatch/prob_ratio_error").values[0], 1.01)
