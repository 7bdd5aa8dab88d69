"""Rating studies in process: the stratified draw, the store (serving, resuming, repeats,
one rating per serve), the statistics against independent references (Krippendorff's
worked example and the `krippendorff` package; the crossed bootstrap's coverage on a
known distribution), every route of the app through Starlette's test client, the
results by hand, the command line, and the world's simulated raters."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import krippendorff
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient
from typer.testing import CliRunner

from rlhflab.cli import app as cli
from rlhflab.doctor.formats.sample_files import read_samples
from rlhflab.doctor.samples import Sample
from rlhflab.studies.app import create_app
from rlhflab.studies.bots import quantile_cuts, world_raters
from rlhflab.studies.design import StudyDesign, StudyError, draw_items, step_bins
from rlhflab.studies.kinds import RATING
from rlhflab.studies.ratings import record_rating
from rlhflab.studies.results import study_results
from rlhflab.studies.stats import crossed_bootstrap, krippendorff_alpha
from rlhflab.studies.store import Study

runner = CliRunner()


def samples(steps: int = 40, per_step: int = 4, text=lambda s, k: f"response {s}-{k}") -> list[Sample]:
    return [Sample(step, f"prompt {step}", text(step, k), reward=0.1 * step) for step in range(steps)
            for k in range(per_step)]


def build(tmp_path: Path, design: StudyDesign = StudyDesign(), systems=("a",), raters: int = 2,
          items: list[Sample] | None = None) -> Study:
    study = Study.create(tmp_path / "study", design, RATING.design_toml(design))
    for name in systems:
        bins, drawn = draw_items(items or samples(), design, name)
        study.add_system(name, f"/data/{name}.jsonl", "table", bins, drawn)
    study.ensure_raters(raters)
    return study


# --- the draw -------------------------------------------------------------------------------
def test_step_bins_split_the_distinct_steps_into_runs_of_about_as_many():
    assert [(b.first_step, b.last_step) for b in step_bins([0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 2, 4)] == [
        (0, 1), (2, 4), (5, 6), (7, 9)]
    assert len(step_bins([5, 5, 7], 10)) == 2  # fewer steps than bins: one bin each


def test_the_draw_takes_per_bin_distinct_samples_from_every_bin_the_same_way_each_time():
    repeated = samples(text=lambda s, k: f"response {s}-{k % 2}")  # two distinct texts per step
    design = StudyDesign(bins=5, per_bin=6)
    bins, drawn = draw_items(repeated, design, "a")
    assert len(bins) == 5
    for b in bins:
        mine = [d for d in drawn if d.bin == b.index]
        assert len(mine) == 6 and all(b.first_step <= d.sample.step <= b.last_step for d in mine)
        assert len({(d.sample.prompt, d.sample.response) for d in mine}) == 6
    assert draw_items(repeated, design, "a") == (bins, drawn)
    assert draw_items(repeated, design, "b")[1] != drawn  # each system its own draw
    small = draw_items(samples(steps=3, per_step=1), StudyDesign(bins=3, per_bin=8), "a")[1]
    assert len(small) == 3  # a bin with fewer samples gives them all


def test_a_design_refuses_what_cannot_be_rated():
    with pytest.raises(StudyError, match="scale 5-5"):
        StudyDesign(scale_min=5, scale_max=5)
    with pytest.raises(StudyError, match="per_bin = 0"):
        StudyDesign(per_bin=0)
    with pytest.raises(StudyError, match="no samples"):
        draw_items([], StudyDesign(), "a")


def test_the_design_is_written_out_whole_and_read_back(tmp_path: Path):
    design = StudyDesign(scale_min=0, scale_max=4, bins=3, instructions='Is it "fluent"?')
    study = build(tmp_path, design)
    text = (study.directory / "study.toml").read_text()
    assert "repeat_every = 10  #" in text and "ratings_per_item = 2  #" in text
    assert Study.open(study.directory).design == design


# --- statistics against independent references ----------------------------------------------
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section E: 4 observers,
# 12 units, values 1-5 with missing ones; the paper gives nominal .743, ordinal .815, interval .849.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def _pairs(matrix):
    units, values = [], []
    for row in matrix:
        for unit, value in enumerate(row):
            if value is not None and value == value:
                units.append(unit)
                values.append(value)
    return units, values


@pytest.mark.parametrize(("level", "published"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_alpha_reproduces_the_published_worked_example(level, published):
    assert krippendorff_alpha(*_pairs(KRIPPENDORFF_2011), level) == pytest.approx(published, abs=5e-4)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the package divides 0 by 0 where every value is one
@given(st.lists(st.lists(st.one_of(st.none(), st.integers(1, 7)), min_size=8, max_size=8), min_size=2, max_size=5))
def test_ordinal_alpha_equals_the_krippendorff_package(matrix):
    units, values = _pairs(matrix)
    ours = krippendorff_alpha(units, values, "ordinal", range(1, 8))
    data = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    try:
        theirs = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal",
                                    value_domain=list(range(1, 8)))
    except ValueError:  # the package refuses data with one value or no pairable unit
        theirs = float("nan")
    if not (np.isnan(ours) and np.isnan(theirs)):
        assert ours == pytest.approx(theirs, abs=1e-9)


def test_perfect_agreement_is_one_and_none_pairable_is_nan():
    assert krippendorff_alpha([0, 0, 1, 1, 2, 2], [1, 1, 5, 5, 3, 3]) == pytest.approx(1.0)
    assert np.isnan(krippendorff_alpha([0, 1, 2], [1, 5, 3]))


def test_the_crossed_bootstrap_on_a_hand_case():
    # two raters, four items: rater 1 gives the item's value, rater 2 one more; the mean is 3.
    interval = crossed_bootstrap([0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1], [1, 2, 3, 4, 2, 3, 4, 5])
    assert interval.mean == 3.0 and interval.low < 3.0 < interval.high
    assert crossed_bootstrap([0, 1, 0, 1], [0, 0, 1, 1], [4, 4, 4, 4]).low == 4.0  # no spread, no width


def test_the_crossed_bootstrap_covers_the_truth_where_resampling_items_alone_does_not():
    """Ratings = item effect + rater leniency + noise, six raters rating 24 items: the
    population mean is 0. Resampling items and raters covers it nearly as often as a 95%
    interval should (0.89 of these 150 studies: a percentile interval from six raters
    runs a little short); resampling items alone, which takes the raters' leniency for
    fixed, covers it 0.58 of the time."""
    rng = np.random.default_rng(7)
    covered = covered_items_only = 0
    trials = 150
    for trial in range(trials):
        items, raters = 24, 6
        effect = rng.normal(0, 1, items)
        leniency = rng.normal(0, 1, raters)
        item = np.repeat(np.arange(items), raters)
        rater = np.tile(np.arange(raters), items)
        value = effect[item] + leniency[rater] + rng.normal(0, 0.5, len(item))
        interval = crossed_bootstrap(item, rater, value, draws=400, seed=trial)
        covered += interval.low <= 0.0 <= interval.high
        one_rater = np.zeros_like(rater)  # every rating from "one rater": items resampled alone
        narrow = crossed_bootstrap(item, one_rater, value, draws=400, seed=trial)
        covered_items_only += narrow.low <= 0.0 <= narrow.high
    assert covered / trials >= 0.82
    assert covered_items_only / trials < 0.7


# --- the store ------------------------------------------------------------------------------
def test_a_rater_is_served_the_same_item_until_answering_it(tmp_path: Path):
    study = build(tmp_path)
    rater = study.raters()[0]
    first = study.next_item(rater)
    assert study.next_item(rater) == first  # leaving and coming back: the same item
    assert record_rating(study, rater, first.serve_id, first.nonce, 4) == "recorded"
    assert record_rating(study, rater, first.serve_id, first.nonce, 5) == "duplicate"
    second = study.next_item(rater)
    assert second.serve_id != first.serve_id
    assert record_rating(study, rater, second.serve_id, "not-the-nonce", 4) == "forbidden"
    other = study.raters()[1]
    assert record_rating(study, other, second.serve_id, second.nonce, 4) == "unknown"  # not served to them
    assert record_rating(study, rater, second.serve_id, second.nonce, 8) == "invalid"
    with sqlite3.connect(study.directory / "study.sqlite") as conn:
        assert conn.execute("SELECT rating FROM ratings").fetchall() == [(4,)]


def rate_all(study: Study, rater, answer=lambda served: 4) -> list:
    served_items = []
    while (served := study.next_item(rater)) is not None:
        assert record_rating(study, rater, served.serve_id, served.nonce, answer(served)) == "recorded"
        served_items.append(served)
    return served_items


def test_every_item_gets_its_ratings_and_repeats_come_at_their_cadence(tmp_path: Path):
    design = StudyDesign(bins=4, per_bin=5, ratings_per_item=2, repeat_every=6)
    study = build(tmp_path, design, systems=("a", "b"), raters=3)
    for rater in study.raters():
        rate_all(study, rater)
    rows = study.ratings()
    fresh = [r for r in rows if not r.repeat]
    per_item = {}
    for r in fresh:
        per_item.setdefault(r.item_id, set()).add(r.rater_id)
    assert len(per_item) == study.item_count() == 40
    assert all(len(raters) >= 2 for raters in per_item.values())
    assert len(fresh) == len({(r.item_id, r.rater_id) for r in fresh})  # no one rates an item twice as new
    for rater in study.raters():
        mine = [r for r in rows if r.rater_id == rater.id]
        flags = [r.repeat for r in mine]
        new_count = flags.count(False)
        assert flags.count(True) == new_count // 6
        for position, repeat in enumerate(flags):
            if repeat:  # a repeat follows every sixth new item, and is of an item rated before
                assert flags[:position].count(False) % 6 == 0
                assert mine[position].item_id in {r.item_id for r in mine[:position] if not r.repeat}


def test_a_raters_order_mixes_steps_and_systems(tmp_path: Path):
    study = build(tmp_path, StudyDesign(bins=10, per_bin=4, repeat_every=0), systems=("a", "b"), raters=2)
    order = study.items()
    place = {(i["prompt"], i["response"]): (i["system"], i["step"]) for i in order}
    seen = [place[(s.prompt, s.response)] for s in rate_all(study, study.raters()[0])]
    steps = [step for _, step in seen]
    assert steps != sorted(steps) and steps != sorted(steps, reverse=True)
    first_half = {system for system, _ in seen[: len(seen) // 4]}
    assert first_half == {"a", "b"}


def test_an_item_left_unanswered_is_given_to_others_once_its_hold_expires(tmp_path: Path):
    study = build(tmp_path, StudyDesign(bins=2, per_bin=3, ratings_per_item=1, repeat_every=0), raters=2)
    leaver, stayer = study.raters()
    held = study.next_item(leaver)  # opened, never answered
    assert len(rate_all(study, stayer)) == 5  # the item is the leaver's while the hold lasts
    study.serve_hold_s = 0
    assert [s.prompt for s in rate_all(study, stayer)] == [held.prompt]
    assert study.next_item(leaver) == held  # the leaver, back, still finds it


def test_tokens_are_kept_and_compared_whole(tmp_path: Path):
    study = build(tmp_path, raters=2)
    tokens = [r.token for r in study.raters()]
    reopened = Study.open(study.directory)
    assert [r.token for r in reopened.ensure_raters(2)] == tokens
    assert reopened.rater_for(tokens[1]).name == "person-2"
    assert reopened.rater_for(tokens[1][:-1]) is None and reopened.rater_for("") is None
    assert len(reopened.ensure_raters(3)) == 3 and [r.token for r in reopened.raters()][:2] == tokens


# --- the app, every route in process --------------------------------------------------------
HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=1"> & "quotes"'


@pytest.fixture
def served(tmp_path: Path):
    study = build(tmp_path, StudyDesign(bins=2, per_bin=2, repeat_every=0),
                  items=samples(steps=4, per_step=1, text=lambda s, k: HOSTILE + f" {s}"))
    return study, TestClient(create_app(study, ["testserver"]), follow_redirects=False)


def test_every_route_refuses_a_missing_or_wrong_token(served):
    study, client = served
    token = study.raters()[0].token
    for method, path in [("get", "/"), ("get", "/r/"), ("get", "/r/nope/"), ("post", "/r/nope/"),
                         ("get", "/r/nope/api/next"), ("post", "/r/nope/api/rate"), ("get", "/r/nope/rate.js"),
                         ("get", f"/r/{token[:-1]}/"), ("get", "/study.sqlite"), ("get", "/../study.sqlite"),
                         ("get", f"/r/{token}/study.sqlite")]:
        response = getattr(client, method)(path)
        assert response.status_code == 403, (method, path, response.status_code)
        assert "sqlite" not in response.text.lower()
    assert client.get(f"/r/{token}/").status_code == 200


def test_every_response_carries_the_security_headers(served):
    study, client = served
    token = study.raters()[0].token
    for path in (f"/r/{token}/", f"/r/{token}/rate.js", f"/r/{token}/api/next", "/nothing"):
        headers = client.get(path).headers
        assert headers["content-security-policy"].startswith("default-src 'self'")
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-content-type-options"] == "nosniff"


def test_a_foreign_host_header_is_refused(served):
    study, client = served
    response = client.get(f"/r/{study.raters()[0].token}/", headers={"host": "attacker.example"})
    assert response.status_code == 400


def test_model_text_is_escaped_and_the_page_hides_where_it_came_from(served):
    study, client = served
    page = client.get(f"/r/{study.raters()[0].token}/").text
    assert "<script>window" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page and "onerror=&#34;" in page
    assert "step" not in page.lower() and "/data/a.jsonl" not in page
    assert page.count("<script") == 1  # the page's own rate.js only


def test_the_form_records_a_rating_and_checks_its_nonce(served):
    study, client = served
    rater = study.raters()[0]
    item = study.next_item(rater)
    base = f"/r/{rater.token}/"
    assert client.post(base, data={"serve": item.serve_id, "csrf": "forged", "rating": "5"}).status_code == 403
    response = client.post(base, data={"serve": item.serve_id, "csrf": item.nonce, "rating": "9"})
    assert response.status_code == 303 and "notice=invalid" in response.headers["location"]
    response = client.post(base, data={"serve": item.serve_id, "csrf": item.nonce, "rating": "unreadable"})
    assert response.status_code == 303 and response.headers["location"] == "./"
    rows = study.ratings()
    assert [(r.rating, r.rater_id) for r in rows] == [(None, rater.id)]
    assert "1 rated" in client.get(base).text


def test_the_json_api_serves_and_records_like_the_page(served):
    study, client = served
    base = f"/r/{study.raters()[1].token}/api/"
    item = client.get(base + "next").json()
    assert set(item) >= {"serve", "csrf", "prompt", "response", "scale"} and "step" not in item
    assert client.post(base + "rate", json={"serve": item["serve"], "csrf": item["csrf"], "rating": 3}).json() == {
        "outcome": "recorded"}
    again = client.post(base + "rate", json={"serve": item["serve"], "csrf": item["csrf"], "rating": 3})
    assert again.status_code == 409
    assert client.post(base + "rate", content=b"[1]").status_code == 400
    huge = client.post(base + "rate", json={"serve": 10**30, "csrf": item["csrf"], "rating": 3})
    assert huge.status_code == 404 and huge.json() == {"outcome": "unknown"}


# --- results, by hand ------------------------------------------------------------------------
def test_results_by_hand(tmp_path: Path):
    design = StudyDesign(bins=2, per_bin=2, ratings_per_item=2, repeat_every=0)
    study = build(tmp_path, design, items=samples(steps=4, per_step=1))
    a, b = study.raters()
    answers = {  # (rater, item step) -> rating; step 3 is unreadable to b
        ("a", 0): 2, ("a", 1): 4, ("a", 2): 6, ("a", 3): 7,
        ("b", 0): 3, ("b", 1): 5, ("b", 2): 6, ("b", 3): None,
    }
    steps = {(i["prompt"], i["response"]): i["step"] for i in study.items()}
    for rater, key in ((a, "a"), (b, "b")):
        rate_all(study, rater, lambda s, key=key: answers[(key, steps[(s.prompt, s.response)])])
    res = study_results(study)
    first, second = res.bins
    assert (first.first_step, first.last_step, second.first_step, second.last_step) == (0, 1, 2, 3)
    assert first.mean == pytest.approx((2 + 4 + 3 + 5) / 4) and first.n == 4 and first.unreadable_rate == 0
    assert second.mean == pytest.approx((6 + 7 + 6) / 3) and second.unreadable_rate == pytest.approx(1 / 4)
    assert first.low <= first.mean <= first.high
    assert second.mean_step == pytest.approx((2 + 3 + 2) / 3)
    units, values = _pairs([[2, 4, 6, None], [3, 5, 6, None]])  # item 3 has one readable rating: not pairable
    assert res.alpha == pytest.approx(krippendorff_alpha(units, values, "ordinal", range(1, 8)))
    assert res.alpha_ratings == 6
    assert json.loads(json.dumps(res.to_json()))["bins"][0]["n"] == 4


def test_results_measure_each_raters_consistency_on_repeats(tmp_path: Path):
    study = build(tmp_path, StudyDesign(bins=2, per_bin=4, repeat_every=2), raters=2)
    rater = study.raters()[0]
    flips = iter(range(100))
    rate_all(study, rater, lambda s: 3 if not s.repeat else 3 + next(flips) % 2)  # repeats: same, one off, same
    mine = next(r for r in study_results(study).raters if r.name == rater.name)
    # repeats after the 4th, 6th and 8th new item (after the 2nd, no item was rated three items before)
    assert mine.rated == 8 and mine.repeats == 3
    assert mine.repeat_exact == pytest.approx(2 / 3) and mine.repeat_within_one == 1.0
    assert mine.repeat_mean_abs_diff == pytest.approx(1 / 3)


# --- the command line -------------------------------------------------------------------------
def write_samples(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_command_builds_reopens_with_the_same_links_and_needs_add_for_more(tmp_path: Path):
    first = write_samples(tmp_path / "first.jsonl", [{"step": s, "prompt": "p", "text": f"r{s}"} for s in range(30)])
    second = write_samples(tmp_path / "second.jsonl", [{"step": s, "prompt": "q", "completion": f"c{s}"}
                                                       for s in range(30)])
    study = tmp_path / "study"
    args = ["rate", f"mine={first}", "--study", str(study), "--map", "text=sample/response", "--no-serve"]
    built = runner.invoke(cli, args + ["--raters", "3", "--bins", "3", "--per-bin", "2"])
    assert built.exit_code == 0, built.output
    links = [line for line in built.stdout.splitlines() if "/r/" in line]
    assert len(links) == 3
    again = runner.invoke(cli, args)
    assert again.exit_code == 0 and [line for line in again.stdout.splitlines() if "/r/" in line] == links
    refused = runner.invoke(cli, ["rate", str(second), "--study", str(study), "--no-serve"])
    assert refused.exit_code == 2 and "--add" in refused.output
    other_design = runner.invoke(cli, args + ["--bins", "4"])
    assert other_design.exit_code == 2 and "bins = 3, not 4" in other_design.output
    clash = runner.invoke(cli, ["rate", f"fresh={second}", f"mine={second}", "--study", str(study), "--add",
                                "--no-serve"])
    assert clash.exit_code == 2 and "already has systems named mine" in clash.output
    assert [s.name for s in Study.open(study).systems()] == ["mine"]  # nothing half-added
    added = runner.invoke(cli, ["rate", str(second), "--study", str(study), "--add", "--no-serve"])
    assert added.exit_code == 0, added.output
    opened = Study.open(study)
    assert [s.name for s in opened.systems()] == ["mine", "second"] and opened.item_count() == 12
    results = runner.invoke(cli, ["rate", str(study), "--results", "--json"])
    assert results.exit_code == 0 and len(json.loads(results.stdout)["bins"]) == 6


def test_bad_sample_files_stop_with_file_line_and_what_was_expected(tmp_path: Path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"step": 1, "completion": "a"}\n{"step": 2, "completion": \n')
    result = runner.invoke(cli, ["rate", str(broken), "--study", str(tmp_path / "s"), "--no-serve"])
    assert result.exit_code == 2 and f"{broken}:2" in result.output
    no_text = write_samples(tmp_path / "no_text.jsonl", [{"step": 1, "words": "a"}])
    result = runner.invoke(cli, ["rate", str(no_text), "--study", str(tmp_path / "t"), "--no-serve"])
    assert result.exit_code == 2 and "no completion column" in result.output and "--map" in result.output
    result = runner.invoke(cli, ["rate", str(tmp_path / "absent.jsonl"), "--no-serve"])
    assert result.exit_code == 2 and "absent.jsonl" in result.output
    assert not (tmp_path / "s" / "study.sqlite").exists()


def test_a_study_of_a_run_lives_in_the_run(tmp_path: Path):
    run = tmp_path / "run"
    write_samples((run / "samples").mkdir(parents=True) or run / "samples" / "ppo.jsonl",
                  [{"step": s, "prompt": "p", "response": f"r{s}", "proxy": 0.1, "gold": 0.2} for s in range(12)])
    result = runner.invoke(cli, ["rate", str(run), "--no-serve"])
    assert result.exit_code == 0, result.output
    study = Study.open(run / "studies" / "ratings")
    assert study.systems()[0].name == "run" and study.systems()[0].format == "rlhflab"
    assert {i["gold"] for i in study.items()} == {0.2}  # the run's truth is kept beside each item, never shown


# --- the world's simulated raters -------------------------------------------------------------
def test_quantile_cuts_make_each_scale_point_as_likely_on_the_reference():
    rng = random.Random(3)
    reference = [rng.gauss(0, 1) for _ in range(7000)]
    cuts = quantile_cuts(reference, 7)
    counts = np.bincount([sum(u >= c for c in cuts) for u in reference], minlength=7)
    assert counts.min() >= 950 and counts.max() <= 1050


def test_two_simulated_raters_agree_as_people_do(smoke_run):
    """Two world raters at the default noise rate the default draw of a smoke run: their
    ordinal alpha lies in 0.4-0.7 (the range bench/rating_bots.py fitted the noise to)."""
    run_samples = read_samples(smoke_run.root).samples
    reference = [(s.prompt, s.response) for s in run_samples if s.step == 0]
    _, drawn = draw_items(run_samples, StudyDesign(), "smoke")
    alphas = []
    for seed in range(4):
        raters = world_raters(smoke_run.root, reference, (1, 7), 2, seed=seed)
        units = [k for k, _ in enumerate(drawn) for _ in raters]
        values = [r(d.sample.prompt, d.sample.response) for d in drawn for r in raters]
        alphas.append(krippendorff_alpha(units, values, "ordinal", range(1, 8)))
    assert 0.4 <= float(np.mean(alphas)) <= 0.7, alphas
