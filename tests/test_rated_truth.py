"""A rating study read as the run's truth: the gold rules on a sparse 10-point rated
series with per-point intervals (a fall counts only beyond them), the study turned into
that series, `doctor --truth`, and `compare --truth` (its change from the study's own
resampling)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app as cli
from rlhflab.cli import main
from rlhflab.doctor.truth import RatedPoint, RatedTruth, attach_truth, significantly_below
from rlhflab.studies.design import StudyError
from rlhflab.studies.store import Study
from rlhflab.studies.truth import match_system, rated_truth, truth_change
from test_doctor_rules import DEMO, fired, healthy_records, table_of
from test_studies import rate_all

runner = CliRunner()
BINS = [(8 * k, 8 * k + 7) for k in range(10)]  # 10 bins over an 80-step run


def rated(means: list[float], half: float | list[float]) -> RatedTruth:
    halves = half if isinstance(half, list) else [half] * len(means)
    return RatedTruth("study:run", (1, 7), tuple(
        RatedPoint((a + b) // 2, a, b, m, m - h, m + h, 16) for (a, b), m, h in zip(BINS, means, halves)), "test")


def table_with(truth: RatedTruth, proxy_rises: bool = True):
    records = healthy_records(0, gold=False)
    if not proxy_rises:
        for r in records:
            r["reward/proxy_mean"] = 0.2 + 0.0 * r["step"]
    table = table_of(records, **DEMO)
    attach_truth(table, truth)
    return table


def test_a_point_is_below_another_only_beyond_both_intervals():
    peak = RatedPoint(0, 0, 0, 5.0, 4.6, 5.4, 16)
    # gap 1.0 against sqrt(0.4^2 + 0.5^2) = 0.64: below; gap 0.6 against the same: not
    assert significantly_below(peak, RatedPoint(0, 0, 0, 4.0, 3.5, 4.5, 16))
    assert not significantly_below(peak, RatedPoint(0, 0, 0, 4.4, 3.9, 4.9, 16))


RISE_THEN_FALL = [3.0, 3.6, 4.2, 4.8, 5.2, 5.0, 4.4, 3.8, 3.2, 2.8]


def test_a_rated_fall_beyond_the_intervals_is_reward_hacking_dated_at_its_first_point():
    found = fired(table_with(rated(RISE_THEN_FALL, 0.3)))
    # peak at bin 4 (5.2 +- 0.3); bin 6 (4.4): gap 0.8 > 0.42, and every later bin too
    assert found.get("reward_hacking_gold") == BINS[6][0] + 3  # the bin's point: its mean step
    assert "gold_falling" not in found


def test_the_fall_is_dated_at_the_first_point_below_the_peaks_interval():
    # bin 5 (4.85) lies below the peak's interval [4.9, 5.5] though not beyond both intervals: the fall starts there
    means = RISE_THEN_FALL[:5] + [4.85] + RISE_THEN_FALL[6:]
    assert fired(table_with(rated(means, 0.3))).get("reward_hacking_gold") == BINS[5][0] + 3


def test_the_same_means_inside_wide_intervals_are_no_fall():
    found = fired(table_with(rated(RISE_THEN_FALL, 1.8)))
    assert "reward_hacking_gold" not in found and "gold_falling" not in found


def test_a_fall_that_recovers_by_the_end_is_no_fall():
    means = RISE_THEN_FALL[:8] + [5.0, 5.1]
    assert "reward_hacking_gold" not in fired(table_with(rated(means, 0.3)))


def test_a_rated_fall_with_the_proxy_falling_too_is_the_policy_getting_worse():
    found = fired(table_with(rated(RISE_THEN_FALL, 0.3), proxy_rises=False))
    assert "gold_falling" in found and "reward_hacking_gold" not in found


def test_a_rated_stall_needs_every_later_point_confidently_below_the_peak():
    plateau = [3.0, 3.8, 4.6, 5.2] + [4.85] * 6  # later bins 0.35 below the peak
    # each later upper bound (5.15) below the peak's mean (5.2), the gap short of a fall's hypot(0.3, 0.3) = 0.42
    found = fired(table_with(rated(plateau, 0.3)))
    assert found.get("gold_stalled") == BINS[3][0] + 3 and "reward_hacking_gold" not in found
    wide = [0.3] * 4 + [0.6] * 6  # later upper bounds above 5.2: a new best cannot be ruled out
    assert "gold_stalled" not in fired(table_with(rated(plateau, wide)))


def test_a_rising_rated_truth_is_healthy():
    assert fired(table_with(rated([3.0 + 0.3 * k for k in range(10)], 0.4))) == {}


def test_attaching_replaces_a_logged_gold_and_says_so():
    table = table_of(healthy_records(0), **DEMO)
    attach_truth(table, rated(RISE_THEN_FALL, 0.3))
    assert table.get("reward/gold_mean").values == tuple(RISE_THEN_FALL)
    assert any("replaced by the ratings of study:run" in note for note in table.notes)


# --- from a study ---------------------------------------------------------------------------
def run_dir(root: Path, name: str, gold_peak: int | None, steps: int = 80) -> Path:
    """A run directory with a metrics log and samples whose response text carries its quality."""
    run = root / name
    (run / "metrics").mkdir(parents=True)
    (run / "samples").mkdir()
    records = healthy_records(1, gold=False)
    (run / "metrics" / "ppo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = []
    for step in range(steps):
        quality = step if gold_peak is None else min(step, 2 * gold_peak - step)
        rows += [{"step": step, "prompt": f"p{step}-{k}", "response": f"q={quality} k={k}", "proxy": 0.1}
                 for k in range(4)]
    (run / "samples" / "ppo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def quality_rating(served) -> int:
    quality = int(served.response.split("q=")[1].split()[0])
    return max(1, min(7, 1 + quality // 12))


@pytest.fixture
def two_runs(tmp_path: Path):
    good, hacked = run_dir(tmp_path, "good", None), run_dir(tmp_path, "hacked", 40)
    study_dir = tmp_path / "study"
    result = runner.invoke(cli, ["rate", f"before={hacked}", f"after={good}", "--study", str(study_dir),
                                 "--per-bin", "6", "--repeat-every", "0", "--no-serve"])
    assert result.exit_code == 0, result.output
    study = Study.open(study_dir)
    for rater in study.raters():
        rate_all(study, rater, quality_rating)
    return study, hacked, good


def test_a_study_becomes_the_runs_rated_truth(two_runs):
    study, hacked, good = two_runs
    assert match_system(study, hacked) == "before" and match_system(study, good / "metrics" / "ppo.jsonl") == "after"
    truth = rated_truth(study, "before")
    assert len(truth.points) == 10 and truth.scale == (1, 7)
    # the bins' means follow the quality the raters read: up to step 40, then down
    means = [p.mean for p in truth.points]
    assert max(range(10), key=means.__getitem__) in (4, 5) and means[-1] < means[4]
    assert all(p.low <= p.mean <= p.high for p in truth.points)
    assert truth.points[0].examples and all(e.rating >= truth.points[0].examples[-1].rating
                                            for e in truth.points[0].examples[:1])
    with pytest.raises(StudyError, match="no system 'other'.*before.*after"):
        match_system(study, hacked, "other")


def test_doctor_reads_the_study_as_gold(two_runs, tmp_path: Path):
    study, hacked, _ = two_runs
    result = runner.invoke(cli, ["doctor", str(hacked), "--truth", f"{study.directory}:before", "--json",
                                 "--html", str(tmp_path / "r.html")])
    out = json.loads(result.stdout)
    rules = {f["rule"] for f in out["findings"]}
    assert "reward_hacking_gold" in rules, out["findings"]
    assert any("mean rating on 1-7" in n for n in out["notes"])
    page = (tmp_path / "r.html").read_text()
    assert "Rated samples of steps" in page
    wrong = runner.invoke(cli, ["doctor", str(hacked), "--truth", f"{study.directory}:nope"])
    assert wrong.exit_code == 2 and "before" in wrong.output and "after" in wrong.output


def test_compare_takes_the_truths_change_from_the_study(two_runs, capsys):
    study, hacked, good = two_runs
    change = truth_change(study, ["before"], ["after"])
    assert change.change > 0 and change.low > 0 and change.significant
    assert "items (within each side) and raters (shared)" in change.method
    with pytest.raises(SystemExit):
        main(["compare", str(hacked), "--", str(good), "--truth", str(study.directory), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert body["truth"]["which"].startswith("mean rating of") and math.isclose(body["truth"]["change"],
                                                                                 change.change)
    with pytest.raises(SystemExit) as same:
        main(["compare", str(hacked), "--", str(hacked), "--truth", str(study.directory)])
    assert same.value.code == 2 and "same system" in capsys.readouterr().err


def test_a_run_without_a_gold_reads_the_study_in_its_directory(tmp_path: Path):
    run = run_dir(tmp_path, "hacked", 40)
    assert runner.invoke(cli, ["rate", str(run), "--per-bin", "6", "--repeat-every", "0", "--no-serve"]).exit_code == 0
    plain = json.loads(runner.invoke(cli, ["doctor", str(run), "--json"]).stdout)
    assert not any("mean rating" in n for n in plain["notes"])  # nothing rated yet: no truth
    study = Study.open(run / "studies" / "ratings")
    for rater in study.raters():
        rate_all(study, rater, quality_rating)
    out = json.loads(runner.invoke(cli, ["doctor", str(run), "--json"]).stdout)
    assert "reward_hacking_gold" in {f["rule"] for f in out["findings"]}
    assert any("mean rating on 1-7" in n for n in out["notes"])


def test_logs_sharing_a_directory_are_matched_by_their_names(tmp_path: Path):
    for name in ("base", "tuned"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"step": s, "completion": f"{name} {s}"}) + "\n"
                                                        for s in range(10)))
    study_dir = tmp_path / "study"
    assert runner.invoke(cli, ["rate", str(tmp_path / "base.jsonl"), str(tmp_path / "tuned.jsonl"), "--study",
                               str(study_dir), "--no-serve"]).exit_code == 0
    study = Study.open(study_dir)
    assert match_system(study, tmp_path / "tuned.log") == "tuned" and match_system(study, tmp_path / "base.csv") == "base"
    with pytest.raises(StudyError, match="several systems"):
        match_system(study, tmp_path / "other.log")


def test_a_broken_study_found_in_a_run_is_noted_not_fatal(tmp_path: Path):
    run = run_dir(tmp_path, "hacked", 40)
    (run / "studies" / "old").mkdir(parents=True)
    (run / "studies" / "old" / "study.sqlite").write_text("not a database")
    result = runner.invoke(cli, ["doctor", str(run), "--json"])
    assert result.exit_code in (0, 1, 3), result.output
    assert any("was not read as the truth" in n for n in json.loads(result.stdout)["notes"])


def test_a_study_of_another_run_is_refused_where_the_truth_is_read(two_runs, tmp_path: Path, capsys):
    """doctor --truth and compare --truth read a rating study only for the run it rates: a study of
    another run (its items not among the run's samples), or one that stops before the run's end,
    is one line and exit 2, and the run's own findings stay."""
    study, hacked, good = two_runs
    accepted = runner.invoke(cli, ["doctor", str(hacked), "--truth", f"{study.directory}:before", "--json"])
    assert accepted.exit_code in (0, 1)
    other = runner.invoke(cli, ["doctor", str(hacked), "--truth", f"{study.directory}:after"])
    assert other.exit_code == 2 and "not among" in other.output and "rates another run" in other.output
    assert "Traceback" not in other.output

    longer = run_dir(tmp_path / "longer", "after", None, steps=200)  # 'after' again, run on to step 199
    with pytest.raises(SystemExit) as refused:
        main(["compare", str(hacked), "--", str(longer), "--truth", str(study.directory)])
    assert refused.value.code == 2 and "last quarter" in capsys.readouterr().err
    with pytest.raises(SystemExit) as read:
        main(["compare", str(hacked), "--", str(good), "--truth", str(study.directory)])
    assert read.value.code in (0, 1, 3)


def test_a_found_study_of_another_run_is_noted_and_the_runs_findings_stay(tmp_path: Path):
    good, hacked = run_dir(tmp_path, "good", None), run_dir(tmp_path, "hacked", 40)
    assert runner.invoke(cli, ["rate", str(good), "--per-bin", "6", "--repeat-every", "0", "--no-serve"]).exit_code == 0
    study = Study.open(good / "studies" / "ratings")
    for rater in study.raters():
        rate_all(study, rater, quality_rating)
    own = json.loads(runner.invoke(cli, ["doctor", str(good), "--json"]).stdout)
    assert any("mean rating on 1-7" in n for n in own["notes"])  # its own run: read
    import shutil

    shutil.copytree(good / "studies", hacked / "studies")  # another run's study, copied beside this one
    out = json.loads(runner.invoke(cli, ["doctor", str(hacked), "--json"]).stdout)
    assert any("was not read as the truth" in n and "rates another run" in n for n in out["notes"]), out["notes"]
    assert not any("mean rating on 1-7" in n for n in out["notes"])
