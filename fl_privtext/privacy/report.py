"""PrivacyReport: what a mechanism claims and what it actually guarantees."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np


def json_number(value: float) -> float | str:
    """A JSON-safe number: floats pass through, +/-inf become "inf"/"-inf", NaN becomes "nan"."""
    v = float(value)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    return v


def json_safe(value: Any) -> Any:
    """Recursively convert numpy scalars/arrays, tuples, mappings and non-finite floats to JSON-safe values."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return json_number(float(value))
    return value


@dataclass(frozen=True, kw_only=True)
class PrivacyReport:
    """Privacy accounting record of one release by one user.

    - ``epsilon_nominal``: what the published analysis states (after word-dropout amplification when mu > 0).
    - ``epsilon_worst_case``: the true epsilon under replacement adjacency (any two inputs of the user), without
      amplification; ``math.inf`` when unbounded (serialised as "inf").
    - ``calibration``: the probabilities or noise scale actually used (flattened into ``to_json()``).
    - ``published_claim_note``: set where the published claim is wrong, with the true value.
    - ``word_dropout``: the Theorem 2 (DPNR) amplification record when mu > 0, else None.
    - ``float_safe``: True when what is actually sampled meets ``epsilon_worst_case`` (exact discrete noise, bit
      flips from 53-bit uniforms, no noise at all); False for continuous floating-point noise, whose low bits leak
      (Mironov 2012): there ``epsilon_worst_case`` holds for ideal real-valued noise only.
    """

    mechanism: str
    epsilon_nominal: float
    epsilon_worst_case: float
    delta: float = 0.0
    output_dim: int | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    calibration: Mapping[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    published_claim_note: str | None = None
    reference: str = ""
    word_dropout: Mapping[str, Any] | None = None
    float_safe: bool = True

    _CORE_KEYS = ("mechanism", "epsilon_nominal", "epsilon_worst_case", "delta", "output_dim", "parameters",
                  "assumptions", "published_claim_note", "reference", "word_dropout", "float_safe")

    def __post_init__(self) -> None:
        if not self.epsilon_nominal >= 0 or not self.epsilon_worst_case >= 0:
            raise ValueError("Epsilons in a PrivacyReport must be >= 0 (math.inf when unbounded).")
        if not 0 <= self.delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {self.delta}.")
        clash = set(self.calibration) & set(self._CORE_KEYS)
        if clash:
            raise ValueError(f"Calibration keys clash with report fields: {sorted(clash)}.")
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "calibration", MappingProxyType(dict(self.calibration)))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))
        if self.word_dropout is not None:
            object.__setattr__(self, "word_dropout", MappingProxyType(dict(self.word_dropout)))

    @property
    def bounded(self) -> bool:
        """True when the worst-case epsilon is finite."""
        return math.isfinite(self.epsilon_worst_case)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict: core fields, then the calibration keys (probabilities / noise scale) at top level."""
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon_nominal": json_number(self.epsilon_nominal),
            "epsilon_worst_case": json_number(self.epsilon_worst_case),
            "delta": float(self.delta),
            "output_dim": self.output_dim,
            "float_safe": bool(self.float_safe),
        }
        out.update(json_safe(dict(self.calibration)))
        out["parameters"] = json_safe(dict(self.parameters))
        out["assumptions"] = list(self.assumptions)
        out["published_claim_note"] = self.published_claim_note
        out["word_dropout"] = None if self.word_dropout is None else json_safe(dict(self.word_dropout))
        out["reference"] = self.reference
        return out
