"""Units of logged metrics, and the conversions the table can make between them.

Trainers log the same quantity in different units: TRL's `objective/kl` is a
per-sequence sum, veRL's `critic/kl` a per-token mean, a hand-made CSV may log a clip
fraction in percent. Each format declares the unit of every name it maps; the table
converts to the canonical unit where the log holds what the conversion needs (a
response length, a batch size) and says so where it does not.
"""

from __future__ import annotations

from typing import Literal

Unit = Literal[
    "nats/sequence",  # a sum over a response's tokens (KL, entropy), batch-averaged
    "nats/token",  # a per-token mean over response tokens
    "fraction",  # a share in [0, 1]
    "percent",  # a share in [0, 100]
    "count",  # a number of items per batch (e.g. responses that ended)
    "tokens",
    "words",  # whitespace-and-punctuation words of decoded text (the doctor's measures of sample files)
    "seconds",
    "value",  # a dimensionless quantity with no alternative unit (a loss, a reward, a ratio)
]
UNITS: tuple[Unit, ...] = ("nats/sequence", "nats/token", "fraction", "percent", "count", "tokens", "words", "seconds",
                           "value")


class UnitError(ValueError):
    """A unit name that is not one of `UNITS`."""


def check_unit(name: str, where: str = "") -> Unit:
    if name not in UNITS:
        raise UnitError(f"{where + ': ' if where else ''}unknown unit {name!r}; known: {', '.join(UNITS)}")
    return name  # type: ignore[return-value]
