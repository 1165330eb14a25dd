"""The noise law of an upload around its mean E[upload | x]: what a mechanism declares for the server's corrections.

Under local DP the mechanism and its parameters are public (Kerckhoffs), so the server may compute the moments of
its noise. The learners (`fl_privtext.server.learners`) use them for the errors-in-variables correction: the
within-class covariance of the clean means is the uploads' within-class covariance minus E[Cov(upload | x)]
(method of moments; Fuller, *Measurement Error Models*, 1987, ch. 1-2).

Each mechanism declares its law (``Mechanism.noise_law``); the laws it can be built from are here:
- bit mechanisms (``bit_probabilities()`` gives p_j = Pr[1 -> 1], q_j = Pr[0 -> 1]): exact. Bit j is Bernoulli
  with mean m = q + (p - q) b, so E[Var | x] = E[m(1 - m)] = E[u_j] (1 - p_j - q_j) + p_j q_j, a function of the
  uploads' mean only; flips are independent, so the covariance is diagonal (`bit_flip_law`).
- mechanisms with ``noise_moments()`` (`fl_privtext.privacy.mechanisms.NoiseMoments`), exact (`moments_law`):
  - additive (Gaussian, Laplace, multivariate Laplace; float samplers): Cov = variance I + shared 1 1^T.
  - cap (PrivUnitG float, PrivUnit, Duchi): E[u u^T | x] = a I + b v v^T for the input's unit direction v, so
    with M = E[u u^T] (the uploads' second moment, estimated from them) E[v v^T] = (M - a I) / b, and
    E[Cov(u | x)] = a I + b E[v v^T] - E[m m^T], m = E[u | x]. ``normalise`` map: m = C v, fully identified.
    ``round`` map: m = the clipped x, whose norm the uploads do not reveal; E[m m^T] = r2 E[v v^T] under the
    stated assumption that the norm is independent of the direction, with r2 = E||m||^2 either C^2 (every input
    on the clipping sphere: the assumption the Monte Carlo law made too) or measured on public data through
    the same public projection and clipping (``input_norm2``). ``NoiseLaw.assumption`` says which.
- every other mechanism (secure samplers, Purkayastha): Monte Carlo with the server's own generator on probe
  inputs of norm ``clip_norm`` (1 where the mechanism has none): the mean of (privatize(x) - expected(x))^2 per
  coordinate, isotropic part only (`monte_carlo_law`).
The probes are synthetic (no user's data); the server's randomness is the stream ``(seed, "server", "noise")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PROBE_DIRECTIONS", "PROBE_DRAWS", "NoiseLaw", "bit_flip_law", "moments_law", "monte_carlo_law"]

PROBE_DIRECTIONS = 16
PROBE_DRAWS = 256  # per direction: 4,096 draws, relative error of a coordinate's variance ~ sqrt(2 / 4096) = 2%


@dataclass(frozen=True)
class NoiseLaw:
    """The server's noise law for uploads of width D: ``variance`` (D,) E[Var(u_j | x)] (for the cap mechanisms
    the isotropic part at the assumed input norm), how it was obtained (``method``: "none", "bit flips (exact)",
    "closed form", "monte carlo"), the exact moments where known and the assumption on E[m m^T] (cap, round)."""

    variance: np.ndarray
    method: str
    moments: Any = None  # fl_privtext.privacy.mechanisms.NoiseMoments | None
    input_norm2: float = 1.0  # r2 = E||E[u | x]||^2 (cap mechanisms, round map)
    assumption: str = ""

    @classmethod
    def diagonal(cls, variance: np.ndarray, method: str = "given") -> NoiseLaw:
        return cls(np.asarray(variance, np.float64), method)

    @property
    def structured(self) -> bool:
        """Whether the full covariance depends on the uploads' second moment (cap mechanisms)."""
        return self.moments is not None and self.moments.kind == "cap"

    def covariance(self, second: np.ndarray, directions: np.ndarray | None = None) -> np.ndarray:
        """(D, D) E[Cov(u | x)], given ``second`` (D, D) the uploads' second moment E[u u^T] (estimated);
        ``directions``: `directions` of that ``second`` where the caller has it (cap laws: not computed again)."""
        d = self.variance.shape[0]
        mo = self.moments
        if mo is None:
            return np.diag(self.variance)
        if mo.kind == "additive":
            return mo.variance * np.eye(d) + mo.shared * np.ones((d, d))
        r2 = mo.clip_norm ** 2 if mo.sphere_map == "normalise" else self.input_norm2
        out = np.eye(d)
        out *= mo.iso  # mo.iso * I + (b - r2) E[v v^T], in place: the same operations, two D x D arrays, not four
        out += (mo.rank_one - r2) * (self.directions(second) if directions is None else directions)
        return out

    def input_second(self, second: np.ndarray, directions: np.ndarray | None = None) -> np.ndarray | None:
        """(D, D) estimate of E[m m^T], m = E[u | x], for the cap mechanisms: r2 (M - a I) / b with its trace set to
        r2 exactly (tr E[v v^T] = 1; E||u||^2 = a D + b whatever the inputs, so the trace of M carries only noise);
        None for the other laws (E[m m^T] is then M - E[Cov(u | x)]). ``directions``: as `covariance`'s."""
        if not self.structured:
            return None
        mo = self.moments
        r2 = mo.clip_norm ** 2 if mo.sphere_map == "normalise" else self.input_norm2
        return r2 * (self.directions(second) if directions is None else directions)

    def directions(self, second: np.ndarray) -> np.ndarray:
        """(D, D) E[v v^T] for the inputs' unit directions v, given the uploads' second moment ``second`` (cap laws:
        what `covariance` and `input_second` both scale; a caller that needs both computes it once and passes it)."""
        d = self.variance.shape[0]
        # E[v v^T] = (M - a I) / b with tr = 1; isotropic where b = 0 (Duchi: the uploads carry no such information)
        a, b = self.moments.iso, self.moments.rank_one
        if abs(b) <= 1e-9 * a:
            return np.eye(d) / d
        # ((M - a I) / b, symmetrised) + c I, the same operations in place: three D x D arrays where there were
        # eight (each freshly mapped and faulted in under the pinned mmap threshold, `fl_privtext.memory`)
        eye = np.eye(d)
        eye *= a
        vv = np.subtract(np.asarray(second, np.float64), eye)
        vv /= b
        sym = vv + vv.T
        sym /= 2
        eye[:] = 0.0
        eye.flat[:: d + 1] = 1.0
        eye *= (1.0 - float(np.trace(sym))) / d
        sym += eye
        return sym

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if self.assumption and not self.structured:
            out["assumption"] = self.assumption
        if self.structured:
            out.update({"structure": "a I + b E[v v^T] - E[m m^T]", "iso": self.moments.iso,
                        "rank_one": self.moments.rank_one, "input_second_moment": self.assumption})
        return out


