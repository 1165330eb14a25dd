"""What the likelihood declarations of the mechanisms share: pairwise sums and distances over uploads x codes.

Each mechanism declares its exact log-likelihood log P[upload | encoded clean input] (``Mechanism.log_likelihood``,
an (N, D) x (M, D) -> (N, M) matrix up to a constant per upload) and, where it is not exact, what it computes
(``Mechanism.likelihood_note``). The mechanism-aware attacks (`fl_privtext.attacks.likelihood`) ask for it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK = 2**24  # elements of the (n, m, d) broadcast computed at once
NEAREST_NOTE = "nearest-neighbour score -||y - c||^2 (no likelihood registered)"


def pairwise_sum(y: np.ndarray, c: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """sum_d f(y_nd - c_md) in chunks of uploads: (N, M)."""
    n, m, d = len(y), len(c), y.shape[1]
    step = max(1, CHUNK // max(1, m * d))
    out = np.empty((n, m))
    for i in range(0, n, step):
        out[i : i + step] = f(y[i : i + step, None, :] - c[None, :, :]).sum(axis=2)
    return out


def sq_dist(y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(N, M) squared Euclidean distances of uploads y (N, D) to codes c (M, D)."""
    d = (y * y).sum(1)[:, None] - 2 * y @ c.T + (c * c).sum(1)[None, :]
    return np.maximum(d, 0.0)


def nearest(y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The fallback score -||y - c||^2 of a mechanism that declares no likelihood (`NEAREST_NOTE`)."""
    return -sq_dist(y, c)
