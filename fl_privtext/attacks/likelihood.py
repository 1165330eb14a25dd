"""Exact log-likelihoods log P[upload | encoded clean input] of each mechanism: the mechanism-aware attacks' core.

``log_likelihood(mech, uploads, codes)`` returns the (N, M) matrix of log densities (up to a constant per upload)
of every upload under every candidate code, where a code is the candidate's clean representation after the
mechanism's own deterministic stages (``encode_candidates``: normalise -> encode, public and noise-free).

Registered: Laplace family (sum |y - c| / b), Gaussian (||y - c||^2 / 2 sigma^2), every per-bit randomiser (OME,
SUE, OUE, BitRR: sum of log Bernoulli(p_j or q_j); a fractional code c in [0, 1] - e.g. a class mean - gives the
exact likelihood of independent bits with Pr[1] = c p + (1 - c) q); the cap family (PrivUnit, PrivUnitG, Duchi),
mvlaplace and purkayastha (each at its function below, with its density). A later mechanism plugs in with
``@register_log_likelihood(MyMechanism)``; the lookup walks the class hierarchy, so subclasses inherit. A mechanism
with no registered likelihood falls back to the nearest-neighbour score -||y - c||^2, reported as not exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fl_privtext.privacy import mechanisms as M
from fl_privtext.privacy.normalise import as_batch

LogLikelihood = Callable[[object, np.ndarray, np.ndarray], np.ndarray]
_REGISTRY: dict[type, LogLikelihood] = {}
_CHUNK = 2**24  # elements of the (n, m, d) broadcast computed at once


def register_log_likelihood(cls: type) -> Callable[[LogLikelihood], LogLikelihood]:
    """Decorator: ``fn(mech, uploads (N, D), codes (M, D)) -> (N, M)`` is the exact log-likelihood for ``cls``."""
    def deco(fn: LogLikelihood) -> LogLikelihood:
        _REGISTRY[cls] = fn
        return fn
    return deco


def lookup(mech: object) -> tuple[LogLikelihood, bool]:
    """The log-likelihood for ``mech`` and whether it is exact (False: nearest-neighbour fallback)."""
    for klass in type(mech).__mro__:
        if klass in _REGISTRY:
            return _REGISTRY[klass], True
    return _nearest, False


def encode_candidates(mech: object, x: np.ndarray) -> np.ndarray:
    """The noise-free part of the mechanism applied to clean representations: (M, k) -> (M, D) float64."""
    batch = as_batch(x, getattr(mech, "dim", None))
    norm = mech.normalise(batch)  # type: ignore[attr-defined]
    enc = mech.encode(norm.values)  # type: ignore[attr-defined]
    return np.asarray(enc.values, np.float64)


def log_likelihood(mech: object, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(N, D) uploads x (M, D) codes -> (N, M) log-likelihoods (exact where registered, see ``lookup``)."""
    fn, _ = lookup(mech)
    return fn(mech, np.asarray(uploads, np.float64), np.asarray(codes, np.float64))


