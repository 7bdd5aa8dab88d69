"""The command line's one error policy, as a matrix: every command (read from the app, so a
new one joins the matrix) × every class of error a user's input can cause. Each cell runs
the command with that bad input and asserts exit code 2, one line saying what was wrong, no
traceback, and no file written beyond what the command keeps (none, here: a bad input is
found before anything is written). A cell is a case or "not applicable" with its reason;
a missing cell fails.

A bug in rlhflab is no user's error: it keeps its traceback and exit code 1 (the last tests).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.cli.doctor import AFTER_MARK

ERROR_CLASSES = ("config", "data file", "model directory", "log format", "study", "sample file", "plan",
                 "host or port", "output path", "missing extra")


@dataclass(frozen=True)
class Bad:
    """A cell's case: `args(inputs)` run as `rlhflab ARGS`, with `blocked` modules made unimportable."""

    args: Callable[["Inputs"], list[str]]
    blocked: tuple[str, ...] = ()
    says: str = ""  # words the one line must hold


@dataclass(frozen=True)
class NotApplicable:
    reason: str


@dataclass
class Inputs:
    """Bad (and good) inputs in a scratch directory, and the shared smoke run."""

    root: Path
    run: Path
    made: dict = field(default_factory=dict)

    def file(self, name: str, text: str) -> str:
        path = self.root / "inputs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return str(path)

    @property
    def bad_jsonl(self) -> str:
        return self.file("bad.jsonl", '{"prompt": "a", "completion": "b"}\n{"prompt": \n')

    @property
    def not_a_model(self) -> str:
        path = self.root / "inputs" / "not-a-model"
        path.mkdir(parents=True, exist_ok=True)
        (path / "README").write_text("no config.json here")
        return str(path)

    @property
    def garbage_log(self) -> str:
        return self.file("train.log", "this is not a training log\n")

    @property
    def not_a_study(self) -> str:
        path = self.root / "inputs" / "not-a-study"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    @property
    def bad_samples(self) -> str:
        return self.file("samples.jsonl", '{"unknown_field": 1}\n')

    @property
    def under_a_file(self) -> str:
        """A path whose parent is a regular file: nothing can be written there."""
        return self.file("a-file", "x") + "/out"

    def out(self, name: str = "out") -> str:
        return str(self.root / name)

    def run_with_bad_config(self) -> str:
        import shutil

        copy = self.root / "inputs" / "run-bad-config"
        if not copy.exists():
            shutil.copytree(self.run, copy, ignore=shutil.ignore_patterns("stage*", "checkpoints", "samples"))
            (copy / "config.toml").write_text("[ppo]\nkl_coef = \"much\"\n", encoding="utf-8")
        return str(copy)

    def two_sample_files(self) -> list[str]:
        rows = [{"step": 0, "prompt": f"prompt {k}", "response": f"response {k}"} for k in range(4)]
        return [self.file(f"{name}.jsonl", "".join(json.dumps({**r, "response": r["response"] + name}) + "\n"
                                                    for r in rows)) for name in ("a", "b")]

    def pair_study(self) -> str:
        if "pair" not in self.made:
            result = CliRunner().invoke(app, ["pair", *self.two_sample_files(), "--study",
                                              str(self.root / "inputs" / "study"), "--no-serve"])
            assert result.exit_code == 0, result.output
            self.made["pair"] = str(self.root / "inputs" / "study")
        return self.made["pair"]


NA_TRAINS = NotApplicable("reads no log, study, sample file or plan: it trains from a config and data files")
NA_SERVES_NOTHING = NotApplicable("it serves nothing: no host or port")
NA_NO_CONFIG = NotApplicable("takes no config: it reads what it is given")
NA_NO_DATA = NotApplicable("reads no data file or model directory: logs and samples only")

STAGE = {"log format": NA_TRAINS, "study": NA_TRAINS, "sample file": NA_TRAINS, "plan": NA_TRAINS,
         "host or port": NA_SERVES_NOTHING}

