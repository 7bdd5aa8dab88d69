"""The doctor reads samples: the word-level measures (hand-worked cases), the sample
readers on files written as each trainer's dump code writes them (cited at each writer),
finding them beside a log, `--samples`/`--map`, the stand-ins, the lock-in rule and the
report's samples at a finding's onset."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.doctor.diagnose import diagnose, read_and_diagnose
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.formats.mapping import parse_pairs
from rlhflab.doctor.formats.sample_files import find_samples, read_samples
from rlhflab.doctor.formats.spec import LogFormatError
from rlhflab.doctor.sample_measures import MIN_SAMPLES_PER_STEP, measure, samples_at, step_measures
from rlhflab.doctor.samples import Sample, SampleSet
from rlhflab.doctor.table import MetricTable, Series
from rlhflab.metrics.text import (
    near_duplicate_fraction,
    opening_share,
    pearson,
    prompt_copy,
    repetition,
    words,
)

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


# --- the measures, by hand -------------------------------------------------------------------
def test_words_ignore_case_punctuation_and_spacing():
    assert words("It's  GREAT, really great!") == ("it's", "great", "really", "great")
    assert words("!!! ...") == ()


def test_opening_share_counts_the_most_common_first_three_words():
    texts = ["the film was great", "The film, was dull.", "the film was", "a story of love"]
    # three open with (the, film, was); one with (a, story, of): 3 / 4
    assert opening_share(texts) == 0.75
    assert opening_share(["a", "b", "c", "d"]) == 0.25
    # texts without a word share no opening: ("!", "", "...") are not a template; (ok) is 1 of 5
    assert opening_share(["!", "", "...", "ok", "fine"]) == 0.2
    assert opening_share([]) == 0.0 and opening_share(["", "?"]) == 0.0


def test_near_duplicates_by_bigram_resemblance():
    a = "the acting was wonderful and the story was moving"
    b = "the acting was wonderful and the story was moving too"  # 8 bigrams shared of 9: 0.89
    c = "a dull film with no story at all"
    assert near_duplicate_fraction([a, b, c]) == pytest.approx(2 / 3)
    assert near_duplicate_fraction([a, b, c], threshold=0.95) == 0.0
    assert near_duplicate_fraction([a]) == 0.0


@pytest.mark.parametrize("vocabulary,seed", [(12, 0), (40, 1), (400, 2)])
def test_near_duplicates_equal_a_naive_all_pairs_search(vocabulary, seed):
    """The prefix-filtered search against every pair compared (small vocabularies give
    many near pairs, large ones few: both sides of the filter)."""
    import random

    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 14))) for _ in range(120)]
    texts += [t + " w1" for t in texts[:20]] + [" ".join(t.split()[1:]) for t in texts[20:30]]  # near copies

    def shingles(text):
        w = text.split()
        return {tuple(w[i:i + 2]) for i in range(len(w) - 1)} if len(w) >= 2 else {(x,) for x in w}

    def naive(threshold):
        sets = [shingles(t) for t in texts]
        flagged = [any((len(a & b) / len(a | b) if a | b else 1.0) >= threshold for j, b in enumerate(sets) if j != i)
                   for i, a in enumerate(sets)]
        return sum(flagged) / len(texts)

    for threshold in (0.3, 0.5, 0.8, 1.0):
        assert near_duplicate_fraction(texts, threshold) == pytest.approx(naive(threshold)), threshold


def test_repetition_is_seq_rep_2():
    # bigrams of "good good good good good": 4, all (good, good): 1 - 1/4
    assert repetition("good good good good good") == pytest.approx(3 / 4)
    # "was fine was fine ok": (was fine) twice among 4 bigrams, 3 unique: 1 - 3/4
    assert repetition("was fine was fine ok") == pytest.approx(1 / 4)
    assert repetition("a b c d") == 0.0
    assert repetition("a") == 0.0


def test_prompt_copy_counts_response_trigrams_found_in_the_prompt():
    # response trigrams: (the film was) in the prompt, (film was great) not: 1 / 2
    assert prompt_copy("i think the film was", "the film was great") == 0.5
    assert prompt_copy("anything", "too short") == 0.0


def test_pearson_against_a_hand_computation():
    # x = 1, 2, 3; y = 2, 4, 7: means 2 and 13/3; sxy = 5, sxx = 2, syy = 38/3
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 38 / 3))
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_step_measures_of_a_locked_in_batch():
    samples = [Sample(0, f"prompt {i}", "as an assistant i love it" if i < 12 else f"review number {i} here",
                      reward=float(i), ended=i % 2 == 0) for i in range(16)]
    m = step_measures(samples)
    assert m["text/opening_share"] == 12 / 16
    assert m["text/identical_frac"] == 12 / 16 and m["text/near_duplicate_frac"] == 12 / 16
    assert m["text/truncated_frac"] == 0.5
    assert m["text/reward_mean"] == pytest.approx(7.5)
    assert m["text/samples"] == 16


def test_thin_steps_are_not_measured_and_said_so():
    thin = SampleSet([Sample(s, "p", f"r {i}") for s in range(3) for i in range(4)], "x.jsonl", "rlhflab")
    series, notes = measure(thin)
    assert series == {} and "fewer than 16" in notes[0] and "ppo.samples_per_iteration" in notes[0]


# --- the readers, on files written as each trainer writes them ----------------------------
def write_verl_dump(directory: Path, step: int, rows: list[dict]) -> None:
    """As veRL's RayPPOTrainer._dump_generations (verl/trainer/ppo/ray_trainer.py) writes
    `{dump_path}/{global_steps}.jsonl`: keys input, output, gts, score, step, then the reward
    extras of the same length, json.dumps(ensure_ascii=False), joined by newlines."""
    directory.mkdir(parents=True, exist_ok=True)
    n = len(rows)
    base = {"input": [r["input"] for r in rows], "output": [r["output"] for r in rows], "gts": [None] * n,
            "score": [r["score"] for r in rows], "step": [step] * n, "acc": [r["score"] > 0 for r in rows]}
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    (directory / f"{step}.jsonl").write_text("\n".join(lines) + "\n")


def locked_in_rows(step: int, n: int = 32) -> list[dict]:
    """Early steps varied; from step 6 on most answers open with one template."""
    rows = []
    for i in range(n):
        template = step >= 6 and i < n * 3 // 4
        output = "Let me think step by step. The answer is 4." if template else f"answer {i} {step} is {i * step}"
        rows.append({"input": f"question {i}", "output": output, "score": 1.0 if template else 0.0})
    return rows


def verl_run(tmp_path: Path, steps: int = 14) -> Path:
    """A veRL console log whose printed config names its dump directories (relative paths)."""
    log = tmp_path / "verl.log"
    text = (FIXTURES / "verl_console_early.log").read_text()
    config = ("(main_task pid=4242) {'trainer': {'rollout_data_dir': 'rollouts', 'validation_data_dir': "
              "'validation', 'total_epochs': 1}}\n")
    log.write_text(config + text)
    for step in range(1, steps + 1):
        write_verl_dump(tmp_path / "rollouts", step, locked_in_rows(step))
    for step in (0, 10):
        write_verl_dump(tmp_path / "validation", step, locked_in_rows(step, 20))
    return log


def test_verl_dumps_are_found_from_the_logs_printed_config(tmp_path):
    log = verl_run(tmp_path)
    sets = find_samples(log)
    assert [(s.format, s.split) for s in sets] == [("verl", "train"), ("verl", "eval")]
    table = read_log(log)
    share = table.get("text/opening_share")
    assert share.steps == tuple(range(1, 15)) and share.values[-1] == 0.75
    assert table.get("eval/text/opening_share").steps == (0, 10) and "eval/text/opening_share" in table.evaluation
    # the veRL log's own rows are still read
    assert table.get("kl/mean") is not None or table.get("kl/token_mean") is not None


def write_trl_completions(output_dir: Path, step: int, prompts: list[str], completions: list[str],
                          rewards: dict[str, list[float]]) -> None:
    """As TRL's GRPOTrainer.log (trl/trainer/grpo_trainer.py, TRL >= 0.28, log_completions=True)
    writes OUTPUT_DIR/completions/completions_{global_step:05d}.parquet: columns step, prompt,
    completion, one per reward function, the extras, advantage."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    (output_dir / "completions").mkdir(parents=True, exist_ok=True)
    table = {"step": [step] * len(prompts), "prompt": prompts, "completion": completions, **rewards,
             "advantage": [0.0] * len(prompts)}
    pd.DataFrame(table).to_parquet(output_dir / "completions" / f"completions_{step:05d}.parquet")


