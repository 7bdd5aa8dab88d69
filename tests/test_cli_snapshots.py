"""The command line's face, held byte for byte: every command's `--help`, and the `--json`
output of each command that has one on a smoke run. A restructuring of the command line must
leave both as they are; a deliberate change of the face rewrites them with
`RLHFLAB_SNAPSHOTS=write python -m pytest tests/test_cli_snapshots.py` and shows in the diff.

Each runs `rlhflab` in a process of its own at 100 columns, the run's directory written as RUN
(and a study's as STUDY), so the text is what a user sees, wherever the run lies."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).parent / "snapshots" / "cli"
WRITE = os.environ.get("RLHFLAB_SNAPSHOTS") == "write"
RLHFLAB = str(Path(sys.executable).parent / "rlhflab")  # the console script: its usage lines say `rlhflab`


def rlhflab(*args: str, cwd: Path | None = None, places: dict[str, Path] | None = None) -> tuple[int, str]:
    """`rlhflab ARGS` as a user's terminal shows it at 100 columns; `places` written by name."""
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "RLHFLAB_DEMO_PRESET": ""}
    done = subprocess.run([RLHFLAB, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    text = done.stdout
    for name, path in (places or {}).items():
        text = text.replace(str(path.resolve()), name).replace(str(path), name)
    # durations differ on every run: a snapshot keeps that they are there, not their values
    text = re.sub(r'"time": \{[^{}]*(?:\{[^{}]*\}[^{}]*)?\}',
                  lambda block: re.sub(r"(?<=: )\d+(?:\.\d+)?", "\"SECONDS\"", block.group(0)), text)
    return done.returncode, text


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group of the app, as the words that name it (() for `rlhflab` itself)."""
    import typer

    from rlhflab.cli import app

    found: list[tuple[str, ...]] = []

    def walk(command, path: tuple[str, ...]) -> None:
        found.append(path)
        if hasattr(command, "commands"):  # a group (typer carries a click of its own)
            for name in sorted(command.commands):
                walk(command.commands[name], (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no snapshot {path}: write it with RLHFLAB_SNAPSHOTS=write"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} changed; if on purpose, RLHFLAB_SNAPSHOTS=write rewrites it"


@pytest.mark.parametrize("words", command_paths(), ids=lambda words: " ".join(words) or "rlhflab")
def test_help_is_unchanged(words):
    code, text = rlhflab(*words, "--help")
    assert code == 0
    check(f"help/{'-'.join(words) or 'rlhflab'}.txt", text)


def test_every_command_has_its_help_snapshot():
    kept = {p.name for p in (SNAPSHOTS / "help").glob("*.txt")}
    assert kept == {f"{'-'.join(words) or 'rlhflab'}.txt" for words in command_paths()}


@pytest.fixture(scope="module")
def judged(smoke_run, tmp_path_factory) -> dict[str, Path]:
    """The smoke run, a rating study of it answered by its reward model, and a comparison study
    of its two models answered by the world's labeler: what the --json outputs read."""
    work = tmp_path_factory.mktemp("snapshots")
    run = work / "run"
    shutil.copytree(smoke_run.root, run)
    ratings, pairs = work / "ratings", work / "pairs"
    steps = [("rate", str(run), "--study", str(ratings), "--no-serve"),
             ("rate", str(ratings), "--judge", f"rm:{run / 'stage2_rm'}"),
             ("sample", str(run)),
             ("pair", f"base={run / 'samples' / 'stage1.jsonl'}", f"tuned={run / 'samples' / 'policy.jsonl'}",
              "--study", str(pairs), "--judge", f"world:{run}")]
    for args in steps:
        code, text = rlhflab(*args, cwd=work)
        assert code == 0, text
    return {"RUN": run, "RATINGS": ratings, "PAIRS": pairs, "WORK": work}


JSON_OUTPUTS = {
    "doctor": ("doctor", "RUN", "--json"),
    "compare": ("compare", "RUN", "--", "RUN", "--json"),
    "rate-results": ("rate", "RATINGS", "--results", "--json"),
    "pair-results": ("pair", "PAIRS", "--results", "--json"),
    "ablate": ("ablate", "RUN", "--seeds", "1", "--fix", "ppo.lr=0.0005", "--json", "--quiet"),
}


def test_every_json_option_has_its_snapshot():
    """A command given --json later must be added to JSON_OUTPUTS (and its snapshot written)."""
    from rlhflab.cli import app  # noqa: F401  (the commands' options are read from their help)

    having = {" ".join(words) for words in command_paths()
              if words and "--json" in rlhflab(*words, "--help")[1]}
    assert having == {args[0] for args in JSON_OUTPUTS.values()}


@pytest.mark.parametrize("name", JSON_OUTPUTS)
def test_json_output_is_unchanged(name, judged):
    places = {key: judged[key] for key in ("RUN", "RATINGS", "PAIRS")}
    args = [str(places[a]) if a in places else a for a in JSON_OUTPUTS[name]]
    if name == "ablate":
        shutil.rmtree(judged["RUN"] / "ablate", ignore_errors=True)
    code, text = rlhflab(*args, cwd=judged["WORK"], places={**places, "WORK": judged["WORK"]})
    json.loads(text)  # the whole output is one JSON document
    check(f"json/{name}.json", f"exit {code}\n{text}")
