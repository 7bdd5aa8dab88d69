"""`DoctorCallback`: the doctor inside any transformers `Trainer` (TRL's GRPO, RLOO, PPO,
DPO, ... included). Every `every` logging calls it reads the trainer's `log_history` so
far through the format registry (as its saved trainer_state.json would be read, with the
settings its arguments hold), runs the rules, and reports each new finding once: a line
in the console and `OUTPUT_DIR/rlhflab/diagnosis.json`; `report.html` beside it when
training ends. With `stop_on` (rule names, the meaning of `ppo.stop_on`) a finding of one
of those rules saves a checkpoint and stops the run.

    from rlhflab.integrations import DoctorCallback
    trainer = GRPOTrainer(..., callbacks=[DoctorCallback(stop_on=("kl_explosion",))])
    trainer.train()

Trainers whose own loop ignores `control.should_training_stop` (TRL 1.12's PPOTrainer)
get `DoctorStop` raised at their next logging call, after the checkpoint they saved.

The samples a trainer writes beside its output (GRPOTrainer's `completions/` with
`log_completions=True`) are read with the log. For a trainer that keeps its latest
completions only in memory (RLOOTrainer; GRPOTrainer without `log_completions`), give it
to the callback and they are written to `OUTPUT_DIR/rlhflab/samples.jsonl`:

    trainer = RLOOTrainer(...)
    trainer.add_callback(DoctorCallback(samples_of=trainer))
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from rich.markup import escape
from transformers import TrainerCallback

from rlhflab.doctor import (
    CALLBACK_SAMPLES,
    Finding,
    LiveLog,
    Watch,
    finding_line,
    parse_map_options,
    stop_rules,
    write_diagnosis,
    write_report,
)
from rlhflab.progress import console

OUTPUT_SUBDIR = CALLBACK_SAMPLES.parent.name  # "rlhflab": where the samples are looked for too


class DoctorStop(RuntimeError):
    """Raised to end a trainer that ignored the callback's request to stop."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(f"stopped by the doctor: {finding.title} (rule {finding.rule})")
        self.finding = finding


