"""Pure eps-LDP mean-estimation mechanisms on the unit L2 sphere: PrivUnitG, PrivUnit and Duchi et al.'s L2 sampler.

All three share one structure. The input u is a unit vector; with probability p the output direction V is drawn from
the "cap" {<V, u> >= gamma} of a rotation-invariant law, otherwise from its complement, and the upload is C * V / m
with m = E<V, u>, so that it is an unbiased estimate of C * u. The density of V given u is the base density times
p/q on the cap and (1-p)/(1-q) off it (q = base probability of the cap), so for ANY two inputs the likelihood ratio
is one of e^eps, 1, e^-eps with

    eps = ln(p (1-q) / (q (1-p)))                                            (exact; no inequality involved)

and it depends only on whether <V, u> >= gamma for each of the two inputs (what the audit uses).

Inputs: clipped to the L2 ball of radius C (``clip_norm``) and divided by C, then mapped to the sphere by
``sphere_map``:
- ``"round"`` (default; Duchi et al. 2018, step 1): u = +x/||x|| with probability (1 + ||x||)/2, else -x/||x||
  (a uniformly random direction when x = 0), so E[u] = x and the upload is unbiased for the clipped x itself.
  The rounding uses the client's secret randomness; a mixture of eps-LDP outputs is eps-LDP.
- ``"normalise"``: u = x/||x|| (random direction for x = 0): unbiased for the direction C * x/||x|| only.

An optional public projection (``projection = random | pca``, ``proj_dim = k``; see
:mod:`fl_privtext.privacy.projection`) runs before the clipping; the mechanism then works in k dimensions.
All per-row scalars are float64; the (N, k) arrays are float32. Samplers are floating-point and pseudo-random
(simulation grade, Mironov 2012), except PrivUnitG's ``sampler="secure"`` (SECURE_PRIVUNITG):

- Construction: the clipped input x (ball of radius C) is rounded coordinate-wise to a sign vertex s of
  {-1, +1}^k with E[s] = x / C; X on the integer grid is drawn EXACTLY from the product discrete Laplace
  B = DLap(64)^k (CKS 2020; P(x) ~ e^(-|x|/64)) conditioned on the cap {sum_i X_i >= g} with an exact Bernoulli(p) coin (p a
  multiple of 2^-53, 53 secure bits), else on its complement; the upload is C/m * diag(s) X (float64 -> float32,
  a deterministic post-processing of diag(s) X; a zero is uploaded as +0.0: s_i X_i computed as a product would
  give -0.0 where s_i = -1 and X_i = 0, revealing s_i, which for the input +-e_1 is the input itself).
- Neighbouring relation: any two inputs (LDP, replacement). Sensitivity: none needed. Guarantee: B is invariant
  under coordinate sign flips, so the cap {<X', s> >= g} of every vertex s has the same B-probability q; the pmf of
  the output given s is B(diag(s) y) * (p/q on the cap, (1-p)/(1-q) off it), hence the ratio of any two inputs is
  e^eps', 1 or e^-eps' with eps' = ln(p (1-q) / (q (1-p))) for the realised p and q (q exact, from the negative
  binomial form of the sum: :func:`secure_cap_probability`); mixtures over the vertex rounding keep eps'.
- Reference: PrivUnitG of Asi, Feldman, Talwar (ICML 2022) with the base Gaussian replaced by the discrete
  Laplace of Canonne, Kamath, Steinke (NeurIPS 2020; 5x cheaper to sample exactly than their discrete Gaussian,
  and any sign-invariant base law keeps the argument) and the input rounding of Duchi, Jordan, Wainwright (2018).
- Cost: the vertex rounding multiplies the MSE by about k (it is E||s - x/C||^2 = k - ||x/C||^2 of extra
  variance before the mechanism); rejection from B by side costs max(p/q, (1-p)/(1-q)) draws per row.
Duchi's ``sampler="secure"`` (SECURE_DUCHI) is the same construction with the base law uniform on {-1, +1}^k and
the half-cube {sum X >= 1} as the cap (its proof is in :class:`Duchi`). PrivUnit has no secure variant (its law,
uniform on a cap of the sphere, has no exact finite sampler here: on a grid it becomes secure PrivUnitG or secure
Duchi): float_safe is false, and the audit's low-bit distinguisher certifies the leak (docs/privacy.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import exact
from fl_privtext.privacy.mechanisms.audit_plan import (
    SHARED_BLOCK,
    AuditPlan,
    Component,
    column,
    float32_product_image,
    shared_offset_consistent,
)
from fl_privtext.privacy.mechanisms.base import (
    COMPOSITION,
    FLOAT_SAMPLER,
    REPLACEMENT,
    Mechanism,
    NoiseMoments,
    check_dim,
    check_positive,
    check_sampler,
    set_field,
)
from fl_privtext.privacy.mechanisms.likelihood import CHUNK as CHUNK_LIKELIHOOD
from fl_privtext.privacy.projection import PROJECTIONS, PublicProjection, random_projection
from fl_privtext.privacy.stage import Stage

SPHERE_MAPS = ("round", "normalise")
FLOAT_NOISE = (
    "Noise is floating-point (float64 per-row scalars, float32 vectors) and pseudo-random: simulation grade. "
    "epsilon_worst_case holds for the exact real-valued mechanism; the float32 output's low bits may reveal more "
    "(Mironov 2012), so float_safe is false. No secure sampler is offered for this mechanism (privacy.sampler does "
    "not apply)."
)
# What the audit's low-bit distinguisher certifies against the float PrivUnit / Duchi (CapMechanism.audit_plan: a
# shared float32 offset on a block of coordinates) and the float Purkayastha (metric_dp; Purkayastha.audit_plan, the
# same detector: its upload has PrivUnit's structure), measured by the command given, and carried by their reports
# (float_safe false). The bound is limited by the sample count (no output from x1 is ever inconsistent; ~18-19%
# from x0 are, for every epsilon and dim >= 4 tried): the leak is at least this, not at most. Purkayastha's claim
# is per radian: its bound is also far above its LDP value pi x epsilon (epsilon_worst_case).
LOW_BIT_AUDIT: dict[str, dict[str, Any]] = {
    name: {"epsilon_lower_bound": bound, "epsilon_claimed": 1.0, "epsilon_worst_case": worst, "dim": 16,
           "samples_per_input": 1_000_000, "alpha": 0.05,
           # duchi's default sampler is the secure one (issue #35): its float sampler is named
           "command": f"fl-privtext audit {name} --set epsilon=1 --set dim=16"
                      f"{' --set sampler=float' if name == 'duchi' else ''} --seed 0",
           "detector": "shared float32 offset of coordinates 0-3 (x1 = C(1/2,1/2,1/2,1/2,0,...) vs x0 = -C e_1)",
           "note": "sample-limited lower bound on the float sampler's epsilon; the ideal mechanism's calibration "
                   "passes the same audit"}
    for name, bound, worst in (("privunit", 10.14, 1.0), ("duchi", 10.22, 1.0), ("purkayastha", 10.21, math.pi))
}
CHUNK_VALUES = 1 << 20
TINY_NORM = 1e-30  # rows shorter than this have no representable direction (1/norm would overflow float32)
MAX_EPSILON = 20.0  # 1 - p >= 2e-9 >> 2^-53, the resolution of the uniforms deciding the cap
AFT_PAPER = ("Asi, Feldman, Talwar. Optimal Algorithms for Mean Estimation under Local Differential Privacy, "
             "ICML 2022")
BHOWMICK_PAPER = ("Bhowmick, Duchi, Freudiger, Kapoor, Rogers. Protection Against Reconstruction and Its "
                  "Applications in Private Federated Learning, arXiv:1812.00984 (2018)")
DUCHI_PAPER = ("Duchi, Jordan, Wainwright. Minimax Optimal Procedures for Locally Private Estimation, JASA 2018 "
               "(L2 sampling strategy, Section 4.2.3)")


# ------------------------------------------------------------------------------------------------- samplers
def uniform_directions(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """(n, dim) float64 unit vectors, uniform on the sphere (normalised Gaussians; a zero draw is redrawn)."""
    out = rng.standard_normal((n, dim))
    norms = np.linalg.norm(out, axis=1)
    while (bad := norms == 0).any():  # probability ~0; never divide by zero
        out[bad] = rng.standard_normal((int(bad.sum()), dim))
        norms = np.linalg.norm(out, axis=1)
    return out / norms[:, None]


def row_norms(x: np.ndarray) -> np.ndarray:
    """(n,) float64 L2 norms of float32 rows: a float32 pass, redone in float64 where it overflowed or underflowed."""
    sq = np.einsum("ij,ij->i", x, x).astype(np.float64)
    bad = ~np.isfinite(sq) | (sq < TINY_NORM ** 2)
    if bad.any():
        sq[bad] = np.einsum("ij,ij->i", x[bad], x[bad], dtype=np.float64)
    return np.sqrt(sq)


def to_sphere(x: np.ndarray, rng: np.random.Generator, rule: str, *,
              radius: float = 1.0) -> tuple[np.ndarray, dict[str, int]]:
    """Rows of the ball of radius ``radius`` (n, k) -> unit rows (n, k) float32 by ``rule`` ("round"/"normalise").

    round: +x/||x|| with probability (1 + ||x||/radius)/2, else -x/||x||, so E[radius u] = x (Duchi et al. 2018).
    normalise: x/||x||. Zero rows (norm < 1e-30) get a uniformly random direction (E[u] = 0) under both rules.
    """
    if rule not in SPHERE_MAPS:
        raise ValueError(f"sphere_map must be one of {', '.join(SPHERE_MAPS)}, got {rule!r}.")
    norms = row_norms(x)  # (n,)
    r = np.minimum(norms / radius, 1.0)
    zero = norms < TINY_NORM  # no float32 direction below this: treated as 0 (bias < 1e-30, privacy unaffected)
    factor = np.divide(1.0, norms, out=np.zeros_like(norms), where=~zero)
    flipped = 0
    if rule == "round":
        keep = rng.random(x.shape[0]) < (1.0 + r) / 2.0
        factor = np.where(keep, factor, -factor)
        flipped = int((~keep & ~zero).sum())
    u = x * factor.astype(np.float32)[:, None]
    if zero.any():
        u[zero] = uniform_directions(int(zero.sum()), x.shape[1], rng)
    return u, {"zero_rows": int(zero.sum()), "flipped_rows": flipped}


def truncated_normal(t: float, upper: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exact N(0, 1) conditioned on W >= t (where ``upper``) or W < t (elsewhere); (n,) float64.

    Inverse CDF in log space: W = -Phi^-1(U Phi(-t)) resp. Phi^-1(U Phi(t)) with U uniform on (0, 1], through
    ``ndtri_exp`` (accurate in both tails). No rejection and no fallback to an untruncated normal (the
    apple/ml-projunit sampler falls back to plain Gaussian noise with probability ~2^-25, which breaks pure DP:
    its output can then land on the wrong side of the threshold). The side is enforced exactly.
    """
    from scipy import special

    up = np.asarray(upper, dtype=bool)
    log_u = np.log1p(-rng.random(up.shape))  # ln U, U = 1 - uniform[0, 1) in (0, 1]
    w = np.empty(up.shape, dtype=np.float64)
    w[up] = -special.ndtri_exp(log_u[up] + special.log_ndtr(-t))
    w[~up] = special.ndtri_exp(log_u[~up] + special.log_ndtr(t))
    w[up] = np.maximum(w[up], t)
    w[~up] = np.minimum(w[~up], np.nextafter(t, -math.inf))
    return w


