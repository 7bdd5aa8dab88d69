"""End-to-end: the smoke pipeline into one run directory, checked through its files."""

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.config import config_from_run, load_config, with_strategy
from rlhflab.doctor.metrics import KNOWN, PPO_METRICS
from rlhflab.models.lm import build_tiny_lm
from rlhflab.ppo import losses
from rlhflab.ppo.components import PPOComponents, record_components
from rlhflab.ppo.state import load_ppo_state
from rlhflab.ppo.trainer import ppo_iteration
from rlhflab.runs import RunDir, read_jsonl
from rlhflab.seeding import derive_seed
from rlhflab.worlds.reviews import ReviewsWorld

# DESIGN.md's canonical PPO metrics, written out here as the contract a run must meet.
CANONICAL_PPO_METRICS = [
    "step", "reward/proxy_mean", "reward/proxy_std", "reward/gold_mean", "reward/total_mean", "kl/mean",
    "kl/k3_mean", "kl/coef", "policy/entropy", "policy/approxkl", "policy/clipfrac", "policy/ratio_mean",
    "policy/ratio_max", "policy/loss", "policy/grad_norm", "value/loss", "value/clipfrac",
    "value/explained_variance", "adv/mean", "adv/std", "response/length_mean", "response/eos_rate",
    "response/distinct_1", "response/distinct_2", "response/self_bleu", "lr", "time/rollout_s", "time/train_s",
    "tokens/generated",
]


def test_run_directory_layout(smoke_run: RunDir):
    # the strategy it ran under, and every component it used (the defaults) recorded
    assert config_from_run(smoke_run.root) == record_components(with_strategy(load_config("smoke"), 1), PPOComponents())
    assert json.loads((smoke_run.world / "world.json").read_text())["world"] == "reviews"
    lm = AutoModelForCausalLM.from_pretrained(str(smoke_run.stage1_lm))
    assert AutoTokenizer.from_pretrained(str(smoke_run.stage1_lm)).eos_token == "<eos>"
    rm = AutoModelForSequenceClassification.from_pretrained(str(smoke_run.stage2_rm))
    assert rm.config.num_labels == 1 and rm.config.reward_std > 0
    policy = AutoModelForCausalLM.from_pretrained(str(smoke_run.stage3_policy))
    assert (smoke_run.stage3_policy / "value_head.safetensors").is_file()
    assert sum(p.numel() for p in policy.parameters()) == sum(p.numel() for p in lm.parameters())
    for stage, keys in {
        "pretrain": ["lm/train_loss", "lm/val_loss", "lm/grammatical_rate"],
        "reward": ["rm/train_loss", "rm/train_acc", "rm/val_acc", "rm/gold_agreement", "rm/length_corr"],
    }.items():
        records = read_jsonl(smoke_run.metrics(stage))
        for key in keys:
            assert any(key in r for r in records), f"{stage} never logged {key}"
    samples = read_jsonl(smoke_run.samples("ppo"))
    assert samples and set(samples[0]) == {"step", "prompt", "response", "proxy", "gold", "ended"}
    # every response of each batch is kept (smoke: 32 a batch, 64 kept at most), in the batch's
    # order: their mean proxy and EOS rate are the iteration's logged ones
    config = load_config("smoke")
    assert len(samples) == config.ppo.iterations * min(config.ppo.batch_size, config.ppo.samples_per_iteration)
    for record in read_jsonl(smoke_run.metrics("ppo")):
        rows = [s for s in samples if s["step"] == record["step"]]
        assert sum(s["ended"] for s in rows) / len(rows) == pytest.approx(record["response/eos_rate"])


def test_ppo_metrics_follow_the_schema(smoke_run: RunDir):
    records = read_jsonl(smoke_run.metrics("ppo"))
    config = load_config("smoke")
    assert [r["step"] for r in records] == list(range(config.ppo.iterations))
    for record in records:
        missing = [k for k in CANONICAL_PPO_METRICS if k not in record]
        assert not missing, missing
        assert all(record[k] is not None and math.isfinite(record[k]) for k in CANONICAL_PPO_METRICS)
    assert records[0]["kl/coef"] == config.ppo.kl_coef
    # The doctor's registry knows every name the run logs, so none is reported as unknown.
    assert set(CANONICAL_PPO_METRICS) - {"step"} == set(PPO_METRICS)
    assert all(name in KNOWN for record in records for name in record if name != "step")


def test_ppo_raised_gold_reward(smoke_run: RunDir):
    records = read_jsonl(smoke_run.metrics("ppo"))
    gold = [r["reward/gold_mean"] for r in records]
    proxy = [r["reward/proxy_mean"] for r in records]
    assert sum(gold[-3:]) / 3 > sum(gold[:3]) / 3
    assert sum(proxy[-3:]) / 3 > sum(proxy[:3]) / 3
    evaluation = json.loads((smoke_run.root / "metrics" / "eval.json").read_text())
    assert evaluation["policy"]["gold_mean"] > evaluation["stage1"]["gold_mean"]
    assert evaluation["stage1"]["kl_mean"] == pytest.approx(0.0, abs=1e-4)


