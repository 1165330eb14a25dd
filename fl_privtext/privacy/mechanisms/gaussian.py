"""The L2-ball Gaussian mechanism (analytic calibration), float or exact discrete noise."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import normalise
from fl_privtext.privacy.calibration import analytic_gaussian_sigma, classic_gaussian_sigma, gaussian_delta
from fl_privtext.privacy.mechanisms import samplers
from fl_privtext.privacy.mechanisms.audit_plan import AuditPlan, Component, column, low_bit_component
from fl_privtext.privacy.mechanisms.base import (
    FLOAT32_SLACK,
    FLOAT_SAMPLER,
    SECURE_SAMPLER,
    Mechanism,
    NoiseMoments,
    check_dim,
    check_open_unit,
    check_positive,
    check_sampler,
    set_field,
)
from fl_privtext.privacy.mechanisms.likelihood import sq_dist
from fl_privtext.privacy.stage import Stage


# ---------------------------------------------------------------------------------------------------- Gaussian
@dataclass(frozen=True, kw_only=True)
class Gaussian(Mechanism):
    """L2-ball Gaussian: clip to ||x||_2 <= C, add N(0, sigma^2) i.i.d., sigma from the analytic Gaussian mechanism.

    Neighbouring relation: any two inputs. Sensitivity: Delta_2 = 2C. Guarantee: (eps, delta)-LDP with the
    smallest sigma meeting Balle & Wang (2018) Theorem 8 exactly (bisection); valid for every eps > 0, unlike the
    classic sigma = Delta_2 sqrt(2 ln(1.25/delta))/eps (eps <= 1 only), which it never exceeds for eps <= 1.
    """

    name: ClassVar[str] = "gaussian"
    reference: ClassVar[str] = ("Balle & Wang, Improving the Gaussian Mechanism for Differential Privacy, ICML 2018, "
                                "Theorem 8 / Algorithm 1.")

    epsilon: float
    delta: float
    clip_norm: float = 1.0
    sampler: str = "secure"  # the default wherever a mechanism is built (issue #35); "float" is simulation-grade
    _noise_std: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 1, optional=True))
        set_field(self, "epsilon", check_positive("epsilon", self.epsilon))
        set_field(self, "delta", check_open_unit("delta", self.delta))
        set_field(self, "clip_norm", check_positive("clip_norm", self.clip_norm))
        set_field(self, "sampler", check_sampler(self.sampler))
        sigma = analytic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity)
        if not (sigma > 0 and math.isfinite(sigma)) or not 1e-30 < sigma < 1e30:
            raise ValueError(f"gaussian: epsilon={self.epsilon:g}, delta={self.delta:g} give sigma={sigma:.3g}, "
                             "outside what float32 uploads can carry; choose a moderate epsilon.")
        if self.sampler == "secure":
            if self.dim is None:
                raise ValueError("gaussian: sampler='secure' needs dim (the default sampler; OpenDP's privacy map "
                                 "depends on dim): give dim, or sampler='float' (simulation-grade).")
            sigma = samplers.calibrate_gaussian(self.epsilon, self.delta, self.l2_sensitivity * FLOAT32_SLACK,
                                              int(self.dim), sigma)
        set_field(self, "_noise_std", sigma)

    @property
    def l2_sensitivity(self) -> float:
        """Delta_2 = 2C."""
        return 2.0 * self.clip_norm

    @property
    def noise_std(self) -> float:
        """sigma of each coordinate's noise."""
        return self._noise_std

    def noise_moments(self) -> NoiseMoments | None:
        """Float sampler: i.i.d. N(0, sigma^2) per coordinate, independent of x (closed form). The secure sampler's
        discrete Gaussian on its grid: None (the server estimates it)."""
        return NoiseMoments("additive", variance=self.noise_std ** 2) if self.sampler == "float" else None

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.l2_clip(x, self.clip_norm)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        if self.sampler == "secure":
            noisy32 = samplers.secure_gaussian(c, self.noise_std, rng, np.float32)  # float64 result, rounded
            return Stage(noisy32, {"method": "discrete-gaussian, " + samplers.SECURE_METHOD,
                                                      "noise_std": self.noise_std})
        noisy = samplers.gaussian_noise(c.shape, self.noise_std, rng)
        noisy += c
        return Stage(noisy, {"method": "gaussian", "noise_std": self.noise_std})

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        if self.sampler == "secure":
            return samplers.gaussian_epsilon(self.noise_std, self.l2_sensitivity * FLOAT32_SLACK, self.delta,
                                           int(self.dim or 1))
        return self.epsilon  # at report_delta, by construction of sigma (for exact real-valued noise)

    @property
    def float_safe(self) -> bool:
        return self.sampler == "secure"

    @property
    def report_delta(self) -> float:
        return self.delta

    def calibration_values(self) -> dict[str, Any]:
        return {"noise_std": self.noise_std, "l2_sensitivity": self.l2_sensitivity, "sampler": self.sampler,
                "analytic_noise_std": analytic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity),
                "delta_at_noise_std": gaussian_delta(self.noise_std, self.epsilon, self.l2_sensitivity),
                "classic_noise_std": classic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity),
                "classic_valid": self.epsilon <= 1.0}

    def assumptions(self) -> tuple[str, ...]:
        return super().assumptions() + (SECURE_SAMPLER if self.sampler == "secure" else FLOAT_SAMPLER,
                                        "Approximate DP: delta adds over releases (basic composition).")

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """-||y - c||^2 / 2 sigma^2."""
        s = float(self.noise_std)
        return -sq_dist(uploads, codes) / (2 * s * s)

    def likelihood_note(self) -> str:
        return ""

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """C*e_1 vs -C*e_1, coordinate 0 (with delta), plus the low-bit distinguisher."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0 = np.zeros(k)
        x0[0] = self.clip_norm
        return AuditPlan(x0, -x0, self.privatize, k, (Component("coordinate 0", 1, column(0)),), None,
                         "C*e_1 vs -C*e_1 (differ in one coordinate)", delta=self.delta,
                         extra=(low_bit_component(-x0),))
