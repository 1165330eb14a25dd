"""PrivUnit (Bhowmick et al. 2018) and Duchi et al.'s L2 sampler (2018): the cap mechanisms with a uniform base law
on the sphere (:mod:`.sphere` has the shared structure). Duchi's ``sampler="secure"`` (SECURE_DUCHI) is the
construction of secure PrivUnitG (:mod:`.privunitg`) with the base law uniform on {-1, +1}^k and the half-cube
{sum X >= 1} as the cap (its proof is in :class:`Duchi`). PrivUnit has no secure variant (float_safe is false).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import exact
from fl_privtext.privacy.mechanisms.audit_plan import (
    SHARED_BLOCK,
    AuditPlan,
    Component,
    column,
)
from fl_privtext.privacy.mechanisms.base import (
    FLOAT_SAMPLER,
    check_sampler,
    set_field,
)
from fl_privtext.privacy.mechanisms.likelihood import CHUNK as CHUNK_LIKELIHOOD
from fl_privtext.privacy.mechanisms.sphere import (
    BHOWMICK_PAPER,
    DUCHI_PAPER,
    FLOAT_NOISE,
    LOW_BIT_AUDIT,
    TWO53,
    CapCalibration,
    CapMechanism,
    cap_inner_products,
    cap_mixture,
    optimise_eps0,
    orthogonal_noise,
    secure_signs,
    split_q,
)
from fl_privtext.privacy.stage import Stage


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

    p, q = split_q(epsilon, eps0)
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
        eps0 = optimise_eps0(self.epsilon, lambda e0: privunit_calibration(self.epsilon, k, e0).mse)
        return privunit_calibration(self.epsilon, k, eps0)

    def sample_directions(self, u: np.ndarray, rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
        cal = self.calibration
        w = cap_inner_products(u.shape[1], cal.q, np.less(rng.random(u.shape[0]), cal.p), rng)
        dot = orthogonal_noise(u, rng, out)
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

    def direction_second_moment(self) -> float | None:
        """Float: the hemisphere cap's closed form. Secure: None (its output is a cube vertex, not a direction on the
        sphere, and its threshold is a sum of signs: the sphere's cap law does not describe it; the noise law falls
        back to Monte Carlo of the mechanism itself, as the secure PrivUnitG's does)."""
        return None if self.sampler == "secure" else super().direction_second_moment()

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
        yy, r = secure_signs(self, y, c)
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
            out[s:s + step] = cap_mixture(self, pmf[..., j0:].sum(axis=2))
        return out

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """Float: the cap family's plan. Secure: the law of the output depends on the inputs only through the sign
        vertex; coordinate 0 is sufficient for the antipodal pair (k < 4), the exact log-likelihood ratio of the
        block's signs for the block pair."""
        if self.sampler != "secure":
            return super().audit_plan(default_dim)
        k = self.work_dim
        x0, x1, pair, extra = self.audit_pair()
        comp = Component("coordinate 0", 1, column(0)) if k < SHARED_BLOCK else \
            Component("exact log-likelihood ratio of the signs of coordinates 0-3", 1, _secure_duchi_llr(self, k))
        return AuditPlan(x0, x1, self.audit_sample, k, (comp,), None, pair, extra=extra)