def _pairwise(y: np.ndarray, c: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    # sum_d f(y_nd - c_md) in chunks of uploads: (N, M)
    n, m, d = len(y), len(c), y.shape[1]
    step = max(1, _CHUNK // max(1, m * d))
    out = np.empty((n, m))
    for i in range(0, n, step):
        out[i : i + step] = f(y[i : i + step, None, :] - c[None, :, :]).sum(axis=2)
    return out


def _sq_dist(y: np.ndarray, c: np.ndarray) -> np.ndarray:
    d = (y * y).sum(1)[:, None] - 2 * y @ c.T + (c * c).sum(1)[None, :]
    return np.maximum(d, 0.0)


@register_log_likelihood(M.LaplaceMechanism)
def _laplace(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    b = float(mech.noise_scale)  # type: ignore[attr-defined]
    return -_pairwise(y, c, np.abs) / b


@register_log_likelihood(M.LaplaceDPNRCode)
def _laplace_shared(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    # one scalar draw s on every coordinate: y - c must be constant across coordinates; s = mean(y - c)
    b = float(mech.noise_scale)  # type: ignore[attr-defined]
    out = np.empty((len(y), len(c)))
    for j in range(len(c)):
        r = y - c[j]  # (N, D)
        s = r.mean(axis=1)
        resid = ((r - s[:, None]) ** 2).sum(axis=1)
        out[:, j] = -np.abs(s) / b - 1e6 * resid  # residual is exactly 0 for the true input (up to float32)
    return out


@register_log_likelihood(M.Gaussian)
def _gaussian(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    s = float(mech.noise_std)  # type: ignore[attr-defined]
    return -_sq_dist(y, c) / (2 * s * s)


@register_log_likelihood(M.BitMechanism)
def _bits(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    p, q = mech.bit_probabilities()  # type: ignore[attr-defined]
    p = np.clip(np.asarray(p, np.float64), 1e-300, 1 - 1e-16)
    q = np.clip(np.asarray(q, np.float64), 1e-300, 1 - 1e-16)
    if np.all((c == 0) | (c == 1)):
        # log P = sum_j c_j [y_j log(p/q) + (1-y_j) log((1-p)/(1-q))] + terms free of c: one matrix product
        a = y * np.log(p / q) + (1 - y) * (np.log1p(-p) - np.log1p(-q))  # (N, D)
        return a @ c.T
    rate = np.clip(c * p + (1 - c) * q, 1e-300, 1 - 1e-16)  # (M, D): Pr[bit = 1] for a fractional code
    return y @ np.log(rate).T + (1 - y) @ np.log1p(-rate).T


@register_log_likelihood(M.NoPrivacy)
def _identity(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    # the upload IS the code: a point mass, scored by distance so that near-ties still rank (float32 rounding)
    return -1e6 * _sq_dist(y, c)


def _nearest(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    return -_sq_dist(y, c)


@register_log_likelihood(M.CapMechanism)
def _cap(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """PrivUnit, PrivUnitG, Duchi: exact log density ratio of the upload to the mechanism's base law.

    The upload is y = C V / m. Given the unit direction u, V's density relative to its base law (uniform on the
    sphere for PrivUnit/Duchi, N(0, I) for PrivUnitG, whose truncation acts on <V, u> alone) is r(<V, u>) with
    r(s) = p/q for s >= threshold and (1-p)/(1-q) below. The code c (the clean projected input, or a class mean)
    gives u = +c/|c| with probability a = (1 + min(1, |c|/C))/2 and -c/|c| otherwise under the ``round`` sphere
    map (a = 1 under ``normalise``); a zero code gives a uniform u, whose average ratio is exactly 1. So
    log P[y | c] = log(a r(s) + (1 - a) r(-s)) + log base(y), s = <y, c/|c|> m / C; the base term is the same
    for every code and dropped.
    """
    cal = mech.calibration  # type: ignore[attr-defined]
    clip = float(mech.clip_norm)  # type: ignore[attr-defined]
    inside, outside = math.log(cal.p) - math.log(cal.q), math.log1p(-cal.p) - math.log1p(-cal.q)
    norms = np.sqrt((c * c).sum(axis=1))
    zero = norms < 1e-30
    unit = c / np.where(zero, 1.0, norms)[:, None]
    s = (y @ unit.T) * (cal.m / clip)  # (N, M): <V, u>
    a = (1.0 + np.minimum(1.0, norms / clip)) / 2.0 if mech.sphere_map == "round" else np.ones_like(norms)  # type: ignore[attr-defined]
    log_r = np.where(s >= cal.threshold, inside, outside)
    log_r_flip = np.where(-s >= cal.threshold, inside, outside)
    with np.errstate(divide="ignore"):
        out = np.logaddexp(np.log(a)[None, :] + log_r, np.log1p(-a)[None, :] + log_r_flip)
    out[:, zero] = 0.0
    return out


@register_log_likelihood(M.MultivariateLaplace)
def _mvlaplace(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Density proportional to exp(-eps ||y - c||_2) around the clipped code (Feyisetan et al. 2020); the
    normaliser does not depend on c."""
    return -float(mech.epsilon) * np.sqrt(_sq_dist(y, c))  # type: ignore[attr-defined]


@register_log_likelihood(M.Purkayastha)
def _purkayastha(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Density on the sphere of radius C proportional to exp(-kappa angle(y, u)), u = c/|c| (Weggenmann &
    Kerschbaum 2021); returned relative to the uniform law on the sphere (what a zero code gets), so codes of
    every norm compare exactly: -kappa theta - ln I_(k-2)(kappa) + ln I_(k-2)(0), I_n(kappa) = int_0^pi
    e^(-kappa t) sin^n t dt and I_n(0) = sqrt(pi) Gamma((n+1)/2) / Gamma(n/2 + 1)."""
    from scipy import special

    from fl_privtext.privacy.mechanisms.metric_dp import log_angular_normaliser

    kappa = float(mech.epsilon)  # type: ignore[attr-defined]
    k = y.shape[1]
    n = k - 2
    log_i0 = 0.5 * math.log(math.pi) + float(special.gammaln((n + 1) / 2.0) - special.gammaln(n / 2.0 + 1.0))
    norms = np.sqrt((c * c).sum(axis=1))
    zero = norms < 1e-30
    unit = c / np.where(zero, 1.0, norms)[:, None]
    ynorm = np.sqrt((y * y).sum(axis=1))
    cos = (y @ unit.T) / np.where(ynorm > 0, ynorm, 1.0)[:, None]
    theta = np.arccos(np.clip(cos, -1.0, 1.0))
    out = -kappa * theta - log_angular_normaliser(n, kappa) + log_i0
    out[:, zero] = 0.0
    return out