class DoctorCallback(TrainerCallback):
    """Args:
        every: logging calls between two diagnoses (the last one is always diagnosed at the end).
        stop_on: rule names whose finding stops the run, with a checkpoint.
        mapping: `their_name=metric` pairs or TOML mapping files for columns the registry does not know,
            as `--map`.
        output_dir: where `rlhflab/` goes; default: the trainer's `args.output_dir`.
        compare_to: an earlier run's log or output directory (any format the doctor reads): as
            this run passes the step where each of its findings began, that finding is told gone
            or still there; at the end, `rlhflab/compare.json` holds `rlhflab compare`'s verdict.
        samples_of: a TRL GRPOTrainer or RLOOTrainer whose latest generation batch (prompts,
            completions, each reward function's rewards, advantages: its `_logs`) is written to
            `rlhflab/samples.jsonl` at every logging step, once per batch.
    """

    def __init__(self, every: int = 10, stop_on: Iterable[str] | str = (), mapping: Iterable[str] = (),
                 output_dir: str | Path | None = None, compare_to: str | Path | None = None,
                 samples_of: object | None = None) -> None:
        self.sample_writer = SampleWriter(samples_of) if samples_of is not None else None
        self.compare_to = Path(compare_to) if compare_to is not None else None
        self.earlier = None  # (its table, its diagnosis), read at the first diagnosis
        self.told_earlier: dict[str, str] = {}  # earlier finding's rule -> what was told of it
        self.mapping = parse_map_options(list(mapping))
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.watch = Watch(stop_rules(stop_on), every)
        self.live: LiveLog | None = None  # made at the first logging call, from the trainer's arguments
        self.seconds: list[float] = []  # wall time of each diagnosis
        self.stopped_at: int | None = None  # the global step at which the stop was asked
        self.table = None

    def out_dir(self, args) -> Path:
        return (self.output_dir or Path(args.output_dir)) / OUTPUT_SUBDIR

    def follow_history(self, args, state) -> LiveLog:
        """The live log with the rows of `state.log_history` it does not hold yet (all of a
        resumed run's at the first call). A history shorter than the log is another training
        (a second `train()`, a hyperparameter-search trial): read afresh."""
        if self.live is None or len(state.log_history) < len(self.live.rows):
            self.live = LiveLog.of_transformers(args, self.mapping, self.output_dir or Path(args.output_dir))
        for row in state.log_history[len(self.live.rows):]:
            self.live.append(row)
        return self.live

    def diagnose(self, args, state) -> list[Finding]:
        """The findings new in the history so far. Every process diagnoses the same history
        (transformers keeps it on each), so all of them decide to stop at the same step;
        the main process alone writes and prints."""
        start = time.perf_counter()
        self.table = self.follow_history(args, state).table()
        new = self.watch.check(self.table)
        if state.is_world_process_zero:
            out = self.out_dir(args)
            out.mkdir(parents=True, exist_ok=True)
            write_diagnosis(self.watch.diagnosis, out / "diagnosis.json")
            for finding in new:
                console.print(escape(finding_line(finding)), highlight=False)
            for line in self._against_earlier(state.global_step):
                console.print(escape(line), highlight=False)
        self.seconds.append(time.perf_counter() - start)
        return new

    def _against_earlier(self, step: int) -> list[str]:
        """Each medium/high finding of the earlier run whose onset this run has now passed, told
        once: gone, or still there (this run has it too)."""
        if self.compare_to is None:
            return []
        if self.earlier is None:
            from rlhflab.doctor import diagnose, read_log

            table = read_log(self.compare_to, self.mapping)
            self.earlier = (table, diagnose(table))
        now = {f.rule for f in self.watch.diagnosis.findings if f.severity in ("high", "medium")}
        lines = []
        for finding in self.earlier[1].findings:
            if finding.severity not in ("high", "medium") or finding.rule in self.told_earlier:
                continue
            if step >= finding.onset_step:
                status = "still there" if finding.rule in now else "gone"
                self.told_earlier[finding.rule] = status
                lines.append(f"rlhflab doctor: the earlier run's {finding.rule} (from step {finding.onset_step}) is "
                             f"{status} at step {step}")
        return lines

    def on_train_begin(self, args, state, control, **kwargs):
        self.live = None  # a new training (or a trial) is read from its own history
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.sample_writer is not None and state.is_world_process_zero:
            self.sample_writer.write(self.out_dir(args) / "samples.jsonl", state.global_step)
        if self.stopped_at is not None and state.global_step > self.stopped_at:
            if state.is_world_process_zero:
                self._write_report(args)
            raise DoctorStop(self.watch.stopped_by)  # the trainer kept going after the checkpoint
        if not self.watch.due(self.follow_history(args, state)):
            return control
        self.diagnose(args, state)
        if self.watch.stopped_by is not None and self.stopped_at is None:
            finding = self.watch.stopped_by
            if state.is_world_process_zero:
                console.print(f"rlhflab doctor: stopping at step {state.global_step} on {finding.rule} "
                              f"(stop_on); a checkpoint is saved in {args.output_dir}")
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if state.log_history:
            self.diagnose(args, state)
            if state.is_world_process_zero:
                self._write_report(args)
                if self.earlier is not None:
                    self._write_comparison(args)
        return control

    def _write_comparison(self, args) -> None:
        """`rlhflab compare`'s comparison of the earlier run with this one, at the end."""
        import json

        from rlhflab.doctor import compare_tables

        result = compare_tables([self.earlier[0]], [self.table])
        (self.out_dir(args) / "compare.json").write_text(json.dumps(
            {"earlier": str(self.compare_to), **result.to_json(), "told": self.told_earlier}, indent=1, default=str))
        console.print(f"rlhflab doctor: against {self.compare_to}: {result.verdict} ({result.why})", highlight=False)

    def _write_report(self, args) -> None:
        if self.table is not None and self.watch.diagnosis is not None:
            write_report(self.out_dir(args), self.table, self.watch.diagnosis)


class SampleWriter:
    """Writes a TRL trainer's latest generation batch (its `_logs`: `prompt`, `completion`,
    `rewards` per reward function, `advantages`; GRPOTrainer and RLOOTrainer fill them
    whether or not `log_completions` is set) as JSONL rows `{step, prompt, completion,
    reward, <function>..., advantage}`. The reward is the functions' rewards weighted as the
    trainer weighs them (`reward_weights`). A batch is written once, at the first logging
    step that sees it (a batch generated for several steps is not repeated)."""

    def __init__(self, trainer: object) -> None:
        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, dict) or not {"prompt", "completion", "rewards"} <= set(logs):
            raise ValueError(f"{type(trainer).__name__} keeps no completions the callback can read (it reads "
                             "GRPOTrainer's and RLOOTrainer's `_logs`)")
        self.trainer = trainer
        self.last_batch: tuple | None = None

    def rows(self, step: int) -> list[dict]:
        logs = self.trainer._logs
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        weights = getattr(self.trainer, "reward_weights", None)
        weights = [float(w) for w in weights] if weights is not None else [1.0] * len(rewards)
        advantages = list(logs.get("advantages", []))
        rows = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            per_function = {name: float(values[i]) for name, values in rewards.items() if i < len(values)}
            total = sum(w * v for w, v in zip(weights, per_function.values()))
            rows.append({"step": step, "prompt": prompt, "completion": completion, "reward": total, **per_function}
                        | ({"advantage": float(advantages[i])} if i < len(advantages) else {}))
        return rows

    def write(self, path: Path, step: int) -> None:
        import json

        logs = self.trainer._logs
        batch = tuple(map(str, logs["completion"]))
        if not batch or batch == self.last_batch:
            return
        self.last_batch = batch
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            for row in self.rows(step):
                handle.write(json.dumps(row, default=str) + "\n")