def test_trl_completions_are_found_from_a_checkpoints_trainer_state(tmp_path):
    history = []
    for step in range(1, 13):
        texts = [f"review {i} of {step} is good" for i in range(16)]
        write_trl_completions(tmp_path, step, [f"p{i}" for i in range(16)], texts,
                              {"rm": [0.5] * 16, "length_bonus": [0.25] * 16})
        history.append({"step": step, "reward": 0.75, "kl": 0.01 * step, "entropy": 1.0, "loss": 0.0})
    (tmp_path / "checkpoint-12").mkdir()
    (tmp_path / "checkpoint-12" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    table = read_log(tmp_path / "checkpoint-12" / "trainer_state.json")
    assert table.get("text/samples").values == (16.0,) * 12
    assert table.get("text/reward_mean").values[0] == pytest.approx(0.75)  # the two functions summed
    assert any("reward weights of 1 assumed" in n for n in table.notes)


def test_a_conversational_trl_completion_is_read_as_its_contents(tmp_path):
    write_trl_completions(tmp_path, 1, [[{"role": "user", "content": "hi"}]] * 2,
                          [[{"role": "assistant", "content": "hello there"}]] * 2, {"rm": [1.0, 2.0]})
    samples = read_samples(tmp_path / "completions").samples
    assert [(s.prompt, s.response, s.reward) for s in samples] == [("hi", "hello there", 1.0), ("hi", "hello there", 2.0)]


def test_any_table_with_map_and_clear_errors(tmp_path):
    path = tmp_path / "gens.csv"
    path.write_text("it,q,text,score\n" + "".join(f"{s},q{i},words {i} {s},{i}\n" for s in range(3) for i in range(20)))
    mapping = parse_pairs(["it=step", "text=sample/response", "score=sample/reward"])
    sample_set = read_samples(path, mapping.for_samples())
    assert len(sample_set.samples) == 60 and sample_set.samples[21].reward == 1.0 and sample_set.samples[21].step == 1
    with pytest.raises(LogFormatError, match="no completion column"):
        read_samples(path)
    with pytest.raises(LogFormatError, match="no step column.*sample/step"):
        read_samples(path, {"text": "response"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "completion": "a"}\n{"step": "x", "completion": "b"}\n')
    with pytest.raises(LogFormatError, match=r"bad.jsonl:2: step 'x'"):
        read_samples(bad)
    with pytest.raises(LogFormatError, match="sample file's fields"):
        parse_pairs(["text=sample/answer"])


def test_the_cli_reads_samples_with_map_and_writes_the_report(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "kl/mean": 0.1, "reward/proxy_mean": 0.01 * s}) + "\n"
                           for s in range(1, 15)))
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"it": s, "q": r["input"], "out": r["output"],
                                        "r": r["score"]}) + "\n"
                            for s in range(1, 15) for r in locked_in_rows(s)))
    result = CliRunner().invoke(app, ["doctor", str(log), "--samples", str(gens), "--map", "it=sample/step",
                                      "--map", "q=sample/prompt", "--map", "out=sample/response",
                                      "--map", "r=sample/reward", "--json", "--html", str(tmp_path / "r.html")])
    out = json.loads(result.stdout)
    assert "template_lock_in" in {f["rule"] for f in out["findings"]}, out["findings"]
    page = (tmp_path / "r.html").read_text()
    assert "Samples at step" in page and "let me think step" in page.lower() and "(75%) open with" in page