def test_each_stage_changed_its_parameters(smoke_run: RunDir):
    config = load_config("smoke")
    fresh = build_tiny_lm(ReviewsWorld().tokenizer(), config.pretrain, derive_seed(config.seed, "lm-init"))
    lm = AutoModelForCausalLM.from_pretrained(str(smoke_run.stage1_lm))
    rm = AutoModelForSequenceClassification.from_pretrained(str(smoke_run.stage2_rm))
    policy = AutoModelForCausalLM.from_pretrained(str(smoke_run.stage3_policy))
    lm_state, rm_trunk, policy_state = lm.state_dict(), rm.base_model.state_dict(), policy.state_dict()
    for name, value in fresh.state_dict().items():
        assert not torch.equal(value, lm_state[name]), f"stage 1 left {name} at its initial value"
    trunk_names = [n for n in rm_trunk if not n.endswith("attn.bias")]
    assert all(not torch.equal(rm_trunk[n], lm_state[f"transformer.{n}"]) for n in trunk_names)
    assert any(not torch.equal(v, lm_state[n]) for n, v in policy_state.items())


class RecordingPolicyLoss:
    """The default policy loss, remembering the stats of every call."""

    def __init__(self):
        self.stats = []

    def __call__(self, *args):
        loss, stats = losses.policy_loss(*args)
        self.stats.append(stats)
        return loss, stats


def test_policy_changes_reference_does_not_and_first_ratio_is_one(smoke_run: RunDir):
    config = load_config("smoke")
    recorder = RecordingPolicyLoss()
    state = load_ppo_state(config, smoke_run, PPOComponents(policy_loss=recorder))
    policy_before = {k: v.clone() for k, v in state.policy.state_dict().items()}
    reference_before = {k: v.clone() for k, v in state.reference.state_dict().items()}
    reward_before = {k: v.clone() for k, v in state.reward.model.state_dict().items()}
    prompts = ReviewsWorld().prompts(config.ppo.batch_size, 123)
    rollout, metrics = ppo_iteration(state, prompts, 0, 0)

    changed = [k for k, v in state.policy.state_dict().items() if not torch.equal(v, policy_before[k])]
    assert len(changed) == len(policy_before)  # every tensor, value head included, was updated
    assert all(torch.equal(v, reference_before[k]) for k, v in state.reference.state_dict().items())
    assert all(torch.equal(v, reward_before[k]) for k, v in state.reward.model.state_dict().items())
    assert all(not p.requires_grad for p in state.reference.parameters())
    policy_storage = {p.untyped_storage().data_ptr() for p in state.policy.parameters()}
    assert not policy_storage & {p.untyped_storage().data_ptr() for p in state.reference.parameters()}

    first = recorder.stats[0]
    assert float(first.ratio_mean) == pytest.approx(1.0, abs=1e-5)
    assert float(first.approxkl) == pytest.approx(0.0, abs=1e-8)
    assert float(first.clipfrac) == 0.0
    assert len(recorder.stats) == config.ppo.epochs * config.ppo.minibatches
    # Logprobs recorded at sampling (KV cache) equal those recomputed in the padded forward.
    torch.testing.assert_close(rollout.sampled_logprobs[rollout.mask], rollout.logprobs[rollout.mask], atol=1e-4, rtol=0)


def test_cli_rejects_unknown_keys_with_the_key_named(tmp_path: Path):
    result = CliRunner().invoke(app, ["pipeline", "--preset", "smoke", "--out", str(tmp_path / "r"), "ppo.kl_cof=1"])
    assert result.exit_code == 2
    assert "unknown config key 'ppo.kl_cof'" in result.output
    assert not (tmp_path / "r").exists()


def test_stage_commands_explain_missing_inputs(tmp_path: Path):
    result = CliRunner().invoke(app, ["ppo", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "rlhflab pretrain" in result.output


def test_a_stage_result_prints_as_a_table_of_its_groups_and_values():
    from rich.console import Console

    from rlhflab.cli.render import result_table

    summary = {"stage1": {"proxy_mean": 0.1, "kl_mean": 0.0}, "policy": {"proxy_mean": 0.51234, "kl_mean": 2.5},
               "stopped": {"step": 7, "rule": "kl_explosion"}}
    console = Console(width=200, record=True)
    console.print(result_table("stage 3", summary))
    text = console.export_text()
    assert "stage1" in text and "policy" in text and "0.5123" in text
    assert "stopped" in text and "rule kl_explosion" in text and "{" not in text  # no raw dict
