"""Whose answers count: people (raters on the page, bots that rate through it, annotators
whose answers were imported), the judges, one judge by name, or everyone. Every reader of a
study's answers (results, exports, a study as a truth) takes one, and says which it used:
people and judges are never pooled without being asked, and a study answered by a judge
alone is still read, as that judge's.

The default (`answered_by(study, None)`): the people where any person has answered, else
the judges where any judge has, so a study a judge answered at once reads as it is, with
the judge named.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhflab.studies.design import StudyError
from rlhflab.studies.store import Rater, Study

PEOPLE_KINDS = ("person", "bot", "tool")
"""Raters who stand for people: on the page, a bot through the page, an annotation tool's user."""
CHOICES = "people, judges, judge:NAME or all"


@dataclass(frozen=True)
class Whose:
    spec: str
    """people | judges | judge:NAME | all"""
    why: str = ""
    """How it was chosen, when not asked for (said beside the results)."""

    def counts(self, rater: Rater) -> bool:
        if self.spec == "people":
            return rater.kind in PEOPLE_KINDS
        if self.spec == "judges":
            return rater.kind == "judge"
        if self.spec.startswith("judge:"):
            return rater.kind == "judge" and rater.name == self.spec.removeprefix("judge:")
        return True

    @property
    def is_people(self) -> bool:
        return self.spec == "people"

    def describe(self) -> str:
        return f"answers of {self.spec}" + (f" ({self.why})" if self.why else "")


PEOPLE = Whose("people")
JUDGES = Whose("judges")


def parse_whose(text: str) -> Whose:
    if text in ("people", "judges", "all") or (text.startswith("judge:") and text != "judge:"):
        return Whose(text)
    raise StudyError(f"--answers {text!r}: expected {CHOICES}")


def answered_by(study: Study, asked: str | None) -> Whose:
    """Whose answers count in `study`: `asked`, or the default (module docstring); a named judge
    that is no rater of the study is a StudyError naming the judges it has."""
    raters = study.raters()
    if asked is not None:
        whose = parse_whose(asked)
        if whose.spec.startswith("judge:") and not any(whose.counts(r) for r in raters):
            judges = ", ".join(r.name for r in raters if r.kind == "judge") or "none"
            raise StudyError(f"{study.directory}: no judge {whose.spec.removeprefix('judge:')!r}; its judges: {judges}")
        return whose
    answered = {row["rater_id"] for row in study.rows("SELECT DISTINCT rater_id FROM ratings")}
    if any(r.id in answered for r in raters if PEOPLE.counts(r)) or not any(
            r.id in answered for r in raters if JUDGES.counts(r)):
        return PEOPLE
    judges = [r.name for r in raters if r.kind == "judge" and r.id in answered]
    spec = f"judge:{judges[0]}" if len(judges) == 1 else "judges"
    return Whose(spec, "no person has answered yet")
