"""A study's items out to Label Studio and Argilla and their annotators' ratings back in,
on exports shaped as the vendors write them: Label Studio 1.x's task format (annotations
with a `result` list, `completed_by`, `was_cancelled`; the Rating tag's `{"rating": N}`:
labelstud.io/guide/task_format, labelstud.io/tags/rating) and Argilla 2.x's
`Record.to_dict()` (`responses: {question: [{"value", "user_id"}]}`, argilla 2.x
argilla/records/_resource.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rlhflab.cli import app as cli
from rlhflab.studies.design import StudyDesign
from rlhflab.studies.results import study_results
from rlhflab.studies.store import Study
from test_studies import build, samples

runner = CliRunner()


def exported(tmp_path: Path, tool: str, design=StudyDesign(bins=2, per_bin=3, repeat_every=0)):
    study = build(tmp_path, design, items=samples(steps=6, per_step=1))
    out = tmp_path / f"{tool}.json"
    result = runner.invoke(cli, ["rate", str(study.directory), "--export", tool, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return study, json.loads(out.read_text())


def test_the_export_is_blind(tmp_path: Path):
    study, tasks = exported(tmp_path, "label-studio")
    assert len(tasks) == 6 and set(tasks[0]["data"]) == {"prompt", "response", "item"}
    keys = {i["key"]: i for i in study.items()}
    assert {t["data"]["item"] for t in tasks} == set(keys)
    text = json.dumps(tasks)
    assert '"step"' not in text and '"system"' not in text and "/data/a.jsonl" not in text
    config = (tmp_path / "label-studio.xml").read_text()
    assert '<Rating name="rating" toName="response" maxRating="7"/>' in config and "unreadable" in config


def label_studio_export(tasks: list[dict], ratings: dict[int, list]) -> list[dict]:
    """The tasks back as Label Studio exports them: annotator id -> a rating per task (None: unreadable;
    'skip': cancelled)."""
    out = []
    for n, task in enumerate(tasks):
        annotations = []
        for user, answers in ratings.items():
            answer = answers[n]
            if answer == "skip":
                annotations.append({"id": 100 + n, "result": [], "was_cancelled": True, "completed_by": user})
                continue
            result = ([{"from_name": "unreadable", "to_name": "response", "type": "choices", "id": "f1",
                        "value": {"choices": ["unreadable"]}}] if answer is None else
                      [{"from_name": "rating", "to_name": "response", "type": "rating", "id": "r1",
                        "value": {"rating": answer}, "origin": "manual"}])
            annotations.append({"id": 200 + n, "result": result, "was_cancelled": False, "ground_truth": False,
                                "created_at": "2026-12-01T10:00:00Z", "lead_time": 4.2, "task": n + 1,
                                "completed_by": user})
        out.append({"id": n + 1, "data": task["data"], "annotations": annotations, "predictions": [],
                    "project": 3})
    return out


def test_label_studio_annotations_come_back_as_ratings(tmp_path: Path):
    study, tasks = exported(tmp_path, "label-studio")
    answers = {7: [5, 6, None, 2, "skip", 3], 9: [4, 7, 1, 2, 3, 3]}
    path = tmp_path / "ls_export.json"
    path.write_text(json.dumps(label_studio_export(tasks, answers)))
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert result.exit_code == 0 and "imported 11 ratings" in result.output, result.output
    by_rater = {r.name: r.id for r in study.raters("tool")}
    assert set(by_rater) == {"label-studio:7", "label-studio:9"}
    keys = {i["key"]: i["id"] for i in study.items()}
    got = {(r.rater_id, r.item_id): r.rating for r in study.ratings()}
    for user, row in answers.items():
        for task, answer in zip(tasks, row):
            item = keys[task["data"]["item"]]
            if answer == "skip":
                assert (by_rater[f"label-studio:{user}"], item) not in got
            else:
                assert got[(by_rater[f"label-studio:{user}"], item)] == answer
    # imported people are the study's people: 4 items have two readable ratings (task 3 is unreadable to 7,
    # task 5 was skipped by 7)
    assert study_results(study).alpha_ratings == 8
    again = runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert "imported 0 ratings (11 already held)" in again.output


def test_label_studio_stars_are_shifted_onto_a_scale_that_does_not_start_at_one(tmp_path: Path):
    study, tasks = exported(tmp_path, "label-studio", StudyDesign(scale_min=0, scale_max=4, bins=2, per_bin=3,
                                                                  repeat_every=0))
    path = tmp_path / "ls.json"
    path.write_text(json.dumps(label_studio_export(tasks, {1: [1, 5, 3, 3, 3, 3]})))
    runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert sorted(r.rating for r in study.ratings())[:2] == [0, 2]  # 1 star -> 0, 5 stars -> 4


def test_argilla_records_come_back_as_ratings(tmp_path: Path):
    study, records = exported(tmp_path, "argilla")
    assert set(records[0]) == {"id", "fields"}
    users = ["7b7f2a4e-0000-4000-8000-000000000001", "7b7f2a4e-0000-4000-8000-000000000002"]
    dumped = []
    for n, record in enumerate(records):  # Record.to_dict() of a dataset with these questions
        responses = {"rating": [{"value": 1 + (n + k) % 7, "user_id": u} for k, u in enumerate(users)]}
        if n == 0:
            responses = {"rating": [{"value": 4, "user_id": users[0]}],
                         "unreadable": [{"value": ["unreadable"], "user_id": users[1]}]}
        dumped.append({"id": record["id"], "fields": record["fields"], "metadata": {}, "suggestions": {},
                       "responses": responses, "vectors": {}, "status": "completed",
                       "_server_id": f"00000000-0000-4000-8000-{n:012d}"})
    path = tmp_path / "argilla_records.json"
    path.write_text(json.dumps(dumped))
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert result.exit_code == 0 and "imported 12 ratings" in result.output, result.output
    first = {i["key"]: i["id"] for i in study.items()}[records[0]["id"]]
    assert sorted((r.rating is None) for r in study.ratings() if r.item_id == first) == [False, True]


def test_an_export_of_something_else_is_refused_with_what_was_expected(tmp_path: Path):
    study = build(tmp_path, StudyDesign(bins=2, per_bin=2))
    path = tmp_path / "other.json"
    path.write_text(json.dumps([{"text": "a"}]))
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert result.exit_code == 2 and "Label Studio tasks" in result.output and "Argilla records" in result.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": 1}\n{"data": \n')
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(broken)])
    assert result.exit_code == 2 and f"{broken}:2" in result.output
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps([{"data": {"item": "nope"}, "annotations": [
        {"result": [{"from_name": "rating", "type": "rating", "value": {"rating": 3}}], "completed_by": 1}]}]))
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(unknown)])
    assert "no item 'nope' in this study" in result.output
    assert Study.open(study.directory).ratings() == []


FIXTURES = Path(__file__).parent / "fixtures" / "annotations"


def test_records_written_by_the_argilla_package_come_back_as_ratings(tmp_path: Path):
    """tests/fixtures/annotations/argilla_records.json was written by argilla 2.8's own
    `Record.to_dict()` (write_argilla.py beside it); only the record ids are set here to
    this study's item keys."""
    study, _ = exported(tmp_path, "argilla")
    written = json.loads((FIXTURES / "argilla_records.json").read_text())
    keys = [i["key"] for i in study.items()]
    for record, key in zip(written["records"], keys):
        record["id"] = key
    path = tmp_path / "records.json"
    path.write_text(json.dumps(written))
    result = runner.invoke(cli, ["rate", str(study.directory), "--import", str(path)])
    assert result.exit_code == 0 and "imported 12 ratings" in result.output, result.output
    expected = ((5, 6), (2, None), (7, 6), (1, 2), (4, 4), (3, 5))  # write_argilla.RATINGS, unreadable as None
    raters = {r.name: r.id for r in study.raters("tool")}
    first, second = (raters[f"argilla:00000000-0000-0000-0000-00000000000{k}"] for k in (1, 2))
    got = {(r.rater_id, r.item_id): r.rating for r in study.ratings()}
    item_ids = {i["key"]: i["id"] for i in study.items()}
    for key, (a, b) in zip(keys, expected):
        assert (got[(first, item_ids[key])], got[(second, item_ids[key])]) == (a, b)
