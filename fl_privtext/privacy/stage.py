"""What one pipeline stage (normalise, encode, randomise) produced and what it did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Stage:
    """Output of one stage plus a small JSON-safe record of what it did.

    ``info`` always has ``"method"`` (e.g. ``"z-score"``) and stage-specific counts or parameters, e.g.
    ``{"method": "fixed-point", "saturated": 3, "values": 5000}`` or ``{"method": "laplace", "noise_scale": 2.0}``.
    """

    values: np.ndarray
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "method" not in self.info:
            raise ValueError("Stage.info must name the stage's 'method'.")
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))
