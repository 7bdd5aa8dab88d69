"""Judges that compare: each answers every pair of a comparison study as a rater of its own
(kind "judge"), never pooled with people; its agreement with them is measured instead.

- `RewardModelPairJudge`: a reward model directory scores both responses (judges/ratings.py's
  `RewardModelJudge`); the higher wins, equal scores tie. A reward model reads each response
  alone, so the side cannot sway it.
- `LanguageModelPairJudge`: a local causal LM asked with a pairwise template ({prompt},
  {first}, {second}) that ends where its answer follows; the next-token probabilities of the
  labels "A" (the first) and "B" decide. It reads an order, so it is asked both orders: an
  answer is kept where the two agree, and is a tie where they do not (Zheng et al. 2023,
  "Judging LLM-as-a-judge with MT-Bench and Chatbot Arena", sec. 3.3-3.4: swapping the
  positions). How often its single-order answers chose the first shown is its position bias.
- `FunctionPairJudge`: any function of (prompt, first, second), such as the world's simulated
  labeler (studies/bots.py `WorldComparer`), asked as the page shows an item.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from rlhflab.studies.design import StudyError
from rlhflab.studies.kinds import PAIR, require_kind
from rlhflab.studies.pair_store import record_choice, sides
from rlhflab.studies.pairwise import wilson_interval
from rlhflab.studies.store import Study

PAIR_TEMPLATE_FIELDS = ("prompt", "first", "second")


class PairJudge(Protocol):
    name: str
    reads_order: bool  # True: asked both orders

    def prefer(self, prompt: str, first: str, second: str) -> str:
        """"first", "second" or "tie"."""


@dataclass
class FunctionPairJudge:
    name: str
    choose: Callable[[str, str, str], str]  # (prompt, left, right) -> "left", "right" or "tie"
    reads_order: bool = False

    def prefer(self, prompt: str, first: str, second: str) -> str:
        return {"left": "first", "right": "second"}.get(self.choose(prompt, first, second), "tie")


class RewardModelPairJudge:
    reads_order = False

    def __init__(self, directory: Path, policy_tokenizer: Path | None = None) -> None:
        from rlhflab.judges.ratings import RewardModelJudge

        self.scorer = RewardModelJudge(directory, policy_tokenizer)
        self.name = f"pair-{self.scorer.name}"

    def prefer(self, prompt: str, first: str, second: str) -> str:
        a, b = (self.scorer.judge(prompt, text).score for text in (first, second))
        return "first" if a > b else "second" if b > a else "tie"


def check_pair_template(template: str, where: str) -> None:
    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    if fields != set(PAIR_TEMPLATE_FIELDS):
        raise StudyError(f"{where}: a pairwise judge's template takes {{prompt}}, {{first}} and {{second}}; it has "
                         f"{', '.join(sorted(fields)) or 'none'}")


class LanguageModelPairJudge:
    reads_order = True

    def __init__(self, directory: Path, template: str, labels: tuple[str, str] = ("A", "B")) -> None:
        import torch  # noqa: F401  (the training stack: a causal LM)

        from rlhflab.models.lm import load_causal_lm, load_tokenizer

        check_pair_template(template, "--template")
        self.name = f"pair-lm:{Path(directory).resolve()}#{hashlib.sha256(template.encode()).hexdigest()[:8]}"
        self.model = load_causal_lm(Path(directory)).eval()
        self.tokenizer = load_tokenizer(Path(directory))
        self.template, self.labels = template, labels

    def _encode(self, text: str) -> list[int]:
        bos = [] if self.tokenizer.bos_token_id is None else [self.tokenizer.bos_token_id]
        return bos + self.tokenizer.encode(text, add_special_tokens=False)

    def label_probabilities(self, prompt: str, first: str, second: str) -> tuple[float, float]:
        """P("A"), P("B") after the template, renormalised over the two; each label must be
        one token after the template's text."""
        import torch

        text = self.template.format(prompt=prompt, first=first, second=second)
        context = self._encode(text)
        tokens = []
        for label in self.labels:
            ids = self._encode(text + label)
            if len(ids) != len(context) + 1 or ids[:-1] != context:
                raise StudyError(f"the label {label!r} is not one token after the template with this tokenizer; end "
                                 "the template where the answer's letter follows as one token")
            tokens.append(ids[-1])
        if tokens[0] == tokens[1] or self.tokenizer.unk_token_id in tokens:
            raise StudyError(f"the labels {self.labels[0]!r} and {self.labels[1]!r} are not two tokens of this "
                             "tokenizer's own (one is unknown to it)")
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([context])).logits[0, -1].float()
        probs = torch.softmax(logits, dim=-1)[tokens]
        probs = probs / probs.sum()
        return float(probs[0]), float(probs[1])

    def prefer(self, prompt: str, first: str, second: str) -> str:
        a, b = self.label_probabilities(prompt, first, second)
        return "first" if a > b else "second" if b > a else "tie"