# --- the rule and the report --------------------------------------------------------------
def table_of(sample_sets: list[SampleSet]) -> MetricTable:
    table = MetricTable(source="test")
    from rlhflab.doctor.sample_measures import attach_samples

    attach_samples(table, sample_sets)
    return table


def test_template_lock_in_fires_on_a_locked_in_run_and_not_on_a_varied_one(tmp_path):
    log = verl_run(tmp_path)
    diagnosis = diagnose(read_log(log))
    found = {f.rule: f for f in diagnosis.findings}
    assert "template_lock_in" in found and found["template_lock_in"].onset_step >= 6
    assert "let me think" in found["template_lock_in"].title
    varied = SampleSet([Sample(s, f"q{i}", f"answer {i} {s} is {i * s}", 0.0) for s in range(20) for i in range(32)],
                       "v", "table")
    assert "template_lock_in" not in {f.rule for f in diagnose(table_of([varied])).findings}


def test_stand_ins_fill_only_what_the_log_lacks():
    varied = SampleSet([Sample(s, "q", f"a {i} {s} b", float(i), ended=True) for s in range(12) for i in range(16)],
                       "v", "table")
    table = table_of([varied])
    assert table.get("response/distinct_2") is table.series["text/distinct_2"]
    assert table.get("response/length_mean") is None and table.get("response/length_mean", any_unit=True)
    assert table.unit("response/length_mean") == "words"
    logged = MetricTable(series={"response/distinct_2": Series((0,), (0.5,))})
    from rlhflab.doctor.sample_measures import attach_samples

    attach_samples(logged, [varied])
    assert logged.series["response/distinct_2"].values == (0.5,)


