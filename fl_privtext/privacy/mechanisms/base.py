"""The base class of every local randomiser and its stages (normalise -> encode -> randomise -> report).


A mechanism is normalise -> (encode) -> randomise. ``Mechanism.release`` composes the three stages once for every
mechanism; each stage returns a :class:`Stage` saying what it did (rows clipped, values saturated, noise scale), and
``report()`` states the privacy contract: the published (nominal) epsilon next to the true worst-case epsilon.

Adjacency for ``epsilon_worst_case`` is local DP under replacement: any two inputs of one user (the whole
representation may change). ``dim`` rule: it is required where the noise or the epsilon depends on it (ome, sue,
oue, bitrr, laplace-dpnr, laplace-box); elsewhere (none, laplace-dpnr-code, laplace-l1, gaussian) it is optional:
None means "whatever width x has" (and ``output_dim`` is None); when given, x must have exactly ``dim`` columns.
Every mechanism accepts ``mu`` (word dropout rate, default 0): it changes only the report (``epsilon_nominal``
becomes the amplified value of DPNR Theorem 2); the dropout itself is applied to the texts before extraction with
:func:`fl_privtext.privacy.dropout.word_dropout`.

"""

import math
from abc import ABC, abstractmethod
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

import numpy as np

from fl_privtext.names import (
    SAMPLERS,  # the choice list of privacy.sampler (one list, read by the config too)
)
from fl_privtext.privacy import normalise
from fl_privtext.privacy.dropout import PRECONDITIONS, amplified_epsilon
from fl_privtext.privacy.mechanisms.audit_plan import AuditPlan
from fl_privtext.privacy.mechanisms.likelihood import NEAREST_NOTE, nearest
from fl_privtext.privacy.mechanisms.noise_law import NoiseLaw, moments_law, monte_carlo_law
from fl_privtext.privacy.report import PrivacyReport
from fl_privtext.privacy.stage import Stage

REPLACEMENT = (
    "Local DP of one upload under replacement adjacency: the two inputs may be any two representations of the "
    "same user."
)
FLOAT_SAMPLER = (
    "sampler='float': noise is floating-point (float32) and pseudo-random: fine for simulation, NOT a "
    "deployment-grade DP sampler. epsilon_worst_case holds for exact real-valued noise; the float32 output's low "
    "bits reveal the input beyond it (Mironov 2012; `fl-privtext audit` certifies a violation), so float_safe is "
    "false. Use privacy.sampler='secure' for deployment."
)
SECURE_SAMPLER = (
    "sampler='secure': exact discrete noise (Canonne, Kamath & Steinke 2020) on a power-of-two grid 2^-24 of the "
    "noise scale, sampled with exact arithmetic from AES-256-CTR keyed by the OS (fl_privtext.privacy.exact); "
    "epsilon_worst_case is the privacy map of what is sampled (input rounding to the grid included)."
)
# The secure sampler's privacy map is evaluated at the sensitivity inflated by FLOAT32_SLACK: the normalised input is
# rounded to float32 (each coordinate by <= 2^-24 relative), so its norm can exceed the bound by that much. The
# Laplace mechanisms calibrate their scale (samplers.secure_laplace_scale) so that the mapped epsilon stays <= the nominal one.
FLOAT32_SLACK = 1.0 + 2.0**-22
SECURE_MARGIN = 1.0 + 2.0**-20
# A per-bit probability below 2^-53 (or above 1 - 2^-53) cannot be realised by comparing 53-bit uniforms.
MIN_BIT_PROBABILITY = 2.0**-53
COMPOSITION = "Every further release of the same user's data adds its epsilon (use Accountant)."
OME_PAPER = "Lyu, He, Li, Xiao. Towards Differentially Private Text Representations (OME), SIGIR 2020"
DPNR_PAPER = ("Lyu, He, Li. Differentially Private Representation for NLP: Formal Guarantee and An Empirical Study "
              "on Privacy and Fairness (DPNR), Findings of EMNLP 2020")
CALIBRATIONS = ("paper", "textbook")


# ---------------------------------------------------------------------------------------------------- validation
def check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")  # noqa: TRY004
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return v


def check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return float(value)


def check_open_unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value!r}.")
    return float(value)


