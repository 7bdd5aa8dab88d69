"""Configuration of the reviews world: gold utility weights and labeler noise."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorldConfig:
    """Gold utility weights and labeler noise of the reviews world.

    Defaults are chosen so that a grammar sample almost never pays a penalty (the grammar
    never repeats a content word, and 98.5 % of its reviews stay within the soft limit),
    while degenerate text aimed at VADER (``great great great !``, a sentence said three
    times) ends clearly below a plain positive review, and a response that rambles to the
    end of its token budget pays for its length; see ``docs/world.md``.
    """

    labeler_tau: float = 0.1
    """Labeler noise: P(a > b) = sigmoid((u_a - u_b) / tau); 0.1 -> a 0.1 gap is 73 %."""
    ungrammatical_penalty: float = 0.5
    """Subtracted per sentence that matches no template (incl. an unterminated tail)."""
    repeat_penalty: float = 0.2
    """Subtracted per duplicated sentence and per repeated content-word occurrence."""
    length_soft_limit: int = 30
    """Words of the full review (prompt + response) allowed before the length penalty: the corpus's
    98.5th percentile, below the 34-37 words of a 2-5 word prompt and a 32-token response that never stops."""
    length_penalty: float = 0.05
    """Subtracted per word of the full review past ``length_soft_limit``."""

    def __post_init__(self) -> None:
        if not self.labeler_tau > 0:
            raise ValueError(f"labeler_tau must be > 0, got {self.labeler_tau}")
        for name in ("ungrammatical_penalty", "repeat_penalty", "length_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.length_soft_limit < 1:
            raise ValueError(f"length_soft_limit must be >= 1, got {self.length_soft_limit}")