def cap_inner_products(dim: int, q: float, upper: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """<V, u> for V uniform on S^(dim-1) conditioned on the cap {<V,u> >= gamma} (``upper``) or its complement.

    W = <V, u> = 2B - 1 with B ~ Beta(a, a), a = (dim-1)/2; the cap of probability q is {W >= gamma} with
    gamma = 1 - 2 I^-1_q(a, a). Exact inverse CDF: cap W = 1 - 2 I^-1(U q), complement W = 2 I^-1(U (1-q)) - 1
    (Beta(a, a) is symmetric), U uniform on (0, 1]; (n,) float64.
    """
    from scipy import special

    a = (dim - 1) / 2.0
    up = np.asarray(upper, dtype=bool)
    u = 1.0 - rng.random(up.shape)
    w = np.empty(up.shape, dtype=np.float64)
    w[up] = 1.0 - 2.0 * special.betaincinv(a, a, u[up] * q)
    w[~up] = 2.0 * special.betaincinv(a, a, u[~up] * (1.0 - q)) - 1.0
    gamma = cap_threshold(dim, q)
    w[up] = np.maximum(w[up], gamma)
    w[~up] = np.minimum(w[~up], np.nextafter(gamma, -math.inf))
    return np.clip(w, -1.0, 1.0)


def cap_threshold(dim: int, q: float) -> float:
    """gamma with Pr[<V, u> >= gamma] = q for V uniform on S^(dim-1)."""
    from scipy import special

    a = (dim - 1) / 2.0
    return float(1.0 - 2.0 * special.betaincinv(a, a, q))


def _orthogonal_noise(u: np.ndarray, rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    # out <- Z ~ N(0, I) (n, k) float32; returns <Z, u> (n,) float64. Z - <Z,u> u is N(0, I - u u^T).
    rng.standard_normal(dtype=np.float32, out=out)
    return np.einsum("ij,ij->i", out, u).astype(np.float64)


# ---------------------------------------------------------------------------------------------- calibration
@dataclass(frozen=True)
class CapCalibration:
    """Parameters of a cap mechanism: p, q, the cap threshold, m = E<V,u> and the unbiased-output MSE.

    ``threshold`` is in the sampler's units (PrivUnitG: N(0, 1) coordinates, i.e. gamma/sigma; PrivUnit and
    Duchi: the inner product on the unit sphere). ``mse`` is E||V/m - u||^2 for a unit input u.
    """

    p: float
    q: float
    threshold: float
    m: float
    mse: float

    @property
    def epsilon(self) -> float:
        """ln(p (1-q) / (q (1-p))), the exact worst-case epsilon of these parameters."""
        return (math.log(self.p) - math.log1p(-self.p)) + (math.log1p(-self.q) - math.log(self.q))


def _split_q(epsilon: float, eps0: float) -> tuple[float, float]:
    # p = e^eps0/(1+e^eps0) and q with p(1-q)/(q(1-p)) = e^eps exactly: (1-q)/q = e^(eps-eps0).
    from scipy import special

    return float(special.expit(eps0)), float(special.expit(-(epsilon - eps0)))


def _optimise(epsilon: float, mse_of: Any) -> float:
    # eps0 in (0, eps) minimising the MSE: coarse grid, then bounded Brent inside the best bracket.
    grid = np.linspace(0.0, epsilon, 202)[1:-1]
    vals = np.array([mse_of(float(e)) for e in grid])
    i = int(np.nanargmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    if lo == hi:
        return float(grid[i])
    from scipy import optimize  # here, not at import: the torch-free ClientApp loads this module (~0.1 s)

    res = optimize.minimize_scalar(mse_of, bounds=(float(lo), float(hi)), method="bounded",
                                   options={"xatol": 1e-10 * max(1.0, epsilon)})
    return float(res.x) if res.fun <= vals[i] else float(grid[i])


def privunitg_calibration(epsilon: float, dim: int, eps0: float) -> CapCalibration:
    """Closed form of PrivUnitG for p = e^eps0/(1+e^eps0) (AFT'22), in units sigma = 1 (threshold t = gamma/sigma).

    q = Phi(-t) with (1-q)/q = e^(eps-eps0); m = E[W] = phi(t) (p/q - (1-p)/(1-q)) for W the truncated N(0,1)
    mixture; E[W^2] = p (1 + t phi(t)/q) + (1-p) (1 - t phi(t)/(1-q)); MSE = (dim - 1 + E[W^2]) / m^2 - 1.
    """
    from scipy import special

    p, q = _split_q(epsilon, eps0)
    t = float(-special.ndtri(q))
    phi = math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    m = phi * (p / q - (1.0 - p) / (1.0 - q))
    ew2 = p * (1.0 + t * phi / q) + (1.0 - p) * (1.0 - t * phi / (1.0 - q))
    return CapCalibration(p, q, t, m, (dim - 1.0 + ew2) / (m * m) - 1.0)


SECURE_SCALE = 64.0  # the secure PrivUnitG base law: DLap(64) per coordinate, P(x) ~ exp(-|x| / 64) on the integers
TWO53 = 1 << 53
SECURE_PRIVUNITG = (
    "sampler='secure' (PrivUnitG): the input is rounded coordinate-wise to a sign vertex s in {-1, +1}^k, "
    "E[s] = x / C (Duchi et al. 2018); the output is C / m * diag(s) X with X on the integer grid, drawn exactly "
    "(CKS 2020 discrete Laplace, AES-256-CTR bits keyed from the OS) from DLap(64)^k conditioned on "
    "{sum X >= g} with an exact Bernoulli(p) coin (p a multiple of 2^-53), else on its complement (zeros are "
    "uploaded as +0.0, never -0.0, so the sign vertex is not revealed where X_i = 0). The base law "
    "is invariant under sign flips, so every vertex's cap has the same probability q and the likelihood ratio of "
    "any two inputs is e^eps', 1 or e^-eps', eps' = ln(p (1-q) / (q (1-p))) for the realised p and q: "
    "epsilon_worst_case is that of what is sampled (float_safe). The vertex rounding costs utility: the MSE is about "
    "k times that of the ideal PrivUnitG (see mse_unit_sphere)."
)


def _sum_pmf(k: int, a: float, half: int) -> np.ndarray:
    # pmf of the sum of k i.i.d. DLap on -half..half by FFT of the characteristic function
    # ((1-a)^2 / (1 - 2a cos w + a^2))^k (moments only; q is computed exactly in secure_cap_probability)
    size = 1 << math.ceil(math.log2(4 * half + 1))
    w = 2.0 * math.pi * np.arange(size) / size
    phi = ((1.0 - a) ** 2 / (1.0 - 2.0 * a * np.cos(w) + a * a)) ** k
    pmf = np.maximum(np.fft.ifft(phi).real, 0.0)
    return np.concatenate([pmf[size - half:], pmf[: half + 1]])


def secure_cap_probability(k: int, g: int, t: float = SECURE_SCALE) -> float:
    """Pr[X_1 + ... + X_k >= g] for X_i i.i.d. DLap(t) (P(x) ~ e^(-|x|/t)): exact up to float64 rounding.

    DLap(t) = N1 - N2 with N1, N2 i.i.d. geometric (failures before a success of probability 1 - e^(-1/t)), so the
    sum is NB1 - NB2 with NB negative binomial (k, 1 - e^(-1/t)) and q = sum_m P(NB2 = m) P(NB1 >= g + m), summed
    until the remaining mass of NB2 is below 1e-30 (scipy's incomplete-beta sf, relative accuracy ~1e-15).
    """
    from scipy import stats

    r = -math.expm1(-1.0 / t)  # success probability 1 - e^(-1/t)
    top = int(stats.nbinom.isf(1e-30, k, r)) + 1
    m = np.arange(top + 1, dtype=np.float64)
    return float(np.sum(stats.nbinom.pmf(m, k, r) * stats.nbinom.sf(g + m - 1, k, r)))


MAX_SECURE_DRAWS = 1000  # beyond it the exact cap sampler's time and memory grow like e^epsilon (eps 16: 56 s, 11 GB
# for 200 rows of dim 50), so larger epsilons are refused with a one-line error


def _secure_privunitg_cap(epsilon: float, dim: int, eps0: float) -> tuple[int, float, float, float]:
    """The secure PrivUnitG's cap: threshold g (grid units), its probability q, the realised p, and the exact base
    draws one upload costs (rejection by side); see :func:`secure_privunitg_calibration`."""
    from scipy import special

    ideal = privunitg_calibration(epsilon, dim, eps0)
    a = math.exp(-1.0 / SECURE_SCALE)
    sd = math.sqrt(dim * 2.0 * a / (1.0 - a) ** 2)
    g = math.ceil(ideal.threshold * sd)
    q = secure_cap_probability(dim, g)
    if not 0.0 < q < 1.0:
        raise ValueError(f"privunitg secure: epsilon={epsilon:g} gives a cap probability {q:.3g} out of (0, 1).")
    logit_p = epsilon + math.log(q) - math.log1p(-q)
    p = math.floor(float(special.expit(logit_p)) * TWO53) / TWO53
    while p > 0 and (math.log(p) - math.log1p(-p)) + (math.log1p(-q) - math.log(q)) > epsilon:
        p -= 2.0 ** -53
    return g, q, p, max(p / q, (1.0 - p) / (1.0 - q))


@functools.lru_cache(maxsize=64)
def secure_privunitg_max_epsilon(dim: int) -> float:
    """The largest epsilon (to 0.1, rounded down) at which the secure PrivUnitG in ``dim`` dimensions needs at most
    MAX_SECURE_DRAWS draws per upload: the range its refusal names (about 9-11 for dim 16-384). Bisection, ~0.3 s."""

    def fits(eps: float) -> bool:
        eps0 = _optimise(eps, lambda e0: privunitg_calibration(eps, dim, e0).mse)
        try:
            return _secure_privunitg_cap(eps, dim, eps0)[3] <= MAX_SECURE_DRAWS
        except ValueError:
            return False

    lo, hi = 0, 640  # tenths of epsilon; fits(0.1) holds for every dim
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid / 10) else (lo, mid)
    return lo / 10


def secure_privunitg_calibration(epsilon: float, dim: int, eps0: float) -> CapCalibration:
    """Calibration of the secure (grid) PrivUnitG in ``dim`` = k dimensions, cap threshold from the ideal ``eps0``.

    Base law: X_i i.i.d. DLap(t), t = SECURE_SCALE, variance v = 2a/(1-a)^2 (a = e^(-1/t)); S = sum X_i.
    g = ceil(t_ideal sqrt(k v)) with t_ideal the ideal PrivUnitG threshold (units of the standard deviation);
    q = Pr[S >= g] exactly (:func:`secure_cap_probability`); p = the largest multiple of 2^-53 with
    p (1-q) / (q (1-p)) <= e^epsilon. Returned in X units: ``threshold`` = g, ``m`` = E[S] / k (the output
    C X . s / m is unbiased), ``mse`` = E||X||^2 / m^2 - 1 with E||X||^2 = k E[X_1^2] under the p-mixture (moments
    from the FFT pmf of S: they set the unbiasing scale and the reported MSE, not epsilon).
    """
    g, q, p, draws = _secure_privunitg_cap(epsilon, dim, eps0)
    if draws > MAX_SECURE_DRAWS:
        top = secure_privunitg_max_epsilon(dim)
        raise ValueError(f"privunitg with sampler='secure' supports epsilon <= {top:g} at dim={dim} (at "
                         f"epsilon={epsilon:g} its exact cap sampler needs ~{draws:.3g} draws per upload, at most "
                         f"{MAX_SECURE_DRAWS}): use a smaller epsilon, or sampler='float' (simulation-grade).")
    a = math.exp(-1.0 / SECURE_SCALE)
    var = 2.0 * a / (1.0 - a) ** 2
    sd = math.sqrt(dim * var)
    half = int(60.0 * sd) + abs(g) + int(60 * SECURE_SCALE)
    n = np.arange(-half, half + 1, dtype=np.float64)
    pk = _sum_pmf(dim, a, half)
    cap = n >= g
    es = p * float((pk[cap] * n[cap]).sum()) / q + (1.0 - p) * float((pk[~cap] * n[~cap]).sum()) / (1.0 - q)
    # E[X_1^2 1[S >= g]] = sum_x x^2 P(x) Pr[S_(k-1) >= g - x]
    xs = np.arange(-int(60 * SECURE_SCALE), int(60 * SECURE_SCALE) + 1, dtype=np.float64)
    px = (1.0 - a) / (1.0 + a) * a ** np.abs(xs)
    sf_rest = np.cumsum(_sum_pmf(dim - 1, a, half)[::-1])[::-1]  # Pr[S_(k-1) >= n] on -half..half
    x2_cap = float(np.sum(xs ** 2 * px * sf_rest[np.clip(g - xs + half, 0, 2 * half).astype(np.int64)]))
    ex2 = dim * (p * x2_cap / q + (1.0 - p) * (var - x2_cap) / (1.0 - q))
    m = es / dim
    return CapCalibration(p, q, float(g), m, ex2 / (m * m) - 1.0)


def sample_secure_caps(n: int, dim: int, cal: CapCalibration, bits: exact.SecureBits,
                       out: np.ndarray | None = None, draws: Callable[[int], np.ndarray] | None = None,
                       gather: np.ndarray | None = None) -> np.ndarray:
    """(n, dim) integer-valued float64 rows X ~ DLap(SECURE_SCALE)^dim conditioned on {sum X >= g} with an exact
    Bernoulli(p) coin, else on {sum X < g} (into ``out[:n]`` when given; ``draws`` reuses a sampler's buffers, or
    gives another sign-invariant integer base law: :class:`SignDraws` for the secure Duchi).

    Exact: base rows are drawn in cache-sized batches and split by side, and the i-th output row needing a cap takes
    the i-th cap row drawn (order only, never values), so each is an independent draw of the conditional law. The
    coin compares 53 secure bits with p * 2^53 (p is a multiple of 2^-53).
    """
    coins = (bits.words(n) >> np.uint64(11)) < np.uint64(round(cal.p * TWO53))
    res = np.empty((n, dim), dtype=np.float64) if out is None else out[:n]
    dest = {True: np.flatnonzero(coins), False: np.flatnonzero(~coins)}
    done = {True: 0, False: 0}
    draws = draws if draws is not None else exact.LaplaceDraws(SECURE_SCALE, bits)
    g = cal.threshold
    batch = max(1, exact.CHUNK // dim)
    while done[True] < dest[True].size or done[False] < dest[False].size:
        want = max((dest[True].size - done[True]) / cal.q, (dest[False].size - done[False]) / (1.0 - cal.q))
        rows = int(min(batch, 1.05 * want + 2))
        x = draws(rows * dim).reshape(rows, dim)
        side = x.sum(axis=1) >= g  # exact: integers far below 2^53
        for key in (True, False):
            to = dest[key][done[key]:]
            if to.size:
                src = np.flatnonzero(side == key)[: to.size]
                if gather is not None and gather.shape[0] >= src.size and gather.shape[1] == dim:
                    res[to[: src.size]] = np.take(x, src, axis=0, out=gather[: src.size])
                else:
                    res[to[: src.size]] = x[src]
                done[key] += src.size
    return res


def signed_scaled(x: np.ndarray, r: np.ndarray, scale: float, bits: exact.SecureBits,
                  out: np.ndarray | None = None, scratch: np.ndarray | None = None) -> np.ndarray:
    """x (n, k) float64 -> scale * diag(s) x (into ``out``, float32 by default; x is overwritten), s the sign vertex
    of rows r (|r_i| <= 1; r is overwritten): s_i = +1 with probability ceil((1 + r_i) 2^31) / 2^32 (32 secure bits;
    E[s] = r within 2^-32, and the coins need not be exact: any mixture of eps-LDP outputs is eps-LDP). Zeros come
    out as +0.0: a -0.0 would reveal s_i where X_i = 0 (for the input e_1 vs -e_1, with certainty). ``scratch``: a
    buffer of x.size 64-bit words or more."""
    n = r.size
    sb = np.empty(n, dtype=np.uint64) if scratch is None else scratch.reshape(-1).view(np.uint64)[:n]
    u = bits.words((n + 1) // 2).view(np.uint32)[:n].reshape(r.shape)
    np.clip(r, -1.0, 1.0, out=r)
    r *= 2.0**31
    r += 2.0**31  # (1 + r) / 2 * 2^32
    flip = sb.reshape(r.shape)
    np.greater_equal(u, r, out=flip, casting="unsafe")  # 1 where s_i = -1
    flip <<= np.uint64(63)
    xv = x.view(np.uint64)
    xv ^= flip  # x_i -> -x_i where s_i = -1
    res = np.empty(r.shape, dtype=np.float32) if out is None else out
    np.multiply(x, scale, out=res, casting="same_kind")
    res += np.float32(0.0)  # -0.0 + 0.0 = +0.0
    return res


def privunitg_second_moment(cal: CapCalibration) -> float:
    """E[W^2] of PrivUnitG's truncated N(0, 1) mixture (threshold t, cap side with probability p; closed form):
    E[W^2 | W >= t] = 1 + t phi(t) / q, E[W^2 | W < t] = 1 - t phi(t) / (1 - q), q = Phi(-t)."""
    t = cal.threshold
    phi = math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    return cal.p * (1.0 + t * phi / cal.q) + (1.0 - cal.p) * (1.0 - t * phi / (1.0 - cal.q))


def cap_second_moment(cal: CapCalibration, dim: int) -> float:
    """E[W^2] of PrivUnit's inner product W = <V, u> (V uniform on S^(dim-1) restricted to the cap {W >= gamma}
    with probability p, to its complement otherwise; closed form). W = 1 - 2B, B ~ Beta(a, a), a = (dim - 1)/2, and
    the cap is {B <= b}, b = (1 - gamma)/2; E[B^j; B <= b] = I_b(a + j, a) B(a + j, a) / B(a, a), so
    E[W^2; cap] = I_b(a, a) - 4 I_b(a+1, a) / 2 + 4 I_b(a+2, a) (a + 1) / (2 (2a + 1)); the complement's from
    E[W^2] = 1/dim (uniform V)."""
    from scipy import special

    a = (dim - 1) / 2.0
    b = (1.0 - cal.threshold) / 2.0
    q = float(special.betainc(a, a, b))
    w2_cap = (q - 2.0 * float(special.betainc(a + 1.0, a, b))
              + 2.0 * (a + 1.0) / (2.0 * a + 1.0) * float(special.betainc(a + 2.0, a, b)))
    w2_rest = 1.0 / dim - w2_cap
    return cal.p * w2_cap / q + (1.0 - cal.p) * w2_rest / (1.0 - q)


def privunit_calibration(epsilon: float, dim: int, eps0: float) -> CapCalibration:
    """Closed form of PrivUnit for p = e^eps0/(1+e^eps0) (Bhowmick et al. 2018, Algorithm 1, exact calibration).

    q = I_{(1-gamma)/2}(a, a) with a = (dim-1)/2 and (1-q)/q = e^(eps-eps0); E[W; W >= gamma] =
    (1-gamma^2)^a / ((dim-1) B(1/2, a)) and E[W] = 0, so m = (p/q - (1-p)/(1-q)) E[W; W >= gamma];
    MSE = 1/m^2 - 1 (||V|| = 1). Computed in log space (d = 768 underflows otherwise).
    """
    from scipy import special

    p, q = _split_q(epsilon, eps0)
    a = (dim - 1) / 2.0
    b = float(special.betaincinv(a, a, q))  # (1 - gamma)/2
    log_1mg2 = math.log(4.0) + math.log(b) + math.log1p(-b)  # ln(1 - gamma^2) = ln(4 b (1 - b))
    log_cap_mean = a * log_1mg2 - math.log(dim - 1.0) - float(special.betaln(0.5, a))
    m = (p / q - (1.0 - p) / (1.0 - q)) * math.exp(log_cap_mean)
    return CapCalibration(p, q, 1.0 - 2.0 * b, m, 1.0 / (m * m) - 1.0)


def duchi_calibration(epsilon: float, dim: int) -> CapCalibration:
    """Duchi et al. (2018): hemisphere cap (gamma = 0, q = 1/2), p = e^eps/(1+e^eps); 1/m = B =
    (e^eps+1)/(e^eps-1) * sqrt(pi) Gamma((d+1)/2) / Gamma(d/2)."""
    from scipy import special

    p = float(special.expit(epsilon))
    log_b = (math.log(math.sqrt(math.pi)) + float(special.gammaln((dim + 1) / 2.0) - special.gammaln(dim / 2.0))
             - math.log(math.tanh(epsilon / 2.0)))  # (e^eps+1)/(e^eps-1) = 1/tanh(eps/2)
    m = math.exp(-log_b)
    return CapCalibration(p, 0.5, 0.0, m, 1.0 / (m * m) - 1.0)


SECURE_DUCHI = (
    "sampler='secure' (Duchi): the input is rounded coordinate-wise to a sign vertex s in {-1, +1}^k, E[s] = x / C "
    "(Duchi et al. 2018); X is uniform on {-1, +1}^k (k secure bits, AES-256-CTR keyed from the OS), conditioned "
    "exactly on the half-cube {sum X >= 1} with an exact Bernoulli(p) coin (p a multiple of 2^-53), else on its "
    "complement; the upload is C / m * diag(s) X, every coordinate +-fl32(C/m). The base law is invariant under "
    "sign flips, so every vertex's half-cube has the same probability q (a binomial tail, exact in integers) and "
    "the likelihood ratio of any two inputs is e^eps', 1 or e^-eps', eps' = ln(p (1-q) / (q (1-p))) for the "
    "realised p and q: epsilon_worst_case is that of what is sampled (float_safe). This is the L-infinity sampler "
    "of the same paper applied after the vertex rounding: its MSE is about k times that of the float Duchi (see "
    "mse_unit_sphere)."
)


class SignDraws:
    """``draws(n)``: n i.i.d. uniform signs in {-1.0, +1.0} (float64), one secure bit each: the base law of the
    secure Duchi (uniform on the vertices of the cube, invariant under sign flips)."""

    def __init__(self, bits: exact.SecureBits) -> None:
        self.bits = bits

    def __call__(self, n: int) -> np.ndarray:
        w = self.bits.words((n + 63) // 64)
        b = np.unpackbits(w.view(np.uint8), count=n).astype(np.float64)
        b *= 2.0
        b -= 1.0
        return b


def secure_duchi_calibration(epsilon: float, dim: int) -> CapCalibration:
    """Calibration of the secure (sign-vector) Duchi in ``dim`` = k dimensions.

    X uniform on {-1, +1}^k, S = sum X_i = 2J - k with J ~ Binomial(k, 1/2); cap {S >= 1} (the half-cube, Duchi's
    hemisphere on the cube; ties S = 0 for even k go to the complement). In integers: A = 2^k q = sum_{j >= j0}
    C(k, j), T = 2^k E[S; S >= 1] = sum_{j >= j0} (2j - k) C(k, j) (and E[S] = 0, so E[S; S < 1] = -T). p = the
    largest multiple of 2^-53 with ln(P (2^k - A)) - ln((2^53 - P) A) <= epsilon (logarithms of exact integers).
    m = E[S] / k = (p T/A - (1-p) T/(2^k - A)) / k makes C/m diag(s) X unbiased for C s; mse = k / m^2 - 1.
    Returned with ``threshold`` = 1 (in units of S).
    """
    from scipy import special

    k = int(dim)
    total = 1 << k
    j0 = k // 2 + 1  # 2j - k >= 1
    combs = [math.comb(k, j) for j in range(j0, k + 1)]
    a = sum(combs)
    t = sum((2 * j - k) * c for j, c in zip(range(j0, k + 1), combs, strict=True))
    q = a / total  # int / int: correctly rounded

    def eps_of(pp: int) -> float:
        return math.log(pp * (total - a)) - math.log((TWO53 - pp) * a)

    big_p = math.floor(float(special.expit(epsilon + math.log(a) - math.log(total - a))) * TWO53)
    big_p = min(big_p, TWO53 - 1)
    while big_p > 0 and (eps_of(big_p) > epsilon or CapCalibration(big_p / TWO53, q, 1.0, 1.0, 0.0).epsilon > epsilon):
        big_p -= 1
    if big_p <= 0:
        raise ValueError(f"duchi secure: epsilon={epsilon:g} gives no valid coin probability in dimension {k}.")
    p = big_p / TWO53
    m = (p * (t / a) - (1.0 - p) * (t / (total - a))) / k
    return CapCalibration(p, q, 1.0, m, k / (m * m) - 1.0)


# ------------------------------------------------------------------------------- secure likelihoods, audit

def _secure_signs(mech: CapMechanism, y: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The secure cap samplers' integer draw Y = diag(s) X recovered from the upload (N, D) (the upload is
    fl32(C / m Y), Y integers far below 2^24) and the vertex-rounding means r (M, D) of the codes: r = c / max(|c|, C)
    (``round``) or c / |c| (``normalise``), 0 for a zero code (as the sampler does)."""
    clip = float(mech.clip_norm)
    scale = clip / float(mech.calibration.m)
    yy = np.rint(y / scale)
    norms = np.sqrt((c * c).sum(axis=1))
    zero = norms < 1e-30
    denom = np.maximum(norms, clip) if mech.sphere_map == "round" else norms
    r = np.where(zero[:, None], 0.0, c / np.where(zero, 1.0, denom)[:, None])
    return yy, np.clip(r, -1.0, 1.0)


def _cap_mixture(mech: CapMechanism, cap: np.ndarray) -> np.ndarray:
    """log(p/q Pr[cap] + (1-p)/(1-q) (1 - Pr[cap])): the density ratio to the base law B(Y), given the probability
    ``cap`` (N, M) over the vertex rounding that <s, Y> >= g (B is sign-invariant: B(diag(s) Y) = B(Y))."""
    cal = mech.calibration
    cap = np.clip(cap, 0.0, 1.0)
    return np.log(cal.p / cal.q * cap + (1.0 - cal.p) / (1.0 - cal.q) * (1.0 - cap))


SECURE_PRIVUNITG_NOTE = ("normal approximation (continuity-corrected) of Pr[<s, Y> >= g] over the sign-vertex "
                         "rounding s; the rest (the base law's sign invariance, the cap coin) is exact")
FLOAT_CAP_NOTE = ("float cap law of the ideal mechanism; the secure sampler's sign-vertex construction is not "
                  "modelled")


def _secure_duchi_llr(mech: CapMechanism, k: int) -> Callable[[np.ndarray], np.ndarray]:
    # Secure duchi, pair -C e_1 vs C (1/2,1/2,1/2,1/2,0,...): P(Y | x) = sum over the block's sign vertex s_b of
    # P(s_b | x) 2^-k (p/q or (1-p)/(1-q) as <Y, s> >= 1), and <Y, s> = <a, s_b> + B with a the block's signs of Y
    # and B a sum of k - 4 uniform signs (the other vertex coordinates are uniform from both inputs), so the ratio
    # is a function of a: 16 values, computed exactly.
    from scipy import stats

    cal = mech.calibration
    rest = k - SHARED_BLOCK
    inside, outside = cal.p / cal.q, (1.0 - cal.p) / (1.0 - cal.q)

    def tail(t: int) -> float:  # Pr[B >= t], B = 2J - rest, J ~ Binomial(rest, 1/2)
        return float(stats.binom.sf(math.ceil((t + rest) / 2) - 1, rest, 0.5)) if rest > 0 else float(t <= 0)

    vertices = [np.array(v) for v in product((-1, 1), repeat=SHARED_BLOCK)]

    def lik(a: np.ndarray, plus: tuple[float, ...]) -> float:
        total = 0.0
        for sb in vertices:
            w = float(np.prod([pp if sj > 0 else 1.0 - pp for pp, sj in zip(plus, sb, strict=True)]))
            c = tail(1 - int(a @ sb))
            total += w * (inside * c + outside * (1.0 - c))
        return total

    table = np.array([math.log(lik(a, (0.0, 0.5, 0.5, 0.5))) - math.log(lik(a, (0.75,) * SHARED_BLOCK))
                      for a in vertices])
    weights = 1 << np.arange(SHARED_BLOCK)[::-1]  # the index of a in `vertices` (+1 -> bit 1, first = highest)

    def llr(y: np.ndarray) -> np.ndarray:
        return np.round(table[(y[:, :SHARED_BLOCK] > 0).astype(np.int64) @ weights], 9)

    return llr


# ------------------------------------------------------------------------------------------ projected base
@dataclass(frozen=True, kw_only=True)
class ProjectedMechanism(Mechanism):
    """Shared part of the new mechanisms: required ``dim`` (input width), ``clip_norm`` and a public projection.

    ``projection`` = "none" | "random" | "pca" with ``proj_dim`` = k: the mechanism then works on the k-dim image
    (``output_dim`` = k). random: built from the public ``proj_seed``; pca: ``projector`` fitted on public data
    (:func:`fl_privtext.privacy.projection.fit_pca`) and ``public_data`` naming it (required; the report shows both).
    """

    min_dim: ClassVar[int] = 2

    dim: int = field()  # required: the calibration depends on the width
    clip_norm: float = 1.0
    projection: str = "none"
    proj_dim: int | None = None
    proj_seed: int = 0
    public_data: str = ""
    projector: PublicProjection | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, self.min_dim, optional=False))
        set_field(self, "clip_norm", check_positive("clip_norm", self.clip_norm))
        if self.projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {', '.join(PROJECTIONS)}, got {self.projection!r}.")
        if self.projector is not None and not isinstance(self.projector, PublicProjection):
            raise ValueError("projector must be a fl_privtext.privacy.projection.PublicProjection or None.")
        if isinstance(self.proj_seed, bool) or not isinstance(self.proj_seed, (int, np.integer)):
            raise ValueError(f"proj_seed must be an integer (a PUBLIC seed), got {self.proj_seed!r}.")  # noqa: TRY004
        if self.projection == "none":
            if self.proj_dim is not None or self.projector is not None:
                raise ValueError("proj_dim and projector need projection = 'random' or 'pca' (projection is 'none').")
            return
        k = self.proj_dim
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not self.min_dim <= k <= self.dim:
            raise ValueError(f"proj_dim must be an integer in [{self.min_dim}, dim={self.dim}] with projection = "
                             f"{self.projection!r}, got {k!r}.")
        set_field(self, "proj_dim", int(k))
        if self.projection == "random":
            if self.projector is not None:
                raise ValueError("projection = 'random' is built from the public proj_seed; do not pass a projector.")
            set_field(self, "projector", random_projection(self.dim, int(k), int(self.proj_seed)))
            return
        if not str(self.public_data).strip():
            raise ValueError("projection = 'pca' needs public_data: the name of the public dataset (disjoint from "
                             "every simulated user) the PCA was fitted on.")
        p = self.projector
        if p is not None and (p.method != "pca" or p.in_dim != self.dim or p.out_dim != k):
            raise ValueError(f"The projector must be a pca map from {self.dim} to {k} dimensions, got "
                             f"{p.method} {p.in_dim} -> {p.out_dim}.")

    @property
    def float_safe(self) -> bool:
        """False: continuous floating-point noise (see FLOAT_NOISE)."""
        return False

    @property
    def work_dim(self) -> int:
        """Width the randomiser works in: proj_dim with a projection, else dim."""
        return int(self.proj_dim) if self.proj_dim is not None else int(self.dim)

    @property
    def output_dim(self) -> int:
        return self.work_dim

    @property
    def params(self) -> dict[str, Any]:
        out = super().params
        out["projector"] = None if self.projector is None else self.projector.describe()
        return out

    def project(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Apply the public projection (if any): (N, dim) -> (N, work_dim) float32."""
        if self.projection == "none":
            return x, {}
        if self.projector is None:
            raise ValueError("projection = 'pca' needs projector=fit_pca(public_features, proj_dim, source=...) "
                             "fitted on public data before privatizing.")
        return self.projector.apply(x), {"projection": self.projection, "proj_dim": self.work_dim,
                                         "projector": self.projector.fingerprint}

    def assumptions(self) -> tuple[str, ...]:
        out: tuple[str, ...] = (REPLACEMENT, COMPOSITION, FLOAT_NOISE)
        if self.projection != "none":
            out += ((f"The {self.projection} projection to {self.work_dim} dimensions is public and fixed (it depends "
                    "on no user's data), so the guarantee of the randomiser holds for the raw input."),)
        return out


# ----------------------------------------------------------------------------------------------- cap family
@dataclass(frozen=True, kw_only=True)
class CapMechanism(ProjectedMechanism):
    """Shared part of PrivUnitG, PrivUnit and Duchi: clip -> sphere map -> cap sampling -> C V / m."""

    epsilon: float
    sphere_map: str = "round"
    _cal: CapCalibration | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "epsilon", check_positive("epsilon", self.epsilon))
        if self.epsilon > MAX_EPSILON:
            raise ValueError(f"{self.name} supports epsilon <= {MAX_EPSILON:g}, got {self.epsilon}: beyond it 1 - p "
                             "approaches the float64 resolution of the uniform draws and the realised epsilon drifts.")
        if self.sphere_map not in SPHERE_MAPS:
            raise ValueError(f"sphere_map must be one of {', '.join(SPHERE_MAPS)}, got {self.sphere_map!r}.")
        set_field(self, "_cal", self.calibrate())

    def calibrate(self) -> CapCalibration:
        """The parameters actually used (p, q, threshold, m, MSE)."""
        raise NotImplementedError

    @property
    def calibration(self) -> CapCalibration:
        assert self._cal is not None
        return self._cal

    def normalise(self, x: np.ndarray) -> Stage:
        z, info = self.project(x)
        if self.sphere_map == "round":
            # Clipping to ||x|| <= C is applied by the rounding itself: u = +-x/||x|| with probabilities
            # (1 +- min(1, ||x||/C))/2 is the law of rounding the clipped x (saves a pass over (N, k)).
            norms = row_norms(z)
            return Stage(z, {"method": "l2-clip (inside the sphere rounding)", "clip_norm": self.clip_norm,
                             "clipped_rows": int((norms > self.clip_norm).sum()), **info})
        return Stage(z, {"method": "none (directions taken in randomise)", **info})

    def mean_output(self, c: np.ndarray) -> np.ndarray:
        """Unbiased: E[upload] = the clipped input (round), or C x/||x|| (normalise); 0 for a zero row."""
        norms = row_norms(c)
        zero = norms < TINY_NORM
        if self.sphere_map == "round":
            factor = np.minimum(1.0, np.divide(self.clip_norm, norms, out=np.ones_like(norms), where=~zero))
        else:
            factor = np.divide(self.clip_norm, norms, out=np.zeros_like(norms), where=~zero)
        factor[zero] = 0.0
        return c * factor.astype(np.float32)[:, None]

    def sample_directions(self, u: np.ndarray, rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
        """Unit inputs u (n, k) float32 (overwritten) -> out = scale * V, (n, k) float32."""
        raise NotImplementedError

    def secure_sign_vertex(self, c: np.ndarray, rng: np.random.Generator,
                           make_draws: Callable[[exact.SecureBits], Any], method: str) -> Stage:
        """The secure samplers' shared loop (secure PrivUnitG and Duchi): each row rounded to a sign vertex of its
        (clipped) direction, times an exact draw from the mechanism's grid sampler (``make_draws(bits)``, consumed
        by `sample_secure_caps`), scaled by C/m; cache-sized blocks of rows, AES-CTR bits keyed from ``rng``."""
        n, k = c.shape
        cal = self.calibration
        bits = exact.SecureBits.keyed_by(rng)
        out = np.empty((n, k), dtype=np.float32)
        scale = self.clip_norm / cal.m
        step = max(1, exact.CHUNK // max(1, k))  # cache-sized blocks of rows
        draws = make_draws(bits)
        x, r, gather = (np.empty((step, k), dtype=np.float64) for _ in range(3))
        zero_rows = 0
        for s in range(0, n, step):
            z = c[s:s + step]
            norms = np.sqrt(np.einsum("ij,ij->i", z, z, dtype=np.float64))
            zero = norms < TINY_NORM
            zero_rows += int(zero.sum())
            if self.sphere_map == "round":
                factor = np.divide(1.0, np.maximum(norms, self.clip_norm), out=np.zeros_like(norms), where=~zero)
            else:
                factor = np.divide(1.0, norms, out=np.zeros_like(norms), where=~zero)
            rows = z.shape[0]
            xb = sample_secure_caps(rows, k, cal, bits, x, draws, gather)
            rb = np.multiply(z, factor[:, None], out=r[:rows], dtype=np.float64)
            signed_scaled(xb, rb, scale, bits, out[s:s + step], gather)
        return Stage(out, {"method": method, "sphere_map": self.sphere_map, "zero_rows": zero_rows,
                           "flipped_rows": 0, "p": cal.p, "scale": scale})

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        n, k = c.shape
        out = np.empty((n, k), dtype=np.float32)
        scale = self.clip_norm / self.calibration.m
        counts = {"zero_rows": 0, "flipped_rows": 0}
        step = max(1, CHUNK_VALUES // max(1, k))
        for s in range(0, n, step):
            u, info = to_sphere(c[s:s + step], rng, self.sphere_map, radius=self.clip_norm)
            for key in counts:
                counts[key] += info[key]
            self.sample_directions(u, rng, out[s:s + step], scale)
        return Stage(out, {"method": self.name, "sphere_map": self.sphere_map, **counts,
                           "p": self.calibration.p, "scale": scale})

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        return self.calibration.epsilon

    def direction_second_moment(self) -> float | None:
        """E[W^2] of the inner product W = <V, u> of the sampled direction with the input's (None: not given)."""
        return None

    def noise_moments(self) -> NoiseMoments | None:
        """upload = s (W u + R) with s = C / m, u the unit direction of the sphere map and R orthogonal to u with a
        rotation-invariant law given W: E[u u^T | x] = s^2 (E[W^2] u u^T + E[||R||^2] / (k - 1) (I - u u^T)) (exact;
        E[||R||^2] = k - 1 for PrivUnitG's Gaussian, 1 - E[W^2] for PrivUnit's sphere)."""
        ew2 = self.direction_second_moment()
        if ew2 is None:
            return None
        k = self.work_dim
        s2 = (self.clip_norm / self.calibration.m) ** 2
        iso = s2 * (self.orthogonal_energy(ew2) / (k - 1.0))
        return NoiseMoments("cap", iso=iso, rank_one=s2 * ew2 - iso, sphere_map=self.sphere_map,
                            clip_norm=self.clip_norm)

    def orthogonal_energy(self, ew2: float) -> float:
        """E||R||^2 of the part of V orthogonal to the input direction (unit-sphere mechanisms: 1 - E[W^2])."""
        return 1.0 - ew2

    def calibration_values(self) -> dict[str, Any]:
        cal = self.calibration
        return {"p": cal.p, "q": cal.q, "unbiasing_scale": 1.0 / cal.m,
                "mse_unit_sphere": cal.mse, "mse_at_clip_norm": self.clip_norm ** 2 * cal.mse,
                "work_dim": self.work_dim}

    def mse(self, input_norm: float | None = None) -> float:
        """Closed-form E||upload - x||^2 for an input of norm ``input_norm`` <= C after clipping (default C).

        round: C^2 (MSE_unit + 1) - ||x||^2 (the rounding is part of the noise); normalise: C^2 MSE_unit.
        """
        c2 = self.clip_norm ** 2
        if self.sphere_map == "normalise":
            return c2 * self.calibration.mse
        r = self.clip_norm if input_norm is None else min(float(input_norm), self.clip_norm)
        return c2 * (self.calibration.mse + 1.0) - r * r

    def assumptions(self) -> tuple[str, ...]:
        rule = ("x is clipped to ||x|| <= C and rounded to +-x/||x|| with probabilities (1 +- ||x||/C)/2 (Duchi et al. "
                "2018), so the upload is unbiased for the clipped x" if self.sphere_map == "round" else
                "x is normalised to x/||x||; the upload is unbiased for C x/||x||")
        return super().assumptions() + (
            f"Inputs: {rule}; a zero input gets a uniformly random direction.",
            ("The likelihood ratio of any two inputs is e^eps, 1 or e^-eps and depends only on which inputs' caps "
            "contain the output: exactly eps-LDP on the sphere and, by the rounding, on the ball."),
        )

    def cap_log_likelihood(self, y: np.ndarray, c: np.ndarray) -> np.ndarray:
        """PrivUnit, PrivUnitG, Duchi: exact log density ratio of the upload to the mechanism's base law.

        The upload is y = C V / m. Given the unit direction u, V's density relative to its base law (uniform on the
        sphere for PrivUnit/Duchi, N(0, I) for PrivUnitG, whose truncation acts on <V, u> alone) is r(<V, u>) with
        r(s) = p/q for s >= threshold and (1-p)/(1-q) below. The code c (the clean projected input, or a class mean)
        gives u = +c/|c| with probability a = (1 + min(1, |c|/C))/2 and -c/|c| otherwise under the ``round`` sphere
        map (a = 1 under ``normalise``); a zero code gives a uniform u, whose average ratio is exactly 1. So
        log P[y | c] = log(a r(s) + (1 - a) r(-s)) + log base(y), s = <y, c/|c|> m / C; the base term is the same
        for every code and dropped.
        """
        cal = self.calibration
        clip = float(self.clip_norm)
        inside, outside = math.log(cal.p) - math.log(cal.q), math.log1p(-cal.p) - math.log1p(-cal.q)
        norms = np.sqrt((c * c).sum(axis=1))
        zero = norms < 1e-30
        unit = c / np.where(zero, 1.0, norms)[:, None]
        s = (y @ unit.T) * (cal.m / clip)  # (N, M): <V, u>
        a = (1.0 + np.minimum(1.0, norms / clip)) / 2.0 if self.sphere_map == "round" else np.ones_like(norms)
        log_r = np.where(s >= cal.threshold, inside, outside)
        log_r_flip = np.where(-s >= cal.threshold, inside, outside)
        with np.errstate(divide="ignore"):
            out = np.logaddexp(np.log(a)[None, :] + log_r, np.log1p(-a)[None, :] + log_r_flip)
        out[:, zero] = 0.0
        return out

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The float cap law (`cap_log_likelihood`); the secure samplers declare their own."""
        return self.cap_log_likelihood(uploads, codes)

    def likelihood_note(self) -> str:
        """Exact for the float sampler; a secure sampler without its own likelihood gets the float law, labelled."""
        return FLOAT_CAP_NOTE if getattr(self, "sampler", "float") == "secure" else ""

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """-C*e_1 vs C*(1/2,1/2,1/2,1/2,0,...) at full (working) dimension (k >= 4; antipodal and no low-bit
        detector below); the exact likelihood-ratio class 1[<y,u0> >= tau] - 1[<y,u1> >= tau] (the ratio is e^eps, 1
        or e^-eps; for secure duchi the exact log-likelihood ratio of the signs of coordinates 0-3), plus the low-bit
        distinguisher: the shared float32 offset of coordinates 0-3 (`shared_offset_consistent`)."""
        # PrivUnit and Duchi (float): pair x0 = -C e_1, x1 = C (1/2, 1/2, 1/2, 1/2, 0, ...) (k >= 4; else antipodal).
        # The likelihood ratio of two inputs depends only on which caps contain the output:
        # eps * (1[<y, u0> >= tau] - 1[<y, u1> >= tau]), tau = C/m * threshold (the cap boundary in output units).
        # Low-bit distinguisher (float sampler): the upload is fl32(f (Z - <Z,u> u)) + fl32(u_j * fl32(C/m W)) with a
        # per-row float32 factor f; for u1 the four block coordinates get the SAME float32 offset b = fl32(C/(2m) W),
        # so every block coordinate that nearly cancels b is exactly A_i + b and lies on b's coarser grid, whereas from
        # x0 they are plain products fl32(f Z_j) with free low bits (:func:`shared_offset_consistent`: probability 1
        # from x1, ~0.82 from x0 at k = 16). No known constant enters, so the per-row renormalisation f, which hides
        # the single-coordinate product test of PrivUnitG, does not help. Secure Duchi (the sign-vector grid) passes:
        # its coordinates are +-fl32(C/m). Audited on the randomiser's domain (a projection is public pre-processing).
        k = self.work_dim
        x0 = np.zeros(k)
        x0[0] = -self.clip_norm
        # float32 inputs, as the pipeline's normalise stage hands them over (a float64 batch would make u float64 and
        # the offset b a float64 that no float32 grid holds, which is not what a client computes)
        sample = lambda c, rng: self.randomise(np.asarray(c, dtype=np.float32), rng).values
        extra: tuple[Component, ...] = ()
        if k < SHARED_BLOCK:
            x1 = -x0
            pair = (f"C*e_1 vs -C*e_1 on the sphere of radius C in {k} dimensions (randomiser stage; no low-bit "
                    "detector below 4 dimensions)")
        else:
            x1 = np.zeros(k)
            x1[:SHARED_BLOCK] = 0.5 * self.clip_norm
            low = Component("shared float32 offset of coordinates 0-3 (consistency with x1)", 1,
                            lambda y: shared_offset_consistent(y).astype(np.float64))
            extra = (low,)
            pair = (f"-C*e_1 vs C*(1/2,1/2,1/2,1/2,0,...) on the sphere of radius C in {k} dimensions "
                    "(randomiser stage)")
        if getattr(self, "sampler", "float") == "secure":
            # secure duchi: the law of the output depends on the inputs only through the sign vertex; coordinate 0 is
            # sufficient for the antipodal pair, the exact log-likelihood ratio of the block's signs for the block pair
            comp = Component("coordinate 0", 1, column(0)) if k < SHARED_BLOCK else \
                Component("exact log-likelihood ratio of the signs of coordinates 0-3", 1, _secure_duchi_llr(self, k))
            return AuditPlan(x0, x1, sample, k, (comp,), None, pair, extra=extra)
        u0, u1 = x0 / self.clip_norm, x1 / self.clip_norm
        tau = self.clip_norm / self.calibration.m * self.calibration.threshold

        def indicator(y: np.ndarray) -> np.ndarray:
            z = y.astype(np.float64)
            return (z @ u0 >= tau).astype(np.float64) - (z @ u1 >= tau).astype(np.float64)

        comp = Component(f"likelihood-ratio class 1[<y,u0> >= {tau:.6g}] - 1[<y,u1> >= {tau:.6g}] (full dimension {k})",
                         1, indicator)
        return AuditPlan(x0, x1, sample, k, (comp,), None, pair, extra=extra)


@dataclass(frozen=True, kw_only=True)
class PrivUnitG(CapMechanism):
    """PrivUnitG (Asi, Feldman, Talwar ICML 2022, Algorithm "PrivUnitG"): Gaussian analogue of PrivUnit.

    - Pipeline: (public projection) -> clip to ||x|| <= C -> sphere map (``round``: unbiased for the ball) ->
      V ~ N(0, sigma^2 I) conditioned on <V, u> >= gamma with probability p, on <V, u> < gamma otherwise ->
      upload C V / m, m = E<V, u>. Only the coordinate along u is truncated: V = W u + (I - u u^T) Z.
    - Neighbouring relation: any two inputs (LDP, replacement). Sensitivity: none needed; the density ratio is
      p/q : (1-p)/(1-q) with q = Phi(-gamma/sigma).
    - Guarantee: exactly eps-LDP with p (1-q) / (q (1-p)) = e^eps. p = e^eps0/(1+e^eps0) is chosen per (eps, d)
      to minimise the closed-form MSE (see :func:`privunitg_calibration`); the output is invariant to sigma, so
      sigma = 1/sqrt(d) (the paper's) and gamma = t sigma are reported. MSE = Theta(d/eps) (4,861 / 334 / 72 at
      d = 768, eps = 1 / 4 / 10).
    - Published claim: correct. The reference implementation (apple/ml-projunit) samples the truncated normal by
      rejection and falls back to an untruncated Gaussian after too many rejections (probability ~2^-25), which
      breaks pure DP; here the truncated normal is sampled exactly (:func:`truncated_normal`).
    """

    name: ClassVar[str] = "privunitg"
    reference: ClassVar[str] = f"{AFT_PAPER}, Algorithm PrivUnitG (Section 3); PrivUnit of {BHOWMICK_PAPER}."

    sampler: str = "secure"  # the default wherever a mechanism is built (issue #35); "float" is simulation-grade

    def __post_init__(self) -> None:
        set_field(self, "sampler", check_sampler(self.sampler))
        super().__post_init__()

    def calibrate(self) -> CapCalibration:
        k = self.work_dim
        eps0 = _optimise(self.epsilon, lambda e0: privunitg_calibration(self.epsilon, k, e0).mse)
        if self.sampler == "secure":
            return secure_privunitg_calibration(self.epsilon, k, eps0)
        return privunitg_calibration(self.epsilon, k, eps0)

    @property
    def float_safe(self) -> bool:
        """True with sampler='secure' (exact grid construction, SECURE_PRIVUNITG); False with 'float'."""
        return self.sampler == "secure"

    def direction_second_moment(self) -> float | None:
        """Float sampler: E[W^2] of the truncated normal mixture (closed form, :func:`privunitg_second_moment`);
        the secure sampler's sign-vertex construction: None (the server estimates its noise)."""
        return privunitg_second_moment(self.calibration) if self.sampler == "float" else None

    def orthogonal_energy(self, ew2: float) -> float:
        """(I - u u^T) Z with Z ~ N(0, I_k): E||R||^2 = k - 1."""
        return self.work_dim - 1.0

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        """sampler='secure': sign-vertex rounding and exact cap sampling on the grid (SECURE_PRIVUNITG)."""
        if self.sampler != "secure":
            return super().randomise(c, rng)
        return self.secure_sign_vertex(c, rng, lambda bits: exact.LaplaceDraws(SECURE_SCALE, bits),
                                       "privunitg (secure: sign vertex, exact discrete cap sampling)")

    def assumptions(self) -> tuple[str, ...]:
        base = tuple(a for a in super().assumptions() if a != FLOAT_NOISE)
        if self.sampler == "secure":
            return (*base, SECURE_PRIVUNITG)
        return (*base, FLOAT_SAMPLER)

    def sample_directions(self, u: np.ndarray, rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
        cal = self.calibration
        dot = _orthogonal_noise(u, rng, out)
        w = truncated_normal(cal.threshold, np.less(rng.random(u.shape[0]), cal.p), rng)
        u *= ((w - dot) * scale).astype(np.float32)[:, None]
        out *= np.float32(scale)
        out += u  # scale * (W u + (Z - <Z,u> u))

    def calibration_values(self) -> dict[str, Any]:
        if self.sampler == "secure":
            return {**super().calibration_values(), "sampler": "secure", "base_dlap_scale": SECURE_SCALE,
                    "cap_threshold_grid_units": self.calibration.threshold}
        sigma = 1.0 / math.sqrt(self.work_dim)
        return {**super().calibration_values(), "sampler": "float", "sigma": sigma,
                "gamma": self.calibration.threshold * sigma, "threshold_over_sigma": self.calibration.threshold}

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The float cap law, or for ``sampler="secure"`` a stated normal approximation of its own law."""
        if self.sampler == "secure":
            return self._secure_log_likelihood(uploads, codes)
        return self.cap_log_likelihood(uploads, codes)

    def likelihood_note(self) -> str:
        return SECURE_PRIVUNITG_NOTE if self.sampler == "secure" else ""

    def _secure_log_likelihood(self, y: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Secure PrivUnitG: Y integer (DLap(64)^k conditioned by side), P(Y | x) = B(Y) E_s[ratio(<s, Y>)]. <s, Y> is a
        sum of independent +-|Y_i| terms (mean sum r_i Y_i, variance sum (1 - r_i^2) Y_i^2); its exact law needs a
        convolution over ~k * 64 integers per upload and code, so Pr[<s, Y> >= g] is taken from the normal law with a
        continuity correction (an approximation: `likelihood_note` names it)."""
        from scipy.special import ndtr

        yy, r = _secure_signs(self, y, c)
        g = float(self.calibration.threshold)
        mean = yy @ r.T  # (N, M)
        var = (yy * yy) @ (1.0 - r * r).T
        sd = np.sqrt(var)
        with np.errstate(divide="ignore", invalid="ignore"):
            cap = np.where(sd > 0, ndtr((mean - (g - 0.5)) / np.where(sd > 0, sd, 1.0)), (mean >= g).astype(float))
        return _cap_mixture(self, cap)

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """C*e_1 vs C*e_2; the likelihood-ratio class 1[y_0 >= tau] - 1[y_1 >= tau] (float) or coordinate 0 (secure),
        plus the low-bit distinguisher on coordinate 1 (`float32_product_image`)."""
        # Orthogonal pair x0 = C e_1, x1 = C e_2. The likelihood ratio depends only on the caps containing y:
        # eps * (1[y_0 >= tau] - 1[y_1 >= tau]) for the float mechanism (tau = C/m * threshold in output units).
        # Low-bit distinguisher (float sampler): from x0, y_1 = fl32(Z_1) * fl32(C/m) exactly (a float32 product;
        # nothing is added to coordinate 1), while from x1, y_1 = fl32(Z_1 s) + fl32((W - Z_1) s), which misses
        # the image of z -> fl32(z s) with positive probability when s is not a power of two. The secure variant
        # (exact construction on a grid, then deterministic float rounding) passes any statistic.
        k = self.work_dim
        x0, x1 = np.zeros(k), np.zeros(k)
        x0[0] = x1[1] = self.clip_norm
        scale = self.clip_norm / self.calibration.m
        pair = f"C*e_1 vs C*e_2 (orthogonal) in {k} dimensions (randomiser stage)"
        low = Component("low bits of coordinate 1 (a float32 product fl32(z * C/m), as from x0)", 1,
                        lambda y: float32_product_image(y[:, 1], scale).astype(np.float64))
        sample = lambda c, rng: self.randomise(c, rng).values
        if self.sampler == "secure":
            # the vertex rounding mixes the inputs; y_0's sign carries the signal of coordinate 0
            comp = Component("coordinate 0", 1, column(0))
            return AuditPlan(x0, x1, sample, k, (comp,), None, pair, extra=(low,))
        tau = scale * self.calibration.threshold

        def indicator(y: np.ndarray) -> np.ndarray:
            return (y[:, 0].astype(np.float64) >= tau).astype(np.float64) - (y[:, 1].astype(np.float64) >= tau)

        comp = Component(f"likelihood-ratio class 1[y_0 >= {tau:.6g}] - 1[y_1 >= {tau:.6g}] (full dimension {k})",
                         1, indicator)
        return AuditPlan(x0, x1, sample, k, (comp,), None, pair, extra=(low,))


@dataclass(frozen=True, kw_only=True)
class PrivUnit(CapMechanism):
    """PrivUnit (Bhowmick et al. 2018, Algorithm 1 "PrivUnit2") with exact calibration.

    - Pipeline: (public projection) -> clip -> sphere map -> V uniform on the cap {<V, u> >= gamma} of S^(k-1)
      with probability p, on its complement otherwise -> upload C V / m.
    - Neighbouring relation: any two inputs (LDP). Sensitivity: none needed (the density ratio is bounded by the
      cap construction). Guarantee: exactly eps-LDP with p (1-q)/(q (1-p)) = e^eps,
      q = Pr_uniform[<V, u> >= gamma] = I_{(1-gamma)/2}((k-1)/2, (k-1)/2); p = e^eps0/(1+e^eps0) with eps0
      optimised for the MSE (:func:`privunit_calibration`), gamma solved exactly from q.
    - Published claim: eps-LDP, correct; the paper picks gamma from sufficient inequalities (Lemma 4.1 bounds on
      the cap area), which waste part of the budget. Here the cap area is exact.
    """

    name: ClassVar[str] = "privunit"
    reference: ClassVar[str] = f"{BHOWMICK_PAPER}, Algorithm 1 (PrivUnit2)."

    def calibrate(self) -> CapCalibration:
        k = self.work_dim
        eps0 = _optimise(self.epsilon, lambda e0: privunit_calibration(self.epsilon, k, e0).mse)
        return privunit_calibration(self.epsilon, k, eps0)

    def sample_directions(self, u: np.ndarray, rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
        cal = self.calibration
        w = cap_inner_products(u.shape[1], cal.q, np.less(rng.random(u.shape[0]), cal.p), rng)
        dot = _orthogonal_noise(u, rng, out)
        out -= dot.astype(np.float32)[:, None] * u  # (I - u u^T) Z: uniform direction orthogonal to u
        norms = np.sqrt(np.einsum("ij,ij->i", out, out, dtype=np.float64))
        factor = np.divide(scale * np.sqrt(np.maximum(0.0, 1.0 - w * w)), norms, out=np.zeros_like(norms),
                           where=norms > 0)
        out *= factor.astype(np.float32)[:, None]
        u *= (scale * w).astype(np.float32)[:, None]
        out += u  # scale * (W u + sqrt(1 - W^2) v)

    def calibration_values(self) -> dict[str, Any]:
        """Includes ``low_bit_audit``: what the audit certifies against the float sampler (LOW_BIT_AUDIT)."""
        return {**super().calibration_values(), "gamma": self.calibration.threshold,
                "low_bit_audit": dict(LOW_BIT_AUDIT[self.name])}

    def direction_second_moment(self) -> float | None:
        """E[W^2] of the cap / complement mixture on the sphere (closed form, :func:`cap_second_moment`)."""
        return cap_second_moment(self.calibration, self.work_dim)


@dataclass(frozen=True, kw_only=True)
class Duchi(PrivUnit):
    """Duchi, Jordan, Wainwright (JASA 2018) L2-ball sampler: PrivUnit with the hemisphere as the cap.

    - Pipeline: clip to ||x|| <= C, round to +-x/||x|| w.p. (1 +- ||x||/C)/2, then V uniform on the hemisphere
      {<V, u> > 0} with probability e^eps/(1+e^eps), else on the other one; upload C B V with
      B = (e^eps+1)/(e^eps-1) sqrt(pi) Gamma((k+1)/2)/Gamma(k/2) (unbiased).
    - Neighbouring relation: any two inputs of the ball. Sensitivity: none needed (hemisphere densities differ by
      p/(1-p)). Guarantee: exactly eps-LDP (q = 1/2, p/(1-p) = e^eps).
    - Published claim: correct (nominal = worst case). MSE = Theta(d/eps^2) for small eps.
    - ``sampler="secure"`` (SECURE_DUCHI; float_safe): the same paper's construction on the cube, exactly sampled
      on the finite set {-1, +1}^k after a sign-vertex rounding of the input.
      Neighbouring relation: any two inputs of the ball (LDP, replacement). Guarantee: for a vertex s the output
      Y = diag(s) X has pmf P(y | s) = 2^-k (p/q if <y, s> >= 1 else (1-p)/(1-q)) (diag(s) is a bijection of
      the cube and maps {sum X >= 1} onto {<Y, s> >= 1}); q is the same for every s (the base law is uniform), so
      for any s, s' the ratio P(y | s) / P(y | s') is in {e^eps', 1, e^-eps'}, eps' = ln(p (1-q) / (q (1-p))) <=
      epsilon for the realised p (a multiple of 2^-53, drawn with 53 secure bits) and q (exact integer binomial
      tail). The input enters only through the law of s (a mixture), and a mixture of laws that are pairwise
      within e^eps' keeps eps' (P(y|x) <= max_s P(y|s) <= e^eps' min_s P(y|s) <= e^eps' P(y|x')). The float32
      upload fl32(+-C/m) is a deterministic function of Y (post-processing). X is exact: uniform signs from secure
      bits, conditioned by rejection by side (:func:`sample_secure_caps`). Reference: Duchi, Jordan, Wainwright
      (2018), L-infinity sampling strategy, applied after their input rounding to a vertex.
    """

    name: ClassVar[str] = "duchi"
    reference: ClassVar[str] = DUCHI_PAPER

    sampler: str = "secure"  # the default wherever a mechanism is built (issue #35); "float" is simulation-grade

    def __post_init__(self) -> None:
        set_field(self, "sampler", check_sampler(self.sampler))
        super().__post_init__()

    def calibrate(self) -> CapCalibration:
        if self.sampler == "secure":
            return secure_duchi_calibration(self.epsilon, self.work_dim)
        return duchi_calibration(self.epsilon, self.work_dim)

    @property
    def float_safe(self) -> bool:
        """True with sampler='secure' (exact sign-vector construction, SECURE_DUCHI); False with 'float'."""
        return self.sampler == "secure"

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        """sampler='secure': sign-vertex rounding and exact half-cube sampling (SECURE_DUCHI)."""
        if self.sampler != "secure":
            return super().randomise(c, rng)
        return self.secure_sign_vertex(c, rng, SignDraws, "duchi (secure: sign vertex, exact half-cube sampling)")

    def assumptions(self) -> tuple[str, ...]:
        base = tuple(a for a in super().assumptions() if a != FLOAT_NOISE)
        return (*base, SECURE_DUCHI if self.sampler == "secure" else FLOAT_SAMPLER)

    def calibration_values(self) -> dict[str, Any]:
        if self.sampler == "secure":
            return {**CapMechanism.calibration_values(self), "sampler": "secure", "base_law": "uniform on {-1,+1}^k",
                    "cap_threshold_sum": self.calibration.threshold}
        return {**super().calibration_values(), "sampler": "float"}

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The float cap law, or for ``sampler="secure"`` the exact law of the sign-vertex construction."""
        if self.sampler == "secure":
            return self._secure_log_likelihood(uploads, codes)
        return self.cap_log_likelihood(uploads, codes)

    def likelihood_note(self) -> str:
        return ""

    def _secure_log_likelihood(self, y: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Secure Duchi: Y in {-1, +1}^k, P(Y | x) = 2^-k E_s[p/q 1{<s, Y> >= 1} + (1-p)/(1-q) 1{<s, Y> < 1}]. The
        terms s_i Y_i are independent +-1 with Pr[+1] = (1 + r_i Y_i) / 2, so <s, Y> = 2 J - k with J Poisson-binomial:
        its law by the exact recursion over the k coordinates (O(k^2) per upload and code); exact but for the sampler's
        coins, which realise (1 + r_i) / 2 within 2^-32."""
        yy, r = _secure_signs(self, y, c)
        n, k = yy.shape
        j0 = (int(self.calibration.threshold) + k + 1) // 2  # 2J - k >= g
        out = np.empty((n, len(r)))
        step = max(1, (CHUNK_LIKELIHOOD // 8) // max(1, len(r) * (k + 1)))  # (b, M, k + 1) float64 twice
        for s in range(0, n, step):
            pi = (1.0 + yy[s:s + step, None, :] * r[None, :, :]) / 2.0  # (b, M, k)
            pmf = np.zeros(pi.shape[:2] + (k + 1,))
            pmf[..., 0] = 1.0
            for i in range(k):
                p_i = pi[..., i:i + 1]
                pmf[..., 1:i + 2] = pmf[..., 1:i + 2] * (1.0 - p_i) + pmf[..., 0:i + 1] * p_i
                pmf[..., 0:1] *= 1.0 - p_i
            out[s:s + step] = _cap_mixture(self, pmf[..., j0:].sum(axis=2))
        return out
