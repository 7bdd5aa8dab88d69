"""Every reader reads every step: logs of each format with N step records among the noise
real captures hold (a printed config whose braces never balance, other processes' prints
interleaved, tracebacks, progress bars redrawn with carriage returns, a resumed run that
logs some steps again, a last line cut mid-way), built as each trainer writes them, and
the number of distinct training steps read must be N: not "no traceback", the count."""

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhflab.doctor.formats import read_log

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
RAY = "(TaskRunner pid=4127)"
WORKER = "(WorkerDict pid=5210, ip=10.0.0.2)"

# Noise a console capture holds between its step records.
TRACEBACK = ["Traceback (most recent call last):", '  File "/opt/trainer/hooks.py", line 88, in on_log',
             "    sink.send({'loss': value})", "ConnectionError: sink closed"]
OTHER_PRINTS = ["INFO 12-05 07:31:02 [worker.py:114] Memory profiling takes 3.2 seconds",
                "[rank1]:[W1205 07:31:05] Warning: grad strides do not match bucket view strides",
                "wandb: WARNING Step must only increase in log calls.",
                "{'temperature': 1.0, 'top_p': 1.0, 'max_tokens'",  # a dict another process cut off
                "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.52s/it]"]


def noisy(lines: list[str], rng: random.Random, noise: list[list[str]]) -> list[str]:
    """`lines` with blocks of `noise` inserted between them at random places."""
    out = []
    for line in lines:
        if rng.random() < 0.3:
            out.extend(rng.choice(noise))
        out.append(line)
    return out


