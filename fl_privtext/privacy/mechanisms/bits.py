"""Randomised response on bit encodings: OME, SUE, OUE, BitRR (per-bit flips of the fixed-point code)."""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import encoding, normalise
from fl_privtext.privacy.calibration import per_bit_epsilon
from fl_privtext.privacy.mechanisms.audit_plan import AuditPlan, Component, column
from fl_privtext.privacy.mechanisms.base import (
    CALIBRATIONS,
    MIN_BIT_PROBABILITY,
    OME_PAPER,
    Mechanism,
    check_dim,
    check_positive,
    expit,
    set_field,
)
from fl_privtext.privacy.mechanisms.noise_law import NoiseLaw, bit_flip_law
from fl_privtext.privacy.mechanisms.samplers import flip_bits
from fl_privtext.privacy.stage import Stage


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
        set_field(self, "epsilon", check_positive("epsilon", self.epsilon))
        set_field(self, "dim", check_dim(self.dim, 1, optional=False))
        encoding.check_bits(self.int_bits, self.frac_bits)
        set_field(self, "int_bits", int(self.int_bits))
        set_field(self, "frac_bits", int(self.frac_bits))

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

    def noise_law(self, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator, *,
                  input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
        """Exact: independent flips, E[Var(u_j | x)] = E[u_j] (1 - p_j - q_j) + p_j q_j (`bit_flip_law`)."""
        p, q = self.bit_probabilities()
        return bit_flip_law(p, q, np.asarray(upload_mean, np.float64))

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Sum of log Bernoulli(p_j or q_j); a fractional code c in [0, 1] (e.g. a class mean) gives the exact
        likelihood of independent bits with Pr[1] = c p + (1 - c) q."""
        y, c = uploads, codes
        p, q = self.bit_probabilities()
        p = np.clip(np.asarray(p, np.float64), 1e-300, 1 - 1e-16)
        q = np.clip(np.asarray(q, np.float64), 1e-300, 1 - 1e-16)
        if np.all((c == 0) | (c == 1)):
            # log P = sum_j c_j [y_j log(p/q) + (1-y_j) log((1-p)/(1-q))] + terms free of c: one matrix product
            a = y * np.log(p / q) + (1 - y) * (np.log1p(-p) - np.log1p(-q))  # (N, D)
            return a @ c.T
        rate = np.clip(c * p + (1 - c) * q, 1e-300, 1 - 1e-16)  # (M, D): Pr[bit = 1] for a fractional code
        return y @ np.log(rate).T + (1 - y) @ np.log1p(-rate).T

    def likelihood_note(self) -> str:
        return ""

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """The randomiser on codes all-ones vs all-zeros; one component per distinct (p_j, q_j) class (OME: even
        and odd bits), events {bit = 1} / {bit = 0}; whole-vector log-likelihood ratio."""
        p, q = self.bit_probabilities()
        d = p.size
        pq = np.stack([p, q], axis=1)
        classes, first, counts = np.unique(pq, axis=0, return_index=True, return_counts=True)
        comps = tuple(Component(f"bit {int(j)} (p={c[0]:.6g}, q={c[1]:.6g})", int(m), column(int(j)))
                      for c, j, m in zip(classes, first, counts, strict=True))
        with np.errstate(divide="ignore"):
            w1 = np.nan_to_num(np.log(p) - np.log(q), posinf=1e6, neginf=-1e6)
            w0 = np.nan_to_num(np.log1p(-p) - np.log1p(-q), posinf=1e6, neginf=-1e6)
        slope, offset = w1 - w0, float(w0.sum())
        whole = Component("whole vector log-likelihood ratio", 1, lambda y: np.round(y @ slope + offset, 9))
        return AuditPlan(np.ones(d, dtype=np.uint8), np.zeros(d, dtype=np.uint8),
                         lambda c, rng: self.randomise(c, rng).values, d, comps, whole,
                         f"codes all-ones vs all-zeros ({d} bits; randomiser stage, the domain of the claim)")


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
        set_field(self, "lam", check_positive("lam", self.lam))
        self._check_probabilities()

    def probabilities(self) -> tuple[float, float, float]:
        """(p1, p2, q): p1 on even bit indices, p2 on odd, q everywhere (Theorem 1)."""
        lam = self.lam
        p1 = lam / (1.0 + lam)
        p2 = 1.0 / (1.0 + lam**3)
        q = expit(-(math.log(lam) + self.epsilon / self.code_bits))  # 1 / (1 + lam e^(eps/(r l)))
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
        p = expit(self.epsilon / self.delta_f)
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
        return 0.5, expit(-self.epsilon / self.delta_f)


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
        return expit(-self.epsilon / self.code_bits)

    def bit_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        f = self.flip_probability
        return np.full(self.code_bits, 1.0 - f), np.full(self.code_bits, f)

    def calibration_values(self) -> dict[str, Any]:
        f = self.flip_probability
        return {"flip_probability": f, "p": 1.0 - f, "q": f, "code_bits": self.code_bits}
