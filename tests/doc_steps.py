"""The documented workflows as steps: every `rlhflab` and `make` command of a fenced `sh` (or
`bash`) block in README.md and docs/*.md, in document order, with what the docs say of it.

A command's trailing comment may carry marks in square brackets:
- `[exit N]`: the exit code the docs state (default 0).
- `[needs ...]`: why the test cannot run it here, from a closed list (`SKIP_REASONS`).
- `[runs the tests]`: the test suite itself (`make test`), which a test cannot run.
- `[slow]`: minutes long even at smoke size (the faults bench, an ablation): run by
  `make test-docs` (which .ci/run runs), not by `make test`.
Text the comment quotes ("after preferred in 64% ...") is output the docs promise: its words
before the first number must appear in what the command prints.

A step the test expects to fail until an issue mends it is marked by an HTML comment just
before its block, invisible on the rendered page:
`<!-- workflow-test: expected to fail until #59: rlhflab compare runs/demo -->`, naming the
beginning of the block's command(s) it applies to. The issue that mends the step removes it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# The closed list of reasons a documented command is not run by the test.
SKIP_REASONS = {
    "needs a GPU": "a GPU",
    "needs torchrun": "torchrun with several processes",
    "needs .venv-vllm": "the vLLM venv",
    "needs .venv-trl": "the TRL venv",
    "needs your files": "the user's own files",
    "runs the tests": "the test suite itself",
}

SHELLS = ("sh", "bash")  # the fenced blocks whose commands are steps
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
EXPECTED_FAILURE = re.compile(r"<!--\s*workflow-test:\s*expected to fail until #(\d+):\s*(.+?)\s*-->")
MARK = re.compile(r"\[(exit \d+|needs [^\]]+|runs the tests|slow)\]")
QUOTED = re.compile(r'"([^"]+)"')


class DocStepError(ValueError):
    """A documented command carries a mark this module does not know."""


@dataclass(frozen=True)
class Step:
    document: str  # README.md, docs/studies.md
    line: int  # the command's first line in the document
    command: str  # as the reader would paste it (continuations joined), its comment removed
    comment: str
    exit_code: int = 0
    skip: str | None = None  # a value of SKIP_REASONS
    slow: bool = False  # run by `make test-docs` only
    expected_failure: int | None = None  # the issue the step waits for
    promised: tuple[str, ...] = field(default_factory=tuple)  # what its output must say

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def uses_make(self) -> bool:
        return shlex.split(self.command)[0] == "make"


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its trailing comment (a `#` after blank space, outside quotes)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip(), line[index + 1:].strip()
    return line.rstrip(), ""


def runs_rlhflab(command: str) -> bool:
    """Whether a shell line is one of the documented commands the test runs."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    program = words[0]
    return program in ("rlhflab", "make") or program.endswith("/rlhflab") or "rlhflab.cli" in words


def promised_words(quoted: str) -> str:
    """The part of a quoted output that does not depend on the run: up to its first number or ellipsis."""
    return re.split(r"[\d\[]|\.\.\.|…", quoted, maxsplit=1)[0].strip()


def document_steps(path: Path, root: Path) -> list[Step]:
    """Every documented command of `path`, in order."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix()
    steps: list[Step] = []
    pending: dict[str, int] = {}  # marks before the next block: the command's beginning -> issue
    for match in re.finditer(rf"{FENCE.pattern}|{EXPECTED_FAILURE.pattern}", text, re.S | re.M):
        if match.group(3):
            pending[match.group(4)] = int(match.group(3))
            continue
        if match.group(1) not in SHELLS:
            continue
        first_line = text.count("\n", 0, match.start()) + 2
        block = _block_steps(match.group(2), name, first_line, pending)
        for prefix in pending:
            if not any(s.command.startswith(prefix) for s in block):
                raise DocStepError(f"{name}:{first_line}: an expected-to-fail mark matches no command of the "
                                   f"block after it: {prefix!r}")
        steps.extend(block)
        pending = {}
    return steps


def _block_steps(block: str, document: str, first_line: int, expected: dict[str, int]) -> list[Step]:
    steps = []
    lines = block.split("\n")
    index = 0
    while index < len(lines):
        start, parts = index, []
        while lines[index].rstrip().endswith("\\") and index + 1 < len(lines):  # a continued line
            parts.append(lines[index].rstrip()[:-1].strip())
            index += 1
        parts.append(lines[index].strip())
        index += 1
        command, comment = split_comment(" ".join(p for p in parts if p))
        heredoc = HEREDOC.search(command)
        if heredoc:  # its body is input, not commands: skip to the terminator
            while index < len(lines) and lines[index].strip() != heredoc.group(1):
                index += 1
            index += 1
        if not runs_rlhflab(command):
            continue
        steps.append(_step(document, first_line + start, command, comment, expected))
    return steps


def _step(document: str, line: int, command: str, comment: str, expected: dict[str, int]) -> Step:
    exit_code, skip, slow = 0, None, False
    for mark in MARK.findall(comment):
        if mark == "slow":
            slow = True
        elif mark.startswith("exit "):
            exit_code = int(mark.split()[1])
        elif mark in SKIP_REASONS:
            skip = SKIP_REASONS[mark]
        else:
            raise DocStepError(f"{document}:{line}: [{mark}] is not a known mark; expected [exit N], [slow] or one of "
                               + ", ".join(f"[{m}]" for m in SKIP_REASONS))
    promised = tuple(w for w in (promised_words(q) for q in QUOTED.findall(comment)) if w)
    waits = next((issue for prefix, issue in expected.items() if command.startswith(prefix)), None)
    return Step(document, line, command, comment, exit_code, skip, slow, waits, promised)


def workflow_documents(root: Path) -> list[Path]:
    """README.md first (where a user starts), then docs/ in name order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]
