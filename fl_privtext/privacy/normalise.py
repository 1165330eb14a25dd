"""Normalisers: bound (or rescale) each representation before it is encoded and randomised.

Every normaliser is per vector (one row of an (N, k) batch, never across users, so it is a local operation),
returns a :class:`Stage` with float32 values of the same shape, and counts what it changed.

Numerics: norms, spans, means and scale factors are computed in float64 and applied in float64 before the single
cast to float32, so no input that is finite in float32 (subnormal, or near +-3.4e38) overflows or becomes NaN.
Tiny-vector rule: a row whose norm (L1, L2), spread (z-score) or span (min-max) is below ``TINY`` = 1e-30 has no
meaningful direction at float32 precision and is treated as the zero / constant vector (all zeros out; counted),
which lies in every bounded domain, so the sensitivity bounds hold. The rounded float32 output can exceed a norm
bound by a few float32 ulps (relative ~1e-7).
"""

from __future__ import annotations

import numpy as np

from fl_privtext.privacy.stage import Stage

TINY = 1e-30  # below this norm / spread / span a row is treated as zero (module docstring)


def nonfinite_rows(x: np.ndarray) -> np.ndarray:
    """Indices of the rows of a 2-D array that hold NaN or inf."""
    return np.flatnonzero(~np.isfinite(x).all(axis=1))


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
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    bad = nonfinite_rows(out)
    if bad.size:
        raise ValueError(f"Representations must be finite: row(s) {bad[:10].tolist()} of this batch hold NaN or inf "
                         "(possibly after the cast to float32); nothing was released.")
    return out


def identity(x: np.ndarray) -> Stage:
    """No normalisation."""
    return Stage(x, {"method": "none"})


def zscore(x: np.ndarray) -> Stage:
    """Per-vector z-score (OME, Algorithm 1 step 1): each row minus its mean, divided by its standard deviation.

    Statistics are over the k coordinates of one vector (population std, ddof=0), so the step is local to the
    user. Rows with zero spread become all zeros (``constant_rows`` counts them).
    """
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    std = (x64 - mean).std(axis=1, keepdims=True)
    constant = std[:, 0] < TINY
    inv = np.divide(1.0, std, out=np.zeros_like(std), where=~constant[:, None])
    out = ((x64 - mean) * inv).astype(np.float32)
    return Stage(out, {"method": "z-score", "constant_rows": int(constant.sum())})


def minmax(x: np.ndarray) -> Stage:
    """Per-vector min-max to [0, 1] (DPNR Algorithm 2 step 3): (x - min(x)) / (max(x) - min(x)).

    The paper prints ``x - min(x)/(max(x) - min(x))``; the intended grouping is used. Every output vector has
    a 0 and a 1 coordinate (unless constant: then all zeros, counted in ``constant_rows``).
    """
    x64 = x.astype(np.float64)
    lo = x64.min(axis=1, keepdims=True)
    span = x64.max(axis=1, keepdims=True) - lo  # float64: 3e38 - (-3e38) does not overflow
    constant = span[:, 0] < TINY
    inv = np.divide(1.0, span, out=np.zeros_like(span), where=~constant[:, None])
    out = np.clip((x64 - lo) * inv, 0.0, 1.0).astype(np.float32)
    return Stage(out, {"method": "min-max", "constant_rows": int(constant.sum())})


# Rows whose float64 scale factor lies in this range are rescaled in float32 (fast path): the product cannot
# overflow or lose the row to underflow there; the others go through float64.
_SAFE_FACTOR = (1e-30, 1e30)


def _rescale(x: np.ndarray, norms: np.ndarray, clip_norm: float, *,
             only_shrink: bool) -> tuple[np.ndarray, int, int]:
    # x (N, k) float32, norms (N,) float64. Factor C/||x|| (normalise) or min(1, C/||x||) (clip), computed in
    # float64; applied in float32 where that is exact enough, in float64 for extreme rows (a float32 factor
    # overflows for subnormal rows); rows below TINY become zero.
    tiny = norms < TINY
    factor = np.divide(clip_norm, norms, out=np.zeros_like(norms), where=~tiny)
    if only_shrink:
        changed = norms > clip_norm
        factor = np.where(changed | tiny, factor, 1.0)
    else:
        changed = ~tiny
    out = x * factor.astype(np.float32)[:, None]
    extreme = ~tiny & ((factor < _SAFE_FACTOR[0]) | (factor > _SAFE_FACTOR[1]))
    if extreme.any():
        out[extreme] = (x[extreme].astype(np.float64) * factor[extreme, None]).astype(np.float32)
    return out, int(changed.sum()), int(tiny.sum())


def l1_normalise(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Scale every non-zero row to L1 norm exactly ``clip_norm`` (Maheshwari et al. 2022; CAPE Algorithm 1)."""
    norms = np.abs(x).sum(axis=1, dtype=np.float64)
    out, changed, tiny = _rescale(x, norms, clip_norm, only_shrink=False)
    return Stage(out, {"method": "l1-normalise", "clip_norm": clip_norm, "zero_rows": tiny, "rescaled_rows": changed})


def l1_clip(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Project rows onto the L1 ball by rescaling: x * min(1, C / ||x||_1)."""
    out, clipped, tiny = _rescale(x, np.abs(x).sum(axis=1, dtype=np.float64), clip_norm, only_shrink=True)
    return Stage(out, {"method": "l1-clip", "clip_norm": clip_norm, "clipped_rows": clipped, "zero_rows": tiny})


def l2_clip(x: np.ndarray, clip_norm: float = 1.0) -> Stage:
    """Clip rows to the L2 ball: x * min(1, C / ||x||_2)."""
    # squares in float64: a float32 square of 3e38 overflows
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64, casting="safe"))
    out, clipped, tiny = _rescale(x, norms, clip_norm, only_shrink=True)
    return Stage(out, {"method": "l2-clip", "clip_norm": clip_norm, "clipped_rows": clipped, "zero_rows": tiny})


def box_clip(x: np.ndarray, low: float = 0.0, high: float = 1.0) -> Stage:
    """Clip every coordinate to [low, high] (the box [a, b]^k)."""
    if not low < high:
        raise ValueError(f"The box needs low < high, got low={low}, high={high}.")
    clipped = int(np.count_nonzero((x < low) | (x > high)))
    out = np.clip(x, np.float32(low), np.float32(high))
    return Stage(out, {"method": "box-clip", "low": low, "high": high, "clipped_values": clipped})
