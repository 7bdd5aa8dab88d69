"""Prompts from a user's file, drawn batch by batch the way the embedded world draws its
own (`prompts(n, seed)`), so every stage and probe takes either as its prompt source."""

from __future__ import annotations

import random
from typing import Protocol, Sequence


class PromptSource(Protocol):
    def prompts(self, n: int, seed: int) -> list[str]:
        """n prompts, the same ones for the same seed."""
        ...


class PromptPool:
    """A fixed set of prompts; each batch is a seeded shuffle of the pool, repeated only
    when the pool is smaller than the batch, so a batch repeats a prompt only if it must."""

    def __init__(self, prompts: Sequence[str]) -> None:
        if not prompts:
            raise ValueError("a prompt pool needs at least one prompt")
        self.pool = tuple(prompts)

    def __len__(self) -> int:
        return len(self.pool)

    def prompts(self, n: int, seed: int) -> list[str]:
        rng = random.Random(f"prompt-pool/{seed}")
        drawn: list[str] = []
        while len(drawn) < n:
            order = list(self.pool)
            rng.shuffle(order)
            drawn.extend(order[: n - len(drawn)])
        return drawn
