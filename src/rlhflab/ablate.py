"""`rlhflab ablate RUN`: the doctor's candidate fixes, one at a time, each over seeds, against
a control; the confirmed cause, or "no setting cures it".

The arms: the distinct fixes of the top K causes of the run's medium/high findings (each in
rlhflab's keys), any `--fix` given, and one per non-default PPO component of the run
(swapped back to its default); the control is the run's config unchanged. Every arm runs
the same seeds (`ppo.seed`, the run's own first), from the stage its keys touch, sharing the
stages before by hard link (verify.py). Arms live at `RUN/ablate/ARM/seedK/`, each seed a
run directory marked done by its `seed.json`, so `--resume` continues where a kill left
off (PPO from its checkpoint). An arm's seed stops early once every finding of the control
is already there, no later than on the control's seeds (it can then be neither gone nor
delayed). The ranking is `rlhflab compare`'s, each arm against the control
(doctor/arms.py); `RUN/ablate/ablate.json` and `RUN/ablate/report.html` hold the result.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path

from rich.live import Live
from rich.table import Table

from rlhflab.checkpoint import count_lines
from rlhflab.config import ConfigError, PipelineConfig, apply_overrides, config_from_run, parse_override, save_config
from rlhflab.doctor import RLHFLAB_DIALECT as DIALECT
from rlhflab.doctor import (
    Arm,
    Diagnosis,
    Finding,
    MetricTable,
    Ranking,
    candidate_fixes,
    choose_seeds,
    end_values,
    rank_arms,
    read_and_diagnose,
    serious,
    truth_metric,
    write_ablation_report,
    write_diagnosis,
    write_report,
)
from rlhflab.errors import InputError
from rlhflab.faults.zoo import components_for
from rlhflab.pipeline import STAGE_NAMES, STAGES
from rlhflab.ppo.components import non_default_components, record_components
from rlhflab.preflight import check_response_room
from rlhflab.progress import console
from rlhflab.runs import RunDir, link_file, link_tree, read_json, write_json
from rlhflab.verify import first_stage_to_rerun, rerun, share_stages

CONTROL = "control"
PLAN_FILE = "plan.json"
DONE_FILE = "seed.json"


class AblateError(InputError):
    """An ablation that cannot run as asked (said with what to do instead)."""


@dataclass
class Plan:
    """What an ablation runs: its arms and seeds, and why so many seeds."""

    arms: list[Arm]
    seeds: list[int]
    seeds_why: str
    skipped: list[str] = field(default_factory=list)  # candidate fixes not run, and why
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"arms": [asdict(a) for a in self.arms], "seeds": self.seeds, "seeds_why": self.seeds_why,
                "skipped": self.skipped, "warnings": self.warnings}

    @staticmethod
    def from_json(data: dict) -> "Plan":
        arms = [Arm(**{**a, "changes": tuple(a["changes"])}) for a in data["arms"]]
        return Plan(arms, data["seeds"], data["seeds_why"], data.get("skipped", []), data.get("warnings", []))


def arm_name(changes: tuple[str, ...]) -> str:
    """A directory name that says the arm's changes."""
    return ",".join(changes).replace("/", "_").replace(" ", "")


def candidate_arms(diagnosis: Diagnosis, config: PipelineConfig, top: int) -> tuple[list[Arm], list[str]]:
    """The doctor's candidate fixes (doctor/arms.py) in rlhflab keys, as arms; a fix the run
    already has, or one its model cannot run, is said, not run."""
    def refused(changes: tuple[str, ...]) -> str | None:
        changed = apply_overrides(config, dict(parse_override(c) for c in changes))
        if changed == config:
            return "the run already has these settings"
        try:
            check_response_room(changed)
        except ConfigError as err:
            return str(err)
        return None

    fixes, skipped = candidate_fixes(diagnosis, DIALECT.vocabulary, top, keyed=True, reject=refused)
    return [Arm(arm_name(f.rendered), "setting", f.rendered, f.component, f.why) for f in fixes], skipped


