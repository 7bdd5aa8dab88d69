"""W&B run directories read from their transaction log without network: runs the wandb
package writes here in offline mode, logging as transformers' WandbCallback does
(`train/<name>`, `train/global_step` as the step), read back step by step."""

import os
import subprocess
import sys
import textwrap

import pytest

from rlhflab.doctor.diagnose import diagnose
from rlhflab.doctor.formats import detect_format, read_log
from rlhflab.doctor.formats.wandb_run import run_log

pytest.importorskip("wandb")

WRITER = textwrap.dedent("""
    import math, sys, wandb
    steps, wide = int(sys.argv[2]), sys.argv[3] == "wide"
    run = wandb.init(mode="offline", dir=sys.argv[1], project="grpo", config={"beta": 0.04, "learning_rate": 1e-6})
    for i in range(1, steps + 1):
        row = {"train/global_step": 10 * i, "train/loss": 0.001, "train/grad_norm": 0.5,
               "train/reward": 1 - math.exp(-i / 5), "train/reward_std": 0.3, "train/kl": 0.001 * 1.3 ** i,
               "train/completions/mean_length": 40.0, "train/frac_reward_zero_std": 0.1, "train/epoch": i / steps}
        if wide and i == 3:  # a row larger than a 32 KiB block: its record is split across blocks
            row.update({f"train/rewards/fn{k}/mean": 0.5 for k in range(2000)})
        if i % 5 == 0:
            row["eval/reward"] = 0.5
        run.log(row)
    run.finish()
""")


def offline_run(tmp_path, steps: int, wide: bool = False):
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline"}
    subprocess.run([sys.executable, "-c", WRITER, str(tmp_path), str(steps), "wide" if wide else "narrow"],
                   check=True, env=env, timeout=120, capture_output=True)
    return tmp_path / "wandb"


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    return offline_run(tmp_path_factory.mktemp("wandb"), 40, wide=True)


def test_an_offline_run_is_read_step_by_step_in_trls_names(grpo_run):
    assert detect_format(grpo_run).name == "wandb-run"
    table = read_log(grpo_run)  # the wandb/ directory: its latest run
    assert table.settings.trainer == "trl-grpo" and table.steps_read == 40
    assert table.get("reward/proxy_mean").steps[:3] == (10, 20, 30)  # train/global_step is the step
    assert table.get("kl/token_mean").values[-1] == pytest.approx(0.001 * 1.3 ** 40, rel=1e-6)
    assert any(name.startswith("eval/") for name in table.evaluation)
    assert "kl_explosion" in {f.rule for f in diagnose(table).findings}


def test_the_run_directory_and_its_log_file_read_alike(grpo_run):
    log = run_log(grpo_run)
    assert log.suffix == ".wandb" and log.parent.name.startswith("offline-run-")
    for path in (log.parent, log):
        assert read_log(path).steps_read == 40


def test_a_log_cut_mid_record_is_read_up_to_its_last_whole_record(grpo_run, tmp_path):
    data = run_log(grpo_run).read_bytes()
    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(data[:-50])  # a run stopped while writing its last records
    table = read_log(cut)
    assert table.steps_read >= 38 and any("partial record" in n or "inside a record" in n for n in table.notes)
    cut.write_bytes(data[: len(data) // 2])  # inside the wide row, whose record spans several blocks
    table = read_log(cut)
    assert table.steps_read == 2 and any("inside a record" in n or "partial record" in n for n in table.notes)
