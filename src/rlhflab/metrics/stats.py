"""Masked statistics over padded (B, T) batches of response tokens.

Every PPO reduction in rlhflab goes through these functions, so there is exactly one
masking rule: ``mask`` is a bool tensor, True for a real response token. Padded
positions are *selected away* with ``torch.where`` rather than multiplied by 0, so
garbage there (1e6, inf, nan) can never leak into a result (``inf * 0`` is nan).

The statistics follow TRL's ``trl/core.py`` helpers (``masked_mean``, ``masked_var``
with Bessel's correction, ``masked_whiten`` with ``rsqrt(var + 1e-8)``), which in turn
reproduce ``whiten`` in OpenAI's lm-human-preferences ``lm_human_preferences/utils/core.py``.
Deliberate deviations: empty masks and single-token variances raise instead of
returning nan/inf, and whitened padding is 0 (TRL fills it afterwards with
``masked_fill``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "explained_variance",
]

# Added to the variance before rsqrt, as in lm-human-preferences' whiten and TRL.
WHITEN_EPS = 1e-8


def _check_mask(x: Tensor, mask: Tensor) -> None:
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = real response token), got {mask.dtype}"
        )
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != values shape {tuple(x.shape)}")


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over real tokens.

    Args:
        x: (B, T) float values; anything may sit at padded positions.
        mask: (B, T) bool, True for a real response token.
        dim: None for the sum over all real tokens (0-d), or a dim (e.g. 1 gives
            one sum per row, shape (B,)).

    Returns:
        0-d tensor, or x's shape without ``dim``.
    """
    _check_mask(x, mask)
    # sum_{t: mask_t} x_t ; where() rather than x * mask so inf/nan padding can't leak
    selected = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over real tokens (token-level mean, as TRL's ``masked_mean``).

    Args:
        x: (B, T) float values.
        mask: (B, T) bool, True for a real response token.
        dim: None for the mean over all real tokens of the batch (0-d), or a dim for
            per-row means (dim=1 gives (B,)). A slice with no real token gives nan,
            as ``torch.mean`` of an empty tensor does.

    Returns:
        0-d tensor, or x's shape without ``dim``.
    """
    # mean = sum_{t: mask_t} x_t / |{t: mask_t}|
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.to(x.dtype)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over all real tokens of the batch.

    Two-pass (mean first, then mean squared deviation) for numerical stability;
    ``unbiased`` applies Bessel's correction n / (n - 1), as TRL's ``masked_var``.

    Args:
        x: (B, T) float values.
        mask: (B, T) bool, True for a real response token.
        unbiased: divide by n - 1 instead of n.

    Returns:
        0-d tensor.

    Raises:
        ValueError: no real token, or only one with ``unbiased=True`` (the variance
            is undefined; TRL raises here too rather than return inf).
    """
    _check_mask(x, mask)
    n = int(mask.sum())
    if n < (2 if unbiased else 1):
        raise ValueError(
            f"masked_var needs at least {2 if unbiased else 1} real token(s), got {n}; "
            "use a larger (mini)batch"
        )
    mean = masked_mean(x, mask)
    # var = sum_{t: mask_t} (x_t - mean)^2 / (n - 1 if unbiased else n)
    sq_dev = masked_sum((x - mean) ** 2, mask)
    return sq_dev / (n - 1 if unbiased else n)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """Normalise ``x`` to zero mean and unit variance over real tokens.

    lm-human-preferences ``utils/core.py: whiten`` / TRL ``masked_whiten``. Used for
    advantage normalisation (``shift_mean=True``) and, optionally, reward
    whitening (``shift_mean=False`` keeps the mean and only rescales).

    Args:
        x: (B, T) float values.
        mask: (B, T) bool, True for a real response token (at least 2 of them).
        shift_mean: subtract the mean; when False the mean is added back after
            scaling, so only the spread changes.

    Returns:
        (B, T) whitened values; padded positions are exactly 0.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    # x_hat = (x - mean) / sqrt(var + eps)   [+ mean when not shift_mean]
    whitened = (x - mean) * torch.rsqrt(var + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros((), dtype=x.dtype, device=x.device))


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """Fraction of the variance of the returns explained by the value predictions.

    ``ev = 1 - Var[returns - values] / Var[returns]`` over real tokens, as
    lm-human-preferences' ``ppo/val/var_explained`` and CleanRL's
    ``explained_variance``. 1 is a perfect critic, 0 is no better than a constant,
    negative is worse than a constant.

    Args:
        values: (B, T) value predictions.
        returns: (B, T) value targets (e.g. GAE returns).
        mask: (B, T) bool, True for a real response token.

    Returns:
        Python float; nan when Var[returns] == 0 (the ratio is undefined) or when the
        mask is empty.
    """
    _check_mask(values, mask)
    _check_mask(returns, mask)
    if not bool(mask.any()):
        return float("nan")
    # biased variances: the n's cancel in the ratio, and a single token is allowed
    var_returns = float(masked_var(returns, mask, unbiased=False))
    if var_returns == 0.0:
        return float("nan")
    var_residual = float(masked_var(returns - values, mask, unbiased=False))
    return 1.0 - var_residual / var_returns


def pearson(x: Tensor, y: Tensor) -> float:
    """Pearson correlation of two 1-D tensors; nan when either is constant."""
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denominator = float(x.norm() * y.norm())
    return float((x * y).sum()) / denominator if denominator > 0 else math.nan
