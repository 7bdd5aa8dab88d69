"""Sample files through the registry of where each trainer writes them: every trainer's
`SampleFormat` is declared in its format module (rlhflab's run directory, veRL's dump
directories, TRL's completions), beside the callback's own file and any table."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rlhflab.doctor.formats import rlhflab, trl, verl
from rlhflab.doctor.samples import TABLE, SampleFileError, SampleFormat, SampleSet, read_table

# What `DoctorCallback(samples_of=...)` writes under a trainer's OUTPUT_DIR.
CALLBACK_SAMPLES = Path("rlhflab") / "samples.jsonl"


def _callback_samples(log: Path) -> list[SampleSet]:
    """The callback's file in the output directory: the log's directory or up to two above."""
    base = log if log.is_dir() else log.parent
    for directory in (base, base.parent, base.parent.parent):
        if (directory / CALLBACK_SAMPLES).is_file():
            return [read_table(directory / CALLBACK_SAMPLES)]
    return []


CALLBACK = SampleFormat("callback", "OUTPUT_DIR/rlhflab/samples.jsonl, written by DoctorCallback(samples_of=...)",
                        lambda p: p.name == CALLBACK_SAMPLES.name and p.parent.name == CALLBACK_SAMPLES.parent.name,
                        read_table, _callback_samples)
# Recognised in this order: the specific layouts first, any table last.
SAMPLE_FORMATS: tuple[SampleFormat, ...] = (rlhflab.SAMPLES, verl.SAMPLES, trl.SAMPLES, CALLBACK, TABLE)


def read_samples(path: Path, mapping: Mapping[str, str] | None = None) -> SampleSet:
    """The samples in `path`, its format recognised by its layout and content."""
    path = Path(path)
    if not path.exists():
        raise SampleFileError(f"{path}: no such file or directory")
    for fmt in SAMPLE_FORMATS:
        if fmt.recognise(path):
            return fmt.read(path, mapping)
    raise SampleFileError(f"{path}: not a sample file; known: "
                          + "; ".join(f"{f.name} ({f.description})" for f in SAMPLE_FORMATS))


def find_samples(log: Path) -> list[SampleSet]:
    """The sample files the trainers' layouts put beside `log`: a run directory's own, else
    every layout's that is there. Nothing found: []."""
    log = Path(log)
    own = rlhflab.SAMPLES.find(log)
    return own or [found for fmt in SAMPLE_FORMATS[1:] for found in fmt.find(log)]