def component_arms(config: PipelineConfig) -> list[Arm]:
    """One arm per non-default PPO component of the run, swapped back to its default."""
    return [Arm(arm_name((f"components.{name}=default",)), "component", (f"components.{name}=default",), name,
                f"the run's {name} is {path}, not the default")
            for name, path in non_default_components(config).items()]


def given_arms(fixes: list[str]) -> list[Arm]:
    arms = []
    for text in fixes:
        changes = tuple(part.strip() for part in text.split(",") if part.strip())
        for change in changes:
            parse_override(change)
        arms.append(Arm(arm_name(changes), "given", changes, "", "given with --fix"))
    return arms


def plan_ablation(run_dir: Path, top: int = 3, seeds: int | None = None, fixes: list[str] = ()) -> Plan:
    table, diagnosis = read_and_diagnose(run_dir)
    config = run_config(run_dir)
    arms, skipped = candidate_arms(diagnosis, config, top)
    arms += given_arms(list(fixes)) + component_arms(config)
    names = [a.name for a in arms]
    duplicates = {n for n in names if names.count(n) > 1}
    arms = [a for i, a in enumerate(arms) if a.name not in duplicates or names.index(a.name) == i]
    for arm in arms:  # every arm's config must load, and fit its model, before anything runs
        changed = apply_overrides(config, dict(parse_override(c) for c in arm.changes), source=f"arm {arm.name}")
        try:
            check_response_room(changed)
        except ConfigError as err:
            raise ConfigError(f"arm {arm.name}: {err}") from None
    if not arms:
        raise AblateError(f"{run_dir}: nothing to ablate: no finding of medium or high severity has a setting to change "
                          f"({'; '.join(skipped) or 'no finding'}); give one with --fix KEY=VALUE")
    count, why, warnings = choose_seeds(table, seeds)
    first = config.ppo_seed
    return Plan(arms, [first + k for k in range(count)], why, skipped, warnings)


def run_config(run_dir: Path) -> PipelineConfig:
    """The run's config with its components recorded (runs written before they were)."""
    config = config_from_run(Path(run_dir))
    return record_components(config, components_for(config))


# --- running the seeds --------------------------------------------------------------------
@dataclass(frozen=True)
class StillThere:
    """Stops an arm's seed once every finding of the control is there at medium/high, each
    beginning no later than its last onset on the control's seeds."""

    latest_onsets: tuple[tuple[str, int], ...]

    def __call__(self, diagnosis: Diagnosis) -> Finding | None:
        found = {f.rule: f for f in serious(diagnosis)}
        if not self.latest_onsets:
            return None
        for rule, onset in self.latest_onsets:
            if rule not in found or found[rule].onset_step > onset:
                return None
        return found[self.latest_onsets[0][0]]


@dataclass(frozen=True)
class SeedTask:
    source: Path
    out: Path
    changes: tuple[str, ...]
    seed: int
    resume: bool
    stop: StillThere | None
    threads: int = 0  # torch threads in a worker process (0: as the process has them)


def seed_done(out: Path) -> dict | None:
    path = Path(out) / DONE_FILE
    return read_json(path) if path.is_file() else None


def run_seed(task: SeedTask) -> dict:
    """One arm's seed: its stages from the first its changes touch, the others shared."""
    if task.threads:
        import torch

        torch.set_num_threads(task.threads)
    done = seed_done(task.out)
    if done is not None:
        return done
    source = RunDir(task.source)
    config = apply_overrides(run_config(task.source),
                             dict([*(parse_override(c) for c in task.changes), ("ppo.seed", str(task.seed))]),
                             source=f"ablation seed {task.seed}")
    out = RunDir(task.out)
    resume = task.resume and out.root.is_dir()
    first = first_stage_to_rerun(dict(parse_override(c) for c in task.changes))
    sibling = _sibling_with_stages(out.root, first)
    if sibling is not None:  # the arm's stages before PPO do not depend on ppo.seed: one seed ran them
        source, first = RunDir(sibling), STAGE_NAMES[-1]
    start = time.perf_counter()
    results = rerun(config, source, out, first, components_for(config), show_progress=False, resume=resume,
                    stop_when=task.stop)
    stopped = results.get("eval", {}).get("stopped")
    record = {"seed": task.seed, "changes": list(task.changes), "stopped": stopped,
              "seconds": round(time.perf_counter() - start, 1)}
    write_json(out.root / DONE_FILE, record)
    return record


