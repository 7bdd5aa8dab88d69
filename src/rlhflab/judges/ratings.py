"""Judges: models that rate a study's items, stored as raters of their own (kind "judge").

A judge is named by its model's full path (and an LM judge by its template's hash too), so
two judges are two raters and a judge run again resumes its own ratings. It takes each
item as a person's page serves it (`Study.next_item`, `Study.record`)
and is never pooled with people: its agreement with them is measured instead
(`results.judge_agreement`). Nothing is downloaded: every judge is a local directory.

- `RewardModelJudge`: a reward model directory (rlhflab's stage 2, or any 1-label
  `AutoModelForSequenceClassification` with its tokenizer), reading `<bos> prompt response
  <eos>` as PPO scores it; its raw score is kept on its own scale.
- `ClassifierJudge`: any local sequence classifier, reading (prompt, response) as a text
  pair: a one-label model's logit, else the probability of one label (default the last).
- `LanguageModelJudge`: a causal LM asked with a prompt template the user gives; its
  rating is the expected value over the scale's points, weighted by the next-token
  probabilities of the point tokens renormalised over the scale (as G-Eval weighs its
  scores: Liu et al. 2023, "G-Eval: NLG Evaluation using GPT-4 with Better Human
  Alignment", sec. 2.3).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rlhflab.data.batching import encode_sft
from rlhflab.models.lm import check_model_dir, load_causal_lm, load_tokenizer
from rlhflab.models.reward_model import load_reward_model, load_reward_tokenizer, max_input_length, score_sequences
from rlhflab.studies.design import StudyError
from rlhflab.studies.kinds import RATING, require_kind
from rlhflab.studies.ratings import record_rating
from rlhflab.studies.store import Study

TEMPLATE_FIELDS = ("prompt", "response", "low", "high")


@dataclass(frozen=True)
class Judgement:
    rating: float | None  # on the study's scale, where the judge has one
    score: float | None  # the judge's raw output


class Judge(Protocol):
    name: str

    def judge(self, prompt: str, response: str) -> Judgement: ...


class RewardModelJudge:
    def __init__(self, directory: Path, policy_tokenizer: Path | None = None) -> None:
        self.name = f"rm:{Path(directory).resolve()}"
        self.model = load_reward_model(Path(directory)).eval()
        tokenizer = load_reward_tokenizer(Path(directory))
        if tokenizer is None and policy_tokenizer is not None:
            tokenizer = load_tokenizer(policy_tokenizer)
        if tokenizer is None:
            raise StudyError(f"{directory}: the reward model has no tokenizer of its own; give the policy's "
                             "directory whose tokens it reads")
        self.tokenizer = tokenizer
        self.max_len = max_input_length(self.model) or 1024

    @torch.no_grad()
    def judge(self, prompt: str, response: str) -> Judgement:
        ids, mask, _ = encode_sft(self.tokenizer, [(prompt, response)], self.max_len)
        return Judgement(None, float(score_sequences(self.model, ids, mask)[0]))


class ClassifierJudge:
    def __init__(self, directory: Path, label: str | None = None) -> None:
        directory = check_model_dir(Path(directory))
        self.name = f"classifier:{directory.resolve()}" + (f"#{label}" if label else "")
        self.model = AutoModelForSequenceClassification.from_pretrained(
            str(directory), use_safetensors=True, trust_remote_code=False).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
        labels = self.model.config.id2label
        if self.model.config.num_labels == 1:
            self.label = None
        elif label is None:
            self.label = self.model.config.num_labels - 1
        else:
            found = [i for i, name in labels.items() if name == label]
            if not found:
                raise StudyError(f"{directory}: no label {label!r}; the classifier's labels are "
                                 + ", ".join(labels.values()))
            self.label = found[0]

    @torch.no_grad()
    def judge(self, prompt: str, response: str) -> Judgement:
        encoded = self.tokenizer(prompt, response, return_tensors="pt", truncation=True)
        logits = self.model(**encoded).logits[0].float()
        score = logits[0] if self.label is None else torch.softmax(logits, dim=-1)[self.label]
        return Judgement(None, float(score))


def render_template(template: str, prompt: str, response: str, scale: tuple[int, int]) -> str:
    return template.format(prompt=prompt, response=response, low=scale[0], high=scale[1])


def check_template(template: str, where: str) -> None:
    import string

    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    unknown = fields - set(TEMPLATE_FIELDS)
    if unknown or not {"prompt", "response"} <= fields:
        raise StudyError(f"{where}: a judge's template takes {{prompt}} and {{response}} (and {{low}}, {{high}} for "
                         f"the scale's ends); it has {', '.join(sorted(fields)) or 'none'}")


class LanguageModelJudge:
    """The module docstring's expected value over the scale's point tokens."""

    def __init__(self, directory: Path, template: str, scale: tuple[int, int]) -> None:
        check_template(template, "--template")
        self.name = f"lm:{Path(directory).resolve()}#{hashlib.sha256(template.encode()).hexdigest()[:8]}"
        self.model = load_causal_lm(Path(directory)).eval()
        self.tokenizer = load_tokenizer(Path(directory))
        self.template, self.scale = template, scale

    def point_tokens(self, context: list[int], text: str) -> list[int]:
        """The token each point of the scale is, written right after `text`: the point must
        add exactly one token to the context's tokens (else the judge cannot read it)."""
        tokens = []
        for point in range(self.scale[0], self.scale[1] + 1):
            ids = self._encode(text + str(point))
            if len(ids) != len(context) + 1 or ids[:-1] != context:
                raise StudyError(f"the scale's point {point} is not one token after the template with this "
                                 "tokenizer; end the template where a number follows as one token")
            tokens.append(ids[-1])
        return tokens

    def _encode(self, text: str) -> list[int]:
        bos = [] if self.tokenizer.bos_token_id is None else [self.tokenizer.bos_token_id]
        return bos + self.tokenizer.encode(text, add_special_tokens=False)

    @torch.no_grad()
    def point_probabilities(self, prompt: str, response: str) -> list[float]:
        """P(point | template), renormalised over the scale's points."""
        text = render_template(self.template, prompt, response, self.scale)
        context = self._encode(text)
        tokens = self.point_tokens(context, text)
        logits = self.model(input_ids=torch.tensor([context])).logits[0, -1].float()
        probs = torch.softmax(logits, dim=-1)[tokens]
        return (probs / probs.sum()).tolist()

    def judge(self, prompt: str, response: str) -> Judgement:
        probs = self.point_probabilities(prompt, response)
        rating = sum(p * point for p, point in zip(probs, range(self.scale[0], self.scale[1] + 1)))
        return Judgement(rating, rating)


