"""The rating page in a real headless browser (Debian's chromium, driven by playwright
through its executable path), against the real server (`rlhflab rate` in a process of
its own): rating by keyboard and by mouse with the database read after, hostile model
text staying inert, links without a valid token refused, and a server SIGKILLed mid-study
losing no committed rating and coming back with the same links.

`RLHFLAB_SCREENSHOTS=DIR` keeps the page's screenshot (docs/img/rating_page.png is one)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rlhflab.studies.bots import StudyClient
from study_server import Server

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def write_samples(path: Path, responses: list[str], steps: int = 20) -> Path:
    rows = [{"step": step, "prompt": f"the film was {step}", "completion": responses[step % len(responses)]
             + f" ({step})"} for step in range(steps)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def study(tmp_path: Path) -> Path:
    samples = write_samples(tmp_path / "gens.jsonl", ["a gentle and moving story .", HOSTILE,
                                                      "the plot was dull & slow <b>really</b>"])
    directory = tmp_path / "study"
    built = subprocess.run([sys.executable, "-m", "rlhflab.cli", "rate", str(samples), "--study", str(directory),
                            "--bins", "4", "--per-bin", "3", "--repeat-every", "0", "--no-serve"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return directory


@pytest.fixture
def server(study: Path):
    running = Server(study)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium here (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def ratings(study: Path, rater: str) -> list:
    with sqlite3.connect(study / "study.sqlite") as conn:
        return [row[0] for row in conn.execute(
            "SELECT r.rating FROM ratings r JOIN raters p ON p.id = r.rater_id WHERE p.name = ? ORDER BY r.id",
            (rater,))]


def test_rating_by_keyboard_and_by_mouse(browser, server, study: Path, tmp_path: Path):
    page = browser.new_page(viewport={"width": 900, "height": 700})
    page.goto(server.links["person-1"])
    assert page.locator("#response").inner_text()
    with page.expect_navigation():
        page.keyboard.press("5")  # a number key rates
    with page.expect_navigation():
        page.keyboard.press("u")  # U: unreadable/broken
    with page.expect_navigation():
        page.get_by_role("button", name="3", exact=True).click()  # the mouse
    page.keyboard.press("Tab")  # Tab reaches the scale's first point, then the next
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.value") == "2"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert ratings(study, "person-1") == [5, None, 3, 2]
    assert "4 rated" in page.locator("#progress").inner_text()
    page.screenshot(path=str(tmp_path / "rating_page.png"), full_page=True)
    if os.environ.get("RLHFLAB_SCREENSHOTS"):
        shutil.copy(tmp_path / "rating_page.png", Path(os.environ["RLHFLAB_SCREENSHOTS"]) / "rating_page.png")
    page.close()


def test_hostile_model_text_stays_inert(browser, server, study: Path):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    link = server.links["person-2"]
    seen_hostile = False
    for _ in range(12):
        page.goto(link)
        text = page.locator("#response").inner_text()
        if "<script>" in text:
            seen_hostile = True
            assert 'onerror="window.pwned = 2"' in text  # shown as text, not parsed as markup
            assert page.locator("#response img").count() == 0 and page.locator("#response script").count() == 0
            break
        with page.expect_navigation():
            page.keyboard.press("4")
    assert seen_hostile
    assert page.evaluate("window.pwned") is None and not errors
    page.close()


def test_links_without_a_valid_token_are_refused(browser, server):
    page = browser.new_page()
    token = server.tokens()["person-1"]
    for path in ("/", "/r/", "/r/not-a-token/", f"/r/{token[:-2]}/", f"/r/{token}x/"):
        response = page.goto(server.base + path)
        assert response.status == 403, path
        assert "token" in page.content()
    assert page.goto(server.links["person-1"]).status == 200
    page.close()


def test_a_killed_server_loses_no_rating_and_comes_back_with_the_same_links(study: Path):
    first = Server(study)
    try:
        tokens = first.tokens()
        client = StudyClient(first.links["person-1"])
        for _ in range(5):
            item = client.next()
            assert client.rate(item["serve"], item["csrf"], 6) == "recorded"
        pending = client.next()  # served, not answered, when the server dies
        first.kill()
    finally:
        first.stop()
    assert ratings(study, "person-1") == [6] * 5
    second = Server(study)
    try:
        assert second.tokens() == tokens
        client = StudyClient(second.links["person-1"])
        resumed = client.next()
        assert (resumed["serve"], resumed["prompt"], resumed["response"]) == (
            pending["serve"], pending["prompt"], pending["response"])
        while not (item := client.next())["done"]:
            assert client.rate(item["serve"], item["csrf"], 2) == "recorded"
    finally:
        second.stop()
    assert ratings(study, "person-1") == [6] * 5 + [2] * 7  # 4 bins x 3 items


# --- pair studies: the same app, two responses side by side ----------------------------------
@pytest.fixture
def pair_study(tmp_path: Path) -> Path:
    prompts = [f"the film was {k}" for k in range(6)]
    for name, texts in (("calm", ["a gentle and moving story ."]), ("wild", [HOSTILE, "dull & slow <b>x</b>"])):
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"step": 0, "prompt": p, "response": f"{texts[k % len(texts)]} ({k})"}) + "\n"
            for k, p in enumerate(prompts)))
    directory = tmp_path / "pairs"
    built = subprocess.run([sys.executable, "-m", "rlhflab.cli", "pair", str(tmp_path / "calm.jsonl"),
                            str(tmp_path / "wild.jsonl"), "--study", str(directory), "--ratings-per-item", "1",
                            "--repeat-every", "0", "--no-serve"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return directory


def choices(study: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(study / "study.sqlite") as conn:
        return conn.execute("SELECT r.choice, i.left_side FROM ratings r JOIN items i ON i.id = r.item_id "
                            "ORDER BY r.id").fetchall()


def test_comparing_by_keyboard_and_by_mouse_keeps_the_system_not_the_side(browser, pair_study: Path, tmp_path: Path):
    server = Server(pair_study, raters=1, command="pair")
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(server.links["person-1"])
        assert page.locator("#response-a").inner_text() and page.locator("#response-b").inner_text()
        with page.expect_navigation():
            page.keyboard.press("a")  # A: the left response
        with page.expect_navigation():
            page.get_by_role("button", name="B is better").click()  # the mouse: the right one
        with page.expect_navigation():
            page.keyboard.press("t")  # T: about the same
        page.keyboard.press("Tab")  # Tab reaches the first choice, then the next
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.value") == "right"
        with page.expect_navigation():
            page.keyboard.press("Enter")
        with page.expect_navigation():
            page.keyboard.press("x")  # X: both bad
        shown = page.locator("#response-a").inner_text() + page.locator("#response-b").inner_text()
        assert "<script>" in shown or "<b>" in shown  # model text shown as text
        assert page.locator(".response script, .response img, .response b").count() == 0
        assert page.evaluate("window.pwned") is None and not errors
        assert "5 compared" in page.locator("#progress").inner_text()
        page.screenshot(path=str(tmp_path / "pair_page.png"), full_page=True)
        if os.environ.get("RLHFLAB_SCREENSHOTS"):
            shutil.copy(tmp_path / "pair_page.png", Path(os.environ["RLHFLAB_SCREENSHOTS"]) / "pair_page.png")
        for path in ("/", "/r/not-a-token/"):
            assert page.goto(server.base + path).status == 403
        page.close()
    finally:
        server.stop()
    other = {"a": "b", "b": "a"}
    answered = choices(pair_study)
    assert [c for c, _ in answered] == [answered[0][1], other[answered[1][1]], "tie", other[answered[3][1]],
                                        "both_bad"]