def _sibling_with_stages(out: Path, first: str) -> Path | None:
    """Another seed of the same arm whose stages from `first` up to PPO are complete."""
    needed = [stage for stage in STAGES[STAGE_NAMES.index(first):] if stage.name != STAGE_NAMES[-1]]
    if not needed:
        return None
    for sibling in sorted(out.parent.glob("seed*")):
        summary = sibling / "summary.json"
        if sibling == out or not summary.is_file():
            continue
        done = read_json(summary)
        if all(stage.summary_key in done and (sibling / stage.outputs[-1]).is_dir() for stage in needed):
            return sibling
    return None


def reuse_run_as_control(source: RunDir, out: RunDir, seed: int) -> bool:
    """The control's first seed is the run itself (same config and seed): its files are
    linked, not retrained, when its PPO stage ran to the end."""
    config = run_config(source.root)
    eval_file = source.root / "metrics" / "eval.json"
    if not (source.stage3_policy.is_dir() and eval_file.is_file()) or "stopped" in read_json(eval_file):
        return False
    out.create()
    share_stages(source, out, "ppo")
    link_tree(source.stage3_policy, out.stage3_policy)
    for path in (source.metrics("ppo"), source.samples("ppo"), eval_file):
        if path.is_file():
            link_file(path, out.root / path.relative_to(source.root))
    save_config(apply_overrides(config, {"ppo.seed": seed}), out.config)
    write_json(out.root / DONE_FILE, {"seed": seed, "changes": [], "stopped": None, "linked_from": str(source.root)})
    return True


class ArmsDisplay:
    """A live table, one row per arm: seeds done, and the running seed's iteration (read from
    its metrics file, so it works for worker processes too)."""

    def __init__(self, root: Path, arms: list[str], seeds: list[int], iterations: int) -> None:
        self.root, self.arms, self.seeds, self.iterations = root, arms, seeds, iterations

    def _progress(self, arm: str, seed: int) -> str:
        out = self.root / arm / f"seed{seed}"
        done = seed_done(out)
        if done is not None:
            return "stopped early" if done.get("stopped") else "done"
        metrics = out / "metrics" / "ppo.jsonl"
        if not metrics.is_file():
            return "waiting" if not out.is_dir() else "stages 1-2"
        return f"{count_lines(metrics)}/{self.iterations}"

    def __rich__(self) -> Table:
        table = Table(title="rlhflab ablate", title_justify="left")
        table.add_column("arm")
        for seed in self.seeds:
            table.add_column(f"seed {seed}", justify="right")
        for arm in self.arms:
            table.add_row(arm, *(self._progress(arm, s) for s in self.seeds))
        return table


def usable_jobs(jobs: int) -> tuple[int, int, list[str]]:
    """Jobs and torch threads per job: never more threads in all than cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    notes = []
    if jobs > cores:
        notes.append(f"--jobs {jobs} is more than the {cores} core(s) here: running {cores}")
        jobs = cores
    return max(1, jobs), max(1, cores // max(1, jobs)), notes


def run_tasks(tasks: list[SeedTask], jobs: int, threads: int) -> list[dict]:
    if jobs <= 1:
        return [run_seed(t) for t in tasks]
    # spawn, not fork: torch's thread pools do not survive a fork
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run_seed, replace(t, threads=threads)) for t in tasks]
        return [f.result() for f in as_completed(futures)]


@dataclass
class AblationResult:
    root: Path
    plan: Plan
    ranking: Ranking
    control: list[MetricTable]
    arms: dict[str, list[MetricTable]]
    wall_s: float = 0.0  # this invocation of `ablate`, from its start to its ranking


def latest_onsets(diagnoses: list[Diagnosis]) -> StillThere:
    """The control's findings with their last onset over its seeds."""
    onsets: dict[str, int] = {}
    for d in diagnoses:
        for f in serious(d):
            onsets[f.rule] = max(onsets.get(f.rule, f.onset_step), f.onset_step)
    return StillThere(tuple(sorted(onsets.items())))


