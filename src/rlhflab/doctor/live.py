"""The doctor on a run that is still going. A `LiveLog` holds the rows a trainer has logged
so far and the samples it has written, and reads them into a table as the run's files
will be read afterwards; a `Watch` diagnoses it as it grows, tells each finding once
(again only if it grows more severe), and decides whether the run stops.

One of each serves rlhflab's PPO loop (`ppo.stop_on`), the transformers callback
(`DoctorCallback(stop_on=...)`) and `rlhflab doctor --follow`, so a stop rule means the
same thing everywhere and is parsed in one place (`stop_rules`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from rlhflab.doctor.diagnose import SEVERITY_ORDER, diagnose
from rlhflab.doctor.findings import Diagnosis, Finding
from rlhflab.doctor.formats import read_history
from rlhflab.doctor.formats import rlhflab as rlhflab_format
from rlhflab.doctor.formats.build import build_table
from rlhflab.doctor.formats.sample_files import find_samples
from rlhflab.doctor.formats.spec import RawLog, UserMapping
from rlhflab.doctor.rules import rule_names
from rlhflab.doctor.sample_measures import attach_samples
from rlhflab.doctor.samples import SampleSet, samples_of_rows
from rlhflab.doctor.table import MetricTable

# A stop condition over the live diagnosis beside the stop rules: the finding to stop on, or
# None to go on (an ablation's arm stops where its finding is already there).
StopRule = Callable[[Diagnosis], Optional[Finding]]


def stop_rules(names: Iterable[str] | str) -> tuple[str, ...]:
    """The rules to stop on, from a comma-separated string or names (`ppo.stop_on`,
    `--stop-on`, `DoctorCallback(stop_on=...)`); an unknown name is a ValueError naming
    the known ones."""
    return tuple(rule_names(names))


@dataclass
class LiveLog:
    """The metric rows and sample rows of a running trainer, and how they are read: `read`
    turns the rows into a table (the trainer's format, its settings), `sample_columns` names
    the sample rows' fields (doctor/samples.py), `find` returns sample files the trainer
    writes itself (TRL's completions), read again at each table."""

    read: Callable[[list[dict]], MetricTable]
    rows: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    sample_columns: dict[str, str] = field(default_factory=dict)
    sample_format: str = "live"
    find: Callable[[], list[SampleSet]] = list

    def append(self, row: dict, samples: Iterable[dict] = ()) -> None:
        self.rows.append(row)
        self.samples.extend(samples)

    def table(self) -> MetricTable:
        table = self.read(self.rows)
        sets = self.find()
        if self.samples:
            sets = [SampleSet(samples_of_rows(self.samples, self.sample_columns, "live"), "live", self.sample_format),
                    *sets]
        if sets:
            attach_samples(table, sets)
        return table

    @staticmethod
    def of_rlhflab(config: dict, reward_model_config: dict | None = None, rows: Iterable[dict] = (),
                   samples: Iterable[dict] = ()) -> "LiveLog":
        """rlhflab's PPO loop: its rows read as `metrics/ppo.jsonl` is, with the settings its
        `config.toml` (the config as a dict) and the reward model's config give."""
        settings = rlhflab_format.settings_from_config(config)
        limit = rlhflab_format.reward_train_max(reward_model_config or {})
        if limit is not None:
            settings["reward_train_max"] = limit
        return LiveLog(lambda records: build_table(RawLog(list(records), settings), rlhflab_format.FORMAT,
                                                   UserMapping(), "live"),
                       list(rows), list(samples), dict(rlhflab_format.SAMPLE_COLUMNS), rlhflab_format.DIALECT.name)

    @staticmethod
    def of_transformers(arguments: object, mapping: UserMapping, output_dir: Path) -> "LiveLog":
        """A transformers Trainer's `state.log_history`, read as its saved trainer_state.json
        is (with the settings its arguments hold); the samples the trainer or the callback
        wrote under `output_dir` found as they are beside a saved log."""
        return LiveLog(lambda records: read_history(list(records), arguments, mapping, source=str(output_dir)),
                       find=lambda: find_samples(output_dir))


@dataclass
class Watch:
    """Diagnoses a live log every `every` rows and tells the findings not told before (or
    now more severe). It stops the run on the first of them whose rule is in `stop_on`
    (medium or high: `Finding.stops`), else on what `stop_when` returns, and after
    `nonfinite_streak` rows in a row with a skipped (non-finite) update (0: never)."""

    stop_on: tuple[str, ...] = ()  # as `stop_rules` returns them
    every: int = 1
    stop_when: StopRule | None = None
    nonfinite_streak: int = 0
    tell: bool = True  # diagnose when due even with nothing to stop on (to tell the findings)
    told: dict[str, str] = field(default_factory=dict)  # rule -> the severity it was last told at
    diagnosis: Diagnosis | None = None
    stopped_by: Finding | None = None

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")

    def check(self, table: MetricTable) -> list[Finding]:
        """Diagnose `table`; the findings not told before (or now more severe), in the
        diagnosis's order. The first of them that stops on `stop_on` stops the run, else
        `stop_when`'s."""
        self.diagnosis = diagnose(table)
        # SEVERITY_ORDER ranks high first (0): more severe is a smaller number.
        new = [f for f in self.diagnosis.findings
               if f.rule not in self.told or SEVERITY_ORDER[f.severity] < SEVERITY_ORDER[self.told[f.rule]]]
        for finding in new:
            self.told[finding.rule] = finding.severity
            if self.stopped_by is None and finding.stops(frozenset(self.stop_on)):
                self.stopped_by = finding
        if self.stopped_by is None and self.stop_when is not None:
            self.stopped_by = self.stop_when(self.diagnosis)
        return new

    def due(self, live: LiveLog) -> bool:
        """Whether the log's last row is one the watch diagnoses at."""
        return bool(self.tell or self.stop_on or self.stop_when) and len(live.rows) % self.every == 0

    def observe(self, live: LiveLog) -> list[Finding]:
        """After a row is appended: the new findings when the row is due (or a streak of
        skipped updates ends the run); `stopped_by` says whether the run stops."""
        streak = live.rows[-self.nonfinite_streak:] if self.nonfinite_streak else []
        if len(streak) == self.nonfinite_streak > 0 and all(r.get("guard/skipped_updates", 0) for r in streak):
            new = self.check(live.table())
            self.stopped_by = next(f for f in self.diagnosis.findings if f.rule == "updates_skipped")
            return new
        return self.check(live.table()) if self.due(live) else []


def finding_line(finding: Finding) -> str:
    """One console line for a finding: its severity, rule, onset and title, and its first cause."""
    cause = finding.causes[0].component if finding.causes else "unknown"
    return (f"rlhflab doctor: [{finding.severity}] {finding.rule} at step {finding.onset_step}: "
            f"{finding.title} (likely cause: {cause})")
