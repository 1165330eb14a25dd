"""No privacy: the identity, a real mechanism with the common interface."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fl_privtext.privacy import normalise
from fl_privtext.privacy.mechanisms.base import Mechanism, check_dim, set_field
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


# ------------------------------------------------------------------------------------------------- bit vectors
