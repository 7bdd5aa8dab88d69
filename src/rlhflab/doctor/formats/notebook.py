"""The progress table a transformers trainer renders in a Jupyter or Colab notebook
(`transformers.utils.notebook.NotebookProgressCallback`): an HTML table under the progress
bar, in a saved `.ipynb` (its `text/html` outputs) or in HTML copied out of one, or the same
table as a markdown pipe table (copied or converted into a `.md` file). A file that ends
inside a table (a copy cut short, a notebook saved mid-write) is read to its last whole row,
and said.

`text_to_html_table` writes `<table border="1" class="dataframe">`, a header row of `<th>`
and one `<tr>` of `<td>` per logged row; floats as `{:.6f}`, and a cell a row has no value
for as "No Log" (`write_line`) or "No log" (an evaluation row's training loss). The first
column is `Step` (or `Epoch` when evaluating per epoch). Without evaluation a row holds
the training loss only, unless a library adds the trainer's metrics (Unsloth shows TRL's
names with `/` written ` / `); with evaluation the other columns are evaluation metrics
(`eval_x_y` shown as `X Y`, `eval_loss` as `Validation Loss`). Each `trainer.train()` call
renders a new table, so a resumed run is several: their rows are read in order, and a
step shown twice keeps its last values.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhflab.doctor.formats import trl
from rlhflab.doctor.formats.spec import LogFormat, LogFormatError, RawLog, UserMapping
from rlhflab.doctor.formats.text import open_text

_TABLE = re.compile(r"<table[^>]*class=\"dataframe\"[^>]*>(.*?)(</table>|\Z)", re.DOTALL | re.IGNORECASE)
_PIPE_ROW = re.compile(r"^\s*\|(.*)$")
_PIPE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.DOTALL | re.IGNORECASE)
_CELL = re.compile(r"<t([hd])[^>]*>(.*?)</t[hd]>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")
NO_VALUE = {"", "no log"}  # cells shown for a row without that metric (a NaN loss prints "nan": a value)
FIRST_COLUMNS = {"step": "step", "epoch": "epoch"}
# The columns NotebookProgressCallback names itself; the others are the logged names.
OWN_NAMES = {"training loss": "loss", "validation loss": "eval_loss"}


def _html_of(path: Path) -> str:
    """The HTML a notebook's outputs hold (every `text/html` output, in cell order), or the
    file's own text for HTML copied out of a notebook."""
    with open_text(path) as handle:
        text = handle.read()
    if path.suffix != ".ipynb":
        return text
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as err:
        raise LogFormatError(f"{path}:{err.lineno}: invalid notebook JSON ({err.msg})") from None
    parts = []
    for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
        for output in cell.get("outputs", []) if isinstance(cell, dict) else []:
            data = output.get("data", {}) if isinstance(output, dict) else {}
            value = data.get("text/html") if isinstance(data, dict) else None
            parts.append("".join(value) if isinstance(value, list) else value if isinstance(value, str) else "")
    return "\n".join(parts)


def _cells(row: str) -> list[tuple[str, str]]:
    return [(kind, html.unescape(_TAG.sub("", text)).strip()) for kind, text in _CELL.findall(row)]


def _number(text: str) -> float | None:
    if text.lower() in NO_VALUE:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _column_name(header: str, evaluating: bool) -> str:
    """A header as the logged name: the callback's own names mapped back, Unsloth's ` / `
    joined; with evaluation, a column the callback built from `eval_x_y` is `eval_x_y`."""
    lowered = header.lower()
    if lowered in OWN_NAMES:
        return OWN_NAMES[lowered]
    name = header.replace(" / ", "/")
    if evaluating:
        return "eval_" + "_".join(name.lower().split())
    return name


@dataclass(frozen=True)
class ProgressTable:
    header: list[str]
    rows: list[list[str]]
    cut: bool = False  # the file ends inside the table: its rows up to the last whole one


def _is_progress_header(header: list[str]) -> bool:
    return bool(header) and header[0].lower() in FIRST_COLUMNS and "training loss" in (h.lower() for h in header)


def _html_tables(text: str) -> list[ProgressTable]:
    """The HTML tables; one the file ends inside (no `</table>`) keeps its whole `<tr>` rows."""
    tables = []
    for body, closed in _TABLE.findall(text):
        rows = [_cells(r) for r in _ROW.findall(body)]
        if not rows or not rows[0] or any(kind != "h" for kind, _ in rows[0]):
            continue
        header = [text for _, text in rows[0]]
        if _is_progress_header(header):
            tables.append(ProgressTable(header, [[text for _, text in cells] for cells in rows[1:] if cells],
                                        cut=not closed))
    return tables


def _pipe_cells(line: str) -> list[str] | None:
    """The cells of a markdown table row `| a | b |`; None for a row cut before its closing `|`."""
    body = line.strip()
    if not body.endswith("|") or len(body) < 2:
        return None
    return [html.unescape(cell.strip()) for cell in body[1:-1].split("|")]


