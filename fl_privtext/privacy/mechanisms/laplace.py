"""Laplace mechanisms (DPNR, DPNR on the code, L1 ball, box), float or exact discrete noise."""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import normalise
from fl_privtext.privacy.mechanisms import samplers
from fl_privtext.privacy.mechanisms.audit_plan import (
    AuditPlan,
    Component,
    column,
    laplace_llr,
    low_bit_component,
)
from fl_privtext.privacy.mechanisms.base import (
    DPNR_PAPER,
    FLOAT32_SLACK,
    FLOAT_SAMPLER,
    SECURE_SAMPLER,
    Mechanism,
    NoiseMoments,
    check_dim,
    check_positive,
    check_real,
    check_sampler,
    set_field,
)
from fl_privtext.privacy.mechanisms.likelihood import pairwise_sum
from fl_privtext.privacy.stage import Stage


# ----------------------------------------------------------------------------------------------------- Laplace
def _min_max_pair(k: int) -> tuple[np.ndarray, np.ndarray]:
    # (0,1,...,1) vs (1,0,...,0): opposite min-max vectors, the DPNR mechanisms' worst-case pair
    x0 = np.ones(k)
    x0[0] = 0.0
    return x0, 1.0 - x0


MIN_MAX_PAIR = "(0,1,...,1) vs (1,0,...,0) (opposite min-max vectors)"


@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism(Mechanism):
    """Shared part: normalise to a domain of L1 diameter ``l1_sensitivity``, add Laplace(noise_scale) per coordinate.

    Worst case = l1_sensitivity / noise_scale (Dwork & Roth 2014, Theorem 3.6).
    """

    epsilon: float
    sampler: str = "secure"  # the default wherever a mechanism is built (issue #35); "float" is simulation-grade

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "epsilon", check_positive("epsilon", self.epsilon))
        set_field(self, "sampler", check_sampler(self.sampler))

    def _check_noise(self) -> None:
        # called by subclasses once their parameters are set
        if not self.noise_scale < 1e30:
            raise ValueError(f"{self.name}: the Laplace scale {self.noise_scale:.3g} exceeds what float32 uploads can "
                             f"carry (epsilon={self.epsilon:g} is too small); use epsilon >= "
                             f"{self.epsilon * self.noise_scale / 1e30:.3g}.")
        if self.sampler == "secure" and self.dim is None:
            raise ValueError(f"{self.name}: sampler='secure' needs dim (the default sampler; OpenDP's privacy map "
                             "depends on dim): give dim, or sampler='float' (simulation-grade).")

    @property
    @abstractmethod
    def noise_scale(self) -> float:
        """Laplace scale b of each coordinate's noise."""

    @property
    @abstractmethod
    def l1_sensitivity(self) -> float:
        """max ||u - v||_1 over two normalised vectors."""

    def noise_moments(self) -> NoiseMoments | None:
        """Float sampler: i.i.d. Laplace(b) per coordinate, variance 2 b^2, independent of x (closed form). The
        secure sampler's discrete Laplace on its grid: None (the server estimates it)."""
        return NoiseMoments("additive", variance=2.0 * self.noise_scale ** 2) if self.sampler == "float" else None

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        if self.sampler == "secure":
            noisy32 = samplers.secure_laplace(c, self.noise_scale, rng, np.float32)  # float64 result, rounded
            return Stage(noisy32, {"method": "discrete-laplace, " + samplers.SECURE_METHOD,
                                                      "noise_scale": self.noise_scale})
        noisy = samplers.laplace_noise(c.shape, self.noise_scale, rng)
        noisy += c
        return Stage(noisy, {"method": "laplace", "noise_scale": self.noise_scale})

    def _calibrated(self, l1_sensitivity: float) -> float:
        """Scale for ``epsilon`` at ``l1_sensitivity``; the secure sampler's scale keeps its true epsilon (float32
        input rounding and grid rounding included) at or under the nominal one."""
        if self.sampler != "secure":
            return l1_sensitivity / self.epsilon
        return samplers.secure_laplace_scale(self.epsilon, l1_sensitivity * FLOAT32_SLACK, int(self.dim or 1))

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        if self.sampler == "secure" and math.isfinite(self.l1_sensitivity):
            return samplers.laplace_epsilon(self.noise_scale, self.l1_sensitivity * FLOAT32_SLACK, int(self.dim or 1))
        return self.l1_sensitivity / self.noise_scale

    @property
    def float_safe(self) -> bool:
        return self.sampler == "secure"

    def calibration_values(self) -> dict[str, Any]:
        return {"noise_scale": self.noise_scale, "l1_sensitivity": self.l1_sensitivity, "sampler": self.sampler}

    def assumptions(self) -> tuple[str, ...]:
        return super().assumptions() + (SECURE_SAMPLER if self.sampler == "secure" else FLOAT_SAMPLER,)

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """sum |y - c| / b (i.i.d. Laplace noise of scale b)."""
        return -pairwise_sum(uploads, codes, np.abs) / float(self.noise_scale)

    def likelihood_note(self) -> str:
        return ""


