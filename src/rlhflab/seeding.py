"""Named random streams derived from the run seed, so each consumer (corpus, init,
sampling, prompts) has its own stream and changing one does not shift the others."""

from __future__ import annotations

import hashlib
import random

import torch


def derive_seed(seed: int, *names: str) -> int:
    digest = hashlib.sha256(":".join([str(seed), *names]).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def py_rng(seed: int, *names: str) -> random.Random:
    return random.Random(derive_seed(seed, *names))


def torch_generator(seed: int, *names: str) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(derive_seed(seed, *names))
    return generator
