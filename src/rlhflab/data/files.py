"""Users' data files for the three stages: prompts, SFT pairs and preference pairs.

Files are JSONL (``.jsonl``, one JSON object per line, blank lines ignored) or Parquet
(``.parquet``, one record per row). Every record is validated, and the first bad one
raises a `DataError` whose message reads ``"{path}:{line}: {problem}; expected {what}"``,
with ``line`` the 1-based line of a JSONL file or the 1-based row of a Parquet file.

With ``skip_invalid=True`` bad records are skipped and listed in `Loaded.skipped`
instead; a missing, empty or unreadable file, or one with no valid record at all,
is an error either way, because there would be nothing to train on.

Preference files take the common form (``prompt``, ``chosen``, ``rejected`` strings)
or the conversational form of TRL's preference datasets (``chosen`` / ``rejected``
as lists of ``{"role", "content"}`` messages, with ``prompt`` a list of messages or
absent, in which case the messages that chosen and rejected share are the prompt).
Conversational prompts are rendered with the tokenizer's chat template; the response
is the content of the final assistant message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from rlhflab.errors import InputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

T = TypeVar("T")
Row = bytes | Mapping[str, object]
"""A JSONL line still to be decoded, or a Parquet row already decoded."""

EXTENSIONS = (".jsonl", ".parquet")
"""File types accepted, chosen by the file name's extension."""

MAX_LISTED_LINES = 10
"""Skipped line numbers `Loaded.summary` lists before it ends with "..."."""


class DataError(InputError):
    """A data file, or a record in it, that cannot be used as given."""

    label = "input error"


@dataclass(frozen=True)
class Skipped:
    """A record left out by ``skip_invalid=True``."""

    line: int  # 1-based line (JSONL) or row (Parquet)
    reason: str  # "{problem}; expected {what}", as the DataError would have said


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """The valid records of one file, in file order, and the ones skipped."""

    path: Path
    records: tuple[T, ...]
    skipped: tuple[Skipped, ...]  # empty unless skip_invalid=True

    def summary(self) -> str:
        """One line for logs, e.g. ``data/prefs.jsonl: 120 records, 3 skipped (lines 4, 9, 17)``."""
        head = f"{self.path}: {_plural(len(self.records), 'record')}"
        if not self.skipped:
            return head
        lines = ", ".join(str(s.line) for s in self.skipped[:MAX_LISTED_LINES])
        more = ", ..." if len(self.skipped) > MAX_LISTED_LINES else ""
        word = "line" if len(self.skipped) == 1 else "lines"
        return f"{head}, {len(self.skipped)} skipped ({word} {lines}{more})"


@dataclass(frozen=True)
class PromptRecord:
    """A rollout prompt. Texts are kept as written; `line` is the 1-based line or row."""

    prompt: str
    line: int


@dataclass(frozen=True)
class SFTRecord:
    """A prompt and the completion to imitate."""

    prompt: str
    completion: str
    line: int


@dataclass(frozen=True)
class PreferenceRecord:
    """A prompt and two different responses, the first preferred."""

    prompt: str  # for conversational records, the chat template's rendering of the context
    chosen: str
    rejected: str
    line: int


class _Invalid(Exception):
    """A bad record: `problem` and `expected` become the `DataError` message.

    `fatal` marks problems that ``skip_invalid`` must not hide because every record
    would share them (a missing chat template is the caller's, not the record's).
    """

    def __init__(self, problem: str, expected: str, fatal: bool = False):
        super().__init__(f"{problem}; expected {expected}")
        self.fatal = fatal


def load_prompts(
    path: str | os.PathLike[str], *, skip_invalid: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None, max_tokens: int | None = None,
) -> Loaded[PromptRecord]:
    """Prompts for rollouts: field ``prompt``, at most `max_tokens` tokens when given. A
    prompt given as messages (``[{"role": ..., "content": ...}]``) is rendered by the
    tokenizer's chat template, ending where the assistant's reply begins."""
    _check_limit_args(tokenizer, max_tokens)

    def build(obj: Mapping[str, object], line: int) -> PromptRecord:
        if isinstance(obj.get("prompt"), list):
            if tokenizer is None or not getattr(tokenizer, "chat_template", None):
                raise _Invalid("message prompts need a tokenizer with a chat template",
                               "a model whose tokenizer has a chat_template, or prompts as plain strings", fatal=True)
            prompt = _render(tokenizer, _messages(obj, "prompt"))
        else:
            prompt = _text(obj, "prompt")
        _check_length(tokenizer, max_tokens, "prompt", prompt)
        return PromptRecord(prompt, line)

    return _load(Path(path), build, skip_invalid)