def judge_study(study: Study, judge: Judge, advance: Callable[[], None] = lambda: None) -> int:
    """Rate every item of `study` with `judge`, as a rater of its own; resumes where it stopped."""
    require_kind(study, RATING)
    rater = next((r for r in study.raters("judge") if r.name == judge.name), None) or study.add_rater(
        "judge", judge.name)
    rated = 0
    while (served := study.next_item(rater)) is not None:
        verdict = judge.judge(served.prompt, served.response)
        outcome = record_rating(study, rater, served.serve_id, served.nonce, verdict.rating, verdict.score)
        if outcome != "recorded":
            raise StudyError(f"{judge.name}: its judgement of an item was {outcome}")
        rated += 1
        advance()
    return rated


JUDGE_KINDS = ("rm", "classifier", "lm")


def make_judge(spec: str, study: Study, template: Path | None = None, label: str | None = None,
               tokenizer: Path | None = None) -> Judge:
    """The judge `KIND:DIR` names (`rate --judge`): a reward model, a classifier (its
    `label`'s probability), or a language model asked with `template`. A bad spec is a
    StudyError."""
    kind, _, directory = spec.partition(":")
    if kind not in JUDGE_KINDS or not directory:
        raise StudyError(f"expected KIND:DIR with KIND one of {', '.join(JUDGE_KINDS)}")
    if kind == "lm":
        if template is None:
            raise StudyError("--judge lm:DIR needs --template FILE")
        return LanguageModelJudge(Path(directory), template.read_text(encoding="utf-8"),
                                  (study.design.scale_min, study.design.scale_max))
    if kind == "classifier":
        return ClassifierJudge(Path(directory), label)
    return RewardModelJudge(Path(directory), tokenizer)