def plan(n: int, resume: int) -> list[int]:
    """The steps a run logs: 1..n, and after a crash at n - resume + 1.. it resumes from an
    earlier checkpoint and logs those steps again."""
    steps = list(range(1, n + 1))
    if resume:
        steps = steps[: n - resume // 2] + list(range(n - resume + 1, n + 1))
    return steps


runs = st.tuples(st.integers(12, 60), st.integers(0, 6), st.booleans(), st.integers(0, 2 ** 16))


# --- veRL console -----------------------------------------------------------------------------
def verl_line(step: int, tag: str = RAY) -> str:
    return (f"{tag} step:{step} - critic/score/mean:{0.1 + 0.001 * step:.4f} - critic/kl:{0.001 * step:.5f} - "
            f"actor/entropy_loss:{1.2 - 0.001 * step:.4f} - response_length/mean:{200 + step} - "
            f"actor/pg_clipfrac:0.002 - timing_s/gen:np.float64(3.21)")


@EXAMPLES
@given(run=runs)
def test_verl_console_reads_every_step(tmp_path_factory, run):
    n, resume, cut, seed = run
    rng = random.Random(seed)
    tag = rng.choice([RAY, ""])  # the driver's Ray tag, or none (launched without Ray's log prefix)
    config = [f"{tag} {{'actor_rollout_ref': {{'model': {{'path': 'Qwen/Qwen2.5-0.5B', 'chat_template': "
              "'{% for m in messages %}{{ m.content }}'"]  # braces in a string: never balance
    lines = [line.lstrip() for line in config + [verl_line(s, tag) for s in plan(n, resume)]]
    if cut:
        lines.append(f"{tag} step:{n + 1} - crit".lstrip())
    noise = [TRACEBACK, [f"{WORKER} {OTHER_PRINTS[rng.randrange(4)]}"], [f"{RAY} Training Progress:  12%|#2  | "
                                                                           f"{rng.randrange(n)}/{n} [00:10<01:02]"]]
    path = tmp_path_factory.mktemp("verl") / "driver.log"
    path.write_text("\n".join(noisy(lines, rng, noise)) + ("" if cut else "\n"))
    table = read_log(path)
    assert table.format == "verl-console" and table.steps_read == n


# --- a transformers/TRL console -----------------------------------------------------------------
def hf_dict(step: int) -> str:
    return (f"{{'loss': '{0.01 * step:.4g}', 'grad_norm': '0.52', 'learning_rate': '1e-06', 'reward': "
            f"'{0.2 + 0.01 * step:.4g}', 'reward_std': '0.31', 'frac_reward_zero_std': '0.1', "
            f"'completions/mean_length': '{40 + step}', 'kl': '{0.001 * step:.4g}', 'epoch': '{step / 100:.2f}'}}")


def bar(step: int, total: int) -> str:
    return f"{100 * step // total:3d}%|#         | {step}/{total} [00:{step % 60:02d}<01:00,  1.02it/s]"


@EXAMPLES
@given(run=runs)
def test_hf_console_reads_every_step(tmp_path_factory, run):
    n, resume, cut, seed = run
    rng = random.Random(seed)
    total = 10 * (n + 1)
    chunks = ["Loading weights: 100%|##########| 291/291 [00:00<00:00, 1204.11it/s]"]
    for step in plan(n, resume):
        chunks.append("\r".join(bar(s, total) for s in range(10 * step - 3, 10 * step + 1)))
        chunks.append(hf_dict(10 * step))
    if cut:
        chunks.append("\r" + bar(10 * n + 5, total) + "\n" + hf_dict(10 * n + 10)[:40])
    noise = [TRACEBACK, [rng.choice(OTHER_PRINTS)], ["{'model_type': 'qwen2', 'vocab_size': 151936}"]]
    path = tmp_path_factory.mktemp("hf") / "console.log"
    path.write_text("\n".join(noisy(chunks, rng, noise)))
    table = read_log(path)
    assert table.format == "hf-console" and table.steps_read == n


# --- DeepSpeed-Chat step 3 -----------------------------------------------------------------------
@EXAMPLES
@given(run=runs)
def test_deepspeed_chat_console_reads_every_step(tmp_path_factory, run):
    n, _, cut, seed = run  # its steps are numbered in print order: a resumed run is more steps
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        lines += [f"epoch: 0|step: {i}|ppo_ep: 1|act_loss: {0.1 + 0.001 * i}|cri_loss: 0.2|unsuper_loss: 0.0",
                  f"average reward score: {0.3 + 0.01 * i}", "-" * 60]
    if cut:
        lines.append("epoch: 0|step: ")
    path = tmp_path_factory.mktemp("dsc") / "step3.log"
    path.write_text("\n".join(noisy(lines, rng, [TRACEBACK, [rng.choice(OTHER_PRINTS)]])))
    table = read_log(path)
    assert table.format == "deepspeed-chat" and table.steps_read == n


# --- JSON lines: a loop's own, and veRL's file logger ---------------------------------------------
@EXAMPLES
@given(run=runs, verl=st.booleans())
def test_jsonl_logs_read_every_step(tmp_path_factory, run, verl):
    n, resume, cut, seed = run
    rng = random.Random(seed)
    rows = []
    for step in plan(n, resume):
        metrics = {"critic/score/mean": 0.1 * step, "critic/kl": 0.001, "actor/entropy_loss": 0.9} if verl else \
            {"step": step, "train_reward": 0.1 * step, "kl": 0.001 * step, "policy/entropy": 1.0}
        rows.append(json.dumps({"step": step, "data": metrics} if verl else metrics))
    text = "\n".join(row if rng.random() > 0.1 else "\n" + row for row in rows) + "\n"
    if cut:
        text += rows[-1][: len(rows[-1]) // 2]
    path = tmp_path_factory.mktemp("jsonl") / "metrics.jsonl"
    path.write_text(text)
    table = read_log(path)
    assert table.format == ("verl-jsonl" if verl else "table") and table.steps_read == n
    assert not cut or any("cut before its end" in note for note in table.notes)


# --- trainer_state.json, a CSV table, an MLflow run --------------------------------------------------
@EXAMPLES
@given(run=runs)
def test_trainer_state_reads_every_step_of_a_resumed_run(tmp_path_factory, run):
    n, resume, _, _ = run
    history = [{"step": s, "loss": 0.01, "reward": 0.1 * s, "reward_std": 0.3, "kl": 0.001 * s,
                "completions/mean_length": 30.0, "frac_reward_zero_std": 0.1} for s in plan(n, resume)]
    history.append({"step": n, "train_runtime": 100.0, "train_loss": 0.01, "total_flos": 0.0})
    path = tmp_path_factory.mktemp("ts") / "trainer_state.json"
    path.write_text(json.dumps({"global_step": n, "log_history": history}))
    table = read_log(path)
    assert table.format == "trainer_state" and table.steps_read == n


@EXAMPLES
@given(run=runs)
def test_csv_and_mlflow_read_every_step_of_a_resumed_run(tmp_path_factory, run):
    n, resume, _, seed = run
    steps = plan(n, resume)
    folder = tmp_path_factory.mktemp("tables")
    csv_path = folder / "metrics.csv"
    csv_path.write_text("step,reward_mean,clip_fraction,policy_entropy_mean\n"
                        + "".join(f"{s},{0.1 * s},0.01,1.1\n" for s in steps))
    assert read_log(csv_path).steps_read == n
    run_dir = folder / "mlruns" / "0" / "abc123"
    (run_dir / "metrics" / "objective").mkdir(parents=True)
    (run_dir / "meta.yaml").write_text("run_id: abc123\n")
    for name in ("objective/kl", "objective/scores"):
        (run_dir / "metrics" / name).write_text("".join(f"{1700000000000 + s} {0.1 * s} {s}\n" for s in steps))
    table = read_log(run_dir)
    assert table.format == "mlflow" and table.steps_read == n


# --- TensorBoard events, a W&B panel export, an rlhflab run --------------------------------------
@EXAMPLES
@given(run=runs)
def test_tensorboard_and_a_wandb_export_read_every_step_of_a_resumed_run(tmp_path_factory, run):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    n, resume, _, _ = run
    steps = plan(n, resume)
    folder = tmp_path_factory.mktemp("tb")
    for part, chunk in enumerate((steps[: len(steps) // 2], steps[len(steps) // 2 :])):  # a resumed run: two files
        writer = EventFileWriter(str(folder / "run"), filename_suffix=f".{part}")
        for s in chunk:
            for tag, value in (("objective/kl", 0.1 * s), ("objective/scores", 0.01 * s), ("objective/entropy", 30.0),
                               ("policy/approxkl_avg", 0.01)):
                writer.add_event(Event(wall_time=1.7e9 + s, step=s, summary=Summary(value=[
                    Summary.Value(tag=tag, simple_value=value)])))
        writer.close()
    assert read_log(folder / "run").steps_read == n
    export = folder / "wandb_export.csv"
    run_name = "grpo-0412"
    export.write_text(f"Step,{run_name} - train/reward,{run_name} - train/reward__MIN,{run_name} - train/reward__MAX,"
                      f"{run_name} - train/kl\n" + "".join(f"{s},{0.1 * s},{0.1 * s},{0.1 * s},0.01\n" for s in steps))
    table = read_log(export)
    assert table.format == "wandb-csv" and table.steps_read == n


@EXAMPLES
@given(run=runs)
def test_an_rlhflab_run_reads_every_step_of_a_resumed_run(tmp_path_factory, run):
    n, resume, cut, _ = run
    folder = tmp_path_factory.mktemp("rlhflab")
    (folder / "metrics").mkdir()
    lines = [json.dumps({"step": s, "reward/proxy_mean": 0.1 * s, "kl/mean": 0.5, "policy/entropy": 1.0})
             for s in plan(n, resume)]
    text = "\n".join(lines) + "\n" + (lines[-1][:9] if cut else "")
    (folder / "metrics" / "ppo.jsonl").write_text(text)
    (folder / "config.toml").write_text("seed = 0\n")
    table = read_log(folder)
    assert table.format == "rlhflab" and table.steps_read == n
