"""Empirical epsilon audit: a statistical LOWER bound on a mechanism's epsilon, from samples.

Method (in the style of DP-Sniper and Jagielski et al. 2020):

1. Choose a worst-case input pair (x0, x1) for the mechanism: each mechanism declares it with its statistics
   (``Mechanism.audit_plan``; :func:`plan_for` asks for it).
2. Draw N outputs for each input and reduce each output to scalar statistics: one per *component* (a coordinate or
   bit representing a class of identical, independent coordinates) and one for the whole vector (the
   log-likelihood ratio when it is known).
3. For every statistic T: candidate events {T >= t} and {T < t} at quantiles of a 20% held-out split, both ratio
   directions; the ``n_select`` events with the best held-out bound are kept. On the other 80%, Clopper-Pearson
   gives Pr0(E) >= lo and Pr1(E) <= hi, and eps >= ln((lo - delta) / hi); Bonferroni over the kept events, the two
   bounds per event and the statistics (total level ``alpha``).
4. Product mechanisms compose analytically: if every coordinate of a class has log-ratio >= L on its event, the
   intersection of the events has log-ratio >= multiplicity * L (independence), so the per-component bounds add
   (pure DP only). The whole-vector statistic is a gross-violation detector with no structural assumption.
5. Low-bit distinguisher (Mironov 2012), for additive noise mechanisms (Laplace, Gaussian): T(y) = 1 when the
   float32 output coordinate y could have come from x1 through float32 addition (some float32 n with
   fl32(x1 + n) = y), else 0. Continuous noise rounded to float32 leaves parity patterns that depend on x: e.g. for
   x = -1, y in [1, 2) is exactly n - 1 with n on the coarser grid of [2, 4), so y's last mantissa bit is always 0,
   while from x = +1 it is 0 or 1; the event {T = 0} then has probability 0 under x1 and not under x0, and the
   certified bound is limited only by the samples. Exact discrete noise on a grid (sampler="secure") passes.
   The sphere mechanisms get their own float-consistency statistic: PrivUnitG, whether a coordinate is a float32
   product fl32(z * fl32(C/m)) (``PrivUnitG.audit_plan``); PrivUnit and Duchi, whether four coordinates share one
   float32 additive offset (:func:`shared_offset_consistent`, ``CapMechanism.audit_plan``); Purkayastha, the same shared
   offset (its upload has PrivUnit's structure; ``Purkayastha.audit_plan``); multivariate Laplace, the additive test above.
   Secure PrivUnitG and Duchi pass; PrivUnit, Purkayastha and multivariate Laplace have no secure variant.

Verdict: "violation" when the lower bound exceeds the claimed epsilon (plus 1e-9 relative tolerance), else "pass".
A correct mechanism passes with probability >= 1 - alpha. The largest bound that N samples can certify is about
ln(0.8 N / ln(1/alpha')) (alpha' the per-bound level), e.g. ~11 for N = 1e6: choose N accordingly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_privtext.privacy.mechanisms import Mechanism
from fl_privtext.privacy.mechanisms.audit_plan import (
    AuditPlan,
    Component,
    float32_consistent,
    float32_product_image,
    low_bit_component,
    shared_offset_consistent,
)
from fl_privtext.privacy.report import json_number, json_safe

__all__ = ["AuditPlan", "AuditResult", "Component", "ComponentResult", "EventBound", "audit_mechanism", "cp_lower",
           "cp_upper", "default_samples", "event_lower_bound", "float32_consistent", "float32_product_image",
           "low_bit_component", "plan_for", "shared_offset_consistent"]

HOLDOUT = 0.2
N_THRESHOLDS = 200
N_SELECT = 3
CHUNK_VALUES = 1 << 21
TOLERANCE = 1e-9
MIN_SAMPLES = 1000
SECURE_DEFAULT_SAMPLES = 200_000


# ------------------------------------------------------------------------------------------ Clopper-Pearson
def cp_lower(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson lower bound of a binomial proportion (0 when k = 0)."""
    from scipy import special

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(all="ignore"):
        lo = special.betaincinv(k, n - k + 1.0, alpha)
    return np.where(k <= 0, 0.0, lo)


