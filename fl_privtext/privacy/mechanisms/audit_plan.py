"""What an audit plan is, and the statistics mechanisms build their plans from (`fl_privtext.privacy.audit`).

Each mechanism declares its plan (``Mechanism.audit_plan``): the worst-case input pair, how to sample it, and the
statistics to audit (per-component, whole-vector, and gross-violation detectors such as the low-bit distinguisher
of Mironov 2012). The audit itself (events, Clopper-Pearson bounds, the verdict) is in `fl_privtext.privacy.audit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


# ------------------------------------------------------------------------------------------------- plans
@dataclass(frozen=True)
class Component:
    """A scalar statistic of the output standing for ``multiplicity`` identical independent copies."""

    label: str
    multiplicity: int
    statistic: Callable[[np.ndarray], np.ndarray]  # (n, output_dim) -> (n,)


@dataclass(frozen=True)
class AuditPlan:
    """Worst-case pair, how to sample the mechanism on it, and which statistics to audit."""

    x0: np.ndarray  # (input_dim,)
    x1: np.ndarray
    sample: Callable[[np.ndarray, np.random.Generator], np.ndarray]  # (n, input_dim) -> (n, output_dim)
    output_dim: int
    components: tuple[Component, ...]
    whole: Component | None
    pair: str
    delta: float = 0.0
    extra: tuple[Component, ...] = ()  # further gross-violation detectors (not composed), e.g. the low-bit test


def column(j: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda y: y[:, j]


def float32_consistent(y: np.ndarray, x: float) -> np.ndarray:
    """(n,) bool: whether float32 value y can be fl32(x + n) for some float32 n (float32 addition rounds exactly).

    The candidate n is the float32 nearest to y - x (in float64) and its two neighbours: any n outside them gives
    x + n at least one ulp of y away."""
    y32 = np.asarray(y, dtype=np.float32)
    x32 = np.float32(x)
    n0 = (y32.astype(np.float64) - np.float64(x32)).astype(np.float32)
    out = np.zeros(y32.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for n in (n0, np.nextafter(n0, np.float32(np.inf)), np.nextafter(n0, np.float32(-np.inf))):
            out |= (x32 + n) == y32
    return out


def low_bit_component(x1: np.ndarray, j: int = 0) -> Component:
    """The low-bit distinguisher on coordinate ``j`` (module docstring, step 5)."""
    return Component(f"low bits of coordinate {j} (float32 consistency with x1)", 1,
                     lambda y: float32_consistent(y[:, j], float(x1[j])).astype(np.float64))


def laplace_llr(x0: np.ndarray, x1: np.ndarray, scale: float) -> Callable[[np.ndarray], np.ndarray]:
    # ln p(y|x0) - ln p(y|x1) for i.i.d. Laplace(scale) noise, over the coordinates where the pair differs.
    # float64 (exact for float32 y near the pair) and rounded to 1e-9: otherwise float32 rounding of |y - x|
    # differs between the two inputs and the audit certifies the floating-point artefact (Mironov 2012)
    # instead of the mechanism's calibration.
    diff = np.flatnonzero(x0 != x1)
    a, b = x0[diff].astype(np.float64), x1[diff].astype(np.float64)

    def llr(y: np.ndarray) -> np.ndarray:
        z = y[:, diff].astype(np.float64)
        return np.round((np.abs(z - b) - np.abs(z - a)).sum(axis=1) / scale, 9)

    return llr


SHARED_BLOCK = 4  # x1 = C (1/2, 1/2, 1/2, 1/2, 0, ...): a unit vector with equal float32 entries on 4 coordinates
OFFSET_SLACK = 32.0  # error bound of the block mean, in units of 2^-23 (float32 rounding) times the magnitudes


def shared_offset_consistent(y: np.ndarray, block: int = SHARED_BLOCK) -> np.ndarray:
    """(n,) bool: whether y[:, :block] can be fl32(A_j + b) for float32 A_j and ONE float32 b (see CapMechanism.audit_plan).

    b is estimated by the block mean b_hat; beta = |b_hat| - err is a certain lower bound on |b| (err: 32 x 2^-23
    times the magnitudes, several times the float32 roundings of y_j, A_j and of the orthogonal-noise projection).
    A coordinate with |y_i| <= beta/4 then satisfies |A_i| in (|b|/2, 2|b|), so y_i = A_i + b exactly (Sterbenz)
    and y_i is a multiple of ulp(|b|/2) >= g = 2^(floor(log2(beta/2)) - 23). False (inconsistent) when such a
    coordinate lies off the grid g: impossible under a shared additive float32 offset.
    """
    yb = np.asarray(y[:, :block], dtype=np.float32).astype(np.float64)
    b_hat = yb.sum(axis=1) / block
    err = 2.0 ** -23 * OFFSET_SLACK * (np.abs(yb).sum(axis=1) + block * np.abs(b_hat)) / block
    beta = np.abs(b_hat) - err
    ok = beta > 2.0 ** -120  # normal float32 range: the ulp formula holds
    g = np.exp2(np.floor(np.log2(np.where(ok, beta / 2.0, 1.0))) - 23.0)
    small = (np.abs(yb) <= (beta / 4.0)[:, None]) & ok[:, None]
    ratio = yb / g[:, None]  # exact: g is a power of two
    return ~(small & (np.floor(ratio) != ratio)).any(axis=1)


def float32_product_image(y: np.ndarray, scale: float) -> np.ndarray:
    """(n,) bool: whether float32 y equals fl32(z * fl32(scale)) for some float32 z (float32 products round exactly).

    Candidates: the float32 nearest to y / scale and its two neighbours (any other z is an ulp or more away)."""
    y32 = np.asarray(y, dtype=np.float32)
    s32 = np.float32(scale)
    z0 = (y32.astype(np.float64) / np.float64(s32)).astype(np.float32)
    out = np.zeros(y32.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for z in (z0, np.nextafter(z0, np.float32(np.inf)), np.nextafter(z0, np.float32(-np.inf))):
            out |= (z * s32) == y32
    return out


def angle_to(y: np.ndarray, u: np.ndarray) -> np.ndarray:
    # (n,) float64 angle between the rows of y and the unit vector u (arctan2 of the orthogonal and parallel parts:
    # accurate near 0 and pi, where arccos of the cosine is not)
    z = y.astype(np.float64)
    par = z @ u
    rest = z - par[:, None] * u
    return np.arctan2(np.sqrt(np.einsum("ij,ij->i", rest, rest)), par)
