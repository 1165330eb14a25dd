"""The noise law the server legitimately knows: per-coordinate variance of an upload around its mean E[upload | x].

Under local DP the mechanism and its parameters are public (Kerckhoffs), so the server may compute the moments of
its noise. The learners (`fl_privtext.server.learners`) use them for the errors-in-variables correction: the
within-class covariance of the clean means is the uploads' within-class covariance minus E[Cov(upload | x)]
(method of moments; Fuller, *Measurement Error Models*, 1987, ch. 1-2).

What is computed, per mechanism family (through public attributes only):
- bit mechanisms (``bit_probabilities()`` gives p_j = Pr[1 -> 1], q_j = Pr[0 -> 1]): exact. Bit j is Bernoulli
  with mean m = q + (p - q) b, so E[Var | x] = E[m(1 - m)] = E[u_j] (1 - p_j - q_j) + p_j q_j, a function of the
  uploads' mean only; flips are independent, so the covariance is diagonal.
- every other mechanism: Monte Carlo with the server's own generator on probe inputs of norm ``clip_norm`` (1 where
  the mechanism has none): the mean of (privatize(x) - expected(x))^2 per coordinate. Exact in law for the additive
  mechanisms (Gaussian, every Laplace, multivariate Laplace: the noise does not depend on x); for the
  rotation-invariant sphere mechanisms (PrivUnitG, PrivUnit, Duchi, Purkayastha) it is the isotropic part of the
  noise at an input on the clipping sphere, dropping a rank-one term of size <= C^2 (against a trace of
  C^2 d / (e^eps - 1)-ish: small wherever the correction matters).
The probes are synthetic (no user's data); the server's randomness is the stream ``(seed, "server", "noise")``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["noise_variance"]

PROBE_DIRECTIONS = 16
PROBE_DRAWS = 256  # per direction: 4,096 draws, relative error of a coordinate's variance ~ sqrt(2 / 4096) = 2%


def noise_variance(mechanism: Any, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator
                   ) -> np.ndarray:
    """(D,) float64 E[Var(upload_j | x)] of ``mechanism`` (D = its output width); ``upload_mean`` (D,) is the
    mean of the received uploads (used by the bit mechanisms' exact formula)."""
    mean = np.asarray(upload_mean, np.float64)
    if mean.ndim != 1:
        raise ValueError(f"upload_mean must be a (D,) vector; got shape {mean.shape}.")
    if getattr(mechanism, "name", "") == "none":
        return np.zeros_like(mean)
    if hasattr(mechanism, "bit_probabilities"):
        p, q = (np.asarray(a, np.float64).reshape(-1) for a in mechanism.bit_probabilities())
        if p.shape != mean.shape:
            raise ValueError(f"The mechanism's {p.size} bit probabilities do not match uploads of width {mean.size}.")
        return np.clip(mean * (1.0 - p - q) + p * q, 0.0, None)
    if input_dim < 1:
        raise ValueError(f"input_dim must be >= 1; got {input_dim}.")
    radius = float(getattr(mechanism, "clip_norm", 1.0) or 1.0)
    directions = generator.standard_normal((PROBE_DIRECTIONS, input_dim))
    directions *= radius / np.linalg.norm(directions, axis=1, keepdims=True)
    x = np.repeat(directions, PROBE_DRAWS, axis=0).astype(np.float32)  # (P, input_dim)
    noise = np.asarray(mechanism.privatize(x, generator), np.float64) - mechanism.expected(x)
    if noise.shape[1] != mean.shape[0]:
        raise ValueError(f"The mechanism uploads {noise.shape[1]} values; the uploads have {mean.shape[0]}.")
    return (noise * noise).mean(axis=0)
