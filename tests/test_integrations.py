"""`DoctorCallback` inside the current TRL's GRPOTrainer, on the reviews world's smoke
models: a run whose per-token KL runs away (beta = 0.04 with a learning rate 100x too
high) stops itself with a checkpoint and the right finding; a healthy run is not stopped."""

import json
import math
import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
trl = pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

from rlhflab.integrations import DoctorCallback  # noqa: E402
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig  # noqa: E402


def grpo(run, out, learning_rate: float, steps: int, callback: DoctorCallback):
    tokenizer = AutoTokenizer.from_pretrained(run.root / "stage1_lm", padding_side="left")
    prompts = ReviewsWorld(WorldConfig()).prompts(512, 0)
    config = trl.GRPOConfig(
        output_dir=str(out), use_cpu=True, bf16=False, seed=0, max_steps=steps, logging_steps=1, save_strategy="no",
        report_to=[], disable_tqdm=True, per_device_train_batch_size=8, num_generations=4, max_completion_length=16,
        learning_rate=learning_rate, beta=0.04)
    trainer = trl.GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(run.root / "stage1_lm"),
        reward_funcs=[AutoModelForSequenceClassification.from_pretrained(run.root / "stage2_rm", num_labels=1)],
        args=config, train_dataset=Dataset.from_dict({"prompt": [tokenizer.bos_token + p for p in prompts]}),
        processing_class=tokenizer, reward_processing_classes=[tokenizer], callbacks=[callback])
    trainer.train()
    return trainer


def test_a_grpo_run_whose_kl_runs_away_stops_itself_with_a_checkpoint(smoke_run, tmp_path):
    callback = DoctorCallback(every=5, stop_on=("kl_explosion",))
    trainer = grpo(smoke_run, tmp_path, learning_rate=1e-2, steps=120, callback=callback)
    assert callback.watch.stopped_by is not None and callback.watch.stopped_by.rule == "kl_explosion"
    assert trainer.state.global_step < 120 and trainer.state.global_step == callback.stopped_at
    assert (tmp_path / f"checkpoint-{trainer.state.global_step}").is_dir()
    saved = json.loads((tmp_path / "rlhflab" / "diagnosis.json").read_text())
    assert "kl_explosion" in {f["rule"] for f in saved["findings"]} and saved["trainer"] == "trl-grpo"
    assert (tmp_path / "rlhflab" / "report.html").is_file()
    # The run's own beta came from its GRPOConfig: fixes are written in its names.
    assert callback.table.settings.kl_coef == 0.04
    assert any("GRPOConfig." in change for f in saved["findings"] if f.get("fix") for change in f["fix"]["changes"])


def test_a_healthy_grpo_run_is_not_stopped(smoke_run, tmp_path):
    callback = DoctorCallback(every=5, stop_on=("kl_explosion",))
    trainer = grpo(smoke_run, tmp_path, learning_rate=1e-4, steps=60, callback=callback)
    assert trainer.state.global_step == 60 and callback.stopped_at is None
    assert "kl_explosion" not in callback.watch.told
    assert (tmp_path / "rlhflab" / "report.html").is_file()


def test_a_run_compared_as_it_goes_with_an_earlier_one_whose_kl_ran_away(smoke_run, tmp_path):
    """compare_to: the earlier run's kl_explosion is told gone once this healthy run passes
    the step where it began, and compare.json holds rlhflab compare's verdict at the end."""
    earlier = tmp_path / "earlier" / "trainer_state.json"
    earlier.parent.mkdir()
    history = [{"step": i, "loss": 0.0, "reward": 0.1 + 0.001 * i, "reward_std": 0.3, "frac_reward_zero_std": 0.1,
                "kl": 0.001 * math.exp(0.25 * i), "completions/mean_length": 16.0, "entropy": 2.0,
                "learning_rate": 1e-2, "grad_norm": 1.0} for i in range(1, 41)]
    earlier.write_text(json.dumps({"log_history": history}))
    callback = DoctorCallback(every=5, compare_to=earlier)
    grpo(smoke_run, tmp_path / "now", learning_rate=1e-4, steps=40, callback=callback)
    assert callback.told_earlier.get("kl_explosion") == "gone"
    saved = json.loads((tmp_path / "now" / "rlhflab" / "compare.json").read_text())
    assert saved["earlier"] == str(earlier) and saved["verdict"] in ("fixed", "partly fixed", "cannot tell")
    assert {f["rule"]: f["status"] for f in saved["findings"]}["kl_explosion"] == "gone"
