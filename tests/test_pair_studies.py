"""Pair studies: blind side-by-side comparisons built from sample files, answered through the
app (by system, never by side), summarised one majority vote per item against counts made by
hand, Bradley-Terry strengths against choix, exported as stage-2 data that the reward stage
trains on, and simulated labelers through the HTTP API finding no preference between a
policy and itself at another seed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from rlhflab.data.files import load_preferences
from rlhflab.studies.app import create_app
from rlhflab.studies.build import Source
from rlhflab.studies.kinds import RATING, kind_of, open_study
from rlhflab.studies.pair_results import export_preferences, majority, pair_results
from rlhflab.studies.pair_store import judgements, pair_items, record_choice, sides
from rlhflab.studies.pairs import build_pair_study
from rlhflab.studies.pairwise import bradley_terry, wilson_interval, win_matrix
from rlhflab.studies.store import Study
from rlhflab.studies.whose import JUDGES


def write_samples(path: Path, responses: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"step": 0, "prompt": p, "response": r}) + "\n" for p, r in responses.items()))
    return path


def systems(tmp_path: Path, names: str, prompts: int) -> list[Source]:
    """Sample files of systems answering the same prompts (system a also answers one prompt of its own)."""
    sources = []
    for name in names:
        answers = {f"prompt {k}": f"{name} says {k}" for k in range(prompts)}
        if name == "a":
            answers["only a saw this"] = "a alone"
        sources.append(Source(name, write_samples(tmp_path / f"{name}.jsonl", answers)))
    return sources


def build(tmp_path: Path, names: str = "ab", prompts: int = 6, **asked) -> Study:
    study, _ = build_pair_study(tmp_path / "study", systems(tmp_path, names, prompts), {"repeat_every": 0, **asked})
    return study


def answer_all(study: Study, rater, vote) -> int:
    """Answer every pair served to `rater`: `vote(item_prompt, system_a, system_b)` names the
    preferred system, or "tie"/"both_bad"; translated to the side it is shown on."""
    items = {(i["prompt"], i["response"]): i for i in pair_items(study)}
    answered = 0
    while (served := study.next_item(rater)) is not None:
        item = items[(served.prompt, served.response)]
        said = vote(served.prompt, item["system"], item["system_b"])
        if said in (item["system"], item["system_b"]):
            shown_left = item["system"] if served.item["left_side"] == "a" else item["system_b"]
            said = "left" if said == shown_left else "right"
        assert record_choice(study, rater, served.serve_id, served.nonce, said) == "recorded"
        answered += 1
    return answered


def test_every_shared_prompt_gets_every_pair_with_its_side_drawn_and_kept(tmp_path):
    study = build(tmp_path, "abc", prompts=10)
    items = pair_items(study)
    assert len(items) == 10 * 3  # K(K-1)/2 pairs per prompt; the prompt only a answered is left out
    per_prompt = {}
    for item in items:
        per_prompt.setdefault(item["prompt"], set()).add((item["system"], item["system_b"]))
    assert all(pairs == {("a", "b"), ("a", "c"), ("b", "c")} for pairs in per_prompt.values())
    assert {i["left_side"] for i in items} == {"a", "b"}
    assert study.design.kind == "pair" and 'kind = "pair"' in (study.directory / "study.toml").read_text()
    reopened, added = build_pair_study(study.directory, systems(tmp_path, "abc", 10), {})
    assert added == [] and len(reopened.items()) == 30
    drawn = build_pair_study(tmp_path / "drawn", systems(tmp_path, "abc", 10), {"prompts_drawn": 4})[0]
    assert len(drawn.items()) == 12


def test_answers_are_kept_by_system_and_the_side_pull_is_measured(tmp_path):
    study = build(tmp_path, prompts=20, ratings_per_item=1)
    rater = study.add_rater()
    answered = 0
    while (served := study.next_item(rater)) is not None:  # a rater who always picks the left side
        assert record_choice(study, rater, served.serve_id, served.nonce, "left") == "recorded"
        answered += 1
    judged = judgements(study)
    assert answered == 20 and all(j.choice == j.left_side for j in judged)
    result = pair_results(study)
    assert result.side.left == result.side.decisive == 20 and result.side.low > 0.8
    assert record_choice(study, rater, 10**6, "x", "left") == "unknown"
    assert kind_of(study.design).record(study, rater, 1, "x", 3) == "invalid"  # a rating is no answer to a pair


def test_results_take_one_majority_vote_per_item(tmp_path):
    study = build(tmp_path, prompts=6, ratings_per_item=3)
    # prompts 0-2: a, a, b -> a; 3: a, b, tie -> split; 4: tie, tie, a -> tie; 5: both bad x3
    votes = {0: ("a", "a", "b"), 1: ("a", "a", "b"), 2: ("a", "a", "b"), 3: ("a", "b", "tie"),
             4: ("tie", "tie", "a"), 5: ("both_bad",) * 3}
    raters = [study.add_rater() for _ in range(3)]
    for k, rater in enumerate(raters):
        assert answer_all(study, rater, lambda prompt, a, b, k=k: votes[int(prompt.split()[1])][k]) == 6
    result = pair_results(study)
    (pair,) = result.pairs
    assert (pair.wins, pair.losses, pair.ties, pair.both_bad, pair.split) == (3, 0, 1, 1, 1)
    assert pair.rate == 1.0 and (pair.low, pair.high) == pytest.approx(wilson_interval(3, 3))
    assert pair.tie_rate == pytest.approx(1 / 6) and pair.both_bad_rate == pytest.approx(1 / 6)
    # person-3 against the other two: b where they said a (prompts 0-2), a where they said tie
    # (4), both bad with them (5); on prompt 3 they split (a, b), so there is no majority to meet
    agreement = {r.name: r for r in result.raters}
    assert agreement["person-3"].with_others == 5 and agreement["person-3"].agreement == pytest.approx(1 / 5)
    # person-1's others (persons 2 and 3) split on prompts 0-4 and agree only on 5, as does person-1
    assert (agreement["person-1"].with_others, agreement["person-1"].agreement) == (1, 1.0)
    assert majority(["a", "b"]) is None and majority(["tie", "tie", "a"]) == "tie"


def test_strengths_of_several_systems_are_choix_fit_on_the_majority_votes(tmp_path):
    choix = pytest.importorskip("choix")
    study = build(tmp_path, "abcd", prompts=40, ratings_per_item=1)
    truth = {"a": 0.8, "b": 0.2, "c": -0.2, "d": -0.8}
    rng = np.random.default_rng(3)

    def vote(prompt, a, b):
        return a if rng.random() < 1 / (1 + np.exp(truth[b] - truth[a])) else b

    answer_all(study, study.add_rater(), vote)
    result = pair_results(study)
    names = result.systems
    decided = []
    for j in judgements(study):
        winner, loser = (j.system_a, j.system_b) if j.choice == "a" else (j.system_b, j.system_a)
        decided.append((names.index(winner), names.index(loser)))
    theirs = choix.ilsr_pairwise(len(names), decided, alpha=0.0, tol=1e-12)
    mine = np.array([s.strength for s in result.strengths])
    assert np.abs(mine - (theirs - theirs.mean())).max() < 1e-6
    assert np.allclose(mine, bradley_terry(win_matrix(decided, len(names))))
    assert all(s.low <= s.strength <= s.high for s in result.strengths)
    assert [s.system for s in sorted(result.strengths, key=lambda s: -s.strength)][0] == "a"


def test_export_writes_the_majority_as_preferences_the_reward_stage_reads(tmp_path):
    study = build(tmp_path, prompts=4, ratings_per_item=3)
    votes = {0: ("a", "a", "b"), 1: ("b", "b", "b"), 2: ("a", "b", "tie"), 3: ("tie", "tie", "both_bad")}
    for k, rater in enumerate(study.add_rater() for _ in range(3)):
        answer_all(study, rater, lambda prompt, a, b, k=k: votes[int(prompt.split()[1])][k])
    out = tmp_path / "prefs.jsonl"
    exported = export_preferences(study, out)
    assert exported.written == 2 and exported.dropped == Counter({"split": 1, "tie": 1})
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["prompt"], r["chosen"], r["rejected"]) for r in records} == {
        ("prompt 0", "a says 0", "b says 0"), ("prompt 1", "b says 1", "a says 1")}
    assert len(load_preferences(str(out)).records) == 2
    every = export_preferences(study, tmp_path / "every.jsonl", per_judgement=True)
    assert every.written == 3 + 3 + 2 and every.dropped == Counter({"tie": 3, "both_bad": 1})


def test_the_page_and_the_api_answer_a_pair_and_refuse_what_is_not_one(tmp_path):
    study = build(tmp_path, prompts=3, ratings_per_item=1)
    rater = study.add_rater()
    client = TestClient(create_app(study), base_url="http://127.0.0.1")
    page = client.get(f"/r/{rater.token}/")
    assert page.status_code == 200 and "Response A" in page.text and 'value="both_bad"' in page.text
    served = study.next_item(rater)
    left, right = sides(served)
    assert left in page.text and right in page.text
    posted = client.post(f"/r/{rater.token}/", data={"serve": served.serve_id, "csrf": served.nonce, "choice": "right"},
                         follow_redirects=False)
    assert posted.status_code == 303
    (judged,) = judgements(study)
    assert judged.choice == ("b" if served.item["left_side"] == "a" else "a")  # the right side's system
    item = client.get(f"/r/{rater.token}/api/next").json()
    assert item["kind"] == "pair" and {"left", "right", "prompt"} <= item.keys() and "response" not in item
    bad = client.post(f"/r/{rater.token}/api/rate", json={"serve": item["serve"], "csrf": item["csrf"], "choice": "7"})
    assert bad.status_code == 400
    forged = client.post(f"/r/{rater.token}/api/rate", json={"serve": item["serve"], "csrf": "forged", "choice": "tie"})
    assert forged.status_code == 403
    assert client.get("/r/not-a-token/api/next").status_code == 403
    ok = client.post(f"/r/{rater.token}/api/rate", json={"serve": item["serve"], "csrf": item["csrf"], "choice": "tie"})
    assert ok.json() == {"outcome": "recorded"}


def test_a_study_of_schema_version_1_opens_and_gets_the_columns_its_kind_declares(tmp_path):
    import sqlite3

    from rlhflab.studies.design import StudyDesign
    from rlhflab.studies.kinds import PAIR
    from rlhflab.studies.store import SCHEMA

    def old_study(name: str, design_text: str) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "study.toml").write_text(design_text)
        with sqlite3.connect(directory / "study.sqlite") as conn:
            conn.executescript(SCHEMA)  # the shared tables have not changed since version 1
            conn.execute("PRAGMA user_version = 1")
            conn.execute("INSERT INTO systems VALUES (1, 'run', 'run', 'rlhflab')")
            conn.execute("INSERT INTO items (key, system_id, bin, step, prompt, response) "
                         "VALUES ('k', 1, 0, 3, 'p', 'r')")
        return directory

    rated = open_study(old_study("rated", RATING.design_toml(StudyDesign())))
    assert [(i["prompt"], i["response"]) for i in rated.items()] == [("p", "r")]
    rater = rated.add_rater()
    served = rated.next_item(rater)
    assert kind_of(rated.design).record(rated, rater, served.serve_id, served.nonce, 5) == "recorded"
    with sqlite3.connect(rated.directory / "study.sqlite") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    pairs = open_study(old_study("pairs", PAIR.design_toml(PAIR.design({}))))
    assert {"system_b_id", "response_b", "left_side"} <= set(pairs.items()[0])
    assert "choice" in {column["name"] for column in pairs.rows("PRAGMA table_info(ratings)")}


# --- end to end: models sampled, simulated labelers through the HTTP API, stage 2 trained ------
def sample_model(model: Path, prompts: Path, out: Path, seed: int = 0) -> Path:
    from rlhflab.cli import main

    with pytest.raises(SystemExit) as done:
        main(["sample", str(model), "--prompts", str(prompts), "--out", str(out), "--seed", str(seed)])
    assert done.value.code in (0, None)
    return out


@pytest.fixture(scope="module")
def heldout_prompts(tmp_path_factory) -> Path:
    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    path = tmp_path_factory.mktemp("pairs") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n"
                            for p in ReviewsWorld(WorldConfig()).prompts(200, 11, split="heldout")))
    return path


def labelers_answer(study: Path, run: Path, reference: Path, seed: int) -> dict:
    """Three simulated labelers answer every pair through the real server; the results."""
    from rlhflab.studies.bots import StudyClient, compare_until_done, world_comparers
    from study_server import Server

    samples = [json.loads(line) for line in reference.read_text().splitlines()]
    labelers = world_comparers(run, [(s["prompt"], s["response"]) for s in samples], 3, seed=seed)
    server = Server(study, raters=3, command="pair")
    try:
        for labeler, link in zip(labelers, server.links.values()):
            report = compare_until_done(StudyClient(link), labeler)
            assert report.refused == []
    finally:
        server.stop()
    return pair_results(Study.open(study)).to_json()


def test_an_exported_study_trains_a_reward_model(smoke_run, heldout_prompts, tmp_path):
    from typer.testing import CliRunner

    from rlhflab.cli import app, main
    from rlhflab.runs import read_jsonl

    run = smoke_run.root
    stage1 = sample_model(run / "stage1_lm", heldout_prompts, tmp_path / "stage1.jsonl")
    policy = sample_model(run / "stage3_policy", heldout_prompts, tmp_path / "policy.jsonl")
    study = tmp_path / "study"
    with pytest.raises(SystemExit) as done:
        main(["pair", f"stage1={stage1}", f"policy={policy}", "--study", str(study), "--prompts-drawn", "60",
              "--repeat-every", "0", "--no-serve"])
    assert done.value.code in (0, None)
    result = labelers_answer(study, run, stage1, seed=0)
    (outcome,) = result["pairs"]
    assert outcome["wins"] + outcome["losses"] + outcome["ties"] + outcome["split"] == 60
    prefs = tmp_path / "prefs.jsonl"
    with pytest.raises(SystemExit) as done:
        main(["pair", str(study), "--export", str(prefs)])
    assert done.value.code in (0, None)
    again = export_preferences(Study.open(study), tmp_path / "again.jsonl")
    assert prefs.read_text() == (tmp_path / "again.jsonl").read_text() and again.written > 0
    unreadable = again.dropped["identical responses"] + again.dropped["empty response"]
    assert again.written + unreadable == outcome["wins"] + outcome["losses"]
    trained = CliRunner().invoke(app, ["reward", "--out", str(tmp_path / "rm-run"), "--model", str(run / "stage1_lm"),
                                       "--preferences", str(prefs), "--quiet", "reward.epochs=1",
                                       "reward.batch_size=4"])
    assert trained.exit_code == 0, trained.output
    assert "rm/val_acc" in read_jsonl(tmp_path / "rm-run" / "metrics" / "reward.jsonl")[-1]


@pytest.mark.slow  # 30 s of sampling and labelling: make test-slow (make test keeps the 15-minute line)
def test_labelers_find_no_preference_between_a_policy_and_itself_at_another_seed(smoke_run, heldout_prompts,
                                                                                 tmp_path):
    run = smoke_run.root
    first = sample_model(run / "stage3_policy", heldout_prompts, tmp_path / "seed0.jsonl", seed=0)
    second = sample_model(run / "stage3_policy", heldout_prompts, tmp_path / "seed1.jsonl", seed=1)
    sources = [Source("seed0", first), Source("seed1", second)]
    no_preference = []
    for k in range(20):  # 20 studies, each 40 prompts drawn from the 200 and its own labelers
        study = tmp_path / f"study{k}"
        build_pair_study(study, sources, {"prompts_drawn": 40, "seed": k, "repeat_every": 0})
        (outcome,) = labelers_answer(study, run, first, seed=100 + k)["pairs"]
        no_preference.append(outcome["no_preference"])
    said = sum(no_preference)
    low, high = wilson_interval(said, len(no_preference))
    print(f"no preference in {said} of 20 studies ({low:.2f}-{high:.2f}, Wilson 95%)")
    assert said >= 18


def test_each_kind_of_study_is_read_by_its_own_command(tmp_path, capsys):
    from rlhflab.cli import main

    study = build(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["rate", str(study.directory), "--results"])
    assert done.value.code == 2 and f"rlhflab pair {study.directory}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["pair", str(study.directory), "--results", "--json"])
    assert done.value.code in (0, None) and json.loads(capsys.readouterr().out)["systems"] == ["a", "b"]


# --- a comparison study as compare's truth ------------------------------------------------------
def two_sides(tmp_path: Path, before_wins: bool, runaway_before: bool = False) -> tuple[Path, Path, Path]:
    """Logs before and after a fix, each beside the samples its system was built from, and a
    comparison study of the two that one labeler answered: the side named preferred on 50 of 60."""
    from test_compare import run_log

    logs = []
    for name, runaway in (("before", runaway_before), ("after", False)):
        home = tmp_path / name
        home.mkdir()
        logs.append(run_log(home, "log", 1 if name == "before" else 2, runaway=runaway))
        write_samples(home / "gens.jsonl", {f"prompt {k}": f"{name} says {k}" for k in range(60)})
    study, _ = build_pair_study(tmp_path / "cmp", [Source("before", tmp_path / "before" / "gens.jsonl"),
                                                   Source("after", tmp_path / "after" / "gens.jsonl")],
                                {"ratings_per_item": 1, "repeat_every": 0})
    preferred = "before" if before_wins else "after"
    other = "after" if before_wins else "before"
    answer_all(study, study.add_rater(),
               lambda prompt, a, b: preferred if int(prompt.split()[1]) < 50 else other)
    return logs[0], logs[1], study.directory


def test_compare_takes_the_after_sides_win_rate_as_the_truth(tmp_path, capsys):
    from rlhflab.cli import main

    before, after, study = two_sides(tmp_path, before_wins=False, runaway_before=True)
    with pytest.raises(SystemExit) as done:
        main(["compare", str(before), "--", str(after), "--truth", str(study), "--json"])
    result = json.loads(capsys.readouterr().out)
    truth = result["truth"]
    low, high = wilson_interval(50, 60)
    assert truth["metric"] == "preference" and truth["after_end"] == pytest.approx(50 / 60)
    assert (truth["low"], truth["high"]) == pytest.approx((low - 0.5, high - 0.5)) and truth["significant"]
    assert result["verdict"] == "fixed" and done.value.code == 0  # the finding gone, and people prefer after
    with pytest.raises(SystemExit):
        main(["compare", str(before), "--", str(after), "--truth", str(study)])
    said = " ".join(capsys.readouterr().err.split())
    assert "after preferred in 83% [72%, 91%] of 60 decided comparisons: a preference" in said


def test_before_preferred_is_worse_whatever_the_findings_say(tmp_path, capsys):
    from rlhflab.cli import main

    before, after, study = two_sides(tmp_path, before_wins=True, runaway_before=True)
    with pytest.raises(SystemExit) as done:
        main(["compare", str(before), "--", str(after), "--truth", str(study), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "worse" and done.value.code == 1
    assert all(f["status"] == "gone" for f in result["findings"])  # the finding is gone, people disagree


# --- judges that compare ------------------------------------------------------------------------
def test_a_judge_that_reads_the_order_is_asked_both_and_its_position_bias_is_measured(tmp_path):
    from rlhflab.judges.pairs import FunctionPairJudge, judge_pairs

    study = build(tmp_path, prompts=12, ratings_per_item=1)
    first_always = FunctionPairJudge("first-always", lambda prompt, left, right: "left", reads_order=True)
    report = judge_pairs(study, first_always)
    assert report.answered == 12 and len(report.single_order) == 24
    assert report.position_bias()[0] == 1.0  # it always chose the first shown...
    assert {j.choice for j in judgements(study)} == {"tie"}  # ...so the two orders never agree
    fair = FunctionPairJudge("prefers-b", lambda prompt, left, right: "left" if left.startswith("b") else "right",
                             reads_order=True)
    judge_pairs(study, fair)
    person = study.add_rater()
    answer_all(study, person, lambda prompt, a, b: "b" if int(prompt.split()[1]) < 9 else "a")
    result = pair_results(study)  # people only; the judges are measured against them
    assert result.pairs[0].losses == 9 and result.pairs[0].wins == 3
    agreement = {j.name: j for j in result.judges}
    assert agreement["prefers-b"].items == 12 and agreement["prefers-b"].agreement == pytest.approx(9 / 12)
    assert agreement["first-always"].agreement == 0.0


def test_a_reward_model_judge_prefers_the_higher_score_and_answers_every_pair(smoke_run, tmp_path):
    from rlhflab.judges.pairs import RewardModelPairJudge, judge_pairs
    from rlhflab.judges.ratings import RewardModelJudge

    run = smoke_run.root
    study = build(tmp_path, prompts=8, ratings_per_item=1)
    judge = RewardModelPairJudge(run / "stage2_rm", run / "stage1_lm")
    assert judge_pairs(study, judge).answered == 8
    scorer = RewardModelJudge(run / "stage2_rm", run / "stage1_lm")
    for item, judged in zip(study.items(), judgements(study)):
        a, b = scorer.judge(item["prompt"], item["response"]).score, scorer.judge(item["prompt"], item["response_b"]).score
        assert judged.choice == ("a" if a > b else "b" if b > a else "tie")
    assert judge_pairs(study, judge).answered == 0  # run again: it resumes, nothing left


def test_a_language_model_judge_reads_the_next_token_probabilities_of_its_labels(tmp_path):
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from rlhflab.judges.pairs import LanguageModelPairJudge, judge_pairs

    words = ["<unk>", "<pad>", "<bos>", "<eos>", "A", "B", "prompt", "says", "a", "b", "which", "is", "better:"]
    words += [str(k) for k in range(10)]
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<bos>", eos_token="<eos>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=64, vocab_size=len(words),
                                       bos_token_id=2, eos_token_id=3, pad_token_id=1)).eval()
    model.save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    template = "{prompt} {first} {second} which is better: "
    judge = LanguageModelPairJudge(tmp_path / "judge", template)
    p_a, p_b = judge.label_probabilities("prompt 1", "a says 1", "b says 1")
    context = judge._encode(template.format(prompt="prompt 1", first="a says 1", second="b says 1"))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context])).logits[0, -1]
    expected = torch.softmax(logits[[4, 5]], dim=-1)  # the labels' tokens, renormalised over the two
    assert (p_a, p_b) == pytest.approx(tuple(expected.tolist()), abs=1e-6)
    study = build(tmp_path, prompts=5, ratings_per_item=1)
    assert judge_pairs(study, judge).answered == 5
    with pytest.raises(Exception, match="not two tokens"):
        LanguageModelPairJudge(tmp_path / "judge", template, labels=("X", "Y")).label_probabilities("p", "a", "b")


def test_verify_by_preference_samples_both_policies_and_a_judge_gives_the_verdicts_truth(smoke_run, tmp_path):
    import shutil
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(smoke_run.root, run)
    done = subprocess.run([sys.executable, "-m", "rlhflab.cli", "verify", str(run), "--fix", "ppo.kl_coef=0.05",
                           "--quiet", "--pair", "--judge", f"world:{run}"], capture_output=True, text=True)
    assert done.returncode in (0, 1, 3), done.stderr
    said = " ".join(done.stderr.split())
    assert "truth (after's win rate over before in" in said and "verdict:" in said
    study = Study.open(tmp_path / "run-verify" / "studies" / "pairs")
    assert [s.name for s in study.systems()] == ["run", "run-verify"]
    assert len(judgements(study)) == study.item_count() > 0  # the judge answered every pair
    assert (run / "samples" / "policy.jsonl").is_file() and (tmp_path / "run-verify" / "samples" / "policy.jsonl").is_file()
    without = subprocess.run([sys.executable, "-m", "rlhflab.cli", "verify", str(run), "--fix", "ppo.kl_coef=0.05",
                              "--quiet", "--pair"], capture_output=True, text=True)
    assert without.returncode == 0, without.stderr
    assert "/r/" in without.stdout and "--truth" in " ".join(without.stderr.split())  # links, and what to run next


def test_pair_with_a_judge_answers_at_once_and_gives_the_judges_results(smoke_run, tmp_path, capsys):
    from rlhflab.cli import main

    a, b = systems(tmp_path, "ab", 10)
    with pytest.raises(SystemExit) as done:
        main(["pair", f"a={a.path}", f"b={b.path}", "--study", str(tmp_path / "judged"), "--judge",
              f"world:{smoke_run.root}"])
    assert done.value.code in (0, None)
    said = " ".join(capsys.readouterr().err.split())
    assert "as the judge(s) answered" in said  # (texts the world scores alike: ties, so no side bias to say)
    (outcome,) = pair_results(Study.open(tmp_path / "judged"), whose=JUDGES).pairs
    assert outcome.wins + outcome.losses + outcome.ties == 10 and outcome.unjudged == 0


def test_a_pair_study_is_refused_as_a_rated_truth_and_a_rating_study_as_a_pair_study(tmp_path):
    from rlhflab.studies.as_truth import named_truth
    from rlhflab.studies.design import StudyError
    from rlhflab.studies.kinds import PAIR

    study = build(tmp_path)
    with pytest.raises(StudyError, match="compares systems.*rlhflab compare"):
        named_truth(tmp_path / "a.jsonl", f"{study.directory}:a", table=None)  # refused before the run is read
    with pytest.raises(StudyError, match="a pair study, not a rating study; read it with rlhflab pair"):
        open_study(study.directory, RATING)
    assert open_study(study.directory, PAIR).design.kind == "pair"


def test_whose_answers_count_is_chosen_said_and_never_pooled_silently(tmp_path):
    from typer.testing import CliRunner

    from rlhflab.cli import app
    from rlhflab.studies.whose import PEOPLE, Whose, answered_by

    study = build(tmp_path, prompts=6, ratings_per_item=1)
    judge = study.add_rater("judge", "world:x")
    answer_all(study, judge, lambda prompt, a, b: a)  # the judge always prefers a
    assert answered_by(study, None) == Whose("judge:world:x", "no person has answered yet")
    runner = CliRunner()
    by_default = runner.invoke(app, ["pair", str(study.directory), "--results", "--json"])
    body = json.loads(by_default.stdout)
    assert body["answers_of"] == "answers of judge:world:x (no person has answered yet)"
    assert body["pairs"][0]["wins"] == 6
    people = json.loads(runner.invoke(app, ["pair", str(study.directory), "--results", "--json", "--answers",
                                            "people"]).stdout)
    assert people["pairs"][0]["wins"] == 0 and "no answers yet" in people["notes"]
    exported = runner.invoke(app, ["pair", str(study.directory), "--export", str(tmp_path / "prefs.jsonl")])
    assert exported.exit_code == 0 and "6 preference records" in exported.output
    assert "answers of judge:world:x" in exported.output

    person = study.add_rater()
    answer_all(study, person, lambda prompt, a, b: b)  # the person always prefers b
    assert answered_by(study, None) == PEOPLE  # once people answer, theirs count, and the judge is compared
    assert pair_results(study).pairs[0].losses == 6 and pair_results(study).judges[0].agreement == 0
    assert pair_results(study, Whose("all")).pairs[0].split == 6  # pooled only when asked: one each way
    assert pair_results(study, Whose("judge:world:x")).pairs[0].wins == 6
    wrong = runner.invoke(app, ["pair", str(study.directory), "--results", "--answers", "judge:nobody"])
    assert wrong.exit_code == 2 and "no judge 'nobody'" in wrong.output and "world:x" in wrong.output
    bad = runner.invoke(app, ["pair", str(study.directory), "--results", "--answers", "everyone"])
    assert bad.exit_code == 2 and "people, judges, judge:NAME or all" in bad.output