@dataclass
class JudgeReport:
    name: str
    answered: int = 0
    single_order: list[str] = field(default_factory=list)  # each order's answer: first, second, tie

    def position_bias(self) -> tuple[float | None, float | None, float | None, int]:
        """The share of decisive single-order answers that chose the first shown, with
        Wilson's interval, and how many there were (1/2: no bias)."""
        decisive = [a for a in self.single_order if a != "tie"]
        if not decisive:
            return None, None, None, 0
        first = sum(a == "first" for a in decisive)
        low, high = wilson_interval(first, len(decisive))
        return first / len(decisive), low, high, len(decisive)


def judge_pairs(study: Study, judge: PairJudge, advance: Callable[[], None] = lambda: None) -> JudgeReport:
    """Answer every pair of `study` with `judge`, as a rater of its own (resuming where it
    stopped): a judge that reads the order is asked both; the side the page would show is
    the item's own."""
    require_kind(study, PAIR)
    rater = next((r for r in study.raters("judge") if r.name == judge.name), None) or study.add_rater(
        "judge", judge.name)
    report = JudgeReport(judge.name)
    while (served := study.next_item(rater)) is not None:
        left, right = sides(served)
        shown = judge.prefer(served.prompt, left, right)
        report.single_order.append(shown)
        answer = {"first": "left", "second": "right"}.get(shown, "tie")
        if judge.reads_order:
            swapped = judge.prefer(served.prompt, right, left)
            report.single_order.append(swapped)
            agreed = {"first": "right", "second": "left"}.get(swapped, "tie")
            answer = answer if answer == agreed else "tie"
        outcome = record_choice(study, rater, served.serve_id, served.nonce, answer)
        if outcome != "recorded":
            raise StudyError(f"{judge.name}: its answer to a pair was {outcome}")
        report.answered += 1
        advance()
    return report


PAIR_JUDGE_KINDS = ("rm", "lm", "world")


def parse_pair_judge(spec: str, template: object | None = None) -> tuple[str, Path]:
    """`KIND:PATH` checked before anything runs: a known kind, a path that exists, the template
    an `lm` judge needs; a StudyError says what was expected."""
    kind, _, path = spec.partition(":")
    if kind not in PAIR_JUDGE_KINDS or not path:
        raise StudyError(f"--judge {spec}: expected KIND:PATH with KIND one of {', '.join(PAIR_JUDGE_KINDS)}")
    if not Path(path).exists():
        raise StudyError(f"--judge {spec}: {path} does not exist")
    if kind == "lm" and template is None:
        raise StudyError("--judge lm:DIR needs --template FILE")
    return kind, Path(path)


def make_pair_judge(spec: str, study: Study, template: str | None = None,
                    tokenizer: Path | None = None) -> PairJudge:
    """The judge `KIND:PATH` names: `world:RUN` (the world's simulated labeler, its noise unit
    the spread of the gold utility over `study`'s responses), `rm:DIR`, `lm:DIR` (with `template`)."""
    kind, path = parse_pair_judge(spec, template)
    if kind == "world":
        from rlhflab.studies.bots import world_comparers

        responses = [(i["prompt"], r) for i in study.items() for r in (i["response"], i["response_b"])]
        return FunctionPairJudge(f"world:{path.resolve()}", world_comparers(path, responses, 1, per_item=True)[0])
    if kind == "lm":
        return LanguageModelPairJudge(path, template)
    return RewardModelPairJudge(path, tokenizer)