def _markdown_tables(text: str) -> list[ProgressTable]:
    """Progress tables as markdown pipe tables (the rendered table copied or converted into a
    markdown file): a header row, a rule of dashes, then rows; a last row cut before its
    end (fewer cells, no closing `|`) at the end of the file is left out and said."""
    lines = text.splitlines()
    tables, i = [], 0
    while i + 1 < len(lines):
        header = _pipe_cells(lines[i]) if _PIPE_ROW.match(lines[i]) else None
        if header is None or not _PIPE_RULE.match(lines[i + 1]) or not _is_progress_header(header):
            i += 1
            continue
        rows, cut, j = [], False, i + 2
        while j < len(lines) and _PIPE_ROW.match(lines[j]):
            cells = _pipe_cells(lines[j])
            if cells is None or len(cells) != len(header):
                cut = j == len(lines) - 1  # a row broken off at the file's end; elsewhere a table's end
                break
            rows.append(cells)
            j += 1
        tables.append(ProgressTable(header, rows, cut))
        i = j
    return tables


def training_tables(text: str) -> list[ProgressTable]:
    """Each progress table in `text`, HTML or markdown: tables whose first column is Step or
    Epoch and that show a training loss."""
    return _html_tables(text) + _markdown_tables(text)


def _read(path: Path, mapping: UserMapping) -> RawLog:
    tables = training_tables(_html_of(path))
    if not tables:
        raise LogFormatError(f"{path}: no trainer progress table (a <table class=\"dataframe\"> or a markdown table "
                             "whose first column is Step or Epoch, with a Training Loss column)")
    records: list[dict[str, Any]] = []
    evaluation: list[dict[str, Any]] = []
    for table in tables:
        header, rows = table.header, table.rows
        evaluating = any(h.lower() == "validation loss" for h in header)
        step_key = FIRST_COLUMNS[header[0].lower()]
        names = [step_key] + [_column_name(h, evaluating) for h in header[1:]]
        for number, cells in enumerate(rows, start=1):
            step = _number(cells[0]) if cells else None
            if step is None or not math.isfinite(step) or step != int(step):
                raise LogFormatError(f"{path}: table row {number}: {header[0]} {cells[0] if cells else ''!r} is not a "
                                     "whole number")
            values = {name: value for name, text in zip(names[1:], cells[1:]) if (value := _number(text)) is not None}
            training = {k: v for k, v in values.items() if not k.startswith(trl.EVAL_PREFIXES)}
            held_out = {k.removeprefix("eval_"): v for k, v in values.items() if k.startswith(trl.EVAL_PREFIXES)}
            if training:
                records.append({"step": int(step), **training})
            if held_out:
                evaluation.append({"step": int(step), **held_out})
    notes = [f"read from {len(tables)} progress tables (a run trained again or resumed): a step shown twice keeps "
             "its last values"] if len(tables) > 1 else []
    notes += [f"the file ends inside a progress table: read to its last whole row (step {table.rows[-1][0]})"
              if table.rows else "the file ends inside a progress table before its first whole row"
              for table in tables if table.cut]
    if records and all(set(r) <= {"step", "epoch", "loss"} for r in records):
        notes.append("the table shows the training loss only (transformers' notebook callback writes no other "
                     "training metric): the trainer's trainer_state.json or logger holds them")
    return RawLog(records, notes=notes, eval_records=evaluation, step_key="step")


def _recognise(path: Path) -> bool:
    if not path.is_file() or path.suffix not in (".ipynb", ".html", ".htm", ".md", ".txt", ""):
        return False
    with path.open("rb") as handle:
        head = handle.read(8 << 20).decode("utf-8", errors="replace")
    if "dataframe" not in head and "|" not in head:
        return False
    text = head.replace('\\"', '"').replace("\\n", "\n") if path.suffix == ".ipynb" else head
    return bool(training_tables(text))


FORMAT = LogFormat(
    name="notebook-table",
    description="the progress table a transformers trainer renders in a Jupyter/Colab notebook (.ipynb, its HTML "
                "copied out, or the table in markdown), read to its last whole row when cut",
    reads=("the progress table a transformers trainer renders in Jupyter or Colab (`NotebookProgressCallback`): a saved"
           " `.ipynb` (its `text/html` outputs), the HTML copied out of one, or the table as a markdown pipe table; a "
           "file that ends inside a table (cut mid-cell) is read to its last whole row (said); \"No Log\" cells are no "
           "value; with a Validation Loss column the other columns are evaluations, kept apart; several tables (a run "
           "trained again or resumed) are read in order, a step shown twice keeping its last values. The stock callback"
           " shows the training loss only (said); Unsloth's shows TRL's names"),
    recognise=_recognise,
    read=_read,
    dialects=trl.DIALECTS,
)