CELLS: dict[str, dict[str, Bad | NotApplicable]] = {
    "pipeline": {
        **STAGE,
        "config": Bad(lambda i: ["pipeline", "--preset", "smoke", "ppo.kl_coef=much", "--out", i.out()], says="kl_coef"),
        "data file": Bad(lambda i: ["pipeline", "--preset", "smoke", f"data.preferences={i.bad_jsonl}", "--out",
                                    i.out()], says="bad.jsonl"),
        "model directory": Bad(lambda i: ["pipeline", "--preset", "smoke", f"data.policy={i.not_a_model}", "--out",
                                          i.out()], says="not-a-model"),
        "output path": Bad(lambda i: ["pipeline", "--preset", "smoke", "--out", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["pipeline", "--preset", "smoke", "rollout.engine=vllm", "--out", i.out()],
                             blocked=("vllm",), says="vLLM"),
    },
    "pretrain": {
        **STAGE,
        "config": Bad(lambda i: ["pretrain", "--preset", "smoke", "pretrain.lr=-1", "--out", i.out()], says="lr"),
        "data file": Bad(lambda i: ["pretrain", "--preset", "smoke", "--sft", i.bad_jsonl, "--out", i.out()],
                         says="bad.jsonl"),
        "model directory": Bad(lambda i: ["pretrain", "--preset", "smoke", "--model", i.not_a_model, "--out",
                                          i.out()], says="not-a-model"),
        "output path": Bad(lambda i: ["pretrain", "--preset", "smoke", "--out", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["pretrain", "--preset", "smoke", "--out", i.out()],
                             blocked=("transformers.utils",), says="rlhflab[train]"),
    },
    "reward": {
        **STAGE,
        "config": Bad(lambda i: ["reward", "--preset", "smoke", "reward.epochs=none", "--out", i.out()],
                      says="epochs"),
        "data file": Bad(lambda i: ["reward", "--preset", "smoke", "--preferences", i.bad_jsonl, "--model",
                                    str(i.run / "stage1_lm"), "--out", i.out()], says="bad.jsonl"),
        "model directory": Bad(lambda i: ["reward", "--preset", "smoke", "--model", i.not_a_model, "--preferences",
                                          i.bad_jsonl, "--out", i.out()], says="not-a-model"),
        "output path": Bad(lambda i: ["reward", "--preset", "smoke", "--out", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["reward", "--preset", "smoke", "--out", i.out()],
                             blocked=("transformers.utils",), says="rlhflab[train]"),
    },
    "ppo": {
        **STAGE,
        "config": Bad(lambda i: ["ppo", "--preset", "smoke", "ppo.clip_range=wide", "--out", i.out()],
                      says="clip_range"),
        "data file": Bad(lambda i: ["ppo", "--preset", "smoke", "--prompts", i.bad_jsonl, "--policy",
                                    str(i.run / "stage1_lm"), "--reward-model", str(i.run / "stage2_rm"), "--out",
                                    i.out()], says="bad.jsonl"),
        "model directory": Bad(lambda i: ["ppo", "--preset", "smoke", "--policy", i.not_a_model, "--reward-model",
                                          str(i.run / "stage2_rm"), "--out", i.out()], says="not-a-model"),
        "output path": Bad(lambda i: ["ppo", "--preset", "smoke", "--policy", str(i.run / "stage1_lm"),
                                      "--reward-model", str(i.run / "stage2_rm"), "--out", i.under_a_file],
                           says="a-file"),
        "missing extra": Bad(lambda i: ["ppo", "--preset", "smoke", "--policy", str(i.run / "stage1_lm"),
                                        "--reward-model", str(i.run / "stage2_rm"), "rollout.engine=vllm", "--out",
                                        i.out()], blocked=("vllm",), says="vLLM"),
    },
    "doctor": {
        "config": NA_NO_CONFIG, "data file": NA_NO_DATA, "model directory": NA_NO_DATA,
        "host or port": NA_SERVES_NOTHING,
        "log format": Bad(lambda i: ["doctor", i.garbage_log], says="train.log"),
        "study": Bad(lambda i: ["doctor", str(i.run), "--truth", i.not_a_study], says="not-a-study"),
        "sample file": Bad(lambda i: ["doctor", str(i.run), "--samples", i.bad_samples], says="samples.jsonl"),
        "plan": Bad(lambda i: ["doctor", str(i.run), "--plan"], says="rlhflab ablate"),
        "output path": Bad(lambda i: ["doctor", str(i.run), "--html", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["doctor", str(i.run), "--truth", i.not_a_study], blocked=("starlette",),
                             says="rlhflab[studies]"),
    },
    "report": {
        "config": NotApplicable("rewrites a run's report from its logs; takes no config"),
        "data file": NA_NO_DATA, "model directory": NA_NO_DATA, "study": NotApplicable("reads no study"),
        "sample file": NotApplicable("reads the run's own samples (a bad run directory is its log-format cell)"),
        "plan": NotApplicable("it plans nothing"), "host or port": NA_SERVES_NOTHING,
        "output path": NotApplicable("writes only RUN/report.html and RUN/diagnosis.json, inside the run it reads"),
        "missing extra": NotApplicable("needs only the light install, which every install has"),
        "log format": Bad(lambda i: ["report", i.not_a_study], says="not-a-study"),
    },
    "verify": {
        "config": Bad(lambda i: ["verify", str(i.run), "--fix", "ppo.kl_coef=much", "--out", i.out()],
                      says="kl_coef"),
        "data file": NotApplicable("reruns the run's own inputs; a bad data file is the pipeline's cell"),
        "model directory": NotApplicable("reruns the run's own models; a bad model directory is the pipeline's cell"),
        "log format": Bad(lambda i: ["verify", i.not_a_study, "--fix", "ppo.kl_coef=0.2", "--out", i.out()],
                          says="not-a-study"),
        "study": Bad(lambda i: ["verify", str(i.run), "--fix", "ppo.kl_coef=0.2", "--judge", "world:" + str(i.run),
                                "--out", i.out()], says="--pair"),
        "sample file": NotApplicable("reads no sample file"), "plan": NotApplicable("takes no plan"),
        "host or port": NotApplicable("prints the rater links of its study; rlhflab pair serves it"),
        "output path": Bad(lambda i: ["verify", str(i.run), "--fix", "ppo.kl_coef=0.2", "--out", i.under_a_file],
                           says="a-file"),
        "missing extra": Bad(lambda i: ["verify", str(i.run), "--fix", "ppo.kl_coef=0.2", "--pair", "--out",
                                        i.out()], blocked=("starlette",), says="rlhflab[studies]"),
    },
    "ablate": {
        "config": Bad(lambda i: ["ablate", str(i.run), "--fix", "ppo.kl_coef=much"], says="kl_coef"),
        "data file": NotApplicable("reruns the run's own inputs; a bad data file is the pipeline's cell"),
        "model directory": NotApplicable("reruns the run's own models; a bad model directory is the pipeline's cell"),
        "log format": Bad(lambda i: ["ablate", i.not_a_study], says="not-a-study"),
        "study": Bad(lambda i: ["ablate", str(i.run), "--judge", "nonsense"], says="--judge"),
        "sample file": NotApplicable("reads no sample file"), "plan": NotApplicable("plans and runs its own arms"),
        "host or port": NA_SERVES_NOTHING,
        "output path": NotApplicable("writes only RUN/ablate/, inside the run it reads"),
        "missing extra": Bad(lambda i: ["ablate", str(i.run), "--judge", "world:" + str(i.run)],
                             blocked=("starlette",), says="rlhflab[studies]"),
    },
    "checkup": {
        "config": Bad(lambda i: ["checkup", str(i.run), "ppo.kl_coef=much"], says="kl_coef"),
        "data file": Bad(lambda i: ["checkup", "--policy", str(i.run / "stage1_lm"), "--reward-model",
                                    str(i.run / "stage2_rm"), "--prompts", i.bad_jsonl, "--out", i.out()],
                         says="bad.jsonl"),
        "model directory": Bad(lambda i: ["checkup", "--policy", i.not_a_model, "--reward-model",
                                          str(i.run / "stage2_rm"), "--prompts", i.bad_jsonl, "--out", i.out()],
                               says="not-a-model"),
        "log format": Bad(lambda i: ["checkup", i.not_a_study], says="not-a-study"),
        "study": NotApplicable("reads no study"), "sample file": NotApplicable("reads no sample file"),
        "plan": NotApplicable("takes no plan"), "host or port": NA_SERVES_NOTHING,
        "output path": Bad(lambda i: ["checkup", "--policy", str(i.run / "stage1_lm"), "--reward-model",
                                      str(i.run / "stage2_rm"), "--prompts", i.file("prompts.jsonl",
                                                                                     '{"prompt": "a"}\n' * 4),
                                      "--out", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["checkup", str(i.run)], blocked=("transformers.utils",),
                             says="rlhflab[train]"),
    },
    "compare": {
        "config": NA_NO_CONFIG, "data file": NA_NO_DATA, "model directory": NA_NO_DATA,
        "plan": NotApplicable("takes no plan"), "host or port": NA_SERVES_NOTHING,
        "sample file": NotApplicable("reads the samples beside each log as the doctor does (the doctor's cell)"),
        "log format": Bad(lambda i: ["compare", str(i.run), "--", i.garbage_log], says="train.log"),
        "study": Bad(lambda i: ["compare", str(i.run), "--", str(i.run), "--truth", i.not_a_study],
                     says="not-a-study"),
        "output path": Bad(lambda i: ["compare", str(i.run), "--", str(i.run), "--html", i.under_a_file],
                           says="a-file"),
        "missing extra": Bad(lambda i: ["compare", str(i.run), "--", str(i.run), "--truth", i.not_a_study],
                             blocked=("starlette",), says="rlhflab[studies]"),
    },
    "rate": {
        "config": NA_NO_CONFIG, "data file": NotApplicable("reads sample files (its sample-file cell)"),
        "model directory": NotApplicable("rates sample files; judges' model directories are the judges' own check"),
        "log format": NotApplicable("reads sample files, not logs"), "plan": NotApplicable("takes no plan"),
        "study": Bad(lambda i: ["rate", "--study", i.not_a_study, "--results"], says="not-a-study"),
        "sample file": Bad(lambda i: ["rate", i.bad_samples, "--study", i.out("study"), "--no-serve"],
                           says="samples.jsonl"),
        "host or port": Bad(lambda i: ["rate", str(i.run / "samples" / "ppo.jsonl"), "--study", i.out("study"),
                                       "--port", "99999"], says="99999"),
        "output path": Bad(lambda i: ["rate", str(i.run / "samples" / "ppo.jsonl"), "--study", i.out("study"),
                                      "--export", "label-studio", "--out", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["rate", str(i.run), "--no-serve"], blocked=("starlette",),
                             says="rlhflab[studies]"),
    },
    "sample": {
        "config": Bad(lambda i: ["sample", i.run_with_bad_config()], says="config.toml"),
        "data file": Bad(lambda i: ["sample", str(i.run / "stage1_lm"), "--prompts", i.bad_jsonl, "--out",
                                    i.out("s.jsonl")], says="bad.jsonl"),
        "model directory": Bad(lambda i: ["sample", i.not_a_model, "--prompts", i.bad_jsonl, "--out",
                                          i.out("s.jsonl")], says="not-a-model"),
        "log format": NotApplicable("reads no log"), "study": NotApplicable("builds no study"),
        "sample file": NotApplicable("writes sample files; reads none"), "plan": NotApplicable("takes no plan"),
        "host or port": NA_SERVES_NOTHING,
        "output path": Bad(lambda i: ["sample", str(i.run / "stage1_lm"), "--prompts",
                                      i.file("prompts.jsonl", '{"prompt": "a"}\n'), "--out", i.under_a_file],
                           says="a-file"),
        "missing extra": Bad(lambda i: ["sample", str(i.run)], blocked=("transformers.utils",), says="rlhflab[train]"),
    },
    "pair": {
        "config": NA_NO_CONFIG, "log format": NotApplicable("reads sample files, not logs"),
        "plan": NotApplicable("takes no plan"),
        "data file": Bad(lambda i: ["pair", str(i.run / "stage1_lm"), str(i.run), "--prompts", i.bad_jsonl,
                                    "--study", i.out("study"), "--no-serve"], says="bad.jsonl"),
        "model directory": Bad(lambda i: ["pair", i.not_a_model + "/", str(i.run / "samples" / "ppo.jsonl"),
                                          "--study", i.out("study"), "--no-serve"], says="not-a-model"),
        "study": Bad(lambda i: ["pair", "--study", i.not_a_study, "--results"], says="not-a-study"),
        "sample file": Bad(lambda i: ["pair", i.bad_samples, str(i.run / "samples" / "ppo.jsonl"), "--study",
                                      i.out("study"), "--no-serve"], says="samples.jsonl"),
        "host or port": Bad(lambda i: ["pair", *i.two_sample_files(), "--study", i.out("study"), "--port", "99999"],
                            says="99999"),
        "output path": Bad(lambda i: ["pair", i.pair_study(), "--export", i.under_a_file], says="a-file"),
        "missing extra": Bad(lambda i: ["pair", *i.two_sample_files(), "--study", i.out("study"), "--no-serve"],
                             blocked=("starlette",), says="rlhflab[studies]"),
    },
    "faults list": {name: NotApplicable("takes no input") for name in ERROR_CLASSES},
    "faults show": {**{name: NotApplicable("takes a fault's name only") for name in ERROR_CLASSES},
                    "config": Bad(lambda i: ["faults", "show", "no_such_fault"], says="no_such_fault")},
    "faults bench": {
        **{name: NotApplicable("runs the zoo's own runs from its presets") for name in ERROR_CLASSES},
        "config": Bad(lambda i: ["faults", "bench", "--fault", "no_such_fault", "--out", i.out(), "--doc",
                                 i.out("faults.md")], says="no_such_fault"),
        "output path": Bad(lambda i: ["faults", "bench", "--fault", "kl_sign_flipped", "--out", i.under_a_file,
                                      "--doc", i.out("faults.md")], says="a-file"),
    },
}


def command_names() -> list[str]:
    """Every command the app has, subcommands of a group as "group sub"."""
    import typer.main

    group = typer.main.get_command(app)
    names = []
    for name, command in group.commands.items():
        subcommands = getattr(command, "commands", None)
        names += [f"{name} {sub}" for sub in subcommands] if subcommands else [name]
    return sorted(names)


def test_every_command_has_a_cell_for_every_error_class_and_every_cell_says_why():
    assert sorted(CELLS) == command_names(), "a command without cells (or cells of no command)"
    for command, cells in CELLS.items():
        assert sorted(cells) == sorted(ERROR_CLASSES), f"{command}: cells for {sorted(cells)}"
        for error_class, cell in cells.items():
            assert isinstance(cell, (Bad, NotApplicable)), (command, error_class)
            if isinstance(cell, NotApplicable):
                assert len(cell.reason.split()) >= 3, f"{command} × {error_class}: not applicable, without a reason"


def _tree(*roots: Path) -> set[str]:
    return {str(p) for root in roots for p in root.rglob("*")}


CASES = [(command, error_class) for command, cells in CELLS.items() for error_class, cell in cells.items()
         if isinstance(cell, Bad)]


@pytest.mark.parametrize(("command", "error_class"), CASES, ids=[f"{c}-{e}".replace(" ", "_") for c, e in CASES])
def test_a_bad_input_ends_the_command_with_one_line_and_exit_2_having_written_nothing(
        command, error_class, smoke_run, tmp_path, monkeypatch):
    cell = CELLS[command][error_class]
    inputs = Inputs(tmp_path, smoke_run.root)
    args = [AFTER_MARK if a == "--" else a for a in cell.args(inputs)]
    before = _tree(tmp_path, smoke_run.root)
    for module in cell.blocked:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails as if it were not installed
    monkeypatch.setenv("COLUMNS", "400")  # one line stays one line
    result = CliRunner().invoke(app, args)
    output = result.output
    assert result.exit_code == 2, f"rlhflab {' '.join(args)}: exit {result.exit_code}\n{output}\n{result.exception!r}"
    assert "Traceback" not in output and isinstance(result.exception, SystemExit), output
    lines = [line for line in output.splitlines() if line.strip()]
    said = [line for line in lines if "error" in line.split(":")[0]]
    assert len(said) == 1, f"expected one error line:\n{output}"
    assert cell.says in said[0], f"expected {cell.says!r} in {said[0]!r}"
    assert _tree(tmp_path, smoke_run.root) - before <= _tree(tmp_path / "inputs"), (
        f"written: {sorted(_tree(tmp_path, smoke_run.root) - before - _tree(tmp_path / 'inputs'))}")


def test_a_bug_in_rlhflab_keeps_its_traceback_and_exit_code_1(monkeypatch, tmp_path):
    import rlhflab.doctor

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(rlhflab.doctor, "read_and_diagnose", broken)
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    result = CliRunner().invoke(app, ["doctor", str(log)])
    assert result.exit_code == 1 and isinstance(result.exception, KeyError)


def test_a_checkpoint_written_under_another_config_is_refused_before_the_resume_starts(tmp_path):
    from rlhflab.config import ConfigError, apply_overrides, load_config, training_keys
    from rlhflab.preflight import check_resume
    from rlhflab.runs import RunDir

    config = load_config("smoke")
    run = RunDir(tmp_path / "run")
    (run.checkpoints / "ppo").mkdir(parents=True)
    state = run.checkpoints / "ppo" / "state.json"
    state.write_text(json.dumps({"next_step": 3, "config": training_keys(config)}))
    check_resume(config, run)  # the same config
    check_resume(apply_overrides(config, {"distributed.strategy": "ddp"}), run)  # elsewhere, the same run
    with pytest.raises(ConfigError, match=r"ppo.kl_coef = 0.2 there, 0.5 in config.toml"):
        check_resume(apply_overrides(config, {"ppo.kl_coef": 0.5}), run)
    state.write_text(json.dumps({"next_step": 3}))  # written before checkpoints recorded their config
    check_resume(apply_overrides(config, {"ppo.kl_coef": 0.5}), run)