def cp_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson upper bound of a binomial proportion (1 when k = n)."""
    from scipy import special

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(all="ignore"):
        hi = special.betaincinv(k + 1.0, n - k, 1.0 - alpha)
    return np.where(k >= n, 1.0, hi)


def _log_ratio_bound(num: np.ndarray, n_num: int, den: np.ndarray, n_den: int, alpha: float,
                     delta: float) -> np.ndarray:
    # eps >= ln((Pr_num(E) - delta) / Pr_den(E)) with each probability bounded at level alpha.
    lo = cp_lower(num, n_num, alpha) - delta
    hi = cp_upper(den, n_den, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(lo) - np.log(hi)
    return np.where(lo > 0, out, -np.inf)


# -------------------------------------------------------------------------------------------- event bounds
@dataclass(frozen=True)
class EventBound:
    """Best certified event for one statistic: eps >= lower_bound (per copy of the component)."""

    lower_bound: float
    event: str  # e.g. "T >= 0.75, Pr0/Pr1"
    count_num: int
    count_den: int
    n_eval: int

    def to_json(self) -> dict[str, Any]:
        return {"lower_bound": json_number(self.lower_bound), "event": self.event, "count_num": self.count_num,
                "count_den": self.count_den, "n_eval": self.n_eval}


def _ge_counts(sorted_s: np.ndarray, t: np.ndarray) -> np.ndarray:
    return sorted_s.size - np.searchsorted(sorted_s, t, side="left")


def event_lower_bound(s0: np.ndarray, s1: np.ndarray, *, alpha: float, delta: float = 0.0,
                      holdout: float = HOLDOUT, n_thresholds: int = N_THRESHOLDS,
                      n_select: int = N_SELECT) -> EventBound:
    """Lower bound on eps from scalar statistics ``s0`` (input x0) and ``s1`` (input x1), at level ``alpha``.

    Threshold events are chosen on the first ``holdout`` fraction of each sample and certified on the rest.
    """
    h0, h1 = int(holdout * s0.size), int(holdout * s1.size)
    a0, a1 = np.sort(s0[:h0]), np.sort(s1[:h1])
    b0, b1 = np.sort(s0[h0:]), np.sort(s1[h1:])
    levels = np.linspace(0.0, 1.0, n_thresholds + 1)
    t = np.unique(np.quantile(np.concatenate([a0, a1]), levels))
    level = alpha / (2 * n_select)  # Bonferroni: kept events x (lower, upper) bound

    def candidates(x0: np.ndarray, x1: np.ndarray) -> list[tuple[np.ndarray, int, np.ndarray, int]]:
        ge0, ge1 = _ge_counts(x0, t), _ge_counts(x1, t)
        lt0, lt1 = x0.size - ge0, x1.size - ge1
        return [(ge0, x0.size, ge1, x1.size), (ge1, x1.size, ge0, x0.size),
                (lt0, x0.size, lt1, x1.size), (lt1, x1.size, lt0, x0.size)]

    names = ("T >= {t:.6g}, Pr0/Pr1", "T >= {t:.6g}, Pr1/Pr0", "T < {t:.6g}, Pr0/Pr1", "T < {t:.6g}, Pr1/Pr0")
    held = np.stack([_log_ratio_bound(n, nn, d, nd, level, delta) for n, nn, d, nd in candidates(a0, a1)])
    order = np.argsort(held, axis=None)[::-1][:n_select]
    evals = candidates(b0, b1)
    best = EventBound(0.0, "none certified", 0, 0, int(b0.size))
    for flat in order:
        kind, j = np.unravel_index(flat, held.shape)
        if not np.isfinite(held[kind, j]):
            continue
        num, n_num, den, n_den = evals[kind]
        lb = float(_log_ratio_bound(num[j:j + 1], n_num, den[j:j + 1], n_den, level, delta)[0])
        if lb > best.lower_bound:
            best = EventBound(lb, names[kind].format(t=t[j]), int(num[j]), int(den[j]), int(n_num))
    return best


# ------------------------------------------------------------------------------------------------- plans
def plan_for(mech: Mechanism, *, default_dim: int = 4) -> AuditPlan:
    """Worst-case pair and statistics for ``mech``: what the mechanism declares (``Mechanism.audit_plan``; each
    class's docstring says its pair and statistics). ``default_dim`` is used when the mechanism has dim=None.

    In short: bit mechanisms, the randomiser on codes all-ones vs all-zeros, one component per (p_j, q_j) class;
    laplace-l1 and gaussian, C*e_1 vs -C*e_1; laplace-dpnr(-code), (0,1,...,1) vs (1,0,...,0); laplace-box, low*1
    vs high*1; none, 0 vs e_1; privunit and duchi, -C*e_1 vs C*(1/2,1/2,1/2,1/2,0,...); privunitg, C*e_1 vs C*e_2;
    mvlaplace, C*e_1 vs -C*e_1; purkayastha, as privunit. Mvlaplace's and purkayastha's published claim is per unit
    distance, so the default audit (against the nominal epsilon) finds a violation; audit against
    ``claimed_epsilon=mech.epsilon_worst_case`` for the LDP value; ``low_bits=False`` audits the calibration alone.
    """
    return mech.audit_plan(default_dim)


# ------------------------------------------------------------------------------------------------- audit
@dataclass(frozen=True)
class ComponentResult:
    label: str
    multiplicity: int
    bound: EventBound

    def to_json(self) -> dict[str, Any]:
        out = {"label": self.label, "multiplicity": self.multiplicity}
        out.update(self.bound.to_json())
        out["contribution"] = json_number(self.multiplicity * max(0.0, self.bound.lower_bound))
        return out


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit_mechanism`; ``to_json()`` is what the CLI prints."""

    mechanism: str
    parameters: dict[str, Any]
    epsilon_claimed: float
    epsilon_worst_case: float
    delta: float
    epsilon_lower_bound: float
    composed_lower_bound: float
    verdict: str
    samples: int
    alpha: float
    pair: str
    components: tuple[ComponentResult, ...]
    whole_vector: ComponentResult | None
    max_certifiable: float
    detectors: tuple[ComponentResult, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "parameters": json_safe(self.parameters),
            "epsilon_claimed": json_number(self.epsilon_claimed),
            "epsilon_worst_case": json_number(self.epsilon_worst_case),
            "delta": self.delta,
            "epsilon_lower_bound": json_number(self.epsilon_lower_bound),
            "verdict": self.verdict,
            "samples": self.samples,
            "alpha": self.alpha,
            "pair": self.pair,
            "composed_lower_bound": json_number(self.composed_lower_bound),
            "components": [c.to_json() for c in self.components],
            "whole_vector": None if self.whole_vector is None else self.whole_vector.to_json(),
            "detectors": [c.to_json() for c in self.detectors],
            "max_certifiable_per_statistic": json_number(self.max_certifiable),
            "notes": list(self.notes),
        }


def default_samples(output_dim: int) -> int:
    """Samples per input: as many as 2^25 output values allow, between 20,000 and 1,000,000."""
    return int(min(1_000_000, max(20_000, (1 << 25) // max(1, output_dim))))


def _collect(plan: AuditPlan, x: np.ndarray, stats: list[Component], n: int,
             rng: np.random.Generator) -> list[np.ndarray]:
    rows = max(1, min(n, CHUNK_VALUES // max(1, plan.output_dim)))
    batch = np.ascontiguousarray(np.broadcast_to(x, (rows, x.size)))
    out = [np.empty(n, dtype=np.float64) for _ in stats]
    for s in range(0, n, rows):
        m = min(rows, n - s)
        y = plan.sample(batch[:m], rng)
        for o, c in zip(out, stats, strict=True):
            o[s:s + m] = c.statistic(y)
    return out


def audit_mechanism(mech: Mechanism, rng: np.random.Generator, *, samples: int | None = None,
                    alpha: float = 0.05, claimed_epsilon: float | None = None,
                    default_dim: int = 4, low_bits: bool = True) -> AuditResult:
    """Audit ``mech`` against ``claimed_epsilon`` (default: its published claim for one upload, without mu).

    ``low_bits=False`` leaves out the low-bit distinguisher: the audit then checks the calibration of the ideal
    real-valued mechanism only (the floating-point sampler is known to fail the full audit)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in the open interval (0, 1), got {alpha}.")
    plan = plan_for(mech, default_dim=default_dim)
    n = default_samples(plan.output_dim) if samples is None else samples
    if samples is None and getattr(mech, "sampler", "float") == "secure":
        n = min(n, SECURE_DEFAULT_SAMPLES)  # the exact sampler costs ~3x the float one per value
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_SAMPLES:
        raise ValueError(f"samples must be an integer >= {MIN_SAMPLES}, got {samples!r}.")
    n = int(n)
    claimed = mech.claimed_epsilon if claimed_epsilon is None else float(claimed_epsilon)
    extra = list(plan.extra) if low_bits else []
    stats = list(plan.components) + ([plan.whole] if plan.whole is not None else []) + extra
    if plan.delta > 0 and any(c.multiplicity != 1 for c in plan.components):
        raise ValueError("Analytic composition of per-component bounds needs delta = 0.")
    per_stat_alpha = alpha / len(stats)
    s0 = _collect(plan, plan.x0, stats, n, rng)
    s1 = _collect(plan, plan.x1, stats, n, rng)
    results = [ComponentResult(c.label, c.multiplicity,
                               event_lower_bound(a, b, alpha=per_stat_alpha, delta=plan.delta))
               for c, a, b in zip(stats, s0, s1, strict=True)]
    comp_results = tuple(results[: len(plan.components)])
    whole = results[len(plan.components)] if plan.whole is not None else None
    extras = tuple(results[len(plan.components) + (plan.whole is not None):])
    composed = float(sum(r.multiplicity * max(0.0, r.bound.lower_bound) for r in comp_results))
    lower = max([composed, whole.bound.lower_bound if whole is not None else 0.0,
                 *(r.bound.lower_bound for r in extras)])
    violation = lower > claimed * (1.0 + TOLERANCE) + TOLERANCE
    n_eval = n - int(HOLDOUT * n)
    level = per_stat_alpha / (2 * N_SELECT)
    notes = ["Word dropout (mu) is not audited: the audit uses representation-level replacement adjacency."] \
        if mech.mu > 0 else []
    return AuditResult(
        mechanism=mech.name, parameters=mech.params, epsilon_claimed=claimed,
        epsilon_worst_case=mech.epsilon_worst_case, delta=plan.delta, epsilon_lower_bound=lower,
        composed_lower_bound=composed, verdict="violation" if violation else "pass", samples=n, alpha=alpha,
        pair=plan.pair, components=comp_results, whole_vector=whole, detectors=extras,
        max_certifiable=math.log(n_eval / math.log(1.0 / level)), notes=tuple(notes),
    )
