"""Local randomisers for text representations, chosen by name through one registry.

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

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import encoding, normalise, secure
from fl_privtext.privacy.calibration import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    per_bit_epsilon,
)
from fl_privtext.privacy.dropout import PRECONDITIONS, amplified_epsilon
from fl_privtext.privacy.randomisers import flip_bits, gaussian_noise, laplace_noise
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
    "sampler='secure': exact discrete noise on the grid 2^-40 (Canonne, Kamath & Steinke 2020) from OpenDP, drawn "
    "from a cryptographically secure generator; epsilon_worst_case is OpenDP's privacy map of what is sampled."
)
SAMPLERS = ("float", "secure")
# The secure sampler's privacy map is evaluated at the sensitivity inflated by FLOAT32_SLACK: the normalised input is
# rounded to float32 (each coordinate by <= 2^-24 relative), so its norm can exceed the bound by that much. The
# correct mechanisms widen their noise by SECURE_MARGIN so that the mapped epsilon stays <= the nominal one.
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
def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")  # noqa: TRY004
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return v


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return float(value)


def _open_unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value!r}.")
    return float(value)


def _dim(value: Any, min_dim: int, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < min_dim:
        extra = " or None (take the width of x)" if optional else ""
        raise ValueError(f"dim must be an integer >= {min_dim}{extra}, got {value!r}.")
    return int(value)


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # normalise a validated field of a frozen dataclass


def _sampler(value: Any) -> str:
    if value not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}, got {value!r}.")
    return str(value)


def _expit(a: float) -> float:
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
        _set(self, "mu", float(self.mu))

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
        _set(self, "dim", _dim(self.dim, 1, optional=True))

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
@dataclass(frozen=True, kw_only=True)
class BitMechanism(Mechanism):
    """Shared part of per-bit randomisers on the fixed-point code (z-score -> encode -> flip bits).

    Worst case (all of them): the randomiser's input is the r*l-bit code and two codes may differ in every bit, so
    epsilon_worst_case = sum_j max(|ln(p_j/q_j)|, |ln((1-p_j)/(1-q_j))|)
    (:func:`fl_privtext.privacy.calibration.per_bit_epsilon`), exact over codes.
    """

    epsilon: float
    dim: int = field()  # required (an explicit Field, so the base default None is not inherited)
    int_bits: int = 4
    frac_bits: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "epsilon", _positive("epsilon", self.epsilon))
        _set(self, "dim", _dim(self.dim, 1, optional=False))
        encoding.check_bits(self.int_bits, self.frac_bits)
        _set(self, "int_bits", int(self.int_bits))
        _set(self, "frac_bits", int(self.frac_bits))

    def _check_probabilities(self) -> None:
        # called at the end of every concrete __post_init__, once all parameters are validated
        p, q = self.bit_probabilities()
        probs = np.concatenate([p, 1.0 - p, q, 1.0 - q])
        tiny = probs[probs < MIN_BIT_PROBABILITY]  # exact probabilities are never 0 for finite parameters
        if tiny.size:
            raise ValueError(
                f"{self.name}: a per-bit probability of {tiny.min():.3g} is below 2^-53 (epsilon={self.epsilon:g} "
                f"over {self.code_bits} bits is too large): comparing 53-bit uniforms cannot realise it, so the "
                "report would not describe what is sampled. Lower epsilon or use more bits.")

    @property
    def bits_per_value(self) -> int:
        """l = 1 + int_bits + frac_bits."""
        return encoding.code_length(self.int_bits, self.frac_bits)

    @property
    def code_bits(self) -> int:
        """r * l."""
        return int(self.dim) * self.bits_per_value

    @property
    def output_dim(self) -> int:
        return self.code_bits

    @abstractmethod
    def bit_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        """(p, q), each (r*l,) float64: p_j = Pr[1 -> 1], q_j = Pr[0 -> 1] for bit j (0-based)."""

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.zscore(x)

    def encode(self, z: np.ndarray) -> Stage:
        return encoding.encode(z, self.int_bits, self.frac_bits)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        p, q = self.bit_probabilities()
        return Stage(flip_bits(c, p, q, rng), {"method": "bit-flip", "bits": int(c.size)})

    def mean_output(self, c: np.ndarray) -> np.ndarray:
        """E[bit j] = q_j + (p_j - q_j) c_j."""
        p, q = self.bit_probabilities()
        return (q + (p - q) * np.asarray(c, np.float64)).astype(np.float32)

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        p, q = self.bit_probabilities()
        return per_bit_epsilon(p, q)

    def assumptions(self) -> tuple[str, ...]:
        return super().assumptions() + (
            (f"Each value is z-scored within its vector, then encoded with 1 sign bit, {self.int_bits} integer and "
             f"{self.frac_bits} fraction bits (saturating beyond "
             f"{encoding.max_value(self.int_bits, self.frac_bits):g})."),
            ("Worst case is over encoded inputs that may differ in every one of the r*l bits (the randomiser's "
             "input domain, as in OME Theorem 1); z-scoring makes some codes unreachable, so over raw vectors it "
             "is an upper bound."),
        )


@dataclass(frozen=True, kw_only=True)
class OME(BitMechanism):
    """Optimized Multiple Encoding exactly as published (OME paper, Theorem 1, Eq. 2-3).

    - Pipeline: per-vector z-score -> fixed-point code (1 sign, m integer, n fraction bits; l = 1+m+n) -> every
      one of the r*l bits flipped independently with p = Pr[1->1] = lam/(1+lam) on even 0-based bit indices
      ("i in 2n"), 1/(1+lam^3) on odd indices, and q = Pr[0->1] = 1/(1 + lam e^(eps/(r l))).
    - Neighbouring relation: any two inputs (LDP); sensitivity: all r*l bits may differ.
    - Published claim: eps-LDP (Theorem 1). True guarantee: sum_j max(|ln(p_j/q_j)|, |ln((1-p_j)/(1-q_j))|);
      for lam >= 10 this is (r l / 2) ln(lam (lam^2 - lam + 1)), independent of eps: r=50, l=10: 1703.4 (lam=10),
      2929.1 (lam=50), 3451.4 (lam=100); r=768: 26163.6 / 44990.5 / 53013.4. For lam=1 it is about eps/2.
    """

    name: ClassVar[str] = "ome"
    reference: ClassVar[str] = f"{OME_PAPER}, Section 3.1, Theorem 1 (Eq. 2-3), Algorithm 1."

    lam: float

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "lam", _positive("lam", self.lam))
        self._check_probabilities()

    def probabilities(self) -> tuple[float, float, float]:
        """(p1, p2, q): p1 on even bit indices, p2 on odd, q everywhere (Theorem 1)."""
        lam = self.lam
        p1 = lam / (1.0 + lam)
        p2 = 1.0 / (1.0 + lam**3)
        q = _expit(-(math.log(lam) + self.epsilon / self.code_bits))  # 1 / (1 + lam e^(eps/(r l)))
        return p1, p2, q

    def bit_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        p1, p2, q = self.probabilities()
        even = np.arange(self.code_bits) % 2 == 0
        return np.where(even, p1, p2), np.full(self.code_bits, q)

    def calibration_values(self) -> dict[str, Any]:
        p1, p2, q = self.probabilities()
        return {"p1": p1, "p2": p2, "q": q, "code_bits": self.code_bits, "bits_per_value": self.bits_per_value,
                "bit_parity": "p1 on even 0-based bit indices (i in 2n), p2 on odd (i in 2n+1)"}

    def claim_reason(self) -> str:
        return ("Theorem 1's proof multiplies p/(1-p) * (1-q)/q, i.e. compares two outputs of the SAME input, so "
                "the odd-bit lam^-2 factors cancel the even-bit lam^2; an adversary chooses each bit's direction, so "
                "nothing cancels: eps_true = sum_j max(|ln(p_j/q_j)|, |ln((1-p_j)/(1-q_j))|).")


@dataclass(frozen=True, kw_only=True)
class UnaryEncoding(BitMechanism):
    """SUE/OUE (Wang et al., USENIX Security 2017) applied bit-wise to the r*l-bit code, as in the OME paper.

    ``calibration`` sets the per-bit budget eps/Delta_f:
    - "paper" (default): Delta_f = 2r, the OME paper's value (Sec. 3.1: "changing all elements ... results in
      Delta_f = 2r in both SUE and OUE"), i.e. one-hot sensitivity per value although all r*l bits may differ.
      True epsilon ~ l*eps/2 (SUE), ~ l*eps/4 (OUE).
    - "textbook": Delta_f = r*l, one budget share per bit that can differ. True epsilon = eps (SUE, exact) and
      r*l*ln((1+e^(eps/(r l)))/2) ~ eps/2 (OUE: its per-bit split assumes one-hot pairs, so it is conservative
      for free bits).
    """

    calibration: str = "paper"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {', '.join(map(repr, CALIBRATIONS))}, "
                             f"got {self.calibration!r}.")
        self._check_probabilities()

    @property
    def delta_f(self) -> int:
        """Delta_f that divides eps per bit (2r for "paper", r*l for "textbook")."""
        return 2 * int(self.dim) if self.calibration == "paper" else self.code_bits

    @abstractmethod
    def unary_probabilities(self) -> tuple[float, float]:
        """(p, q) for every bit."""

    def bit_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        p, q = self.unary_probabilities()
        return np.full(self.code_bits, p), np.full(self.code_bits, q)

    def calibration_values(self) -> dict[str, Any]:
        p, q = self.unary_probabilities()
        return {"p": p, "q": q, "delta_f": self.delta_f, "per_bit_epsilon_budget": self.epsilon / self.delta_f,
                "code_bits": self.code_bits}

    def claim_reason(self) -> str:
        return (f"The OME paper splits eps over Delta_f = {self.delta_f} for {self.name.upper()} but applies it to "
                f"the {self.code_bits}-bit code, where all bits may differ; the true epsilon is the per-bit sum.")


@dataclass(frozen=True, kw_only=True)
class SUE(UnaryEncoding):
    """Symmetric unary encoding on the code: p = e^a/(1+e^a), q = 1-p with a = eps/Delta_f (OME paper Sec. 2.2).

    Neighbouring relation: any two inputs (LDP), all r*l bits may differ. Published claim: eps-LDP. True epsilon:
    r*l*a = l*eps/2 with the paper's Delta_f = 2r; exactly eps with calibration="textbook" (Delta_f = r*l).
    """

    name: ClassVar[str] = "sue"
    reference: ClassVar[str] = (f"Wang, Blocki, Li, Jha. Locally Differentially Private Protocols for Frequency "
                                f"Estimation, USENIX Security 2017 (SUE); as used in {OME_PAPER}, Section 2.2.")

    def unary_probabilities(self) -> tuple[float, float]:
        p = _expit(self.epsilon / self.delta_f)
        return p, 1.0 - p


@dataclass(frozen=True, kw_only=True)
class OUE(UnaryEncoding):
    """Optimized unary encoding on the code: p = 1/2, q = 1/(1+e^a) with a = eps/Delta_f (OME paper Sec. 2.2).

    Neighbouring relation: any two inputs (LDP), all r*l bits may differ. Published claim: eps-LDP. True epsilon:
    r*l*ln((1+e^a)/2) ~ l*eps/4 with the paper's Delta_f = 2r; ~ eps/2 with calibration="textbook".
    """

    name: ClassVar[str] = "oue"
    reference: ClassVar[str] = (f"Wang, Blocki, Li, Jha. Locally Differentially Private Protocols for Frequency "
                                f"Estimation, USENIX Security 2017 (OUE); as used in {OME_PAPER}, Section 2.2.")

    def unary_probabilities(self) -> tuple[float, float]:
        return 0.5, _expit(-self.epsilon / self.delta_f)


@dataclass(frozen=True, kw_only=True)
class BitRR(BitMechanism):
    """Correct bit-vector randomized response on the r*l-bit code.

    Every bit flipped independently with probability 1/(1 + e^(eps/(r l))) (p = 1 - q = e^a/(1+e^a),
    a = eps/(r l)). Neighbouring relation: any two inputs; sensitivity: all r*l bits may differ; each bit costs a,
    so the guarantee is exactly eps-LDP (nominal = worst case).
    """

    name: ClassVar[str] = "bitrr"
    reference: ClassVar[str] = ("Randomized response (Warner 1965) on each of the r*l free bits; "
                                "basic composition over bits.")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_probabilities()

    @property
    def flip_probability(self) -> float:
        """1 / (1 + e^(eps/(r l)))."""
        return _expit(-self.epsilon / self.code_bits)

    def bit_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        f = self.flip_probability
        return np.full(self.code_bits, 1.0 - f), np.full(self.code_bits, f)

    def calibration_values(self) -> dict[str, Any]:
        f = self.flip_probability
        return {"flip_probability": f, "p": 1.0 - f, "q": f, "code_bits": self.code_bits}


# ----------------------------------------------------------------------------------------------------- Laplace
@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism(Mechanism):
    """Shared part: normalise to a domain of L1 diameter ``l1_sensitivity``, add Laplace(noise_scale) per coordinate.

    Worst case = l1_sensitivity / noise_scale (Dwork & Roth 2014, Theorem 3.6).
    """

    epsilon: float
    sampler: str = "float"

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "epsilon", _positive("epsilon", self.epsilon))
        _set(self, "sampler", _sampler(self.sampler))

    def _check_noise(self) -> None:
        # called by subclasses once their parameters are set
        if not self.noise_scale < 1e30:
            raise ValueError(f"{self.name}: the Laplace scale {self.noise_scale:.3g} exceeds what float32 uploads can "
                             f"carry (epsilon={self.epsilon:g} is too small); use epsilon >= "
                             f"{self.epsilon * self.noise_scale / 1e30:.3g}.")
        if self.sampler == "secure" and self.dim is None:
            raise ValueError(f"{self.name}: sampler='secure' needs dim (OpenDP's privacy map depends on it).")

    @property
    @abstractmethod
    def noise_scale(self) -> float:
        """Laplace scale b of each coordinate's noise."""

    @property
    @abstractmethod
    def l1_sensitivity(self) -> float:
        """max ||u - v||_1 over two normalised vectors."""

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        if self.sampler == "secure":
            noisy64 = secure.laplace(c, self.noise_scale)
            return Stage(noisy64.astype(np.float32), {"method": "discrete-laplace (OpenDP, CSPRNG)",
                                                      "noise_scale": self.noise_scale})
        noisy = laplace_noise(c.shape, self.noise_scale, rng)
        noisy += c
        return Stage(noisy, {"method": "laplace", "noise_scale": self.noise_scale})

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        if self.sampler == "secure" and math.isfinite(self.l1_sensitivity):
            return secure.laplace_epsilon(self.noise_scale, self.l1_sensitivity * FLOAT32_SLACK, int(self.dim or 1))
        return self.l1_sensitivity / self.noise_scale

    @property
    def float_safe(self) -> bool:
        return self.sampler == "secure"

    def calibration_values(self) -> dict[str, Any]:
        return {"noise_scale": self.noise_scale, "l1_sensitivity": self.l1_sensitivity, "sampler": self.sampler}

    def assumptions(self) -> tuple[str, ...]:
        return super().assumptions() + (SECURE_SAMPLER if self.sampler == "secure" else FLOAT_SAMPLER,)


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
        _set(self, "dim", _dim(self.dim, 2, optional=False))
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

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "dim", _dim(self.dim, 2, optional=True))
        if self.sampler == "secure":  # an audit target: exact noise does not repair it
            raise ValueError("laplace-dpnr-code reproduces a bug (epsilon = inf); it offers only sampler='float'.")
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.minmax(x)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        shared = laplace_noise((c.shape[0], 1), self.noise_scale, rng)  # (N, 1): the same draw on every coordinate
        return Stage(c + shared, {"method": "laplace-shared-scalar", "noise_scale": self.noise_scale})

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
        _set(self, "dim", _dim(self.dim, 1, optional=True))
        _set(self, "clip_norm", _positive("clip_norm", self.clip_norm))
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.l1_normalise(x, self.clip_norm)

    @property
    def noise_scale(self) -> float:
        return 2.0 * self.clip_norm / self.epsilon * (SECURE_MARGIN if self.sampler == "secure" else 1.0)

    @property
    def l1_sensitivity(self) -> float:
        return 2.0 * self.clip_norm


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
        _set(self, "dim", _dim(self.dim, 1, optional=False))
        _set(self, "low", _real("low", self.low))
        _set(self, "high", _real("high", self.high))
        if not self.low < self.high:
            raise ValueError(f"The box needs low < high, got low={self.low}, high={self.high}.")
        self._check_noise()

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.box_clip(x, self.low, self.high)

    @property
    def noise_scale(self) -> float:
        return self.l1_sensitivity / self.epsilon * (SECURE_MARGIN if self.sampler == "secure" else 1.0)

    @property
    def l1_sensitivity(self) -> float:
        return float(self.dim) * (self.high - self.low)


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
    sampler: str = "float"
    _noise_std: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "dim", _dim(self.dim, 1, optional=True))
        _set(self, "epsilon", _positive("epsilon", self.epsilon))
        _set(self, "delta", _open_unit("delta", self.delta))
        _set(self, "clip_norm", _positive("clip_norm", self.clip_norm))
        _set(self, "sampler", _sampler(self.sampler))
        sigma = analytic_gaussian_sigma(self.epsilon, self.delta, self.l2_sensitivity)
        if not (sigma > 0 and math.isfinite(sigma)) or not 1e-30 < sigma < 1e30:
            raise ValueError(f"gaussian: epsilon={self.epsilon:g}, delta={self.delta:g} give sigma={sigma:.3g}, "
                             "outside what float32 uploads can carry; choose a moderate epsilon.")
        if self.sampler == "secure":
            if self.dim is None:
                raise ValueError("gaussian: sampler='secure' needs dim (OpenDP's privacy map depends on it).")
            sigma = secure.calibrate_gaussian(self.epsilon, self.delta, self.l2_sensitivity * FLOAT32_SLACK,
                                              int(self.dim), sigma)
        _set(self, "_noise_std", sigma)

    @property
    def l2_sensitivity(self) -> float:
        """Delta_2 = 2C."""
        return 2.0 * self.clip_norm

    @property
    def noise_std(self) -> float:
        """sigma of each coordinate's noise."""
        return self._noise_std

    def normalise(self, x: np.ndarray) -> Stage:
        return normalise.l2_clip(x, self.clip_norm)

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        if self.sampler == "secure":
            noisy64 = secure.gaussian(c, self.noise_std)
            return Stage(noisy64.astype(np.float32), {"method": "discrete-gaussian (OpenDP, CSPRNG)",
                                                      "noise_std": self.noise_std})
        noisy = gaussian_noise(c.shape, self.noise_std, rng)
        noisy += c
        return Stage(noisy, {"method": "gaussian", "noise_std": self.noise_std})

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        if self.sampler == "secure":
            return secure.gaussian_epsilon(self.noise_std, self.l2_sensitivity * FLOAT32_SLACK, self.delta,
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


# ----------------------------------------------------------------------------------------------------- registry
# Mechanisms in their own modules subclass Mechanism, so they are imported after it is defined (issue #11).
from fl_privtext.privacy.metric_dp import MultivariateLaplace, Purkayastha
from fl_privtext.privacy.sphere import Duchi, PrivUnit, PrivUnitG

MECHANISMS: Mapping[str, type[Mechanism]] = MappingProxyType({
    cls.name: cls
    for cls in (NoPrivacy, OME, SUE, OUE, BitRR, LaplaceDPNR, LaplaceDPNRCode, LaplaceL1, LaplaceBox, Gaussian,
                PrivUnitG, PrivUnit, Duchi, MultivariateLaplace, Purkayastha)
})


def mechanism_params(name: str) -> tuple[str, ...]:
    """Keyword parameters (python names) that mechanism ``name`` accepts."""
    cls = MECHANISMS.get(name)
    if cls is None:
        raise ValueError(f"Unknown mechanism {name!r}; valid names: {', '.join(MECHANISMS)}.")
    return cls.accepted_params()


def make_mechanism(name: str, **params: Any) -> Mechanism:
    """Build the mechanism registered as ``name`` with keyword parameters (python names, e.g. ``int_bits``)."""
    accepted = mechanism_params(name)
    cls = MECHANISMS[name]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"Mechanism {name!r} does not accept {', '.join(unknown)}; accepted parameters: "
                         f"{', '.join(accepted)}.")
    missing = [p for p in cls.required_params() if p not in params]
    if missing:
        raise ValueError(f"Mechanism {name!r} requires {', '.join(missing)}; accepted parameters: "
                         f"{', '.join(accepted)}.")
    return cls(**params)
