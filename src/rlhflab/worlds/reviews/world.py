"""ReviewsWorld: the facade the pipeline uses for the embedded ``reviews`` task.

Seeding: ``corpus(n, seed)`` and ``prompts(n, seed)`` each build their own
``random.Random`` from the seed, on separate streams (a string seed naming the use),
so the same seed gives the same corpus and the same prompts, and prompts are not
the openings of the corpus reviews drawn with that seed.

Prompts are split into a training and a held-out part of the prompt *space*: a prompt
belongs to the held-out part when a stable hash of its text falls in the held-out
buckets, so no prompt drawn for training can ever be drawn for evaluation, and both
parts keep the grammar's distribution (a common opening such as "it was" is simply on
one side), unlike filtering the evaluation set against one training stream.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rlhflab.worlds.reviews.config import WorldConfig
from rlhflab.worlds.reviews.gold import GoldBreakdown, gold_breakdown
from rlhflab.worlds.reviews.grammar import PROMPT_WORDS, ReviewGrammar
from rlhflab.worlds.reviews.tokenizer import build_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PromptSplit = Literal["train", "heldout"]
HELDOUT_BUCKETS = 8
"""One in this many hash buckets of the prompt space is held out for evaluation."""


def prompt_split(prompt: str) -> PromptSplit:
    """The part of the prompt space `prompt` belongs to, by a hash of its text that is the
    same in every process (Python's `hash` of a string is salted per process)."""
    digest = hashlib.blake2b(prompt.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "big") % HELDOUT_BUCKETS == 0 else "train"


class ReviewsWorld:
    """Grammar, gold utility, labeler config and tokenizer of the reviews world."""

    def __init__(self, config: WorldConfig = WorldConfig()) -> None:
        self.config = config
        self.grammar = ReviewGrammar()

    @property
    def longest_prompt_tokens(self) -> int:
        """Tokens the longest prompt takes (the word-level tokenizer gives each word one)."""
        return PROMPT_WORDS[1]

    def corpus(self, n: int, seed: int) -> list[str]:
        """n full reviews sampled from the grammar (mixed moods)."""
        rng = random.Random(f"reviews/corpus/{seed}")
        return [self.grammar.sample_review(rng) for _ in range(n)]

    def prompts(self, n: int, seed: int, split: PromptSplit = "train") -> list[str]:
        """n review openings (the first 2-5 words of fresh reviews) from one part of the
        prompt space: training prompts by default, `split="heldout"` for evaluation."""
        rng = random.Random(f"reviews/prompts/{split}/{seed}")
        drawn: list[str] = []
        while len(drawn) < n:
            prompt = self.grammar.sample_prompt(rng)
            if prompt_split(prompt) == split:
                drawn.append(prompt)
        return drawn

    def gold_breakdowns(self, prompts: list[str], responses: list[str]) -> list[GoldBreakdown]:
        """Gold utility and its components for each (prompt, response) pair."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        return [
            gold_breakdown(self.grammar, self.config, p, r) for p, r in zip(prompts, responses)
        ]

    def gold(self, prompts: list[str], responses: list[str]) -> list[float]:
        """Gold utility u(prompt, response) of each pair (see ``gold.py``)."""
        return [b.utility for b in self.gold_breakdowns(prompts, responses)]

    def grammatical_rate(self, texts: list[str]) -> float:
        """Fraction of all sentences in texts that parse (1.0 if there are none).

        Pass full reviews (prompt + " " + response): a response alone usually starts
        mid-sentence.
        """
        n_total = n_bad = 0
        for text in texts:
            n, bad = self.grammar.count_ungrammatical(text)
            n_total += n
            n_bad += bad
        return 1.0 - n_bad / n_total if n_total else 1.0

    def tokenizer(self) -> "PreTrainedTokenizerFast":
        """The world's word-level tokenizer (a fresh object per call)."""
        return build_tokenizer(self.grammar)

    def save(self, out_dir: Path) -> None:
        """Write out_dir/tokenizer/ (save_pretrained) and out_dir/world.json."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.tokenizer().save_pretrained(out_dir / "tokenizer")
        info = {
            "world": "reviews",
            "config": asdict(self.config),
            "vocabulary": self.grammar.vocabulary,
            "templates": [{"name": t.name, "pattern": t.pattern} for t in self.grammar.templates],
            "categories": {k: list(v) for k, v in self.grammar.categories.items()},
            "function_words": sorted(self.grammar.function_words),
        }
        (out_dir / "world.json").write_text(json.dumps(info, indent=1) + "\n")