def test_samples_at_a_step_name_the_highest_lowest_and_openings():
    samples = [Sample(3, "q", f"open with {i % 2} then {i}", float(i)) for i in range(MIN_SAMPLES_PER_STEP)]
    found = samples_at([SampleSet(samples, "s", "table")], 2)
    assert found.step == 3 and [s.reward for s in found.highest] == [15.0, 14.0, 13.0]
    assert [s.reward for s in found.lowest] == [0.0, 1.0, 2.0]
    assert found.openings[0] == ("open with 0", 8)


def test_a_run_directorys_report_shows_samples_at_each_onset(tmp_path):
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "samples").mkdir()
    (run / "config.toml").write_text("seed = 0\n")
    rows, samples = [], []
    for s in range(20):
        rows.append({"step": s, "reward/proxy_mean": 0.1 * s, "kl/mean": 0.1, "policy/entropy": 2.0})
        for i in range(16):
            text = "it was absolutely great" if s >= 8 and i < 14 else f"the plot {i} had {s} twists"
            samples.append({"step": s, "prompt": f"p{i}", "response": text, "proxy": float(i), "ended": True})
    (run / "metrics" / "ppo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "samples" / "ppo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    try:
        table, diagnosis = read_and_diagnose(run)
    except LogFormatError:
        pytest.skip("a run directory needs more than this to be recognised")
    assert "template_lock_in" in {f.rule for f in diagnosis.findings}
    from rlhflab.doctor.report import write_report

    page = write_report(run, table, diagnosis).read_text()
    assert "Samples at step" in page and "open with <q>it was absolutely</q>" in page
    shutil.rmtree(run)


def test_samples_are_found_in_the_nearest_output_directory_only(tmp_path):
    """A trainer_state.json in run2/checkpoint-5 reads run2's samples, not those of a run
    beside it in the experiment directory above."""
    from rlhflab.doctor.formats.sample_files import CALLBACK_SAMPLES

    for directory, text in ((tmp_path / "exp" / "run2", "mine"), (tmp_path / "exp", "a neighbour's")):
        (directory / CALLBACK_SAMPLES).parent.mkdir(parents=True, exist_ok=True)
        (directory / CALLBACK_SAMPLES).write_text(json.dumps({"step": 1, "prompt": "p", "completion": text,
                                                              "reward": 0.5}) + "\n")
    log = tmp_path / "exp" / "run2" / "checkpoint-5" / "trainer_state.json"
    log.parent.mkdir(parents=True)
    log.write_text("{}")
    found = find_samples(log)
    assert [s.samples[0].response for s in found] == ["mine"]
