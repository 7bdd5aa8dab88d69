"""The study commands: `rlhflab rate`, `rlhflab pair` (a study of a kind: built, served, judged,
exported, its results) and `rlhflab sample` (what a study compares)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from rlhflab.cli.common import AnswersOption, HostOption, NoServeOption, PortOption, studies_extra, training_stack
from rlhflab.cli.errors import fail, writable_parent
from rlhflab.cli.render import announce_study, print_links, print_pair_results, print_study_results
from rlhflab.progress import console

RATE_HELP = """Blind ratings of a run's samples across its steps, served on a local page.

    rlhflab rate RUN                        # build RUN/studies/ratings and serve it
    rlhflab rate a=run1 b=gens.jsonl --study DIR --map text=sample/response
    rlhflab rate DIR --results [--json]     # mean rating per system and step bin

Each source is [NAME=]PATH: a run or any sample file the doctor reads. Reopening a study
serves the same rater links; --add adds sources to it. Exit code 2 for bad input."""


def rate(
    sources: Optional[list[str]] = typer.Argument(None, help="[NAME=]PATH of each run or sample file (or a study "
                                                 "directory)", show_default=False),
    study: Optional[Path] = typer.Option(None, "--study", help="The study's directory (default for one rlhflab run: "
                                         "RUN/studies/ratings)."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="THEIRS=sample/FIELD for sample files "
                                                "(as for the doctor)"),
    add: bool = typer.Option(False, "--add", help="Add these sources to an existing study."),
    results: bool = typer.Option(False, "--results", help="Print the study's results and exit."),
    json_output: bool = typer.Option(False, "--json", help="With --results: print them as JSON."),
    answers: Optional[str] = AnswersOption,
    scale: Optional[str] = typer.Option(None, "--scale", help="The rating scale LOW-HIGH (default 1-7), plus "
                                        "'unreadable/broken'."),
    bins: Optional[int] = typer.Option(None, "--bins", help="Step bins per system (default 10)."),
    per_bin: Optional[int] = typer.Option(None, "--per-bin", help="Distinct samples drawn per bin (default 8)."),
    ratings_per_item: Optional[int] = typer.Option(None, "--ratings-per-item", help="Raters per item at least "
                                                   "(default 2)."),
    repeat_every: Optional[int] = typer.Option(None, "--repeat-every", help="A repeated item after this many new "
                                               "ones, for consistency (default 10; 0: never)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seeds the draw of items (default 0)."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Rater links (one per person; default: ratings "
                                         "per item). Reopening with more adds links."),
    host: str = HostOption,
    port: int = PortOption,
    no_serve: bool = NoServeOption,
    judges: Optional[list[str]] = typer.Option(None, "--judge", help="KIND:DIR: rate every item with a local model "
                                               "and exit: rm (a reward model dir), classifier (any sequence "
                                               "classifier), lm (a causal LM asked with --template)."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the prompt, with "
                                            "{prompt}, {response} (and {low}, {high}), ending where the rating's "
                                            "number follows."),
    label: Optional[str] = typer.Option(None, "--label", help="With --judge classifier:DIR: the label whose "
                                        "probability is the score (default: the last)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="With --judge rm:DIR for a reward model "
                                             "saved without a tokenizer: the directory of the one it reads."),
    export: Optional[str] = typer.Option(None, "--export", help="label-studio or argilla: write the study's items "
                                         "(blind, shuffled) as that tool's tasks or records to --out, and exit."),
    out: Optional[Path] = typer.Option(None, "--out", help="With --export: the file to write."),
    import_file: Optional[Path] = typer.Option(None, "--import", help="A Label Studio JSON export or Argilla records "
                                               "of this study's items: their ratings join the study's, and exit."),
) -> None:
    studies_extra()
    from rlhflab.doctor import parse_map_options
    from rlhflab.studies.build import open_or_build, parse_sources, study_directory
    from rlhflab.studies.design import parse_scale
    from rlhflab.studies.kinds import RATING, open_study
    from rlhflab.studies.whose import answered_by

    def opened():
        directory, listed = _study_or_sources(study, sources)
        parsed = parse_sources(listed)
        directory = study_directory(directory, parsed)
        if results:
            opened_study = open_study(directory, RATING)
            print_study_results(opened_study, json_output, answered_by(opened_study, answers))
            return None
        asked = {k: v for k, v in dict(bins=bins, per_bin=per_bin, ratings_per_item=ratings_per_item,
                                       repeat_every=repeat_every, seed=seed).items() if v is not None}
        if scale is not None:
            asked["scale_min"], asked["scale_max"] = parse_scale(scale)
        built, added = open_or_build(directory, parsed, asked, add, parse_map_options(mapping).for_samples())
        return built, added, f"study {directory}", "items"

    def answered_at_once(built) -> bool:
        if judges:
            _run_judges(built, judges, template, label, tokenizer)
        elif export is not None or import_file is not None:
            _interchange(built, export, out, import_file)
        return bool(judges) or export is not None or import_file is not None

    if export is not None:
        _export_checked(export, out)
    serves = not (results or judges or export is not None or import_file is not None or no_serve)
    study_command(opened, raters, answered_at_once, no_serve, host, port, serves)


SAMPLE_HELP = """A local model's responses to a prompt file, as a sample file.

    rlhflab sample MODEL_DIR --prompts FILE --out SAMPLES.jsonl   # any HF causal LM, or a LoRA adapter dir
    rlhflab sample RUN                     # RUN/samples/stage1.jsonl and policy.jsonl, the run's settings

