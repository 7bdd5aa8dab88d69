"""The rule and clue tables of docs/doctor.md, generated from the rule registry
(`rlhflab doctor --rules-doc docs/doctor.md`, written by `rlhflab.markdown`); a test fails
when the doc is stale."""

from __future__ import annotations

from pathlib import Path

from rlhflab.doctor.causes import Clue
from rlhflab.doctor.rules import RULES, Rule
from rlhflab.doctor.table import MetricTable
from rlhflab.markdown import cell, sections_are_current, write_sections

COMMAND = "`rlhflab doctor --rules-doc docs/doctor.md`"


def _rule_row(rule: Rule) -> str:
    empty = MetricTable()
    thresholds = "<br>".join(f"`{t.name}` = {t.value:g}: {cell(t.source)}" for t in rule.thresholds) or "-"
    causes = ", ".join(make(empty).component for make in rule.causes) or "-"
    clues = ", ".join(f"`{c.name}`" for c in sorted(rule.clues, key=lambda c: c.priority)) or "-"
    return (f"| `{rule.name}` | {rule.symptom} | {', '.join(f'`{m}`' for m in rule.requires) or '-'} | "
            f"{cell(rule.description)} | {thresholds} | {causes} | {clues} |")


def rules_table() -> str:
    """One row per registered rule, in the order the doctor runs them."""
    lines = ["| rule | symptom | needs | fires when | thresholds and their sources | causes, most likely first | "
             "clues that reorder them |", "|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [_rule_row(rule) for rule in RULES])


def all_clues() -> list[Clue]:
    """Every clue some rule lists, in priority order."""
    return sorted({c.name: c for rule in RULES for c in rule.clues}.values(), key=lambda c: c.priority)


def clues_table() -> str:
    lines = ["| priority | clue | holds when | for the rules |", "|---|---|---|---|"]
    for clue in all_clues():
        rules = ", ".join(f"`{r.name}`" for r in RULES if clue in r.clues)
        lines.append(f"| {clue.priority} | `{clue.name}` | {cell(clue.description)} | {rules} |")
    return "\n".join(lines)


def spellings_table() -> str:
    """The name resolver's spelling families (`formats/resolver.py`), with their sources."""
    from rlhflab.doctor.formats.resolver import MEANS, SPREADS

    lines = ["| canonical | statistic | spellings (normalised) | where they are logged |", "|---|---|---|---|"]
    for statistic, families in (("mean", MEANS), ("std", SPREADS)):
        for family in families:
            lines.append(f"| `{family.metric}` | {statistic} | {', '.join(f'`{s}`' for s in sorted(family.spellings))} "
                         f"| {cell(family.sources)} |")
    return "\n".join(lines)


def impossible_table() -> str:
    """Every canonical metric: whether a healthy run can log it exactly 0, exactly constant
    or other than 1 while the policy moves, why, and the rule that holds it where it cannot
    (`rules/impossible.py`), with the floor below which the log's precision must reach."""
    from rlhflab.doctor.rules.impossible import decisions

    lines = ["| metric | a healthy run cannot log it | why | rule | printed precision finer than |",
             "|---|---|---|---|---|"]
    for metric, pin, why, rule, floor in decisions():
        lines.append(f"| `{metric}` | {pin} | {cell(why)} | {f'`{rule}`' if rule else '-'} | "
                     f"{f'`{floor.name}` = {floor.value:g}' if floor else '-'} |")
    return "\n".join(lines)


def file_kinds_table() -> str:
    """The log file kinds (`formats.FORMATS`), in the order they are tried."""
    from rlhflab.doctor.formats import FORMATS

    lines = ["| file kind | reads | trainers |", "|---|---|---|"]
    for fmt in FORMATS:
        trainers = ", ".join(f"`{d.name}`" for d in fmt.dialects) or "any"
        lines.append(f"| `{fmt.name}` | {cell(fmt.reads or fmt.description)} | {trainers} |")
    return "\n".join(lines)


# The settings whose keys show how a trainer's fixes are written, in order of preference.
FIX_EXAMPLES = ("kl_coef", "lr", "clip_eps", "group_size")


def trainers_table() -> str:
    """The trainers' vocabularies (`formats.DIALECTS`), the canonical names last."""
    from rlhflab.doctor.formats import DIALECTS

    lines = ["| trainer | its names | units and artefacts handled | fixes written as |", "|---|---|---|---|"]
    for dialect in DIALECTS:
        keys = [dialect.vocabulary[s] for s in FIX_EXAMPLES if s in dialect.vocabulary][:2]
        fixes = ", ".join(f"`{k}`" for k in keys) + (", ..." if len(dialect.vocabulary) > len(keys) else "")
        lines.append(f"| `{dialect.name}` | {cell(dialect.description)} | {cell(dialect.handles) or '-'} | "
                     f"{fixes or '-'} |")
    return "\n".join(lines)


SECTIONS = {"rule": rules_table, "clue": clues_table, "spelling": spellings_table, "impossible": impossible_table,
            "file kind": file_kinds_table, "trainer": trainers_table}


def write_rules_doc(path: Path) -> None:
    write_sections(path, SECTIONS, COMMAND)


def doc_is_current(path: Path) -> bool:
    return sections_are_current(path, SECTIONS, COMMAND)
