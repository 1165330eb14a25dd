"""Normalisers: bound (or rescale) each representation before it is encoded and randomised.

Every normaliser is per vector (one row of an (N, k) batch, never across users, so it is a local operation),
returns a :class:`Stage` with float32 values of the same shape, and counts what it changed.
Arithmetic is float32 with per-row factors computed in float64; the resulting norms can exceed the bound by a few
float32 ulps (simulation-grade, like the floating-point noise samplers).
"""

from __future__ import annotations

import numpy as np

from fl_privtext.privacy.stage import Stage


def as_batch(x: np.ndarray, dim: int | None = None, *, min_dim: int = 1) -> np.ndarray:
    """Validate a batch of representations and return it as a C-contiguous float32 (N, k) array."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"Expected a 2-D (N, dim) array of representations, got shape {arr.shape}.")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"Expected a real-valued array, got dtype {arr.dtype}.")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"Expected {dim} columns (the mechanism's dim), got {arr.shape[1]}.")
    if arr.shape[1] < min_dim:
        raise ValueError(f"Expected at least {min_dim} columns, got {arr.shape[1]}.")
    out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise ValueError("Representations must be finite (found NaN or inf, possibly after the cast to float32).")
    return out


def identity(x: np.ndarray) -> Stage:
    """No normalisation."""
    return Stage(x, {"method": "none"})


def zscore(x: np.ndarray) -> Stage:
    """Per-vector z-score (OME, Algorithm 1 step 1): each row minus its mean, divided by its standard deviation.

    Statistics are over the k coordinates of one vector (population std, ddof=0), so the step is local to the
    user. Rows with zero spread become all zeros (``constant_rows`` counts them).
    """
    mean = x.mean(axis=1, keepdims=True, dtype=np.float64)
    std = x.std(axis=1, keepdims=True, dtype=np.float64)
    constant = std[:, 0] == 0.0
    inv = np.divide(1.0, std, out=np.zeros_like(std), where=std > 0).astype(np.float32)
    out = (x - mean.astype(np.float32)) * inv
    return Stage(out, {"method": "z-score", "constant_rows": int(constant.sum())})


def minmax(x: np.ndarray) -> Stage:
    """Per-vector min-max to [0, 1] (DPNR Algorithm 2 step 3): (x - min(x)) / (max(x) - min(x)).

    The paper prints ``x - min(x)/(max(x) - min(x))``; the intended grouping is used. Every output vector has
    a 0 and a 1 coordinate (unless constant: then all zeros, counted in ``constant_rows``).
    """
    lo = x.min(axis=1, keepdims=True)
    span = (x.max(axis=1, keepdims=True) - lo).astype(np.float64)
    inv = np.divide(1.0, span, out=np.zeros_like(span), where=span > 0).astype(np.float32)
    out = (x - lo) * inv
    return Stage(out, {"method": "min-max", "constant_rows": int((span[:, 0] == 0).sum())})


def _rescale(x: np.ndarray, norms: np.ndarray, clip_norm: float, *, only_shrink: bool) -> tuple[np.ndarray, int]:
    # norms: (N,) float64. Factor C/||x|| (normalise) or min(1, C/||x||) (clip); zero rows stay zero.
    factor = np.divide(clip_norm, norms, out=np.zeros_like(norms), where=norms > 0)
    if only_shrink:
        changed = norms > clip_norm
        factor = np.where(changed, factor, 1.0)
    else:
        changed = norms > 0
    return x * factor.astype(np.float32)[:, None], int(changed.sum())


def l1_normalise(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Scale every non-zero row to L1 norm exactly ``clip_norm`` (Maheshwari et al. 2022; CAPE Algorithm 1)."""
    norms = np.abs(x).sum(axis=1, dtype=np.float64)
    out, changed = _rescale(x, norms, clip_norm, only_shrink=False)
    return Stage(out, {"method": "l1-normalise", "clip_norm": clip_norm, "zero_rows": int((norms == 0).sum()),
                       "rescaled_rows": changed})


def l1_clip(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Project rows onto the L1 ball by rescaling: x * min(1, C / ||x||_1)."""
    norms = np.abs(x).sum(axis=1, dtype=np.float64)
    out, clipped = _rescale(x, norms, clip_norm, only_shrink=True)
    return Stage(out, {"method": "l1-clip", "clip_norm": clip_norm, "clipped_rows": clipped})


def l2_clip(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Clip rows to the L2 ball: x * min(1, C / ||x||_2)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    out, clipped = _rescale(x, norms, clip_norm, only_shrink=True)
    return Stage(out, {"method": "l2-clip", "clip_norm": clip_norm, "clipped_rows": clipped})


def box_clip(x: np.ndarray, low: float = 0.0, high: float = 1.0) -> Stage:
    """Clip every coordinate to [low, high] (the box [a, b]^k)."""
    if not low < high:
        raise ValueError(f"The box needs low < high, got low={low}, high={high}.")
    clipped = int(np.count_nonzero((x < low) | (x > high)))
    out = np.clip(x, np.float32(low), np.float32(high))
    return Stage(out, {"method": "box-clip", "low": low, "high": high, "clipped_values": clipped})