@dataclass(frozen=True, kw_only=True)
class LaplaceDPNR(LaplaceMechanism):
    """DPNR as published (DPNR Algorithm 2, Theorem 1): per-vector min-max to [0,1]^k, then Lap(1/eps) i.i.d.

    - Neighbouring relation: any two inputs (LDP of the representation).
    - Published claim: Delta_f = 1 ("bounding the sensitivity of each element with 1"), hence eps-DP.
    - True sensitivity: the L1 diameter of min-max vectors is k (u = (0,1,...,1), v = (1,0,...,0)), so the true
      epsilon is k*eps (768*eps for BERT-base). Word dropout (mu) amplifies only under word-substitution adjacency.
    """

    name: ClassVar[str] = "laplace-dpnr"
    reference: ClassVar[str] = f"{DPNR_PAPER}, Algorithm 2, Theorem 1 (b = Delta_f/eps with Delta_f = 1)."
    min_dim: ClassVar[int] = 2

    dim: int = field()  # required (an explicit Field, so the base default None is not inherited)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 2, optional=False))
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.minmax(x)

    @property
    def noise_scale(self) -> float:
        return 1.0 / self.epsilon

    @property
    def l1_sensitivity(self) -> float:
        return float(self.dim)

    def claim_reason(self) -> str:
        return ("DPNR Theorem 1 uses Delta_f = 1 per element, but the L1 sensitivity of min-max vectors in [0,1]^k "
                f"is k = {self.dim} (u = (0,1,...,1) vs v = (1,0,...,0)), so eps_true = k*eps.")

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """(0,1,...,1) vs (1,0,...,0); coordinate 0 (x1) and coordinate 1 (x k-1); whole-vector LLR."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0, x1 = _min_max_pair(k)
        comps = (Component("coordinate 0", 1, column(0)), Component("coordinate 1", k - 1, column(1)))
        whole = Component("whole vector log-likelihood ratio", 1, laplace_llr(x0, x1, self.noise_scale))
        return AuditPlan(x0, x1, self.privatize, k, comps, whole, MIN_MAX_PAIR, extra=(low_bit_component(x1),))


@dataclass(frozen=True, kw_only=True)
class LaplaceDPNRCode(LaplaceMechanism):
    """What DPNR's released code does: min-max, then ONE scalar Lap(1/eps) draw per example added to every coordinate.

    AUDIT TARGET, not a privacy mechanism. Neighbouring relation: any two inputs. Sensitivity: irrelevant, the
    shared draw cancels in every difference of coordinates. Published claim: eps-DP. True epsilon: infinite, since
    y - min(y) = minmax(x) recovers the normalised input exactly.
    """

    name: ClassVar[str] = "laplace-dpnr-code"
    reference: ClassVar[str] = f"{DPNR_PAPER}: the authors' public code (one noise draw per example)."
    min_dim: ClassVar[int] = 2

    sampler: str = "float"  # its only sampler: exact noise would not repair the shared draw

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 2, optional=True))
        if self.sampler == "secure":  # an audit target: exact noise does not repair it
            raise ValueError("laplace-dpnr-code reproduces a bug (epsilon = inf); it offers only sampler='float'.")
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.minmax(x)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        shared = samplers.laplace_noise((c.shape[0], 1), self.noise_scale, rng)  # (N, 1): the same draw on every coordinate
        return Stage(c + shared, {"method": "laplace-shared-scalar", "noise_scale": self.noise_scale})

    def noise_moments(self) -> NoiseMoments | None:
        """One Laplace(b) scalar added to every coordinate: covariance 2 b^2 1 1^T (closed form)."""
        return NoiseMoments("additive", shared=2.0 * self.noise_scale ** 2)

    @property
    def float_safe(self) -> bool:
        return False

    @property
    def noise_scale(self) -> float:
        return 1.0 / self.epsilon

    @property
    def l1_sensitivity(self) -> float:
        return math.inf if self.dim is None else float(self.dim)

    @property
    def epsilon_worst_case(self) -> float:
        return math.inf

    def claim_reason(self) -> str:
        return ("The released code adds one scalar noise value to all coordinates, so y - min(y) recovers the "
                "normalised input exactly: epsilon = inf.")

    def assumptions(self) -> tuple[str, ...]:
        return super().assumptions() + ("Audit target only: reproduces a bug; never use it to protect data.",)

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """One scalar draw s on every coordinate: y - c must be constant across coordinates; s = mean(y - c)."""
        b = float(self.noise_scale)
        out = np.empty((len(uploads), len(codes)))
        for j in range(len(codes)):
            r = uploads - codes[j]  # (N, D)
            s = r.mean(axis=1)
            resid = ((r - s[:, None]) ** 2).sum(axis=1)
            out[:, j] = -np.abs(s) / b - 1e6 * resid  # residual is exactly 0 for the true input (up to float32)
        return out

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """The min-max pair; statistic y[1] - y[0], which equals the input's difference exactly."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0, x1 = _min_max_pair(k)
        whole = Component("y[1] - y[0] (the shared noise cancels)", 1, lambda y: y[:, 1] - y[:, 0])
        return AuditPlan(x0, x1, self.privatize, k, (), whole, MIN_MAX_PAIR)


