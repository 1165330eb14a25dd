"""No privacy: the identity, a real mechanism with the common interface."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fl_privtext.privacy import normalise
from fl_privtext.privacy.mechanisms.audit_plan import AuditPlan, Component, column
from fl_privtext.privacy.mechanisms.base import Mechanism, check_dim, set_field
from fl_privtext.privacy.mechanisms.likelihood import sq_dist
from fl_privtext.privacy.mechanisms.noise_law import NoiseLaw
from fl_privtext.privacy.stage import Stage


# ------------------------------------------------------------------------------------------------------- none
@dataclass(frozen=True, kw_only=True)
class NoPrivacy(Mechanism):
    """Identity: uploads the raw float32 representation.

    Privacy contract: none. Neighbouring relation: any; sensitivity: unbounded; epsilon = inf (nominal and worst
    case). A real mechanism with the common interface, so "no privacy" is never a special case elsewhere.
    """

    name: ClassVar[str] = "none"
    reference: ClassVar[str] = "No randomisation (non-private baseline)."

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, 1, optional=True))

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.identity(x)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        return Stage(np.array(c, dtype=np.float32, copy=True), {"method": "identity"})

    @property
    def claimed_epsilon(self) -> float:
        return math.inf

    @property
    def epsilon_worst_case(self) -> float:
        return math.inf

    def assumptions(self) -> tuple[str, ...]:
        return ("No privacy: the server sees the representation itself.",)

    def noise_law(self, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator, *,
                  input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
        """No noise."""
        return NoiseLaw(np.zeros_like(np.asarray(upload_mean, np.float64)), "none")

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The upload IS the code: a point mass, scored by distance so that near-ties still rank (float32
        rounding)."""
        return -1e6 * sq_dist(uploads, codes)

    def likelihood_note(self) -> str:
        return ""

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """0 vs e_1, coordinate 0."""
        k = int(self.dim) if self.dim is not None else default_dim
        x0 = np.zeros(k)
        x1 = x0.copy()
        x1[0] = 1.0
        return AuditPlan(x0, x1, self.privatize, k, (Component("coordinate 0", 1, column(0)),), None, "0 vs e_1")


# ------------------------------------------------------------------------------------------------- bit vectors