def load_sft(
    path: str | os.PathLike[str], *, skip_invalid: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None, max_tokens: int | None = None,
) -> Loaded[SFTRecord]:
    """Supervised pairs: fields ``prompt`` and ``completion``, together at most `max_tokens`."""
    _check_limit_args(tokenizer, max_tokens)

    def build(obj: Mapping[str, object], line: int) -> SFTRecord:
        prompt, completion = _text(obj, "prompt"), _text(obj, "completion")
        _check_length(tokenizer, max_tokens, "prompt + completion", prompt, completion)
        return SFTRecord(prompt, completion, line)

    return _load(Path(path), build, skip_invalid)


def load_preferences(
    path: str | os.PathLike[str], *, skip_invalid: bool = False,
    tokenizer: PreTrainedTokenizerBase | None = None, max_tokens: int | None = None,
) -> Loaded[PreferenceRecord]:
    """Preference pairs in the common or the conversational form (see the module docstring).

    Conversational records need `tokenizer` with a chat template. With `max_tokens`,
    prompt + chosen and prompt + rejected must each fit in it.
    """
    _check_limit_args(tokenizer, max_tokens)

    def build(obj: Mapping[str, object], line: int) -> PreferenceRecord:
        if isinstance(obj.get("chosen"), list) or isinstance(obj.get("rejected"), list):
            prompt, chosen, rejected = _conversational(obj, tokenizer)
        else:
            either = "a non-empty string or a list of messages"
            prompt = _text(obj, "prompt")
            chosen, rejected = _text(obj, "chosen", either), _text(obj, "rejected", either)
        if chosen.strip() == rejected.strip():
            raise _Invalid("chosen and rejected are the same response", "two different responses")
        _check_length(tokenizer, max_tokens, "prompt + chosen", prompt, chosen)
        _check_length(tokenizer, max_tokens, "prompt + rejected", prompt, rejected)
        return PreferenceRecord(prompt, chosen, rejected, line)

    return _load(Path(path), build, skip_invalid)


def _load(path: Path, build: Callable[[Mapping[str, object], int], T], skip_invalid: bool) -> Loaded[T]:
    """Every row of `path` through `build`, raising or skipping on the bad ones."""
    records: list[T] = []
    skipped: list[Skipped] = []
    for line, row in _rows(path):
        try:
            records.append(build(_as_object(row), line))
        except _Invalid as err:
            if err.fatal or not skip_invalid:
                raise DataError(f"{path}:{line}: {err}") from None
            skipped.append(Skipped(line, str(err)))
    if not records and not skipped:
        raise DataError(f"{path}: file is empty; expected at least one record")
    if not records:
        first = skipped[0]
        raise DataError(
            f"{path}: no valid records, all {_plural(len(skipped), 'line')} skipped "
            f"(first, line {first.line}: {first.reason}); expected at least one valid record"
        )
    return Loaded(path, tuple(records), tuple(skipped))


def _rows(path: Path) -> Iterator[tuple[int, Row]]:
    """(1-based line or row, row) pairs, after checking the file exists and its type."""
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        accepted = ", ".join(EXTENSIONS)
        raise DataError(f"{path}: unsupported file type {suffix or '(none)'!r}; expected one of {accepted}")
    if not path.is_file():
        raise DataError(f"{path}: file not found; expected an existing {suffix} file")
    return _jsonl_rows(path) if suffix == ".jsonl" else _parquet_rows(path)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines as bytes, so a bad byte is reported on its own line, not the file's."""
    with path.open("rb") as f:
        for line, raw in enumerate(f, start=1):
            if line == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # UTF-8 BOM, as some editors write
            if raw.strip():
                yield line, raw


def _parquet_rows(path: Path) -> Iterator[tuple[int, Mapping[str, object]]]:
    """Rows as dicts, a batch at a time so large files are not held whole."""
    import pyarrow as pa  # only Parquet users pay for importing it
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as table:
            row = 0
            for batch in table.iter_batches():
                for obj in batch.to_pylist():
                    row += 1
                    yield row, obj
    except pa.ArrowException as err:
        raise DataError(f"{path}: not a readable Parquet file ({err}); expected a Parquet table") from None


def _as_object(row: Row) -> Mapping[str, object]:
    """A Parquet row as is; a JSONL line decoded as UTF-8 and parsed as one JSON object."""
    if not isinstance(row, bytes):
        return row
    try:
        text = row.decode("utf-8")
    except UnicodeDecodeError as err:
        problem = f"invalid UTF-8 byte 0x{row[err.start]:02x} at byte offset {err.start}"
        raise _Invalid(problem, "UTF-8 text") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise _Invalid(f"not valid JSON ({err.msg} at column {err.colno})", "one JSON object per line") from None
    if not isinstance(obj, dict):
        raise _Invalid(f"the line is {_kind(obj)}, not a JSON object", "one JSON object per line")
    return obj


