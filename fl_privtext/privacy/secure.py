"""OpenDP's exact discrete Laplace / discrete Gaussian on a fine grid: the reference implementation.

Since issue #25 the mechanisms sample with the vectorized :mod:`fl_privtext.privacy.exact` (same distributions,
tested against this module); OpenDP remains the reference in the tests and gives the secure Gaussian's
zCDP -> (eps, delta) map (:func:`gaussian_epsilon`).

Why OpenDP: it implements Canonne, Kamath & Steinke (NeurIPS 2020) exactly (integer arithmetic, no floating-point
transcendental functions), draws its bits from a cryptographically secure generator (OpenSSL's ``RAND_bytes`` in the
published wheels), and ships a *privacy map* proven for what it actually samples: inputs rounded to the grid
2^k, integer noise on that grid, the sum rounded back to float (post-processing). Re-implementing that in numpy
would give up either exactness or speed; calling it costs ~7 us per value (k = -40) on this machine.

The privacy of one release is read off OpenDP's map at our sensitivity, never assumed: `laplace_epsilon` and
`gaussian_epsilon` return the epsilon of what is sampled. The Laplace mechanisms keep their scale (the map then
exceeds l1_sensitivity/scale by the grid's rounding slack, ~dim * 2^-40 / scale); the Gaussian searches the
smallest sigma whose mapped epsilon at delta does not exceed the target (`calibrate_gaussian`). OpenDP's Gaussian is accounted in zCDP and
converted to (eps, delta) by OpenDP's conversion, so the secure Gaussian needs a slightly larger sigma than the
analytic continuous one (the report shows both).

Floating-point safety (Mironov 2012): the released values are ``x + n * 2^k`` rounded, whose low bits carry no
information about x beyond the DP guarantee; the package audit's low-bit distinguisher checks it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

GRID_EXPONENT = -40  # noise granularity 2^-40: the rounding slack in the map is ~dim * 2^-40 / scale
_ODP_FEATURES_ENABLED = False


def _dp() -> Any:
    global _ODP_FEATURES_ENABLED
    try:
        import opendp.prelude as dp
    except ImportError as exc:  # pragma: no cover - opendp is a dependency
        raise ValueError("privacy.sampler='secure' needs the opendp package (pip install opendp).") from exc
    if not _ODP_FEATURES_ENABLED:
        dp.enable_features("contrib")
        _ODP_FEATURES_ENABLED = True
    return dp


@functools.lru_cache(maxsize=64)
def _laplace_meas(scale: float, size: int | None) -> Any:
    dp = _dp()
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
    return dp.m.make_laplace(dom, dp.l1_distance(T=float), scale=scale, k=GRID_EXPONENT)


@functools.lru_cache(maxsize=64)
def _gaussian_meas(std: float, size: int | None) -> Any:
    dp = _dp()
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
    return dp.m.make_gaussian(dom, dp.l2_distance(T=float), scale=std, k=GRID_EXPONENT)


def laplace_epsilon(scale: float, l1_sensitivity: float, dim: int) -> float:
    """Epsilon of one secure Laplace release of a ``dim``-vector whose L1 sensitivity is ``l1_sensitivity``."""
    return float(_laplace_meas(float(scale), int(dim)).map(float(l1_sensitivity)))


def gaussian_epsilon(std: float, l2_sensitivity: float, delta: float, dim: int) -> float:
    """Epsilon at ``delta`` of one secure Gaussian release (OpenDP: zCDP map, then its conversion to (eps, delta))."""
    dp = _dp()
    approx = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(_gaussian_meas(float(std), int(dim))), float(delta))
    eps, _ = approx.map(float(l2_sensitivity))
    return float(eps)


def smallest_noise(epsilon_of: Any, target: float, start: float) -> float:
    """Smallest noise s (relative precision 1e-12) with epsilon_of(s) <= target; epsilon_of is decreasing in s."""
    lo, hi = start, start
    while epsilon_of(hi) > target:
        hi *= 2.0
    while epsilon_of(lo) <= target and lo > 1e-300:
        lo /= 2.0
    for _ in range(200):
        if hi - lo <= 1e-12 * hi:
            break
        mid = 0.5 * (lo + hi)
        if epsilon_of(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=256)
def calibrate_gaussian(epsilon: float, delta: float, l2_sensitivity: float, dim: int, start: float) -> float:
    """Smallest Gaussian sigma whose OpenDP-mapped (epsilon, delta) at ``l2_sensitivity`` meets the target."""
    return smallest_noise(lambda s: gaussian_epsilon(s, l2_sensitivity, delta, dim), epsilon, start)


def _sample(make: Any, noise: float, values: np.ndarray) -> np.ndarray:
    # One OpenDP call for the whole batch: the noise is i.i.d. per value, so the batch is sampled as one vector;
    # the privacy of one row is accounted by the row-sized map (`laplace_epsilon`, `gaussian_epsilon`).
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if flat.size == 0:
        return np.zeros(values.shape, dtype=np.float64)
    out = np.asarray(make(float(noise), int(flat.size))(flat.tolist()), dtype=np.float64)
    return out.reshape(values.shape)


def laplace(values: np.ndarray, scale: float) -> np.ndarray:
    """values + i.i.d. discrete Laplace(scale) noise on the grid 2^k (float64, same shape), from a CSPRNG."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"The Laplace scale must be finite and > 0, got {scale}.")
    return _sample(_laplace_meas, scale, values)


def gaussian(values: np.ndarray, std: float) -> np.ndarray:
    """values + i.i.d. discrete Gaussian(std) noise on the grid 2^k (float64, same shape), from a CSPRNG."""
    if not (std > 0 and math.isfinite(std)):
        raise ValueError(f"The Gaussian sigma must be finite and > 0, got {std}.")
    return _sample(_gaussian_meas, std, values)
