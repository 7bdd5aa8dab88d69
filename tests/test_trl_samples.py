"""Samples written by TRL's real trainers, read by the doctor: GRPOTrainer's own
`completions/*.parquet` (log_completions=True) and, for RLOOTrainer, which keeps them in
memory, the ones `DoctorCallback(samples_of=trainer)` writes. The rewards in the files are
checked against the trainer's own logged `reward` (a second path: the trainer's metric)."""

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
trl = pytest.importorskip("trl")
pytest.importorskip("pyarrow")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

from rlhflab.doctor.formats import read_log  # noqa: E402
from rlhflab.doctor.formats.sample_files import CALLBACK_SAMPLES  # noqa: E402
from rlhflab.integrations import DoctorCallback  # noqa: E402
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig  # noqa: E402

STEPS, BATCH = 12, 16


def trainer_of(kind: str, run, out, **settings):
    tokenizer = AutoTokenizer.from_pretrained(run.root / "stage1_lm", padding_side="left")
    prompts = ReviewsWorld(WorldConfig()).prompts(512, 0)
    config_class, trainer_class = {"grpo": (trl.GRPOConfig, trl.GRPOTrainer), "rloo": (trl.RLOOConfig, trl.RLOOTrainer)}[kind]
    config = config_class(
        output_dir=str(out), use_cpu=True, bf16=False, seed=0, max_steps=STEPS, logging_steps=1, save_strategy="no",
        report_to=[], disable_tqdm=True, per_device_train_batch_size=BATCH, num_generations=4, max_completion_length=12,
        learning_rate=1e-4, beta=0.04, **settings)
    return trainer_class(
        model=AutoModelForCausalLM.from_pretrained(run.root / "stage1_lm"),
        reward_funcs=[AutoModelForSequenceClassification.from_pretrained(run.root / "stage2_rm", num_labels=1)],
        args=config, train_dataset=Dataset.from_dict({"prompt": [tokenizer.bos_token + p for p in prompts]}),
        processing_class=tokenizer, reward_processing_classes=[tokenizer])


def assert_samples_match_the_log(trainer, out):
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    table = read_log(out / "trainer_state.json")
    assert table.get("text/samples").values == (float(BATCH),) * STEPS
    logged = {row["step"]: row["reward"] for row in trainer.state.log_history if "reward" in row}
    measured = dict(zip(table.get("text/reward_mean").steps, table.get("text/reward_mean").values))
    assert set(measured) == set(logged)
    for step, reward in logged.items():
        assert measured[step] == pytest.approx(reward, abs=1e-4), step
    return table


def test_grpo_writes_its_completions_and_the_doctor_reads_them_beside_its_log(smoke_run, tmp_path):
    trainer = trainer_of("grpo", smoke_run, tmp_path, log_completions=True, num_completions_to_print=0)
    trainer.train()
    assert len(list((tmp_path / "completions").glob("completions_*.parquet"))) == STEPS
    table = assert_samples_match_the_log(trainer, tmp_path)
    assert table.get("response/distinct_2") is not None  # a stand-in: GRPO logs no diversity


def test_rloo_completions_are_written_by_the_callback(smoke_run, tmp_path):
    trainer = trainer_of("rloo", smoke_run, tmp_path)
    callback = DoctorCallback(every=5, samples_of=trainer)
    trainer.add_callback(callback)
    trainer.train()
    rows = (tmp_path / CALLBACK_SAMPLES).read_text().splitlines()
    assert len(rows) == STEPS * BATCH  # each generation batch once
    assert_samples_match_the_log(trainer, tmp_path)
    # the live diagnoses read them too
    assert callback.table.get("text/opening_share") is not None


def test_a_trainer_without_completions_in_memory_is_refused():
    with pytest.raises(ValueError, match="keeps no completions"):
        DoctorCallback(samples_of=object())
