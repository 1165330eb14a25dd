"""PrivUnitG (Asi, Feldman, Talwar 2022): the cap mechanism with a Gaussian base law (:mod:`.sphere` has the shared
structure), and its secure sampler ``sampler="secure"`` (SECURE_PRIVUNITG):

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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import exact
from fl_privtext.privacy.mechanisms.audit_plan import (
    AuditPlan,
    Component,
    column,
    float32_product_image,
)
from fl_privtext.privacy.mechanisms.base import (
    FLOAT_SAMPLER,
    check_sampler,
    set_field,
)
from fl_privtext.privacy.mechanisms.sphere import (
    AFT_PAPER,
    BHOWMICK_PAPER,
    FLOAT_NOISE,
    SECURE_SCALE,
    TWO53,
    CapCalibration,
    CapMechanism,
    cap_mixture,
    optimise_eps0,
    orthogonal_noise,
    secure_signs,
    split_q,
    truncated_normal,
)
from fl_privtext.privacy.stage import Stage


def privunitg_calibration(epsilon: float, dim: int, eps0: float) -> CapCalibration:
    """Closed form of PrivUnitG for p = e^eps0/(1+e^eps0) (AFT'22), in units sigma = 1 (threshold t = gamma/sigma).

    q = Phi(-t) with (1-q)/q = e^(eps-eps0); m = E[W] = phi(t) (p/q - (1-p)/(1-q)) for W the truncated N(0,1)
    mixture; E[W^2] = p (1 + t phi(t)/q) + (1-p) (1 - t phi(t)/(1-q)); MSE = (dim - 1 + E[W^2]) / m^2 - 1.
    """
    from scipy import special

    p, q = split_q(epsilon, eps0)
    t = float(-special.ndtri(q))
    phi = math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    m = phi * (p / q - (1.0 - p) / (1.0 - q))
    ew2 = p * (1.0 + t * phi / q) + (1.0 - p) * (1.0 - t * phi / (1.0 - q))
    return CapCalibration(p, q, t, m, (dim - 1.0 + ew2) / (m * m) - 1.0)


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
        eps0 = optimise_eps0(eps, lambda e0: privunitg_calibration(eps, dim, e0).mse)
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


def privunitg_second_moment(cal: CapCalibration) -> float:
    """E[W^2] of PrivUnitG's truncated N(0, 1) mixture (threshold t, cap side with probability p; closed form):
    E[W^2 | W >= t] = 1 + t phi(t) / q, E[W^2 | W < t] = 1 - t phi(t) / (1 - q), q = Phi(-t)."""
    t = cal.threshold
    phi = math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    return cal.p * (1.0 + t * phi / cal.q) + (1.0 - cal.p) * (1.0 - t * phi / (1.0 - cal.q))


SECURE_PRIVUNITG_NOTE = ("normal approximation (continuity-corrected) of Pr[<s, Y> >= g] over the sign-vertex "
                         "rounding s; the rest (the base law's sign invariance, the cap coin) is exact")


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
        eps0 = optimise_eps0(self.epsilon, lambda e0: privunitg_calibration(self.epsilon, k, e0).mse)
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
        dot = orthogonal_noise(u, rng, out)
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

        yy, r = secure_signs(self, y, c)
        g = float(self.calibration.threshold)
        mean = yy @ r.T  # (N, M)
        var = (yy * yy) @ (1.0 - r * r).T
        sd = np.sqrt(var)
        with np.errstate(divide="ignore", invalid="ignore"):
            cap = np.where(sd > 0, ndtr((mean - (g - 0.5)) / np.where(sd > 0, sd, 1.0)), (mean >= g).astype(float))
        return cap_mixture(self, cap)

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