def _text(obj: Mapping[str, object], name: str, expected: str = "a non-empty string") -> str:
    """Field `name` as a string with something besides whitespace in it."""
    if name not in obj:
        raise _Invalid(f"missing field {name!r}", expected)
    value = obj[name]
    if not isinstance(value, str):
        raise _Invalid(f"field {name!r} is {_kind(value)}", expected)
    if not value.strip():
        raise _Invalid(f"field {name!r} is empty", expected)
    return value


def _messages(obj: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    """Field `name` as a non-empty list of ``{"role": str, "content": str}`` messages."""
    expected = 'a non-empty list of {"role": ..., "content": ...} messages'
    if name not in obj:
        raise _Invalid(f"missing field {name!r}", expected)
    value = obj[name]
    if not isinstance(value, list) or not value:
        raise _Invalid(f"field {name!r} is {_kind(value) if value != [] else 'empty'}", expected)
    for i, message in enumerate(value, start=1):
        if not isinstance(message, dict):
            raise _Invalid(f"message {i} of {name!r} is {_kind(message)}", expected)
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                problem = f"message {i} of {name!r} has {key} {_kind(message.get(key))}"
                raise _Invalid(problem, f"{key} to be a string")
    return value


def _conversational(
    obj: Mapping[str, object], tokenizer: PreTrainedTokenizerBase | None
) -> tuple[str, str, str]:
    """(rendered prompt, chosen reply, rejected reply) of a conversational preference record."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise _Invalid(
            "conversational records need a tokenizer with a chat template",
            "a tokenizer whose chat_template is set, or prompt/chosen/rejected as plain strings",
            fatal=True,
        )
    chosen, rejected = _messages(obj, "chosen"), _messages(obj, "rejected")
    prompt = _messages(obj, "prompt") if obj.get("prompt") is not None else []
    for name, conversation in (("chosen", chosen), ("rejected", rejected)):
        last = conversation[-1]
        if last["role"] != "assistant":
            raise _Invalid(f"the last message of {name!r} has role {last['role']!r}", "an assistant reply last")
        if not last["content"].strip():
            raise _Invalid(f"the assistant reply in {name!r} is empty", "a non-empty reply")
    # With an explicit prompt or without, a pair may differ only in its final reply:
    # everything before it is the context both responses answer.
    if chosen[:-1] != rejected[:-1]:
        raise _Invalid("chosen and rejected differ before their last message", "the same messages up to the reply")
    context = [*prompt, *chosen[:-1]]
    if not context:
        raise _Invalid("no prompt messages", "a prompt, or messages before the final assistant reply")
    return _render(tokenizer, context), chosen[-1]["content"], rejected[-1]["content"]


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[Mapping[str, object]]) -> str:
    """`messages` through the chat template, ending where the assistant's reply begins."""
    from jinja2.exceptions import TemplateError  # chat templates need jinja2; nothing else here does

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError as err:
        problem = f"the chat template failed on this conversation ({err})"
        raise _Invalid(problem, "messages the template accepts") from None


def _check_limit_args(tokenizer: PreTrainedTokenizerBase | None, max_tokens: int | None) -> None:
    """Reject a token limit that could not be measured or never be met (a caller's bug)."""
    if max_tokens is not None and tokenizer is None:
        raise ValueError("max_tokens needs a tokenizer to count tokens with")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")


def _check_length(
    tokenizer: PreTrainedTokenizerBase | None, max_tokens: int | None, label: str, *texts: str
) -> None:
    """Raise if `texts` together take more than `max_tokens` tokens.

    Special tokens are not counted: the trainer adds its own (`<bos>`, `<eos>`) when
    it encodes prompts and responses, each encoded separately as here.
    """
    if tokenizer is None or max_tokens is None:
        return
    n = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)
    if n > max_tokens:
        raise _Invalid(f"{label} is {n} tokens, over the limit of {max_tokens}", f"at most {max_tokens} tokens")


def _kind(value: object) -> str:
    """What `value` is, in JSON's words: 'a number', 'null', 'a list', ..."""
    if value is None:
        return "null"
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}
    return kinds.get(type(value), "an object" if isinstance(value, dict) else f"a {type(value).__name__}")


def _plural(n: int, word: str) -> str:
    """`n word` or `n words`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
