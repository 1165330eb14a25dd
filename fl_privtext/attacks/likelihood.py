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

The secure cap samplers (``sampler = "secure"``: PrivUnitG and Duchi, `fl_privtext.privacy.mechanisms.sphere`,
``CapMechanism.secure_sign_vertex``) are other constructions than the float law of ``_cap``: the input is rounded
to a sign vertex s (independent coordinates, Pr[s_i = +1] = (1 + r_i) / 2, r the clipped input over C) and the
integer draw X is conditioned on {sum X >= g}; the upload is C / m diag(s) X. They are registered separately
(``register_log_likelihood(cls, sampler="secure")``): secure Duchi exactly, secure PrivUnitG by a stated normal
approximation (``likelihood_exact: false``; `note` names it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fl_privtext.privacy import mechanisms as M
from fl_privtext.privacy.mechanisms.metric_dp import log_angular_normaliser
from fl_privtext.privacy.normalise import as_batch

LogLikelihood = Callable[[object, np.ndarray, np.ndarray], np.ndarray]
_REGISTRY: dict[type, LogLikelihood] = {}
_SECURE: dict[type, tuple[LogLikelihood, bool, str]] = {}  # sampler = "secure": (fn, exact, what it computes)
_CHUNK = 2**24  # elements of the (n, m, d) broadcast computed at once


def register_log_likelihood(cls: type, *, sampler: str = "", exact: bool = True, note: str = ""
                            ) -> Callable[[LogLikelihood], LogLikelihood]:
    """Decorator: ``fn(mech, uploads (N, D), codes (M, D)) -> (N, M)`` is the log-likelihood for ``cls`` (exact
    unless ``exact=False``, with ``note`` naming the approximation); ``sampler="secure"``: for instances whose
    ``sampler`` is "secure" only (their law is another construction than the float sampler's)."""
    if sampler not in ("", "secure"):
        raise ValueError(f"sampler must be '' or 'secure'; got {sampler!r}.")

    def deco(fn: LogLikelihood) -> LogLikelihood:
        if sampler == "secure":
            _SECURE[cls] = (fn, exact, note)
        else:
            _REGISTRY[cls] = fn
        return fn
    return deco


def _find(mech: object) -> tuple[LogLikelihood, bool, str]:
    secure = getattr(mech, "sampler", "float") == "secure"
    for klass in type(mech).__mro__:
        if secure and klass in _SECURE:
            return _SECURE[klass]
        if klass in _REGISTRY:
            if secure and isinstance(mech, M.CapMechanism):  # a secure cap sampler without its own likelihood
                return (_REGISTRY[klass], False, ("float cap law of the ideal mechanism; the secure sampler's "
                                                  "sign-vertex construction is not modelled"))
            return _REGISTRY[klass], True, ""
    return _nearest, False, "nearest-neighbour score -||y - c||^2 (no likelihood registered)"


def lookup(mech: object) -> tuple[LogLikelihood, bool]:
    """The log-likelihood for ``mech`` and whether it is exact (False: an approximation, `note` names it)."""
    fn, exact, _ = _find(mech)
    return fn, exact


def note(mech: object) -> str:
    """What ``lookup(mech)`` computes when it is not exact ("" when exact)."""
    return _find(mech)[2]


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


def _secure_signs(mech: object, y: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The secure cap samplers' integer draw Y = diag(s) X recovered from the upload (N, D) (the upload is
    fl32(C / m Y), Y integers far below 2^24) and the vertex-rounding means r (M, D) of the codes: r = c / max(|c|, C)
    (``round``) or c / |c| (``normalise``), 0 for a zero code (as the sampler does)."""
    clip = float(mech.clip_norm)  # type: ignore[attr-defined]
    scale = clip / float(mech.calibration.m)  # type: ignore[attr-defined]
    yy = np.rint(y / scale)
    norms = np.sqrt((c * c).sum(axis=1))
    zero = norms < 1e-30
    denom = np.maximum(norms, clip) if mech.sphere_map == "round" else norms  # type: ignore[attr-defined]
    r = np.where(zero[:, None], 0.0, c / np.where(zero, 1.0, denom)[:, None])
    return yy, np.clip(r, -1.0, 1.0)


def _cap_mixture(mech: object, cap: np.ndarray) -> np.ndarray:
    """log(p/q Pr[cap] + (1-p)/(1-q) (1 - Pr[cap])): the density ratio to the base law B(Y), given the probability
    ``cap`` (N, M) over the vertex rounding that <s, Y> >= g (B is sign-invariant: B(diag(s) Y) = B(Y))."""
    cal = mech.calibration  # type: ignore[attr-defined]
    cap = np.clip(cap, 0.0, 1.0)
    return np.log(cal.p / cal.q * cap + (1.0 - cal.p) / (1.0 - cal.q) * (1.0 - cap))


SECURE_PRIVUNITG_NOTE = ("normal approximation (continuity-corrected) of Pr[<s, Y> >= g] over the sign-vertex "
                         "rounding s; the rest (the base law's sign invariance, the cap coin) is exact")


@register_log_likelihood(M.Duchi, sampler="secure")
def _secure_duchi(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Secure Duchi: Y in {-1, +1}^k, P(Y | x) = 2^-k E_s[p/q 1{<s, Y> >= 1} + (1-p)/(1-q) 1{<s, Y> < 1}]. The
    terms s_i Y_i are independent +-1 with Pr[+1] = (1 + r_i Y_i) / 2, so <s, Y> = 2 J - k with J Poisson-binomial:
    its law by the exact recursion over the k coordinates (O(k^2) per upload and code); exact but for the sampler's
    coins, which realise (1 + r_i) / 2 within 2^-32."""
    yy, r = _secure_signs(mech, y, c)
    n, k = yy.shape
    j0 = (int(mech.calibration.threshold) + k + 1) // 2  # type: ignore[attr-defined]  # 2J - k >= g
    out = np.empty((n, len(r)))
    step = max(1, (_CHUNK // 8) // max(1, len(r) * (k + 1)))  # (b, M, k + 1) float64 twice
    for s in range(0, n, step):
        pi = (1.0 + yy[s:s + step, None, :] * r[None, :, :]) / 2.0  # (b, M, k)
        pmf = np.zeros(pi.shape[:2] + (k + 1,))
        pmf[..., 0] = 1.0
        for i in range(k):
            p_i = pi[..., i:i + 1]
            pmf[..., 1:i + 2] = pmf[..., 1:i + 2] * (1.0 - p_i) + pmf[..., 0:i + 1] * p_i
            pmf[..., 0:1] *= 1.0 - p_i
        out[s:s + step] = _cap_mixture(mech, pmf[..., j0:].sum(axis=2))
    return out


@register_log_likelihood(M.PrivUnitG, sampler="secure", exact=False, note=SECURE_PRIVUNITG_NOTE)
def _secure_privunitg(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Secure PrivUnitG: Y integer (DLap(64)^k conditioned by side), P(Y | x) = B(Y) E_s[ratio(<s, Y>)]. <s, Y> is a
    sum of independent +-|Y_i| terms (mean sum r_i Y_i, variance sum (1 - r_i^2) Y_i^2); its exact law needs a
    convolution over ~k * 64 integers per upload and code, so Pr[<s, Y> >= g] is taken from the normal law with a
    continuity correction (an approximation: ``lookup`` reports it as not exact)."""
    from scipy.special import ndtr

    yy, r = _secure_signs(mech, y, c)
    g = float(mech.calibration.threshold)  # type: ignore[attr-defined]
    mean = yy @ r.T  # (N, M)
    var = (yy * yy) @ (1.0 - r * r).T
    sd = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where(sd > 0, ndtr((mean - (g - 0.5)) / np.where(sd > 0, sd, 1.0)), (mean >= g).astype(float))
    return _cap_mixture(mech, cap)