Prompt files hold `prompt` records (strings, or messages through the model's chat template).
Seeded: each prompt's response has a random stream of its own. The settings are written beside
the samples (SAMPLES.jsonl.settings.json); a rerun resumes, skipping prompts already written.
Exit code 2 for bad input."""


def sample(
    source: Path = typer.Argument(..., help="A model directory (or LoRA adapter directory), or an rlhflab run."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file (.jsonl/.parquet of `prompt`); "
                                           "a run's default: its held-out prompts."),
    out: Optional[Path] = typer.Option(None, "--out", help="The sample file to write (JSONL); a run's default: "
                                       "RUN/samples/{stage1,policy}.jsonl."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature (default 1, or "
                                                "the run's ppo.temperature)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Tokens per response at most "
                                                 "(default 32, or the run's ppo.response_length)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed (default 0, or the run's seed)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Prompts sampled at once."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N, or auto (a GPU where there is one)."),
) -> None:
    training_stack()
    from dataclasses import replace

    from rlhflab.errors import writable_directory
    from rlhflab.runs import RunDir
    from rlhflab.sample import SampleError, SamplingSettings, load_model, prompts_from_file, run_sampling

    asked = {k: v for k, v in dict(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed).items()
             if v is not None}
    if RunDir(source).config.is_file():
        models, run_prompts, settings, gold = run_sampling(source)
        jobs = [(path, source / "samples" / f"{name}.jsonl") for name, path in models.items()]
        if out is not None:
            raise SampleError("--out is for a model directory; a run's samples go to RUN/samples/")
    else:
        if prompts is None or out is None:
            raise SampleError("sampling a model directory needs --prompts FILE and --out SAMPLES.jsonl")
        jobs, run_prompts, settings, gold = [(source, out)], None, SamplingSettings(), None
    settings = replace(settings, batch_size=batch_size, device=device, **asked)
    for _, target in jobs:
        writable_directory(target.parent)
    for model_dir, target in jobs:
        model, tokenizer = load_model(model_dir)
        texts = prompts_from_file(prompts, tokenizer) if prompts is not None else run_prompts
        sample_one(model, tokenizer, texts, target, settings, str(model_dir),
                   str(prompts) if prompts is not None else "the run's held-out prompts", gold)


def sample_one(model, tokenizer, texts, target: Path, settings, model_name: str, prompts_name: str, gold) -> None:
    from rlhflab.progress import progress_bar
    from rlhflab.sample import sample_to_file, settings_path

    target.parent.mkdir(parents=True, exist_ok=True)
    with progress_bar(f"sample {target.name}", len(texts)) as bar:
        done = sample_to_file(model, tokenizer, texts, target, settings, model_name=model_name,
                              prompts_name=prompts_name, gold=gold, advance=bar.advance)
    resumed = f" ({done.already} already there)" if done.already else ""
    console.print(f"wrote {done.written} responses to {escape(str(target))}{resumed}; settings in "
                  f"{escape(str(settings_path(target)))}")


PAIR_HELP = """Blind side-by-side comparisons of two or more systems' responses to the same prompts.

    rlhflab pair A B [C ...] --study DIR     # build the study and serve it to raters
    rlhflab pair DIR --results [--json]      # win rates, strengths, the side's pull, raters
    rlhflab pair DIR --export prefs.jsonl    # prompt/chosen/rejected for rlhflab reward --preferences

Each system is [NAME=]PATH: a sample file (any the doctor reads), an rlhflab run (its
policy, sampled on --prompts FILE or else its held-out prompts), or a model directory
(sampled on --prompts FILE).
With K systems every prompt gets all K(K-1)/2 pairs; which side each response is shown on is
drawn per item and kept. Exit code 2 for bad input."""


def pair(
    sources: Optional[list[str]] = typer.Argument(None, help="[NAME=]PATH of each system (or a study directory)",
                                                 show_default=False),
    study: Optional[Path] = typer.Option(None, "--study", help="The study's directory."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file the model directories and runs "
                                           "given are sampled on (rlhflab sample); runs' default: their held-out "
                                           "prompts."),
    mapping: Optional[list[str]] = typer.Option(None, "--map", help="THEIRS=sample/FIELD for sample files"),
    prompts_drawn: Optional[int] = typer.Option(None, "--prompts-drawn", help="Prompts compared (default: every "
                                                "prompt all systems answered)."),
    ratings_per_item: Optional[int] = typer.Option(None, "--ratings-per-item", help="Raters per item at least "
                                                   "(default 3: an odd number has a majority)."),
    repeat_every: Optional[int] = typer.Option(None, "--repeat-every", help="A repeated item after this many new "
                                               "ones, for consistency (default 10; 0: never)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seeds the draw of prompts and sides (default 0)."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Rater links (default: ratings per item)."),
    results: bool = typer.Option(False, "--results", help="Print the study's results and exit."),
    json_output: bool = typer.Option(False, "--json", help="With --results: print them as JSON."),
    answers: Optional[str] = AnswersOption,
    export: Optional[Path] = typer.Option(None, "--export", help="Write the comparisons as prompt/chosen/rejected "
                                          "records to this file (one per item, by majority), and exit."),
    per_judgement: bool = typer.Option(False, "--per-judgement", help="With --export: one record per decisive "
                                       "answer instead of one per item."),
    host: str = HostOption,
    port: int = PortOption,
    no_serve: bool = NoServeOption,
    judges: Optional[list[str]] = typer.Option(None, "--judge", help="KIND:PATH: answer every pair with a judge and "
                                               "exit: rm (a reward model dir: the higher score wins), lm (a causal "
                                               "LM asked with --template, both orders), world (a world run's "
                                               "simulated labeler)."),
    template: Optional[Path] = typer.Option(None, "--template", help="With --judge lm:DIR: the prompt, with "
                                            "{prompt}, {first}, {second}, ending where the letter A or B follows."),
) -> None:
    studies_extra()
    from rlhflab.doctor import parse_map_options
    from rlhflab.studies.build import parse_sources
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.kinds import PAIR, open_study
    from rlhflab.studies.pairs import build_pair_study
    from rlhflab.studies.whose import JUDGES, answered_by

    def opened():
        directory, listed = _study_or_sources(study, sources)
        if directory is None:
            raise StudyError("give the study's directory with --study DIR")
        if results or export is not None:
            existing = open_study(directory, PAIR)
            whose = answered_by(existing, answers)
            if export is not None:
                writable_parent(export)
            if results:
                print_pair_results(existing, json_output, whose)
            else:
                export_as = "preferences-per-judgement" if per_judgement else "preferences"
                written = PAIR.exports[export_as](existing, export, whose)
                for line in written:
                    console.print(f"{escape(line)}; train on them with: rlhflab reward --preferences "
                                  f"{escape(str(export))}")
            return None
        parsed = _sampled_sources(parse_sources(listed), prompts, directory)
        asked = {k: v for k, v in dict(prompts_drawn=prompts_drawn, ratings_per_item=ratings_per_item,
                                       repeat_every=repeat_every, seed=seed).items() if v is not None}
        built, added = build_pair_study(directory, parsed, asked, parse_map_options(mapping).for_samples())
        return built, added, f"pair study {directory}", "pairs to compare"

    def answered_at_once(built) -> bool:
        for spec in judges or []:
            judge_pairs(built, spec, template)
        if judges:
            console.print("as the judge(s) answered (people's answers, where there are any: rlhflab pair STUDY "
                          "--results):")
            print_pair_results(built, json_output=False, whose=JUDGES)
        return bool(judges)

    serves = not (results or export is not None or judges or no_serve)
    study_command(opened, raters, answered_at_once, no_serve, host, port, serves)


def study_command(opened, raters: Optional[int], answered_at_once, no_serve: bool, host: str, port: int,
                  serves: bool) -> None:
    """What `rate` and `pair` share, whatever the study's kind: the address bound first when the
    study will be served (a bad --host or --port is said before any study is built); `opened()`
    builds or reopens the study (or prints what was asked of it and returns None); then its rater
    links, and the study answered at once (`answered_at_once`: judges, an export, an import), or
    its links printed (--no-serve), or served."""
    from rlhflab.studies.serve import bind

    sock = bind(host, port) if serves else None
    found = opened()
    if found is None:
        return
    built, added, title, items = found
    links = built.ensure_raters(raters or built.design.ratings_per_item)
    announce_study(built, added, links, title, items)
    if answered_at_once(built):
        return
    if no_serve or sock is None:
        print_links(links)
        return
    _serve_study(built, links, host, sock)


def judge_pairs(study, spec: str, template: Optional[Path], tokenizer: Optional[Path] = None):
    """`--judge KIND:PATH`: every pair answered by the judge (judges/pairs.py), its position bias said."""
    from rlhflab.judges.pairs import judge_pairs, make_pair_judge
    from rlhflab.studies.design import StudyError

    try:
        if not spec.startswith("world:"):
            training_stack()
        judge = make_pair_judge(spec, study, template.read_text(encoding="utf-8") if template else None, tokenizer)
        from rlhflab.progress import progress_bar

        with progress_bar(f"judge {judge.name}", study.item_count()) as bar:
            report = judge_pairs(study, judge, bar.advance)
    except (StudyError, OSError, ValueError) as err:
        fail(f"--judge {spec}: {err}")
    rate, low, high, decisive = report.position_bias()
    if rate is not None:
        asked = "both orders asked, an answer kept where they agree" if judge.reads_order else "one order asked"
        console.print(f"{escape(judge.name)}: chose the first shown in {rate:.0%} [{low:.0%}, {high:.0%}] of "
                      f"{decisive} decisive answers ({asked})")
    return judge


def _sampled_sources(sources, prompts: Optional[Path], study: Path):
    """Each source as a sample file (`sample.sampled_sources`), sampling printed as it goes."""
    from rlhflab.runs import RunDir

    models = [s for s in sources if RunDir(s.path).config.is_file() or (s.path / "config.json").is_file()
              or (s.path / "adapter_config.json").is_file()]
    if not models:
        return list(sources)  # sample files only: the light install reads them
    training_stack()
    from rlhflab.sample import sampled_sources

    return sampled_sources(sources, prompts, study, sample_one)


def _run_judges(study, judges: list[str], template: Optional[Path], label: Optional[str],
                tokenizer: Optional[Path]) -> None:
    """`rate --judge KIND:DIR ...`: each judge rates every item (resuming), then the agreement."""
    from rlhflab.studies.design import StudyError

    training_stack()
    from rlhflab.judges.ratings import judge_study, make_judge
    from rlhflab.progress import progress_bar

    for spec in judges:
        try:
            judge = make_judge(spec, study, template, label, tokenizer)
            with progress_bar(f"judge {judge.name}", study.item_count()) as bar:
                judge_study(study, judge, bar.advance)
        except (StudyError, OSError, ValueError) as err:
            fail(f"--judge {spec}: {err}")
    from rlhflab.studies.whose import PEOPLE

    print_study_results(study, json_output=False, whose=PEOPLE)


def _interchange(study, export: Optional[str], out: Optional[Path], import_file: Optional[Path]) -> None:
    """`rate --export TOOL --out FILE` and `rate --import FILE`."""
    from rlhflab.studies.interchange import import_ratings
    from rlhflab.studies.kinds import RATING
    from rlhflab.studies.whose import PEOPLE

    if export is not None:
        for line in RATING.exports[export](study, out, PEOPLE):  # the items go out, no answers
            console.print(escape(line))
    if import_file is not None:
        imported = import_ratings(study, import_file)
        console.print(f"imported {imported.recorded} ratings ({imported.duplicates} already held)")
        for line in imported.skipped:
            console.print(f"[yellow]skipped:[/yellow] {escape(line)}")


def _export_checked(export: str, out: Optional[Path]) -> None:
    """`rate --export TOOL --out FILE`, checked before a study is built: a known tool, a file
    that can be written."""
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.kinds import RATING

    if export not in RATING.exports or out is None:
        raise StudyError(f"--export takes one of {', '.join(RATING.exports)} and needs --out FILE")
    writable_parent(out)


def _study_or_sources(study: Optional[Path], sources: Optional[list[str]]) -> tuple[Optional[Path], list[str]]:
    """`rlhflab rate STUDY` and `rlhflab pair STUDY`: a lone argument that is a study's
    directory is the study, not a source to build one from."""
    from rlhflab.studies.store import Study

    if study is None and sources and len(sources) == 1 and Study.exists(Path(sources[0])):
        return Path(sources[0]), []
    return study, list(sources or [])


def _serve_study(study, links, host: str, sock) -> None:
    from rlhflab.studies.serve import base_url, is_loopback, rater_link, serve

    if not is_loopback(host):
        console.print(f"[yellow]warning:[/yellow] listening on {escape(host)}: traffic is plain HTTP, so the rater "
                      "links and ratings cross the network unencrypted (put it behind TLS, or keep the default "
                      "127.0.0.1)")
    for rater in links:
        typer.echo(f"{rater.name}: {rater_link(base_url(sock), rater)}")
    serve(study, sock, announce=lambda line: console.print(escape(line)))  # uvicorn ends on Ctrl-C by itself
