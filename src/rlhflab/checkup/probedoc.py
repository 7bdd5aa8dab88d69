"""The probe table of docs/doctor.md, generated from the checkup's registry
(`python -m rlhflab.checkup.probedoc docs/doctor.md`); a test fails when the doc is stale."""

from __future__ import annotations

import sys
from pathlib import Path

from rlhflab.checkup.probes import PROBES, Probe
from rlhflab.markdown import cell, sections_are_current, write_sections

COMMAND = "`python -m rlhflab.checkup.probedoc docs/doctor.md`"


def _row(probe: Probe) -> str:
    clears = f"{', '.join(probe.clears)} ({', '.join(probe.clears_in)})" if probe.clears else "-"
    return (f"| `{probe.name}` | {probe.specificity} | {', '.join(probe.states)} | {clears} | "
            f"{', '.join(probe.reads) or '-'} | {cell(probe.sees)} | {cell(probe.blind)} |")


def probes_table() -> str:
    """One row per registered probe, in the order the checkup runs them."""
    lines = ["| probe | specificity | runs in | clears (from) | reads the output of | sees | cannot see |",
             "|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [_row(probe) for probe in PROBES])


SECTIONS = {"probe": probes_table}


def write_probes_doc(path: Path) -> None:
    write_sections(path, SECTIONS, COMMAND)


def doc_is_current(path: Path) -> bool:
    return sections_are_current(path, SECTIONS, COMMAND)


if __name__ == "__main__":
    write_probes_doc(Path(sys.argv[1]))
