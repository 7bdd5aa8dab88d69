"""A console capture holding two runs: a later run starts only where a banner or a printed
config stands between the step counters and the counter started over; it is said, the last
run is diagnosed unless `--run N` asks for another, and a counter that restarts by design
(DeepSpeed-Chat's, each epoch) or a resumed run is one run."""

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.formats.runs import run_starts
from test_reader_steps import RAY, bar, hf_dict, verl_line


def verl_config(kl_coef: float, lr: float) -> str:
    return (f"{RAY} {{'actor_rollout_ref': {{'actor': {{'clip_ratio': 0.2, 'optim': {{'lr': {lr}}}}}}}, "
            f"'algorithm': {{'kl_ctrl': {{'type': 'fixed', 'kl_coef': {kl_coef}}}}}, 'data': {{'train_batch_size': 64}}}}")


def verl_console(tmp_path, second: list[int], reprint: bool = True):
    lines = [verl_config(0.001, 1e-6), *(verl_line(s) for s in range(1, 31))]
    lines += [verl_config(0.05, 3e-6)] if reprint else []
    lines += [verl_line(s) for s in second]
    path = tmp_path / "driver.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_step_counter_starting_over_after_a_banner_is_a_new_run_and_only_then():
    assert run_starts([1, 2, 3, 1, 2], {3}) == [3]
    assert run_starts([1, 2, 3, 1, 2], set()) == []  # no banner: a counter that restarts by design
    assert run_starts([1, 2, 3, 2, 3], {3}) == []  # a reprint, then on from past the first step: resumed
    assert run_starts([0, 1, 0, 1, 0], {2, 4}) == [2, 4]
    assert run_starts([5, 6], {0}) == []  # a banner before the first step starts the first run


def test_a_verl_console_with_two_runs_diagnoses_the_last_and_says_so(tmp_path):
    path = verl_console(tmp_path, list(range(1, 21)))
    last = read_log(path)
    assert last.steps_read == 20 and last.settings.kl_coef == 0.05 and last.settings.lr == 3e-6
    assert any("the log holds 2 runs" in n and "diagnosing run 2 of 2" in n and "30, 20 rows" in n
               for n in last.notes)
    first = read_log(path, run=1)
    assert first.steps_read == 30 and first.settings.kl_coef == 0.001
    assert any("diagnosing run 1 of 2" in n for n in first.notes)


def test_a_reprinted_config_of_a_resumed_run_or_steps_going_back_without_one_are_one_run(tmp_path):
    resumed = read_log(verl_console(tmp_path, list(range(21, 41))))  # resumed at step 21 from a checkpoint
    assert resumed.steps_read == 40 and not any("runs" in n for n in resumed.notes)
    no_banner = read_log(verl_console(tmp_path, list(range(1, 21)), reprint=False))
    assert not any("holds 2 runs" in n for n in no_banner.notes)


def test_a_transformers_console_with_two_trainings_is_two_runs(tmp_path):
    chunks = []
    total = 150  # the same script run twice
    for steps in (range(1, 16), range(1, 11)):
        chunks.append("***** Running training *****\n  Num examples = 1,000")
        for step in steps:
            chunks.append("\r".join(bar(s, total) for s in range(10 * step - 3, 10 * step + 1)))
            chunks.append(hf_dict(10 * step))
    path = tmp_path / "console.log"
    path.write_text("\n".join(chunks) + "\n")
    table = read_log(path)
    assert table.format == "hf-console" and table.steps_read == 10
    assert any("the log holds 2 runs" in n for n in table.notes)
    assert read_log(path, run=1).steps_read == 15


def test_deepspeed_chats_counter_restarting_each_epoch_is_one_run(tmp_path):
    lines = ["***** Running training *****"]
    for epoch in range(2):
        for i in range(15):
            lines += [f"epoch: {epoch}|step: {i}|ppo_ep: 1|act_loss: {0.1 + 0.001 * i}|cri_loss: 0.2|unsuper_loss: 0.0",
                      f"average reward score: {0.3 + 0.01 * i}"]
    path = tmp_path / "step3.log"
    path.write_text("\n".join(lines) + "\n")
    table = read_log(path)
    assert table.format == "deepspeed-chat" and table.steps_read == 30
    assert not any("runs" in n for n in table.notes)


def test_the_command_line_takes_run_and_refuses_one_the_log_does_not_hold(tmp_path):
    path = verl_console(tmp_path, list(range(1, 21)))
    result = CliRunner().invoke(app, ["doctor", str(path), "--run", "3"])
    assert result.exit_code == 2 and "--run 3: the log holds 2 runs" in result.output
    result = CliRunner().invoke(app, ["doctor", str(path), "--run", "1", "--json"])
    assert result.exit_code in (0, 1, 3) and '"steps": 30,' in result.output


@pytest.mark.parametrize("run", [0, -1])
def test_run_counts_from_one(tmp_path, run):
    result = CliRunner().invoke(app, ["doctor", str(verl_console(tmp_path, [1, 2])), "--run", str(run)])
    assert result.exit_code == 2
