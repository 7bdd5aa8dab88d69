"""Judges rate a study as raters of their own: a causal LM's expected rating against a hand
computation on a tiny model built from a config, a reward model's score against the
score the PPO stage recorded for the same samples, and their agreement with people."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from typer.testing import CliRunner

from rlhflab.cli import app as cli
from rlhflab.judges.ratings import LanguageModelJudge, RewardModelJudge, judge_study
from rlhflab.studies.design import StudyDesign, StudyError
from rlhflab.studies.results import study_results
from rlhflab.studies.stats import spearman
from rlhflab.studies.store import Study
from test_studies import build, rate_all, samples

runner = CliRunner()
WORDS = ["<bos>", "<eos>", "<pad>", "<unk>", "the", "film", "was", "good", "bad", "rate", "it", "from", "to", ":",
         "1", "2", "3", "4", "5", "6", "7"]
TEMPLATE = "{prompt} {response} rate it from {low} to {high} : "


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    """A random GPT-2 with a word-level tokenizer whose scale points are words of their own."""
    out = tmp_path_factory.mktemp("lm")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>",
                                        pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS), n_positions=64, n_embd=16, n_layer=2, n_head=2)).save_pretrained(
        out)
    tokenizer.save_pretrained(out)
    return out


def test_the_lm_judges_rating_is_the_expected_point_by_hand(tiny_lm: Path):
    judge = LanguageModelJudge(tiny_lm, TEMPLATE, (1, 7))
    got = judge.judge("the film was", "good").rating
    # by hand: the template's words, the model's next-token distribution, the points' share of it
    words = ["<bos>"] + ["the", "film", "was", "good", "rate", "it", "from", "1", "to", "7", ":"]
    model = GPT2LMHeadModel.from_pretrained(tiny_lm)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[WORDS.index(w) for w in words]])).logits[0, -1]
    probs = torch.softmax(logits.double(), dim=-1)
    points = torch.tensor([probs[WORDS.index(str(k))] for k in range(1, 8)])
    expected = float((points / points.sum() * torch.arange(1, 8, dtype=torch.double)).sum())
    assert got == pytest.approx(expected, abs=1e-6)
    assert 1 <= got <= 7


def test_a_template_the_judge_cannot_read_is_refused(tiny_lm: Path):
    with pytest.raises(StudyError, match=r"\{prompt\} and \{response\}"):
        LanguageModelJudge(tiny_lm, "rate {text}: ", (1, 7))
    judge = LanguageModelJudge(tiny_lm, "{prompt} {response} rate it:", (1, 7))  # ':1' is one unknown word
    with pytest.raises(StudyError, match="not one token after the template"):
        judge.judge("the film was", "good")


def test_judges_rate_every_item_and_do_not_count_toward_peoples_share(tmp_path: Path, tiny_lm: Path):
    study = build(tmp_path, StudyDesign(bins=2, per_bin=3, ratings_per_item=1, repeat_every=0), raters=1,
                  items=samples(steps=6, per_step=1, text=lambda s, k: ["good", "bad"][s % 2]))
    assert judge_study(study, LanguageModelJudge(tiny_lm, TEMPLATE, (1, 7))) == 6
    assert judge_study(study, LanguageModelJudge(tiny_lm, TEMPLATE, (1, 7))) == 0  # resumes: nothing left
    person = study.raters("person")[0]
    assert len(rate_all(study, person, lambda s: 6 if "good" in s.response else 2)) == 6  # the judge took none
    res = study_results(study)
    assert [r.name for r in res.raters] == ["person-1"]  # judges are not pooled with people
    (judge,) = res.judges
    assert judge.items == 6 and judge.low <= judge.spearman <= judge.high


def test_spearman_by_hand():
    # ranks (1, 2.5, 2.5, 4) and (1, 2, 3, 4): Pearson of ranks = 0.9486833
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(0.9486833, abs=1e-6)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_the_reward_model_judge_scores_as_the_ppo_stage_did(smoke_run):
    """The smoke run's stage-2 model, judging its own samples, gives back the raw score PPO
    standardised into each sample's proxy (for responses that ended, as the rollout scores them)."""
    judge = RewardModelJudge(smoke_run.root / "stage2_rm")
    config = json.loads((smoke_run.root / "stage2_rm" / "config.json").read_text())
    mean, std = config["reward_mean"], config["reward_std"]
    rows = [json.loads(line) for line in (smoke_run.root / "samples" / "ppo.jsonl").read_text().splitlines()]
    ended = [r for r in rows if r["ended"] and r["step"] == 0][:16]
    assert ended
    for row in ended:
        raw = judge.judge(row["prompt"], row["response"]).score
        assert (raw - mean) / std == pytest.approx(row["proxy"], abs=1e-3)


def test_the_command_runs_a_judge_and_prints_its_agreement(smoke_run, tmp_path: Path):
    study = tmp_path / "study"
    built = runner.invoke(cli, ["rate", str(smoke_run.root), "--study", str(study), "--bins", "2", "--per-bin", "3",
                                "--no-serve"])
    assert built.exit_code == 0, built.output
    opened = Study.open(study)
    for rater in opened.raters():
        rate_all(opened, rater, lambda s: 1 + len(s.response) % 7)
    judged = runner.invoke(cli, ["rate", str(study), "--judge", f"rm:{smoke_run.root / 'stage2_rm'}"])
    assert judged.exit_code == 0, judged.output
    assert "judges against the people" in judged.output
    assert [r.name for r in opened.raters("judge")] == [f"rm:{(smoke_run.root / 'stage2_rm').resolve()}"]
    assert len([r for r in opened.ratings() if r.score is not None]) == 6
    bad = runner.invoke(cli, ["rate", str(study), "--judge", "oracle:somewhere"])
    assert bad.exit_code == 2 and "rm, classifier, lm" in bad.output


def test_the_classifier_judge_scores_the_labels_probability_by_hand(tiny_lm: Path, tmp_path: Path):
    """A two-label classifier built from a config: the judge's score is the softmax
    probability of the named label on the (prompt, response) pair, as computed by hand."""
    from transformers import AutoTokenizer, GPT2ForSequenceClassification

    from rlhflab.judges.ratings import ClassifierJudge

    torch.manual_seed(1)
    config = GPT2Config(vocab_size=len(WORDS), n_positions=64, n_embd=16, n_layer=1, n_head=2, num_labels=2,
                        id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1},
                        pad_token_id=WORDS.index("<pad>"))
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path / "clf")
    AutoTokenizer.from_pretrained(tiny_lm).save_pretrained(tmp_path / "clf")
    judge = ClassifierJudge(tmp_path / "clf", "NEGATIVE")
    model = GPT2ForSequenceClassification.from_pretrained(tmp_path / "clf")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "clf")
    with torch.no_grad():
        logits = model(**tokenizer("the film was", "bad", return_tensors="pt")).logits[0]
    assert judge.judge("the film was", "bad").score == pytest.approx(float(torch.softmax(logits, -1)[0]), abs=1e-6)
    with pytest.raises(StudyError, match="NEGATIVE, POSITIVE"):
        ClassifierJudge(tmp_path / "clf", "NEUTRAL")
