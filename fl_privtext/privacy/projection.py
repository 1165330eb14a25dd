"""Public projection before noise: a fixed, data-independent (or public-data) linear map applied on the device.

A projection ``x -> (x - mean) @ matrix`` with a PUBLIC ``matrix`` (d, k) and ``mean`` (d,) is part of the
mechanism's definition: the server may know it, it depends on no user's data, and the LDP guarantee of the
randomiser that follows holds for any fixed map (post-processing of nothing secret, pre-processing of one input).

- ``random``: sqrt(d/k) * Q with Q (d, k) orthonormal columns from the QR decomposition of a Gaussian matrix drawn
  from a PUBLIC seed (Johnson-Lindenstrauss scaling: E||Q^T x||^2 * d/k = ||x||^2, so clipping bites as often as
  without projection). Data-independent.
- ``pca``: the top-k principal directions (orthonormal columns) and the mean of PUBLIC representations, i.e. of a
  dataset or role disjoint from every simulated user; its name is recorded in ``source`` and in the mechanism's
  report. Fitting it on user data would make the map depend on private data: never do that.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_privtext.rng import generator

PROJECTIONS = ("none", "random", "pca")
# rows projected beyond this L2 norm are scaled down to it (direction kept): far above any clipping radius, far below
# the float32 maximum (3.4e38), so the float32 output and its norm stay finite
MAX_PROJECTED_NORM = 1e30


@dataclass(frozen=True, eq=False)
class PublicProjection:
    """A public linear map (d -> k): ``(x - mean) @ matrix``; ``source`` says where it came from."""

    method: str  # "random" | "pca"
    matrix: np.ndarray  # (d, k) float64
    mean: np.ndarray  # (d,) float64 (zeros for random)
    source: str  # e.g. "random, public seed 0" or "pca on public dataset 'ag_news' (5000 rows)"

    def __post_init__(self) -> None:
        if self.method not in ("random", "pca"):
            raise ValueError(f"A public projection's method must be 'random' or 'pca', got {self.method!r}.")
        m = np.asarray(self.matrix, dtype=np.float64)
        mean = np.asarray(self.mean, dtype=np.float64)
        if m.ndim != 2 or m.shape[1] < 1 or m.shape[1] > m.shape[0]:
            raise ValueError(f"The projection matrix must be (d, k) with 1 <= k <= d, got shape {m.shape}.")
        if mean.shape != (m.shape[0],):
            raise ValueError(f"The projection mean must have shape ({m.shape[0]},), got {mean.shape}.")
        if not (np.isfinite(m).all() and np.isfinite(mean).all()):
            raise ValueError("The projection matrix and mean must be finite.")
        m.setflags(write=False)
        mean.setflags(write=False)
        object.__setattr__(self, "matrix", m)
        object.__setattr__(self, "mean", mean)

    @property
    def in_dim(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def out_dim(self) -> int:
        return int(self.matrix.shape[1])

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 (first 16 hex digits) of the matrix and mean: names the exact public map in reports."""
        h = hashlib.sha256(self.matrix.tobytes())
        h.update(self.mean.tobytes())
        return h.hexdigest()[:16]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(N, d) -> (N, k) float32, computed in float64; never inf or NaN for finite input.

        A finite float32 row near the float32 maximum projects, in float64, to a row whose float32 cast would
        overflow (issue #22). Such a row is scaled down (a positive factor: its direction is kept) to norm
        `MAX_PROJECTED_NORM`, far above any clipping radius: the mechanisms clip every row to their ball before
        noise, so the upload is the same as for the exact projected row (clipping sees only the direction of a
        row longer than the radius)."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"The projection expects an (N, {self.in_dim}) array, got shape {x.shape}.")
        x64 = np.asarray(x, np.float64)
        bad = ~np.isfinite(x64).all(axis=1)
        if bad.any():
            raise ValueError(f"The projection's input has non-finite values (NaN or inf) in row(s) "
                             f"{np.flatnonzero(bad)[:10].tolist()}; nothing was projected.")
        y = (x64 - self.mean) @ self.matrix
        norms = np.sqrt(np.sum(np.square(y / np.maximum(np.abs(y).max(axis=1, keepdims=True), 1e-300)), axis=1))
        norms *= np.abs(y).max(axis=1)  # overflow-free L2 norm in float64
        big = norms > MAX_PROJECTED_NORM
        if big.any():
            y[big] *= (MAX_PROJECTED_NORM / norms[big])[:, None]
        return np.ascontiguousarray(y, dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        """JSON-safe summary for reports."""
        return {"method": self.method, "in_dim": self.in_dim, "out_dim": self.out_dim, "source": self.source,
                "fingerprint": self.fingerprint}


@functools.lru_cache(maxsize=16)
def random_projection(dim: int, proj_dim: int, seed: int) -> PublicProjection:
    """sqrt(d/k) * Q, Q (d, k) orthonormal (QR of a Gaussian matrix from the PUBLIC ``seed``)."""
    if not 1 <= proj_dim <= dim:
        raise ValueError(f"proj_dim must be an integer in [1, dim={dim}], got {proj_dim}.")
    g = generator(int(seed), "public-random-projection", int(dim), int(proj_dim))  # public: anyone can rebuild it
    q, r = np.linalg.qr(g.standard_normal((dim, proj_dim)))
    q *= np.where(np.diag(r) < 0, -1.0, 1.0)  # unique (Haar-distributed) orthonormal frame
    return PublicProjection("random", q * np.sqrt(dim / proj_dim), np.zeros(dim), f"random, public seed {seed}")


def fit_pca(public_x: np.ndarray, proj_dim: int, *, source: str) -> PublicProjection:
    """Top-``proj_dim`` principal directions of PUBLIC representations ``public_x`` (n, d), centred by their mean.

    ``source`` names the public data (a dataset or role disjoint from every simulated user); it goes into reports.
    """
    x = np.asarray(public_x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"PCA needs a 2-D array of at least 2 public representations, got shape {x.shape}.")
    if not 1 <= proj_dim <= x.shape[1]:
        raise ValueError(f"proj_dim must be an integer in [1, {x.shape[1]}], got {proj_dim}.")
    if not source.strip():
        raise ValueError("fit_pca needs a non-empty source naming the public data it was fitted on.")
    if not np.isfinite(x).all():
        raise ValueError("Public representations must be finite.")
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    comps = vt[:proj_dim].T.copy()  # (d, k)
    comps *= np.where(comps[np.abs(comps).argmax(axis=0), np.arange(proj_dim)] < 0, -1.0, 1.0)  # sign convention
    return PublicProjection("pca", comps, mean, f"pca on public data {source} ({x.shape[0]} rows)")
