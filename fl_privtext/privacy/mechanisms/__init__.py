"""Local randomisers for text representations, chosen by name through one registry.

Layout: :mod:`.base` (the :class:`Mechanism` base class, its stages and the shared contract texts), one module per
family (:mod:`.none`, :mod:`.bits` randomised response on bit encodings, :mod:`.laplace`, :mod:`.gaussian`,
:mod:`.sphere` the shared cap family with :mod:`.privunitg` and :mod:`.privunit`, :mod:`.metric_dp`), what the
families' declarations share (:mod:`.noise_law`, :mod:`.likelihood`, :mod:`.audit_plan`), and :mod:`.samplers`
(float and exact noise) that every family calls. Adding a mechanism is one new module and one line in ``fl_privtext.names.MECHANISMS`` (or ``MECHANISMS.register``): its class declares, beside the class, how it is
built from the privacy config section (``section_params``), its noise law (``noise_law``), its likelihood
(``log_likelihood``, ``likelihood_note``) and its audit plan (``audit_plan``), and the server, the attacks and the
audit ask it (no list of mechanism types anywhere else). ``mechanism_from_section`` is the one construction path
from config.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fl_privtext.names import MECHANISMS as _MECHANISMS
from fl_privtext.names import Registry
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
from fl_privtext.privacy.mechanisms.privunit import Duchi, PrivUnit
from fl_privtext.privacy.mechanisms.privunitg import PrivUnitG
from fl_privtext.privacy.mechanisms.sphere import CapMechanism

# name -> class: the registry of fl_privtext.names (its names readable without numpy; a new mechanism registers there
# or through register_mechanism)
MECHANISMS: Registry[type[Mechanism]] = _MECHANISMS
_BUILT_IN = frozenset(MECHANISMS.names())

M = TypeVar("M", bound=type[Mechanism])

__all__ = [
    "CALIBRATIONS", "COMPOSITION", "DPNR_PAPER", "FLOAT32_SLACK", "FLOAT_SAMPLER", "MECHANISMS",
    "MIN_BIT_PROBABILITY", "OME", "OME_PAPER", "OUE", "REPLACEMENT", "SAMPLERS", "SECURE_MARGIN", "SECURE_SAMPLER",
    "SUE", "BitMechanism", "BitRR", "CapMechanism", "Duchi", "Gaussian", "LaplaceBox", "LaplaceDPNR",
    "LaplaceDPNRCode", "LaplaceL1", "LaplaceMechanism", "Mechanism", "MultivariateLaplace", "NoPrivacy",
    "NoiseMoments", "PrivUnit", "PrivUnitG", "Purkayastha", "Release", "UnaryEncoding", "make_mechanism",
    "mechanism_from_section", "mechanism_params", "register_mechanism", "unregister_mechanism",
]


def mechanism_params(name: str) -> tuple[str, ...]:
    """Keyword parameters (python names) that mechanism ``name`` accepts."""
    return MECHANISMS.get(name).accepted_params()  # an unknown name: the registry's one-line error


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


def mechanism_from_section(section: Any, dim: int, *, projector: Any = None) -> Mechanism:
    """The one construction path from config: the mechanism ``section.mechanism`` names, built with what its class
    declares (``Mechanism.section_params``) for inputs of width ``dim``.

    ``section`` is the privacy config section or any object with ``mechanism``, ``projection`` and
    ``mechanism_params()`` (privacy/ never imports the config); ``projector`` is the public pca map where
    ``projection = pca`` (fitted by the caller on public data: `fl_privtext.public.public_projection`)."""
    name = section.mechanism
    accepted = mechanism_params(name)
    if section.projection != "none" and "projection" not in accepted:
        takers = ", ".join(n for n, cls in MECHANISMS.items() if "projection" in cls.accepted_params())
        raise ValueError(f"privacy.projection = {section.projection} is not supported by mechanism {name!r}; "
                         f"mechanisms that take it: {takers}.")
    return make_mechanism(name, **MECHANISMS[name].section_params(section, dim=dim, projector=projector))


def register_mechanism(cls: M) -> M:
    """Add mechanism class ``cls`` to `MECHANISMS` under its ``name`` (also a class decorator): a mechanism defined
    outside this package (its four declarations on the class, see the module docstring) is then built, audited and
    attacked like the built-in ones. Registering the same class again is a no-op; a name taken by another class is
    refused."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise ValueError(f"register_mechanism expects a subclass of Mechanism, got {cls!r}.")  # noqa: TRY004
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name: set the class variable `name` (what privacy.mechanism says).")
    taken = MECHANISMS.get(cls.name, cls)
    if taken is not cls:
        raise ValueError(f"Mechanism name {cls.name!r} is taken by {taken.__module__}.{taken.__qualname__}; choose "
                         "another name.")
    MECHANISMS[cls.name] = cls
    return cls


def unregister_mechanism(name: str) -> None:
    """Remove a mechanism added by `register_mechanism` (the built-in ones stay)."""
    if name in _BUILT_IN:
        raise ValueError(f"{name!r} is a built-in mechanism; only registered ones can be removed.")
    if name not in MECHANISMS:
        raise ValueError(f"Unknown mechanism {name!r}; registered names: "
                         f"{', '.join(n for n in MECHANISMS if n not in _BUILT_IN) or 'none'}.")
    del MECHANISMS[name]
