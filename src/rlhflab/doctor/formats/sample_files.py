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


def _callback_samples(output_dir: Path) -> list[SampleSet]:
    return [read_table(output_dir / CALLBACK_SAMPLES)] if (output_dir / CALLBACK_SAMPLES).is_file() else []


CALLBACK = SampleFormat("callback", "OUTPUT_DIR/rlhflab/samples.jsonl, written by DoctorCallback(samples_of=...)",
                        lambda p: p.name == CALLBACK_SAMPLES.name and p.parent.name == CALLBACK_SAMPLES.parent.name,
                        read_table, in_output_dir=_callback_samples)
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
    """The sample files the trainers' layouts put beside `log`: a run directory's own; else
    those written into the output directory (TRL's completions, the callback's file), the
    nearest first: the log's directory, or up to two above it (trainer_state.json sits in
    `checkpoint-N/`, TensorBoard events in `runs/DATE/`), stopping at the first that has
    any, so that a neighbouring run's are not read; else the directories a log's printed
    config names (veRL's dumps). Nothing found: []."""
    log = Path(log)
    own = rlhflab.SAMPLES.find(log)
    if own:
        return own
    base = log if log.is_dir() else log.parent
    for directory in (base, base.parent, base.parent.parent):
        found = [s for fmt in SAMPLE_FORMATS for s in fmt.in_output_dir(directory)]
        if found:
            return found
    return [s for fmt in SAMPLE_FORMATS for s in fmt.find(log)]
