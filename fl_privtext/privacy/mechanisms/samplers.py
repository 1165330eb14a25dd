"""The noise samplers every mechanism family calls: ``float`` (simulation grade) and ``secure`` (exact, deployment).

Float samplers (:mod:`fl_privtext.privacy.randomisers`) are numpy's pseudo-random floating-point draws: their low
bits leak (Mironov 2012). Secure samplers draw exact discrete noise on a fine grid 2^k with integer arithmetic from
a cryptographically secure source; their privacy maps (``laplace_epsilon``, ``gaussian_epsilon``) give the epsilon
of what is actually sampled.
"""

from __future__ import annotations

import numpy as np

from fl_privtext.privacy import secure as _opendp
from fl_privtext.privacy.randomisers import flip_bits, gaussian_noise, laplace_noise
from fl_privtext.privacy.secure import calibrate_gaussian, gaussian_epsilon, laplace_epsilon

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


def secure_laplace(values: np.ndarray, scale: float) -> np.ndarray:
    """values + i.i.d. exact discrete Laplace(scale) noise on the grid 2^k (float64, same shape)."""
    return _opendp.laplace(values, scale)


def secure_gaussian(values: np.ndarray, std: float) -> np.ndarray:
    """values + i.i.d. exact discrete Gaussian(std) noise on the grid 2^k (float64, same shape)."""
    return _opendp.gaussian(values, std)
