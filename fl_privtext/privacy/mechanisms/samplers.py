"""The noise samplers every mechanism family calls: ``float`` (simulation grade) and ``secure`` (exact, deployment).

Float samplers (:mod:`fl_privtext.privacy.randomisers`) are numpy's pseudo-random floating-point draws: their low
bits leak (Mironov 2012). Secure samplers draw exact discrete noise on a fine grid 2^k with integer arithmetic from
a cryptographically secure source; their privacy maps (``laplace_epsilon``, ``gaussian_epsilon``) give the epsilon
of what is actually sampled.
"""

from __future__ import annotations

import functools

import numpy as np

from fl_privtext.privacy import exact
from fl_privtext.privacy import secure as _opendp
from fl_privtext.privacy.randomisers import flip_bits, gaussian_noise, laplace_noise

__all__ = [
    "calibrate_gaussian",
    "flip_bits",
    "gaussian_epsilon",
    "gaussian_noise",
    "laplace_epsilon",
    "laplace_noise",
    "secure_gaussian",
    "secure_laplace",
]

SECURE_METHOD = "exact discrete noise on a 2^-24-relative grid, AES-256-CTR keyed from the OS"


def secure_laplace(values: np.ndarray, scale: float, rng: np.random.Generator | None = None,
                   dtype: type = np.float64) -> np.ndarray:
    """values + i.i.d. exact discrete Laplace(scale) noise on the grid ``exact.grid_for(scale)`` (float64, or the
    float64 result rounded to ``dtype``); bits keyed by ``rng``'s secret seed (`exact.SecureBits.keyed_by`), so a
    replay or a client seed redraws them."""
    return exact.laplace(values, scale, exact.SecureBits.keyed_by(rng), dtype)


def secure_gaussian(values: np.ndarray, std: float, rng: np.random.Generator | None = None,
                    dtype: type = np.float64) -> np.ndarray:
    """values + i.i.d. exact discrete Gaussian(std) noise on the grid ``exact.grid_for(std)`` (float64, or rounded
    to ``dtype``); bits keyed as `secure_laplace`'s."""
    return exact.gaussian(values, std, exact.SecureBits.keyed_by(rng), dtype)


def laplace_epsilon(scale: float, l1_sensitivity: float, dim: int) -> float:
    """Epsilon of one :func:`secure_laplace` release of a ``dim``-vector (exact, grid rounding included)."""
    return exact.laplace_epsilon(scale, l1_sensitivity, dim)


def secure_laplace_scale(epsilon: float, l1_sensitivity: float, dim: int) -> float:
    """The Laplace scale whose :func:`laplace_epsilon` is <= ``epsilon`` (grid rounding included), so that a secure
    release never costs more than its nominal epsilon: the grid is <= 2^-24 of the scale, so the rounding adds at most
    ``dim`` * 2^-24 to the epsilon, and the scale is widened by exactly that room."""
    room = epsilon - dim * 2.0**-exact.GRID_BITS
    if not room > 0:
        raise ValueError(f"The secure Laplace sampler cannot reach epsilon {epsilon:g} in dimension {dim}: its grid "
                         f"rounding alone costs {dim * 2.0**-exact.GRID_BITS:.3g}; use sampler='float' or fewer "
                         "dimensions.")
    return l1_sensitivity / room


def gaussian_epsilon(std: float, l2_sensitivity: float, delta: float, dim: int) -> float:
    """Epsilon at ``delta`` of one :func:`secure_gaussian` release: the discrete Gaussian is (Delta^2 / 2 sigma^2)-zCDP
    (CKS 2020, Theorem 14) at the grid-rounded sensitivity; OpenDP's map and zCDP -> (eps, delta) conversion of a
    discrete Gaussian at that sensitivity (its own grid adds a further, conservative slack)."""
    return _opendp.gaussian_epsilon(std, exact.gaussian_l2_sensitivity(std, l2_sensitivity, dim), delta, dim)


@functools.lru_cache(maxsize=256)
def calibrate_gaussian(epsilon: float, delta: float, l2_sensitivity: float, dim: int, start: float) -> float:
    """Smallest sigma whose :func:`gaussian_epsilon` at ``l2_sensitivity`` meets the target."""
    return _opendp.smallest_noise(lambda s: gaussian_epsilon(s, l2_sensitivity, delta, dim), epsilon, start)