def ablate(run_dir: Path, top: int = 3, seeds: int | None = None, fixes: list[str] = (), jobs: int = 1,
           resume: bool = False, show_progress: bool = True, judge: str | None = None,
           template: str | None = None) -> AblationResult:
    started = time.perf_counter()
    source = RunDir(Path(run_dir))
    root = source.ablate
    plan_path = root / PLAN_FILE
    if plan_path.is_file():
        if not resume:
            raise AblateError(f"{root}: an ablation is already here; continue it with --resume, or remove the "
                              "directory to start again")
        plan = Plan.from_json(read_json(plan_path))
        if seeds is not None and seeds > len(plan.seeds):  # more seeds for an unconfirmed cure
            plan.seeds += [plan.seeds[-1] + k for k in range(1, seeds - len(plan.seeds) + 1)]
            plan.seeds_why = f"{seeds} seeds a side, raised with --resume --seeds (before: {plan.seeds_why})"
            write_json(plan_path, plan.to_json())
    else:
        plan = plan_ablation(source.root, top, seeds, list(fixes))
        root.mkdir(parents=True, exist_ok=True)
        write_json(plan_path, plan.to_json())
    jobs, threads, notes = usable_jobs(jobs)
    for line in [*plan.warnings, *notes]:
        console.print(f"[yellow]warning:[/yellow] {line}")
    console.print(f"seeds: {plan.seeds_why}")
    for line in plan.skipped:
        console.print(f"[dim]not an arm: {line}[/dim]")

    config = run_config(source.root)
    display = ArmsDisplay(root, [CONTROL] + [a.name for a in plan.arms], plan.seeds, config.ppo.iterations)
    with Live(display, console=console, refresh_per_second=1, transient=False) if show_progress else nullcontext():
        reuse = seed_done(root / CONTROL / f"seed{plan.seeds[0]}") is not None or reuse_run_as_control(
            source, RunDir(root / CONTROL / f"seed{plan.seeds[0]}"), plan.seeds[0])
        control_seeds = plan.seeds[1:] if reuse else plan.seeds
        run_tasks([SeedTask(source.root, root / CONTROL / f"seed{s}", (), s, True, None) for s in control_seeds],
                  jobs, threads)
        control = [read_and_diagnose(root / CONTROL / f"seed{s}") for s in plan.seeds]
        stop = latest_onsets([d for _, d in control])
        run_tasks([SeedTask(source.root, root / arm.name / f"seed{s}", arm.changes, s, True, stop)
                   for arm in plan.arms for s in plan.seeds], jobs, threads)
    arm_tables = {arm.name: [read_and_diagnose(root / arm.name / f"seed{s}")[0] for s in plan.seeds]
                  for arm in plan.arms}
    control_tables = [t for t, _ in control]
    for (_, diagnosis), s in zip(control, plan.seeds):
        write_diagnosis(diagnosis, RunDir(root / CONTROL / f"seed{s}").diagnosis)
    truths = preference_truths(source, root, plan, judge, template) if judge is not None else None
    ranking = rank_arms(control_tables, [(arm, arm_tables[arm.name]) for arm in plan.arms], truths=truths)
    result = AblationResult(root, plan, ranking, control_tables, arm_tables, time.perf_counter() - started)
    summary = ablation_json(result, source)
    write_json(root / "ablate.json", summary)
    run_table, run_diagnosis = read_and_diagnose(source.root)
    write_ablation_report(root / "report.html", run_table, run_diagnosis, ranking, control_tables, arm_tables,
                          summary)
    write_report(source.root, run_table, run_diagnosis)  # its first screen now says what the ablation confirmed
    return result


