"""Every documented workflow is a test: each `rlhflab` and `make` command of a fenced `sh` block
in README.md and docs/*.md runs, in document order, as written, in a scratch directory
(tests/doc_steps.py says how a command is read and what its marks mean).

- README.md runs first, in a directory of its own, from nothing: its first command is
  `make demo`. Every other page starts where that command leaves a user (runs/demo as made),
  in a directory of its own, and runs its commands in order.
- `RLHFLAB_DEMO_PRESET=smoke` makes the demo preset (the default) run at smoke size, so the
  suite stays within its time; nothing else of a command changes.
- A command that serves a study (it prints rater links) is answered through its page in the
  real browser, on its first link, 40 items or all it serves, by a person who answers as the
  world's gold utility says (tests/browser_person.py); then it is stopped as a person stops
  it, with Ctrl-C.
- Commands marked `[slow]` (minutes even at smoke size) run in `make test-docs` only, which
  walks the pages that hold them again, every command included; .ci/run runs it.
- A step fails on an exit code other than the one its docs state, or when output the docs
  quote beside it is missing. A step marked expected to fail must fail (strict): the issue that
  mends it removes the mark. The counts (run, skipped by reason, expected failures) are printed
  at the end of the session.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from doc_steps import Step, document_steps, workflow_documents

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = workflow_documents(ROOT)
DEMO_RUN = "runs/demo"  # what the README's first command, `make demo`, makes
ANSWERS_PER_STUDY = 40  # a person's sitting: enough for a study's results and a preference to show
STEP_SECONDS = 900  # one command's limit: the faults bench at smoke size takes about 3 minutes
LINK = re.compile(r"^(\S+): (http://\S+/r/\S+/)$")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

TALLY: Counter = Counter()  # printed by conftest.py's terminal summary
SECONDS: dict[str, float] = {}  # each step's wall time, the slowest printed beside the tally


@dataclass
class Outcome:
    exit_code: int
    output: str
    answers: int  # given through a served study's pages
    interrupted: bool = False  # ended by the test's Ctrl-C, as a person ends a server


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["VENV"] = sys.prefix  # `make demo` runs this venv's rlhflab, whichever venv runs the suite
    env["RLHFLAB_DEMO_PRESET"] = "smoke"
    env["COLUMNS"] = "200"  # rich wraps at 80 columns without a terminal: verdicts would break across lines
    env["PYTHONUNBUFFERED"] = "1"  # rater links arrive while the server runs
    return env


def scratch(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    makefile = directory / "Makefile"
    if not makefile.exists():
        makefile.symlink_to(ROOT / "Makefile")  # `make demo` as a user types it, in the checkout's Makefile
    return directory


def run_step(step: Step, cwd: Path, person) -> Outcome:
    """Run one documented command; answer a served study through the browser, then Ctrl-C it."""
    process = subprocess.Popen(["bash", "-c", step.command], cwd=cwd, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        return _follow(step, process, lines, person)
    finally:
        if process.poll() is None:  # the test failed while it ran: no server outlives it
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=10)


def _follow(step: Step, process: subprocess.Popen, lines: list[str], person) -> Outcome:
    deadline = time.monotonic() + STEP_SECONDS
    answers, interrupted = 0, False
    while process.poll() is None:
        links = [m.group(2) for m in map(LINK.match, (line.strip() for line in list(lines))) if m]
        if links and serving(links[0]):
            if person is None:
                pytest.fail(f"{step.where}: `{step.command}` serves a study, and no browser is here to answer it")
            answers = person.answer(links[0], ANSWERS_PER_STUDY)  # one person; the other links stay unused
            os.killpg(process.pid, signal.SIGINT)  # the person is done: Ctrl-C, as the docs say
            interrupted = True
            break
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"{step.where}: `{step.command}` still running after {STEP_SECONDS} s\n" + "".join(lines[-40:]))
        time.sleep(0.2)
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{step.where}: `{step.command}` did not end within 60 s of Ctrl-C")
    return Outcome(code, "".join(lines), answers, interrupted)


def serving(link: str) -> bool:
    base = link.split("/r/")[0]
    try:
        urllib.request.urlopen(base + "/", timeout=2)
    except urllib.error.HTTPError:
        return True  # a page without a token is refused: the server is up
    except OSError:
        return False
    return True


def unmet(step: Step, outcome: Outcome) -> str | None:
    """What the docs promised of this step that its run did not do, or None."""
    # a server ended by Ctrl-C exits as any interrupted command does, 128 + SIGINT
    expected = 128 + signal.SIGINT if outcome.interrupted and step.exit_code == 0 else step.exit_code
    if outcome.exit_code != expected:
        return f"exit code {outcome.exit_code}, expected {expected}" + (
            " (ended by Ctrl-C)" if outcome.interrupted else " (as the docs state)")
    said = " ".join(outcome.output.split())
    missing = [words for words in step.promised if " ".join(words.split()) not in said]
    if missing:
        return f"the output does not say {missing[0]!r}, which the docs quote beside it"
    return None


def walk(document: Path, cwd: Path, person, slow: bool, after_step=None) -> None:
    """Run a page's commands in order (its `[slow]` ones only when `slow`); stop at the first
    that breaks its promise."""
    for step in document_steps(document, ROOT):
        if step.skip:
            TALLY[f"skipped: needs {step.skip}"] += 1
            continue
        if step.slow and not slow:
            TALLY["slow, left to make test-docs"] += 1
            continue
        started = time.monotonic()
        outcome = run_step(step, cwd, person)
        SECONDS[f"{step.where} {step.command[:60]}"] = time.monotonic() - started
        broken = unmet(step, outcome)
        if step.expected_failure is not None:
            if broken is None:
                pytest.fail(f"{step.where}: `{step.command}` now works: remove its expected-to-fail mark "
                            f"(issue #{step.expected_failure})")
            TALLY[f"failed as expected (until #{step.expected_failure})"] += 1
            continue
        if broken:
            tail = "\n".join(outcome.output.splitlines()[-40:])
            pytest.fail(f"{step.where}: `{step.command}`: {broken}\n--- its output, last lines ---\n{tail}")
        TALLY["run"] += 1
        TALLY["answers given in the browser"] += outcome.answers
        if after_step:
            after_step(step)


@pytest.fixture(scope="module")
def workflows(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workflows")


@pytest.fixture(scope="module")
def person():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        yield None  # a step that serves a study fails, naming why
        return
    from playwright.sync_api import sync_playwright

    from browser_person import WorldPerson

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield WorldPerson(browser)
        browser.close()


def keep_demo_as_made(workflows: Path, cwd: Path):
    """After `make demo`, a copy of runs/demo as it made it: where every other page starts."""
    def after(step: Step) -> None:
        kept = workflows / "demo-as-made"
        if step.command.split() == ["make", "demo"] and not kept.exists():
            shutil.copytree(cwd / DEMO_RUN, kept, symlinks=True)
    return after


def demo_as_made(workflows: Path, person) -> Path:
    kept = workflows / "demo-as-made"
    if not kept.exists():  # the README's page did not run in this session: its first command, alone
        first = next(s for s in document_steps(ROOT / "README.md", ROOT) if s.command.split() == ["make", "demo"])
        cwd = scratch(workflows / "make-demo")
        outcome = run_step(first, cwd, person)
        assert unmet(first, outcome) is None, outcome.output[-3000:]
        shutil.copytree(cwd / DEMO_RUN, kept, symlinks=True)
    return kept


def walk_page(document: Path, workflows: Path, person, slow: bool) -> None:
    cwd = scratch(workflows / document.relative_to(ROOT).as_posix().replace("/", "-"))
    if document.name == "README.md":
        walk(document, cwd, person, slow, after_step=keep_demo_as_made(workflows, cwd))
        return
    if any(not s.skip for s in document_steps(document, ROOT)):
        shutil.copytree(demo_as_made(workflows, person), cwd / DEMO_RUN, symlinks=True)
    walk(document, cwd, person, slow)


PAGE_IDS = [d.relative_to(ROOT).as_posix() for d in DOCUMENTS]
SLOW_PAGES = [d for d in DOCUMENTS if any(s.slow and not s.skip for s in document_steps(d, ROOT))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=PAGE_IDS)
def test_documented_workflow_runs_as_written(document: Path, workflows: Path, person):
    walk_page(document, workflows, person, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("document", SLOW_PAGES, ids=[d.relative_to(ROOT).as_posix() for d in SLOW_PAGES])
def test_documented_workflow_with_its_slow_commands(document: Path, workflows: Path, person):
    """`make test-docs`: the pages that hold `[slow]` commands, every command run."""
    walk_page(document, workflows, person, slow=True)