def bit_flip_law(p: np.ndarray, q: np.ndarray, mean: np.ndarray) -> NoiseLaw:
    """Exact law of independent bit flips with p_j = Pr[1 -> 1], q_j = Pr[0 -> 1], given the uploads' mean (D,)."""
    p, q = (np.asarray(a, np.float64).reshape(-1) for a in (p, q))
    if p.shape != mean.shape:
        raise ValueError(f"The mechanism's {p.size} bit probabilities do not match uploads of width {mean.size}.")
    return NoiseLaw(np.clip(mean * (1.0 - p - q) + p * q, 0.0, None), "bit flips (exact)")


def moments_law(moments: Any, d: int, *, input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
    """The closed-form law of exact ``moments`` (a `NoiseMoments`, "additive" or "cap") for uploads of width d."""
    if moments.kind == "additive":
        return NoiseLaw(np.full(d, moments.variance + moments.shared), "closed form", moments)
    if moments.kind != "cap":
        raise ValueError(f"NoiseMoments.kind must be 'additive' or 'cap', got {moments.kind!r}.")
    c2 = moments.clip_norm ** 2
    if moments.sphere_map == "normalise":
        r2, assumption = c2, "identified (normalise map: E[u | x] = C v)"
    elif input_norm2 is not None:
        r2 = float(input_norm2)
        if not 0.0 <= r2 <= c2 * (1 + 1e-6):
            raise ValueError(f"input_norm2 must be in [0, clip_norm^2 = {c2:g}]; got {r2:g}.")
        assumption = (f"round map: E[m m^T] = r2 E[v v^T] with r2 = {r2:.4g} measured on public data "
                      f"{norm_source or '(unnamed)'} (norm independent of direction)")
    else:
        r2, assumption = c2, "round map: inputs on the clipping sphere (r2 = C^2), as the Monte Carlo law assumed"
    # isotropic part at r2: tr E[Cov] = a D + b - r2 (tr E[v v^T] = 1)
    var = np.full(d, (moments.iso * d + moments.rank_one - r2) / d)
    return NoiseLaw(var, "closed form", moments, r2, assumption)


def monte_carlo_law(mechanism: Any, input_dim: int, d: int, generator: np.random.Generator) -> NoiseLaw:
    """The isotropic part estimated with ``generator`` on synthetic probes of norm ``clip_norm`` (1 without one)."""
    radius = float(getattr(mechanism, "clip_norm", 1.0) or 1.0)
    directions = generator.standard_normal((PROBE_DIRECTIONS, input_dim))
    directions *= radius / np.linalg.norm(directions, axis=1, keepdims=True)
    x = np.repeat(directions, PROBE_DRAWS, axis=0).astype(np.float32)  # (P, input_dim)
    noise = np.asarray(mechanism.privatize(x, generator), np.float64) - mechanism.expected(x)
    if noise.shape[1] != d:
        raise ValueError(f"The mechanism uploads {noise.shape[1]} values; the uploads have {d}.")
    return NoiseLaw((noise * noise).mean(axis=0), "monte carlo", None, radius ** 2,
                    "isotropic part at inputs on the clipping sphere (Monte Carlo)")