@dataclass(frozen=True, kw_only=True)
class LaplaceL1(LaplaceMechanism):
    """L1-normalised Laplace (Maheshwari et al. 2022; CAPE Algorithm 1): x * C/||x||_1, then Lap(2C/eps) i.i.d.

    Neighbouring relation: any two inputs. Sensitivity: ||u - v||_1 <= 2C for vectors of L1 norm C. Guarantee:
    exactly eps-LDP (nominal = worst case). With C = 1 this is the correction of DPNR adopted by CAPE.
    """

    name: ClassVar[str] = "laplace-l1"
    reference: ClassVar[str] = ("Maheshwari, Denis, Keller, Bellet. Fair NLP Models with Differentially Private Text "
                                "Encoders, 2022 (corrected DPNR); Plant, Giuffrida, Gkatzia. CAPE, 2021, Algorithm 1; "
                                "Laplace mechanism (Dwork & Roth 2014, Thm 3.6).")

    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 1, optional=True))
        set_field(self, "clip_norm", check_positive("clip_norm", self.clip_norm))
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.l1_normalise(x, self.clip_norm)

    @property
    def noise_scale(self) -> float:
        return self._calibrated(2.0 * self.clip_norm)

    @property
    def l1_sensitivity(self) -> float:
        return 2.0 * self.clip_norm

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """C*e_1 vs -C*e_1, coordinate 0."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0 = np.zeros(k)
        x0[0] = self.clip_norm
        x1 = -x0
        comps = (Component("coordinate 0", 1, column(0)),)
        return AuditPlan(x0, x1, self.privatize, k, comps, None,
                         "C*e_1 vs -C*e_1 (differ in one coordinate, so this is also the whole-vector audit)",
                         extra=(low_bit_component(x1),))


@dataclass(frozen=True, kw_only=True)
class LaplaceBox(LaplaceMechanism):
    """Box Laplace (corrected DPNR): clip every coordinate to [low, high], then Lap(k (high-low)/eps) i.i.d.

    Neighbouring relation: any two inputs. Sensitivity: the L1 diameter of [a,b]^k is k(b-a). Guarantee: exactly
    eps-LDP. With [0, 1] this is DPNR with the sensitivity it actually has.
    """

    name: ClassVar[str] = "laplace-box"
    reference: ClassVar[str] = f"Laplace mechanism (Dwork & Roth 2014, Thm 3.6) on [a,b]^k; corrects {DPNR_PAPER}."

    dim: int = field()  # required (an explicit Field, so the base default None is not inherited)
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 1, optional=False))
        set_field(self, "low", check_real("low", self.low))
        set_field(self, "high", check_real("high", self.high))
        if not self.low < self.high:
            raise ValueError(f"The box needs low < high, got low={self.low}, high={self.high}.")
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.box_clip(x, self.low, self.high)

    @property
    def noise_scale(self) -> float:
        return self._calibrated(self.l1_sensitivity)

    @property
    def l1_sensitivity(self) -> float:
        return float(self.dim) * (self.high - self.low)

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """low*1 vs high*1; coordinate 0 (x k); whole-vector LLR."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0, x1 = np.full(k, self.low), np.full(k, self.high)
        comps = (Component("coordinate 0", k, column(0)),)
        return AuditPlan(x0, x1, self.privatize, k, comps,
                         Component("whole vector log-likelihood ratio", 1, laplace_llr(x0, x1, self.noise_scale)),
                         "low*1 vs high*1 (opposite corners of the box)", extra=(low_bit_component(x1),))