def preference_truths(source: RunDir, root: Path, plan: Plan, judge: str, template: str | None) -> dict:
    """Each arm's truth as a judge's preference (`--judge`): the first seed's policy of the
    control and of every arm sampled on the run's held-out prompts, one comparison study of
    them all (RUN/ablate/studies/pairs), answered by the judge; an arm's truth is its win rate
    over the control (studies/pair_results.py `preference_change`). An arm stopped before its
    policy was saved has none."""
    from rlhflab.judges.pairs import judge_pairs, make_pair_judge
    from rlhflab.sample import SampleError, load_model, run_sampling, sample_to_file
    from rlhflab.studies.build import Source
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.pair_results import preference_change
    from rlhflab.studies.pairs import build_pair_study
    from rlhflab.studies.whose import Whose

    sources = []
    try:
        for name in [CONTROL] + [a.name for a in plan.arms]:
            run = root / name / f"seed{plan.seeds[0]}"
            if not (run / "stage3_policy").is_dir():
                continue
            models, prompts, settings, gold = run_sampling(run)
            model, tokenizer = load_model(models["policy"])
            out = run / "samples" / "policy.jsonl"
            sample_to_file(model, tokenizer, prompts, out, settings, model_name=str(models["policy"]),
                           prompts_name="the run's held-out prompts", gold=gold)
            sources.append(Source(name, out))
        study, _ = build_pair_study(root / "studies" / "pairs", sources, {"ratings_per_item": 1, "repeat_every": 0})
        made = make_pair_judge(judge, study, template, source.stage1_lm)
        judge_pairs(study, made)
        named = Whose(f"judge:{made.name}")
        return {s.name: preference_change(study, [CONTROL], [s.name], named) for s in sources[1:]}
    except (SampleError, StudyError) as err:
        raise AblateError(f"--judge {judge}: {err}") from None


def ablation_json(result: AblationResult, source: RunDir) -> dict:
    """`RUN/ablate/ablate.json`: the plan, the verdict and each arm's comparison."""
    control_spread = _end_spread(result.control)
    ranking = result.ranking.to_json()
    return {"run": str(source.root), "plan": result.plan.to_json(), **ranking,
            "control_truth_spread": control_spread, "time": ablation_time(result),
            "next": next_step(result, source)}


def ablation_time(result: AblationResult) -> dict:
    """How long the ablation took: this invocation's wall time, and each arm's seeds' own run
    time summed (a seed resumed counts its last stretch; the run itself, reused as the
    control's first seed, counts none)."""
    arms = {CONTROL: None, **{arm.name: None for arm in result.plan.arms}}
    for name in arms:
        seconds = [(seed_done(result.root / name / f"seed{s}") or {}).get("seconds") for s in result.plan.seeds]
        arms[name] = round(sum(s for s in seconds if s is not None), 1)
    return {"wall_s": round(result.wall_s, 1), "seed_runs_s": arms}


def _end_spread(tables: list[MetricTable]) -> float | None:
    """The control's measured seed spread of its truth's last-quarter mean."""
    levels = [statistics.fmean(end_values(list(s.values))) for t in tables if (s := t.get(truth_metric(t)))]
    return statistics.stdev(levels) if len(levels) > 1 else None


def next_step(result: AblationResult, source: RunDir) -> str:
    """What to do after the verdict."""
    ranking = result.ranking
    if ranking.verdict == "confirmed":
        best = ranking.confirmed[0].arm
        if best.kind == "component":
            return f"fix PPOComponents.{best.component} in code (the arm with the default cures the run)"
        return (f"rlhflab pipeline --config {source.config} --out {source.root}-fixed " + " ".join(best.changes))
    if ranking.verdict == "no setting cures it":
        checkup = source.root / "checkup.json"
        if checkup.is_file():
            data = json.loads(checkup.read_text())
            cleared = ", ".join(data.get("cleared", [])) or "none"
            failed = ", ".join(sorted({p["name"] for p in data.get("probes", []) if not p["passed"]})) or "none"
            return f"the checkup's probes cleared: {cleared}; failed: {failed}"
        return f"rlhflab checkup {source.root} (its probes say which components they clear)"
    if ranking.verdict == "not confirmed":
        return f"rlhflab ablate {source.root} --resume --seeds {len(result.plan.seeds) + 2}"
    return "nothing to confirm"

