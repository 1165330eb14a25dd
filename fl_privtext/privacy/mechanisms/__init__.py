"""Local randomisers for text representations, chosen by name through one registry.

Layout: :mod:`.base` (the :class:`Mechanism` base class, its stages and the shared contract texts), one module per
family (:mod:`.none`, :mod:`.bits` randomised response on bit encodings, :mod:`.laplace`, :mod:`.gaussian`,
:mod:`.sphere`, :mod:`.metric_dp`), and :mod:`.samplers` (float and exact noise) that every family calls. Adding a
mechanism is one new module and one line in ``fl_privtext.names.MECHANISMS`` (or ``MECHANISMS.register``).
"""

from __future__ import annotations

from typing import Any

from fl_privtext.names import MECHANISMS as _MECHANISMS
from fl_privtext.privacy.mechanisms.base import (
    CALIBRATIONS,
    COMPOSITION,
    DPNR_PAPER,
    FLOAT32_SLACK,
    FLOAT_SAMPLER,
    MIN_BIT_PROBABILITY,
    OME_PAPER,
    REPLACEMENT,
    SAMPLERS,
    SECURE_MARGIN,
    SECURE_SAMPLER,
    Mechanism,
    NoiseMoments,
    Release,
)
from fl_privtext.privacy.mechanisms.bits import OME, OUE, SUE, BitMechanism, BitRR, UnaryEncoding
from fl_privtext.privacy.mechanisms.gaussian import Gaussian
from fl_privtext.privacy.mechanisms.laplace import (
    LaplaceBox,
    LaplaceDPNR,
    LaplaceDPNRCode,
    LaplaceL1,
    LaplaceMechanism,
)
from fl_privtext.privacy.mechanisms.metric_dp import MultivariateLaplace, Purkayastha
from fl_privtext.privacy.mechanisms.none import NoPrivacy
from fl_privtext.privacy.mechanisms.sphere import CapMechanism, Duchi, PrivUnit, PrivUnitG
from fl_privtext.registry import Registry

# name -> class: the registry of fl_privtext.names (its names readable without numpy; a new mechanism registers there)
MECHANISMS: Registry[type[Mechanism]] = _MECHANISMS

__all__ = [
    "CALIBRATIONS", "COMPOSITION", "DPNR_PAPER", "FLOAT32_SLACK", "FLOAT_SAMPLER", "MECHANISMS",
    "MIN_BIT_PROBABILITY", "OME", "OME_PAPER", "OUE", "REPLACEMENT", "SAMPLERS", "SECURE_MARGIN", "SECURE_SAMPLER",
    "SUE", "BitMechanism", "BitRR", "CapMechanism", "Duchi", "Gaussian", "LaplaceBox", "LaplaceDPNR",
    "LaplaceDPNRCode", "LaplaceL1", "LaplaceMechanism", "Mechanism", "MultivariateLaplace", "NoPrivacy",
    "NoiseMoments", "PrivUnit", "PrivUnitG", "Purkayastha", "Release", "UnaryEncoding", "make_mechanism",
    "mechanism_params",
]


def mechanism_params(name: str) -> tuple[str, ...]:
    """Keyword parameters (python names) that mechanism ``name`` accepts."""
    cls = MECHANISMS.get(name, None)
    if cls is None:
        raise ValueError(f"Unknown mechanism {name!r}; valid names: {', '.join(MECHANISMS)}.")
    return cls.accepted_params()


def make_mechanism(name: str, **params: Any) -> Mechanism:
    """Build the mechanism registered as ``name`` with keyword parameters (python names, e.g. ``int_bits``)."""
    accepted = mechanism_params(name)
    cls = MECHANISMS[name]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        hint = (f" {name!r} has no secure sampler (its report's float_safe says whether what it samples meets its "
                "epsilon)." if "sampler" in unknown else "")
        raise ValueError(f"Mechanism {name!r} does not accept {', '.join(unknown)}; accepted parameters: "
                         f"{', '.join(accepted)}.{hint}")
    missing = [p for p in cls.required_params() if p not in params]
    if missing:
        raise ValueError(f"Mechanism {name!r} requires {', '.join(missing)}; accepted parameters: "
                         f"{', '.join(accepted)}.")
    return cls(**params)
