"""The noise law the server legitimately knows: the moments of an upload around its mean E[upload | x].

Under local DP the mechanism and its parameters are public (Kerckhoffs), so the server may ask the mechanism for
the law of its noise: each mechanism declares it (``Mechanism.noise_law``; the laws and their derivations are in
`fl_privtext.privacy.mechanisms.noise_law`). The learners (`fl_privtext.server.learners`) use it for the
errors-in-variables correction. The server's randomness (Monte Carlo laws) is the stream ``(seed, "server",
"noise")``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_privtext.privacy.mechanisms.noise_law import PROBE_DIRECTIONS, PROBE_DRAWS, NoiseLaw

__all__ = ["PROBE_DIRECTIONS", "PROBE_DRAWS", "NoiseLaw", "noise_law", "noise_variance"]


def noise_law(mechanism: Any, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator, *,
              input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
    """The noise law ``mechanism`` declares for uploads of width D; ``upload_mean`` (D,) is the mean of the
    received uploads (the bit mechanisms' exact formula). ``input_norm2``: E||E[u | x]||^2 measured on public data
    (named by ``norm_source``) for the cap mechanisms under the round map; default C^2."""
    mean = np.asarray(upload_mean, np.float64)
    if mean.ndim != 1:
        raise ValueError(f"upload_mean must be a (D,) vector; got shape {mean.shape}.")
    return mechanism.noise_law(input_dim, mean, generator, input_norm2=input_norm2, norm_source=norm_source)


def noise_variance(mechanism: Any, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator
                   ) -> np.ndarray:
    """(D,) float64 E[Var(upload_j | x)] of ``mechanism`` (D = its output width): `noise_law`'s ``variance``."""
    return noise_law(mechanism, input_dim, upload_mean, generator).variance