def check_dim(value: Any, min_dim: int, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < min_dim:
        extra = " or None (take the width of x)" if optional else ""
        raise ValueError(f"dim must be an integer >= {min_dim}{extra}, got {value!r}.")
    return int(value)


def set_field(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # normalise a validated field of a frozen dataclass


def check_sampler(value: Any) -> str:
    if value not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}, got {value!r}.")
    return str(value)


def expit(a: float) -> float:
    """1 / (1 + e^-a) without overflow for any finite a."""
    if a >= 0:
        return 1.0 / (1.0 + math.exp(-a))
    e = math.exp(a)
    return e / (1.0 + e)


# ------------------------------------------------------------------------------------------------------ release
@dataclass(frozen=True)
class Release:
    """Privatized batch and the three stages that produced it."""

    values: np.ndarray  # (N, output_dim) float32
    stages: tuple[Stage, Stage, Stage]  # normalise, encode, randomise

    def info(self) -> dict[str, dict[str, Any]]:
        """What each stage did, e.g. ``{"encode": {"method": "fixed-point", "saturated": 3, ...}, ...}``."""
        return {k: dict(s.info) for k, s in zip(("normalise", "encode", "randomise"), self.stages, strict=True)}


# ------------------------------------------------------------------------------------------------ noise moments
@dataclass(frozen=True)
class NoiseMoments:
    """Exact second moments of a mechanism's noise (public: the mechanism and its parameters are), for the
    server's errors-in-variables corrections (`fl_privtext.server.noise`).

    ``kind = "additive"``: upload = E[upload | x] + e with e independent of x, Cov(e) = ``variance`` I +
    ``shared`` 1 1^T (i.i.d. coordinates; ``shared``: one scalar added to every coordinate).
    ``kind = "cap"``: upload = s (W v + Z_perp) for the unit direction v the input is mapped to (``sphere_map``),
    so E[u u^T | x] = ``iso`` I + ``rank_one`` v v^T exactly; E[u | x] = x (clipped, ``round``) or C v
    (``normalise``), ``clip_norm`` = C.
    """

    kind: str
    variance: float = 0.0
    shared: float = 0.0
    iso: float = 0.0
    rank_one: float = 0.0
    sphere_map: str = ""
    clip_norm: float = 1.0


# ---------------------------------------------------------------------------------------------------- base class
@dataclass(frozen=True, kw_only=True)
class Mechanism(ABC):
    """Base class: validated frozen parameters, the composed pipeline, and the report."""

    name: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    min_dim: ClassVar[int] = 1

    dim: int | None = None
    mu: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.mu, bool) or not isinstance(self.mu, (int, float, np.integer, np.floating)) \
                or not 0.0 <= float(self.mu) <= 1.0:
            raise ValueError(f"mu (word dropout rate) must be a number in [0, 1], got {self.mu!r}.")
        set_field(self, "mu", float(self.mu))

    # -- parameters --------------------------------------------------------------------------------------------
    @classmethod
    def accepted_params(cls) -> tuple[str, ...]:
        """Keyword parameters of this mechanism (python names)."""
        return tuple(f.name for f in fields(cls) if f.init)

    @classmethod
    def required_params(cls) -> tuple[str, ...]:
        """Parameters without a default."""
        return tuple(f.name for f in fields(cls) if f.init and f.default is MISSING
                     and f.default_factory is MISSING)

    @property
    def params(self) -> dict[str, Any]:
        """The parameters this mechanism was built with."""
        return {name: getattr(self, name) for name in self.accepted_params()}

    # -- pipeline ----------------------------------------------------------------------------------------------
    @abstractmethod
    def normalise(self, x: np.ndarray) -> Stage:
        """(N, k) float32 -> bounded (N, k) float32."""

    def encode(self, z: np.ndarray) -> Stage:
        """Default: no encoding."""
        return Stage(z, {"method": "none"})

    @abstractmethod
    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        """Encoded (N, D) -> randomised (N, D) float32."""

    def release(self, x: np.ndarray, rng: np.random.Generator) -> Release:
        """Run normalise -> encode -> randomise on an (N, dim) batch and keep what every stage did."""
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}.")  # noqa: TRY004
        batch = normalise.as_batch(x, self.dim, min_dim=self.min_dim)
        norm = self.normalise(batch)
        enc = self.encode(norm.values)
        out = self.randomise(enc.values, rng)
        values = np.asarray(out.values, dtype=np.float32)
        if not np.isfinite(values).all():
            bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
            raise ValueError(f"{self.name}: the randomised output of row(s) {bad[:5].tolist()} is not finite in "
                             f"float32 ({dict(out.info)}); the noise is too large for float32 (epsilon too "
                             "small?). Nothing was released.")
        return Release(values, (norm, enc, out))

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(N, dim) float array -> (N, output_dim) float32 upload."""
        return self.release(x, rng).values

    def expected(self, x: np.ndarray) -> np.ndarray:
        """E[upload | x], (N, output_dim) float32: the noise-free mean of what this mechanism uploads for x.

        On-device inference applies the server's model (trained on uploads) to it: for the unbiased mechanisms it
        is the clipped / normalised (projected) input itself. Deterministic; no randomness, nothing released."""
        batch = normalise.as_batch(x, self.dim, min_dim=self.min_dim)
        return np.asarray(self.mean_output(self.encode(self.normalise(batch).values).values), np.float32)

    def mean_output(self, c: np.ndarray) -> np.ndarray:
        """E[randomise(c)] for an encoded batch c. Default: c (zero-mean additive noise, or none)."""
        return c

    def noise_moments(self) -> NoiseMoments | None:
        """Exact second moments of the noise (`NoiseMoments`), or None where no closed form is given (the server
        then estimates them by Monte Carlo)."""
        return None

    # -- declarations: what the rest of the package asks the mechanism --------------------------------------------
    @classmethod
    def section_params(cls, section: Any, *, dim: int, projector: Any = None) -> dict[str, Any]:
        """How this mechanism is built from the privacy config section: the keyword parameters to construct it.

        ``section`` is duck-typed (privacy/ never imports the config): its ``mechanism_params()`` gives every
        mechanism parameter by python name, of which this class keeps those it accepts; ``dim`` is the input
        width; ``projector`` a public pca map (`fl_privtext.privacy.projection.PublicProjection`), which sets
        ``proj_dim`` to its width (``privacy.proj-dim = auto`` resolved). Built by
        `fl_privtext.privacy.mechanisms.mechanism_from_section`, the one construction path from config."""
        accepted = cls.accepted_params()
        params = {k: v for k, v in section.mechanism_params().items() if k in accepted}
        if "dim" in accepted:
            params["dim"] = dim
        if projector is not None:
            params["projector"] = projector
            params["proj_dim"] = projector.out_dim
        return params

    def noise_law(self, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator, *,
                  input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
        """The law of this mechanism's noise for uploads of width D (`fl_privtext.privacy.mechanisms.noise_law`),
        which the server may compute (the mechanism is public): ``upload_mean`` (D,) is the received uploads'
        mean. Default: the closed form of `noise_moments` where given (``input_norm2`` = E||E[u | x]||^2 measured
        on public data named by ``norm_source``, for the cap laws under the round map), else Monte Carlo on
        synthetic probes with the server's ``generator``."""
        if input_dim < 1:
            raise ValueError(f"input_dim must be >= 1; got {input_dim}.")
        mean = np.asarray(upload_mean, np.float64)
        moments = self.noise_moments()
        if moments is not None and moments.kind in ("additive", "cap"):
            return moments_law(moments, mean.shape[0], input_norm2=input_norm2, norm_source=norm_source)
        return monte_carlo_law(self, input_dim, mean.shape[0], generator)

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(N, D) uploads x (M, D) codes (float64; a code is a candidate after the public stages normalise ->
        encode) -> (N, M) log P[upload | code] up to a constant per upload: the mechanism-aware attacks' core
        (`fl_privtext.attacks.likelihood`). Default: the nearest-neighbour score, not a likelihood
        (`likelihood_note` says so)."""
        return nearest(uploads, codes)

    def likelihood_note(self) -> str:
        """What `log_likelihood` computes where it is not the exact likelihood; "" where it is."""
        return NEAREST_NOTE

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """The empirical audit's worst-case input pair and statistics (`fl_privtext.privacy.audit`);
        ``default_dim`` is the width used where ``dim`` is None."""
        raise ValueError(f"No audit plan for mechanism type {type(self).__name__}.")

    # -- accounting --------------------------------------------------------------------------------------------
    @property
    def output_dim(self) -> int | None:
        """Width of the upload (None when dim is None: then it is the width of x)."""
        return self.dim

    @property
    @abstractmethod
    def claimed_epsilon(self) -> float:
        """Epsilon the published analysis states for one upload (before any dropout amplification)."""

    @property
    @abstractmethod
    def epsilon_worst_case(self) -> float:
        """True epsilon under replacement adjacency (math.inf when unbounded)."""

    @property
    def report_delta(self) -> float:
        """delta of the guarantee (0 for pure epsilon-DP)."""
        return 0.0

    @property
    def float_safe(self) -> bool:
        """True when the realised (floating-point) sampler meets epsilon_worst_case: no continuous float noise."""
        return True

    def calibration_values(self) -> dict[str, Any]:
        """Probabilities or noise scale actually used."""
        return {}

    def assumptions(self) -> tuple[str, ...]:
        """Sentences stating what the guarantee assumes."""
        return (REPLACEMENT, COMPOSITION)

    def claim_reason(self) -> str:
        """Why the published analysis is wrong (used only when worst case > claimed)."""
        return ""

    def report(self) -> PrivacyReport:
        """Nominal vs worst-case epsilon, delta, calibration, assumptions and the published-claim note."""
        claimed, worst = self.claimed_epsilon, self.epsilon_worst_case
        note = None
        if worst > claimed * (1 + 1e-9) + 1e-12:
            note = (f"The published analysis states epsilon = {claimed:g}; the true worst-case epsilon is "
                    f"{worst:.6g}. {self.claim_reason()}").strip()
        dropout = None
        if self.mu > 0:
            dropout = {
                "mu": self.mu,
                "epsilon_base_claimed": claimed,
                "epsilon_amplified_claimed": amplified_epsilon(claimed, self.mu),
                "epsilon_amplified_with_true_base": amplified_epsilon(worst, self.mu),
                "preconditions": list(PRECONDITIONS),
                "applied_by": "fl_privtext.privacy.word_dropout on the texts before extraction",
            }
        return PrivacyReport(
            mechanism=self.name,
            epsilon_nominal=amplified_epsilon(claimed, self.mu),
            epsilon_worst_case=worst,
            delta=self.report_delta,
            output_dim=self.output_dim,
            parameters=self.params,
            calibration=self.calibration_values(),
            assumptions=self.assumptions() + (PRECONDITIONS if self.mu > 0 else ()),
            published_claim_note=note,
            reference=self.reference,
            word_dropout=dropout,
            float_safe=self.float_safe,
        )
