"""A study's items out to an annotation tool, and its people's ratings back in.

- Label Studio 1.x: tasks `[{"data": {"prompt", "response", "item"}}]` with a labeling
  config (a `<Rating>` on the response, `maxRating` the scale's size, and an "unreadable"
  `<Choices>`); its JSON export gives each task's `annotations`, each with a `result` list
  whose `rating` entry holds `{"rating": N}` (N from 1), `completed_by` the annotator, and
  `was_cancelled` for a skipped task (Label Studio's task format and Rating tag docs:
  labelstud.io/guide/task_format, labelstud.io/tags/rating).
- Argilla 2.x: records `{"id", "fields": {"prompt", "response"}}` for a dataset with a
  `RatingQuestion` named `rating` (the scale's values) and a `LabelQuestion` named
  `unreadable`; its records export as `Record.to_dict()` writes them, `{"id", "fields",
  "metadata", "suggestions", "responses": {QUESTION: [{"value", "user_id"}]}, "vectors",
  "status", "_server_id"}` (argilla 2.x, argilla/records/_resource.py).

Items go out under their random key, in a shuffled order, with nothing of their system or
step; each annotator comes back as a rater of kind "tool" named after the tool and its
user, so ratings from the page and from the tool sit side by side.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import quoteattr

from rlhflab.runs import read_jsonl
from rlhflab.studies.design import UNREADABLE, StudyError
from rlhflab.studies.ratings import record_imported
from rlhflab.studies.store import Study

Tool = Literal["label-studio", "argilla"]
TOOLS: tuple[Tool, ...] = ("label-studio", "argilla")
RATING, FLAG = "rating", "unreadable"


@dataclass
class Imported:
    recorded: int = 0
    duplicates: int = 0
    skipped: list[str] = field(default_factory=list)  # what was not read, and why


def _shuffled_items(study: Study) -> list[dict]:
    items = study.items()
    random.Random().shuffle(items)  # an order of no meaning: a rater learns nothing from a task's place
    return items


def label_studio_config(study: Study) -> str:
    d = study.design
    return (f"<View>\n  <Header value={quoteattr(d.instructions)}/>\n  <Text name=\"prompt\" value=\"$prompt\"/>\n"
            f"  <Text name=\"response\" value=\"$response\"/>\n"
            f"  <Rating name=\"{RATING}\" toName=\"response\" maxRating=\"{d.scale_max - d.scale_min + 1}\"/>\n"
            f"  <Choices name=\"{FLAG}\" toName=\"response\" choice=\"single\">\n"
            f"    <Choice value=\"{UNREADABLE}\"/>\n  </Choices>\n</View>\n")


def export_items(study: Study, tool: Tool, out: Path) -> list[Path]:
    """Write the study's items for `tool` (and Label Studio's labeling config beside them)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)  # as every export does: the file's directories made
    items = _shuffled_items(study)
    if tool == "label-studio":
        tasks = [{"data": {"prompt": i["prompt"], "response": i["response"], "item": i["key"]}} for i in items]
        out.write_text(json.dumps(tasks, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        config = out.with_suffix(".xml")
        config.write_text(label_studio_config(study), encoding="utf-8")
        return [out, config]
    records = [{"id": i["key"], "fields": {"prompt": i["prompt"], "response": i["response"]}} for i in items]
    out.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return [out]


def _load(path: Path) -> list[dict]:
    """A JSON list (or an object holding `records` or `tasks`), or JSON lines."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = read_jsonl(path)
        except ValueError as err:
            raise StudyError(f"{err} (neither JSON nor JSON lines)") from None
    if isinstance(data, dict):
        data = data.get("records", data.get("tasks", [data]))
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise StudyError(f"{path}: expected a list of Label Studio tasks or Argilla records")
    return data


def detect(rows: list[dict], path: Path) -> Tool:
    if rows and all("data" in r for r in rows):
        return "label-studio"
    if rows and all("fields" in r for r in rows):
        return "argilla"
    raise StudyError(f"{path}: neither Label Studio tasks (with 'data' and 'annotations') nor Argilla records "
                     "(with 'fields' and 'responses')")


def import_ratings(study: Study, path: Path, tool: Tool | None = None) -> Imported:
    """Read an annotation tool's export of this study's items back as ratings."""
    rows = _load(path)
    tool = tool or detect(rows, path)
    answers = _label_studio(rows, study, path) if tool == "label-studio" else _argilla(rows, study, path)
    result = Imported()
    raters = {r.name: r for r in study.raters("tool")}
    for where, user, key, rating in answers:
        if isinstance(rating, str):  # the reason an answer cannot be read
            result.skipped.append(f"{where}: {rating}")
            continue
        name = f"{tool}:{user}"
        rater = raters.get(name) or raters.setdefault(name, study.add_rater("tool", name))
        outcome = record_imported(study, rater, key, rating)
        if outcome == "recorded":
            result.recorded += 1
        elif outcome == "duplicate":
            result.duplicates += 1
        else:
            result.skipped.append(f"{where}: {'no item ' + repr(key) + ' in this study' if outcome == 'unknown' else outcome}")
    return result


def _label_studio(tasks: list[dict], study: Study, path: Path):
    offset = study.design.scale_min - 1  # Label Studio's stars count from 1
    for t, task in enumerate(tasks):
        key = (task.get("data") or {}).get("item")
        for a, annotation in enumerate(task.get("annotations") or []):
            where = f"{path}: task {t + 1} ({task.get('id', '?')}), annotation {a + 1}"
            if annotation.get("was_cancelled"):
                continue
            user = annotation.get("completed_by")
            user = user.get("email") or user.get("id") if isinstance(user, dict) else user
            rating: float | str | None = "no rating and not marked unreadable"
            for result in annotation.get("result") or []:
                value = result.get("value") or {}
                if result.get("from_name") == FLAG and UNREADABLE in (value.get("choices") or []):
                    rating = None
                    break
                if result.get("type") == "rating" or result.get("from_name") == RATING:
                    stars = value.get("rating")
                    rating = stars + offset if isinstance(stars, (int, float)) else f"rating {stars!r} is not a number"
            yield where, user, key, rating


def _argilla(records: list[dict], study: Study, path: Path):
    for n, record in enumerate(records):
        key = record.get("id") or (record.get("metadata") or {}).get("item")
        responses = record.get("responses") or {}
        flagged = {r.get("user_id") for r in responses.get(FLAG) or [] if UNREADABLE in _as_list(r.get("value"))}
        users = {r.get("user_id") for r in responses.get(RATING) or []} | flagged
        for user in sorted(u for u in users if u is not None):
            where = f"{path}: record {n + 1} ({key}), user {user}"
            if user in flagged:
                yield where, user, key, None
                continue
            value = next(r.get("value") for r in responses[RATING] if r.get("user_id") == user)
            yield where, user, key, value if isinstance(value, (int, float)) else f"rating {value!r} is not a number"


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]
