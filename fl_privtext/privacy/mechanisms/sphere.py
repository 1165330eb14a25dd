"""The sphere mechanisms' shared part: the unit-sphere samplers, the cap calibration, the public projection
(:class:`ProjectedMechanism`) and the cap family (:class:`CapMechanism`). The mechanisms: PrivUnitG
(:mod:`.privunitg`), PrivUnit and Duchi et al.'s L2 sampler (:mod:`.privunit`); the metric-DP ones
(:mod:`.metric_dp`) take the same projection.

All three cap mechanisms share one structure. The input u is a unit vector; with probability p the output direction
V is drawn from the "cap" {<V, u> >= gamma} of a rotation-invariant law, otherwise from its complement, and the upload
is C * V / m with m = E<V, u>, so that it is an unbiased estimate of C * u. The density of V given u is the base
density times p/q on the cap and (1-p)/(1-q) off it (q = base probability of the cap), so for ANY two inputs the
likelihood ratio is one of e^eps, 1, e^-eps with

    eps = ln(p (1-q) / (q (1-p)))                                            (exact; no inequality involved)

and it depends only on whether <V, u> >= gamma for each of the two inputs (what the audit uses).

Inputs: clipped to the L2 ball of radius C (``clip_norm``) and divided by C, then mapped to the sphere by
``sphere_map``:
- ``"round"`` (default; Duchi et al. 2018, step 1): u = +x/||x|| with probability (1 + ||x||)/2, else -x/||x||
  (a uniformly random direction when x = 0), so E[u] = x and the upload is unbiased for the clipped x itself.
  The rounding uses the client's secret randomness; a mixture of eps-LDP outputs is eps-LDP.
- ``"normalise"``: u = x/||x|| (random direction for x = 0): unbiased for the direction C * x/||x|| only.

An optional public projection (``projection = random | pca``, ``proj_dim = k``; see
:mod:`fl_privtext.privacy.projection`) runs before the clipping; the mechanism then works in k dimensions.
All per-row scalars are float64; the (N, k) arrays are float32. Samplers are floating-point and pseudo-random
(simulation grade, Mironov 2012), except the secure samplers of PrivUnitG and Duchi (``sampler="secure"``): the input
rounded to a sign vertex, then an exact draw on an integer grid conditioned on the cap (:func:`sample_secure_caps`,
:func:`signed_scaled`, ``CapMechanism.secure_sign_vertex``; constructions and proofs in :mod:`.privunitg` and
:class:`~fl_privtext.privacy.mechanisms.privunit.Duchi`). PrivUnit has no secure variant (its law, uniform on a cap
of the sphere, has no exact finite sampler here: on a grid it becomes secure PrivUnitG or secure Duchi): float_safe
is false, and the audit's low-bit distinguisher certifies the leak (docs/privacy.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fl_privtext.privacy import exact
from fl_privtext.privacy.mechanisms.audit_plan import (
    SHARED_BLOCK,
    AuditPlan,
    Component,
    shared_offset_consistent,
)
from fl_privtext.privacy.mechanisms.base import (
    COMPOSITION,
    REPLACEMENT,
    Mechanism,
    NoiseMoments,
    check_dim,
    check_positive,
    set_field,
)
from fl_privtext.privacy.projection import PROJECTIONS, PublicProjection, random_projection
from fl_privtext.privacy.stage import Stage

SPHERE_MAPS = ("round", "normalise")
FLOAT_NOISE = (
    "Noise is floating-point (float64 per-row scalars, float32 vectors) and pseudo-random: simulation grade. "
    "epsilon_worst_case holds for the exact real-valued mechanism; the float32 output's low bits may reveal more "
    "(Mironov 2012), so float_safe is false. No secure sampler is offered for this mechanism (privacy.sampler does "
    "not apply)."
)
# What the audit's low-bit distinguisher certifies against the float PrivUnit / Duchi (CapMechanism.audit_plan: a
# shared float32 offset on a block of coordinates) and the float Purkayastha (metric_dp; Purkayastha.audit_plan, the
# same detector: its upload has PrivUnit's structure), measured by the command given, and carried by their reports
# (float_safe false). The bound is limited by the sample count (no output from x1 is ever inconsistent; ~18-19%
# from x0 are, for every epsilon and dim >= 4 tried): the leak is at least this, not at most. Purkayastha's claim
# is per radian: its bound is also far above its LDP value pi x epsilon (epsilon_worst_case).
LOW_BIT_AUDIT: dict[str, dict[str, Any]] = {
    name: {"epsilon_lower_bound": bound, "epsilon_claimed": 1.0, "epsilon_worst_case": worst, "dim": 16,
           "samples_per_input": 1_000_000, "alpha": 0.05,
           # duchi's default sampler is the secure one (issue #35): its float sampler is named
           "command": f"fl-privtext audit {name} --set epsilon=1 --set dim=16"
                      f"{' --set sampler=float' if name == 'duchi' else ''} --seed 0",
           "detector": "shared float32 offset of coordinates 0-3 (x1 = C(1/2,1/2,1/2,1/2,0,...) vs x0 = -C e_1)",
           "note": "sample-limited lower bound on the float sampler's epsilon; the ideal mechanism's calibration "
                   "passes the same audit"}
    for name, bound, worst in (("privunit", 10.14, 1.0), ("duchi", 10.22, 1.0), ("purkayastha", 10.21, math.pi))
}
CHUNK_VALUES = 1 << 20
TINY_NORM = 1e-30  # rows shorter than this have no representable direction (1/norm would overflow float32)
MAX_EPSILON = 20.0  # 1 - p >= 2e-9 >> 2^-53, the resolution of the uniforms deciding the cap
AFT_PAPER = ("Asi, Feldman, Talwar. Optimal Algorithms for Mean Estimation under Local Differential Privacy, "
             "ICML 2022")
BHOWMICK_PAPER = ("Bhowmick, Duchi, Freudiger, Kapoor, Rogers. Protection Against Reconstruction and Its "
                  "Applications in Private Federated Learning, arXiv:1812.00984 (2018)")
DUCHI_PAPER = ("Duchi, Jordan, Wainwright. Minimax Optimal Procedures for Locally Private Estimation, JASA 2018 "
               "(L2 sampling strategy, Section 4.2.3)")


# ------------------------------------------------------------------------------------------------- samplers
def uniform_directions(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """(n, dim) float64 unit vectors, uniform on the sphere (normalised Gaussians; a zero draw is redrawn)."""
    out = rng.standard_normal((n, dim))
    norms = np.linalg.norm(out, axis=1)
    while (bad := norms == 0).any():  # probability ~0; never divide by zero
        out[bad] = rng.standard_normal((int(bad.sum()), dim))
        norms = np.linalg.norm(out, axis=1)
    return out / norms[:, None]


def row_norms(x: np.ndarray) -> np.ndarray:
    """(n,) float64 L2 norms of float32 rows: a float32 pass, redone in float64 where it overflowed or underflowed."""
    sq = np.einsum("ij,ij->i", x, x).astype(np.float64)
    bad = ~np.isfinite(sq) | (sq < TINY_NORM ** 2)
    if bad.any():
        sq[bad] = np.einsum("ij,ij->i", x[bad], x[bad], dtype=np.float64)
    return np.sqrt(sq)


def to_sphere(x: np.ndarray, rng: np.random.Generator, rule: str, *,
              radius: float = 1.0) -> tuple[np.ndarray, dict[str, int]]:
    """Rows of the ball of radius ``radius`` (n, k) -> unit rows (n, k) float32 by ``rule`` ("round"/"normalise").

    round: +x/||x|| with probability (1 + ||x||/radius)/2, else -x/||x||, so E[radius u] = x (Duchi et al. 2018).
    normalise: x/||x||. Zero rows (norm < 1e-30) get a uniformly random direction (E[u] = 0) under both rules.
    """
    if rule not in SPHERE_MAPS:
        raise ValueError(f"sphere_map must be one of {', '.join(SPHERE_MAPS)}, got {rule!r}.")
    norms = row_norms(x)  # (n,)
    r = np.minimum(norms / radius, 1.0)
    zero = norms < TINY_NORM  # no float32 direction below this: treated as 0 (bias < 1e-30, privacy unaffected)
    factor = np.divide(1.0, norms, out=np.zeros_like(norms), where=~zero)
    flipped = 0
    if rule == "round":
        keep = rng.random(x.shape[0]) < (1.0 + r) / 2.0
        factor = np.where(keep, factor, -factor)
        flipped = int((~keep & ~zero).sum())
    u = x * factor.astype(np.float32)[:, None]
    if zero.any():
        u[zero] = uniform_directions(int(zero.sum()), x.shape[1], rng)
    return u, {"zero_rows": int(zero.sum()), "flipped_rows": flipped}


def truncated_normal(t: float, upper: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exact N(0, 1) conditioned on W >= t (where ``upper``) or W < t (elsewhere); (n,) float64.

    Inverse CDF in log space: W = -Phi^-1(U Phi(-t)) resp. Phi^-1(U Phi(t)) with U uniform on (0, 1], through
    ``ndtri_exp`` (accurate in both tails). No rejection and no fallback to an untruncated normal (the
    apple/ml-projunit sampler falls back to plain Gaussian noise with probability ~2^-25, which breaks pure DP:
    its output can then land on the wrong side of the threshold). The side is enforced exactly.
    """
    from scipy import special

    up = np.asarray(upper, dtype=bool)
    log_u = np.log1p(-rng.random(up.shape))  # ln U, U = 1 - uniform[0, 1) in (0, 1]
    w = np.empty(up.shape, dtype=np.float64)
    w[up] = -special.ndtri_exp(log_u[up] + special.log_ndtr(-t))
    w[~up] = special.ndtri_exp(log_u[~up] + special.log_ndtr(t))
    w[up] = np.maximum(w[up], t)
    w[~up] = np.minimum(w[~up], np.nextafter(t, -math.inf))
    return w


def cap_inner_products(dim: int, q: float, upper: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """<V, u> for V uniform on S^(dim-1) conditioned on the cap {<V,u> >= gamma} (``upper``) or its complement.

    W = <V, u> = 2B - 1 with B ~ Beta(a, a), a = (dim-1)/2; the cap of probability q is {W >= gamma} with
    gamma = 1 - 2 I^-1_q(a, a). Exact inverse CDF: cap W = 1 - 2 I^-1(U q), complement W = 2 I^-1(U (1-q)) - 1
    (Beta(a, a) is symmetric), U uniform on (0, 1]; (n,) float64.
    """
    from scipy import special

    a = (dim - 1) / 2.0
    up = np.asarray(upper, dtype=bool)
    u = 1.0 - rng.random(up.shape)
    w = np.empty(up.shape, dtype=np.float64)
    w[up] = 1.0 - 2.0 * special.betaincinv(a, a, u[up] * q)
    w[~up] = 2.0 * special.betaincinv(a, a, u[~up] * (1.0 - q)) - 1.0
    gamma = cap_threshold(dim, q)
    w[up] = np.maximum(w[up], gamma)
    w[~up] = np.minimum(w[~up], np.nextafter(gamma, -math.inf))
    return np.clip(w, -1.0, 1.0)


def cap_threshold(dim: int, q: float) -> float:
    """gamma with Pr[<V, u> >= gamma] = q for V uniform on S^(dim-1)."""
    from scipy import special

    a = (dim - 1) / 2.0
    return float(1.0 - 2.0 * special.betaincinv(a, a, q))


def orthogonal_noise(u: np.ndarray, rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    # out <- Z ~ N(0, I) (n, k) float32; returns <Z, u> (n,) float64. Z - <Z,u> u is N(0, I - u u^T).
    rng.standard_normal(dtype=np.float32, out=out)
    return np.einsum("ij,ij->i", out, u).astype(np.float64)


# ---------------------------------------------------------------------------------------------- calibration
@dataclass(frozen=True)
class CapCalibration:
    """Parameters of a cap mechanism: p, q, the cap threshold, m = E<V,u> and the unbiased-output MSE.

    ``threshold`` is in the sampler's units (PrivUnitG: N(0, 1) coordinates, i.e. gamma/sigma; PrivUnit and
    Duchi: the inner product on the unit sphere). ``mse`` is E||V/m - u||^2 for a unit input u.
    """

    p: float
    q: float
    threshold: float
    m: float
    mse: float

    @property
    def epsilon(self) -> float:
        """ln(p (1-q) / (q (1-p))), the exact worst-case epsilon of these parameters."""
        return (math.log(self.p) - math.log1p(-self.p)) + (math.log1p(-self.q) - math.log(self.q))


def split_q(epsilon: float, eps0: float) -> tuple[float, float]:
    # p = e^eps0/(1+e^eps0) and q with p(1-q)/(q(1-p)) = e^eps exactly: (1-q)/q = e^(eps-eps0).
    from scipy import special

    return float(special.expit(eps0)), float(special.expit(-(epsilon - eps0)))


def optimise_eps0(epsilon: float, mse_of: Any) -> float:
    # eps0 in (0, eps) minimising the MSE: coarse grid, then bounded Brent inside the best bracket.
    grid = np.linspace(0.0, epsilon, 202)[1:-1]
    vals = np.array([mse_of(float(e)) for e in grid])
    i = int(np.nanargmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    if lo == hi:
        return float(grid[i])
    from scipy import optimize  # here, not at import: the torch-free ClientApp loads this module (~0.1 s)

    res = optimize.minimize_scalar(mse_of, bounds=(float(lo), float(hi)), method="bounded",
                                   options={"xatol": 1e-10 * max(1.0, epsilon)})
    return float(res.x) if res.fun <= vals[i] else float(grid[i])


SECURE_SCALE = 64.0  # the secure PrivUnitG base law: DLap(64) per coordinate, P(x) ~ exp(-|x| / 64) on the integers
TWO53 = 1 << 53


def sample_secure_caps(n: int, dim: int, cal: CapCalibration, bits: exact.SecureBits,
                       out: np.ndarray | None = None, draws: Callable[[int], np.ndarray] | None = None,
                       gather: np.ndarray | None = None) -> np.ndarray:
    """(n, dim) integer-valued float64 rows X ~ DLap(SECURE_SCALE)^dim conditioned on {sum X >= g} with an exact
    Bernoulli(p) coin, else on {sum X < g} (into ``out[:n]`` when given; ``draws`` reuses a sampler's buffers, or
    gives another sign-invariant integer base law: :class:`SignDraws` for the secure Duchi).

    Exact: base rows are drawn in cache-sized batches and split by side, and the i-th output row needing a cap takes
    the i-th cap row drawn (order only, never values), so each is an independent draw of the conditional law. The
    coin compares 53 secure bits with p * 2^53 (p is a multiple of 2^-53).
    """
    coins = (bits.words(n) >> np.uint64(11)) < np.uint64(round(cal.p * TWO53))
    res = np.empty((n, dim), dtype=np.float64) if out is None else out[:n]
    dest = {True: np.flatnonzero(coins), False: np.flatnonzero(~coins)}
    done = {True: 0, False: 0}
    draws = draws if draws is not None else exact.LaplaceDraws(SECURE_SCALE, bits)
    g = cal.threshold
    batch = max(1, exact.CHUNK // dim)
    while done[True] < dest[True].size or done[False] < dest[False].size:
        want = max((dest[True].size - done[True]) / cal.q, (dest[False].size - done[False]) / (1.0 - cal.q))
        rows = int(min(batch, 1.05 * want + 2))
        x = draws(rows * dim).reshape(rows, dim)
        side = x.sum(axis=1) >= g  # exact: integers far below 2^53
        for key in (True, False):
            to = dest[key][done[key]:]
            if to.size:
                src = np.flatnonzero(side == key)[: to.size]
                if gather is not None and gather.shape[0] >= src.size and gather.shape[1] == dim:
                    res[to[: src.size]] = np.take(x, src, axis=0, out=gather[: src.size])
                else:
                    res[to[: src.size]] = x[src]
                done[key] += src.size
    return res


def signed_scaled(x: np.ndarray, r: np.ndarray, scale: float, bits: exact.SecureBits,
                  out: np.ndarray | None = None, scratch: np.ndarray | None = None) -> np.ndarray:
    """x (n, k) float64 -> scale * diag(s) x (into ``out``, float32 by default; x is overwritten), s the sign vertex
    of rows r (|r_i| <= 1; r is overwritten): s_i = +1 with probability ceil((1 + r_i) 2^31) / 2^32 (32 secure bits;
    E[s] = r within 2^-32, and the coins need not be exact: any mixture of eps-LDP outputs is eps-LDP). Zeros come
    out as +0.0: a -0.0 would reveal s_i where X_i = 0 (for the input e_1 vs -e_1, with certainty). ``scratch``: a
    buffer of x.size 64-bit words or more."""
    n = r.size
    sb = np.empty(n, dtype=np.uint64) if scratch is None else scratch.reshape(-1).view(np.uint64)[:n]
    u = bits.words((n + 1) // 2).view(np.uint32)[:n].reshape(r.shape)
    np.clip(r, -1.0, 1.0, out=r)
    r *= 2.0**31
    r += 2.0**31  # (1 + r) / 2 * 2^32
    flip = sb.reshape(r.shape)
    np.greater_equal(u, r, out=flip, casting="unsafe")  # 1 where s_i = -1
    flip <<= np.uint64(63)
    xv = x.view(np.uint64)
    xv ^= flip  # x_i -> -x_i where s_i = -1
    res = np.empty(r.shape, dtype=np.float32) if out is None else out
    np.multiply(x, scale, out=res, casting="same_kind")
    res += np.float32(0.0)  # -0.0 + 0.0 = +0.0
    return res


def secure_signs(mech: CapMechanism, y: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The secure cap samplers' integer draw Y = diag(s) X recovered from the upload (N, D) (the upload is
    fl32(C / m Y), Y integers far below 2^24) and the vertex-rounding means r (M, D) of the codes: r = c / max(|c|, C)
    (``round``) or c / |c| (``normalise``), 0 for a zero code (as the sampler does)."""
    clip = float(mech.clip_norm)
    scale = clip / float(mech.calibration.m)
    yy = np.rint(y / scale)
    norms = np.sqrt((c * c).sum(axis=1))
    zero = norms < 1e-30
    denom = np.maximum(norms, clip) if mech.sphere_map == "round" else norms
    r = np.where(zero[:, None], 0.0, c / np.where(zero, 1.0, denom)[:, None])
    return yy, np.clip(r, -1.0, 1.0)


def cap_mixture(mech: CapMechanism, cap: np.ndarray) -> np.ndarray:
    """log(p/q Pr[cap] + (1-p)/(1-q) (1 - Pr[cap])): the density ratio to the base law B(Y), given the probability
    ``cap`` (N, M) over the vertex rounding that <s, Y> >= g (B is sign-invariant: B(diag(s) Y) = B(Y))."""
    cal = mech.calibration
    cap = np.clip(cap, 0.0, 1.0)
    return np.log(cal.p / cal.q * cap + (1.0 - cal.p) / (1.0 - cal.q) * (1.0 - cap))


FLOAT_CAP_NOTE = ("float cap law of the ideal mechanism; the secure sampler's sign-vertex construction is not "
                  "modelled")


# ------------------------------------------------------------------------------------------ projected base
@dataclass(frozen=True, kw_only=True)
class ProjectedMechanism(Mechanism):
    """Shared part of the new mechanisms: required ``dim`` (input width), ``clip_norm`` and a public projection.

    ``projection`` = "none" | "random" | "pca" with ``proj_dim`` = k: the mechanism then works on the k-dim image
    (``output_dim`` = k). random: built from the public ``proj_seed``; pca: ``projector`` fitted on public data
    (:func:`fl_privtext.privacy.projection.fit_pca`) and ``public_data`` naming it (required; the report shows both).
    """

    min_dim: ClassVar[int] = 2

    dim: int = field()  # required: the calibration depends on the width
    clip_norm: float = 1.0
    projection: str = "none"
    proj_dim: int | None = None
    proj_seed: int = 0
    public_data: str = ""
    projector: PublicProjection | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "dim", check_dim(self.dim, self.min_dim, optional=False))
        set_field(self, "clip_norm", check_positive("clip_norm", self.clip_norm))
        if self.projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {', '.join(PROJECTIONS)}, got {self.projection!r}.")
        if self.projector is not None and not isinstance(self.projector, PublicProjection):
            raise ValueError("projector must be a fl_privtext.privacy.projection.PublicProjection or None.")
        if isinstance(self.proj_seed, bool) or not isinstance(self.proj_seed, (int, np.integer)):
            raise ValueError(f"proj_seed must be an integer (a PUBLIC seed), got {self.proj_seed!r}.")  # noqa: TRY004
        if self.projection == "none":
            if self.proj_dim is not None or self.projector is not None:
                raise ValueError("proj_dim and projector need projection = 'random' or 'pca' (projection is 'none').")
            return
        k = self.proj_dim
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not self.min_dim <= k <= self.dim:
            raise ValueError(f"proj_dim must be an integer in [{self.min_dim}, dim={self.dim}] with projection = "
                             f"{self.projection!r}, got {k!r}.")
        set_field(self, "proj_dim", int(k))
        if self.projection == "random":
            if self.projector is not None:
                raise ValueError("projection = 'random' is built from the public proj_seed; do not pass a projector.")
            set_field(self, "projector", random_projection(self.dim, int(k), int(self.proj_seed)))
            return
        if not str(self.public_data).strip():
            raise ValueError("projection = 'pca' needs public_data: the name of the public dataset (disjoint from "
                             "every simulated user) the PCA was fitted on.")
        p = self.projector
        if p is not None and (p.method != "pca" or p.in_dim != self.dim or p.out_dim != k):
            raise ValueError(f"The projector must be a pca map from {self.dim} to {k} dimensions, got "
                             f"{p.method} {p.in_dim} -> {p.out_dim}.")

    @property
    def float_safe(self) -> bool:
        """False: continuous floating-point noise (see FLOAT_NOISE)."""
        return False

    @property
    def work_dim(self) -> int:
        """Width the randomiser works in: proj_dim with a projection, else dim."""
        return int(self.proj_dim) if self.proj_dim is not None else int(self.dim)

    @property
    def output_dim(self) -> int:
        return self.work_dim

    @property
    def params(self) -> dict[str, Any]:
        out = super().params
        out["projector"] = None if self.projector is None else self.projector.describe()
        return out

    def project(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Apply the public projection (if any): (N, dim) -> (N, work_dim) float32."""
        if self.projection == "none":
            return x, {}
        if self.projector is None:
            raise ValueError("projection = 'pca' needs projector=fit_pca(public_features, proj_dim, source=...) "
                             "fitted on public data before privatizing.")
        return self.projector.apply(x), {"projection": self.projection, "proj_dim": self.work_dim,
                                         "projector": self.projector.fingerprint}

    def assumptions(self) -> tuple[str, ...]:
        out: tuple[str, ...] = (REPLACEMENT, COMPOSITION, FLOAT_NOISE)
        if self.projection != "none":
            out += ((f"The {self.projection} projection to {self.work_dim} dimensions is public and fixed (it depends "
                    "on no user's data), so the guarantee of the randomiser holds for the raw input."),)
        return out


# ----------------------------------------------------------------------------------------------- cap family
@dataclass(frozen=True, kw_only=True)
class CapMechanism(ProjectedMechanism):
    """Shared part of PrivUnitG, PrivUnit and Duchi: clip -> sphere map -> cap sampling -> C V / m."""

    epsilon: float
    sphere_map: str = "round"
    _cal: CapCalibration | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_field(self, "epsilon", check_positive("epsilon", self.epsilon))
        if self.epsilon > MAX_EPSILON:
            raise ValueError(f"{self.name} supports epsilon <= {MAX_EPSILON:g}, got {self.epsilon}: beyond it 1 - p "
                             "approaches the float64 resolution of the uniform draws and the realised epsilon drifts.")
        if self.sphere_map not in SPHERE_MAPS:
            raise ValueError(f"sphere_map must be one of {', '.join(SPHERE_MAPS)}, got {self.sphere_map!r}.")
        set_field(self, "_cal", self.calibrate())

    def calibrate(self) -> CapCalibration:
        """The parameters actually used (p, q, threshold, m, MSE)."""
        raise NotImplementedError

    @property
    def calibration(self) -> CapCalibration:
        assert self._cal is not None
        return self._cal

    def normalise(self, x: np.ndarray) -> Stage:
        z, info = self.project(x)
        if self.sphere_map == "round":
            # Clipping to ||x|| <= C is applied by the rounding itself: u = +-x/||x|| with probabilities
            # (1 +- min(1, ||x||/C))/2 is the law of rounding the clipped x (saves a pass over (N, k)).
            norms = row_norms(z)
            return Stage(z, {"method": "l2-clip (inside the sphere rounding)", "clip_norm": self.clip_norm,
                             "clipped_rows": int((norms > self.clip_norm).sum()), **info})
        return Stage(z, {"method": "none (directions taken in randomise)", **info})

    def mean_output(self, c: np.ndarray) -> np.ndarray:
        """Unbiased: E[upload] = the clipped input (round), or C x/||x|| (normalise); 0 for a zero row."""
        norms = row_norms(c)
        zero = norms < TINY_NORM
        if self.sphere_map == "round":
            factor = np.minimum(1.0, np.divide(self.clip_norm, norms, out=np.ones_like(norms), where=~zero))
        else:
            factor = np.divide(self.clip_norm, norms, out=np.zeros_like(norms), where=~zero)
        factor[zero] = 0.0
        return c * factor.astype(np.float32)[:, None]

    def sample_directions(self, u: np.ndarray, rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
        """Unit inputs u (n, k) float32 (overwritten) -> out = scale * V, (n, k) float32."""
        raise NotImplementedError

    def secure_sign_vertex(self, c: np.ndarray, rng: np.random.Generator,
                           make_draws: Callable[[exact.SecureBits], Any], method: str) -> Stage:
        """The secure samplers' shared loop (secure PrivUnitG and Duchi): each row rounded to a sign vertex of its
        (clipped) direction, times an exact draw from the mechanism's grid sampler (``make_draws(bits)``, consumed
        by `sample_secure_caps`), scaled by C/m; cache-sized blocks of rows, AES-CTR bits keyed from ``rng``."""
        n, k = c.shape
        cal = self.calibration
        bits = exact.SecureBits.keyed_by(rng)
        out = np.empty((n, k), dtype=np.float32)
        scale = self.clip_norm / cal.m
        step = max(1, exact.CHUNK // max(1, k))  # cache-sized blocks of rows
        draws = make_draws(bits)
        x, r, gather = (np.empty((step, k), dtype=np.float64) for _ in range(3))
        zero_rows = 0
        for s in range(0, n, step):
            z = c[s:s + step]
            norms = np.sqrt(np.einsum("ij,ij->i", z, z, dtype=np.float64))
            zero = norms < TINY_NORM
            zero_rows += int(zero.sum())
            if self.sphere_map == "round":
                factor = np.divide(1.0, np.maximum(norms, self.clip_norm), out=np.zeros_like(norms), where=~zero)
            else:
                factor = np.divide(1.0, norms, out=np.zeros_like(norms), where=~zero)
            rows = z.shape[0]
            xb = sample_secure_caps(rows, k, cal, bits, x, draws, gather)
            rb = np.multiply(z, factor[:, None], out=r[:rows], dtype=np.float64)
            signed_scaled(xb, rb, scale, bits, out[s:s + step], gather)
        return Stage(out, {"method": method, "sphere_map": self.sphere_map, "zero_rows": zero_rows,
                           "flipped_rows": 0, "p": cal.p, "scale": scale})

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        n, k = c.shape
        out = np.empty((n, k), dtype=np.float32)
        scale = self.clip_norm / self.calibration.m
        counts = {"zero_rows": 0, "flipped_rows": 0}
        step = max(1, CHUNK_VALUES // max(1, k))
        for s in range(0, n, step):
            u, info = to_sphere(c[s:s + step], rng, self.sphere_map, radius=self.clip_norm)
            for key in counts:
                counts[key] += info[key]
            self.sample_directions(u, rng, out[s:s + step], scale)
        return Stage(out, {"method": self.name, "sphere_map": self.sphere_map, **counts,
                           "p": self.calibration.p, "scale": scale})

    @property
    def claimed_epsilon(self) -> float:
        return self.epsilon

    @property
    def epsilon_worst_case(self) -> float:
        return self.calibration.epsilon

    def direction_second_moment(self) -> float | None:
        """E[W^2] of the inner product W = <V, u> of the sampled direction with the input's (None: not given)."""
        return None

    def noise_moments(self) -> NoiseMoments | None:
        """upload = s (W u + R) with s = C / m, u the unit direction of the sphere map and R orthogonal to u with a
        rotation-invariant law given W: E[u u^T | x] = s^2 (E[W^2] u u^T + E[||R||^2] / (k - 1) (I - u u^T)) (exact;
        E[||R||^2] = k - 1 for PrivUnitG's Gaussian, 1 - E[W^2] for PrivUnit's sphere)."""
        ew2 = self.direction_second_moment()
        if ew2 is None:
            return None
        k = self.work_dim
        s2 = (self.clip_norm / self.calibration.m) ** 2
        iso = s2 * (self.orthogonal_energy(ew2) / (k - 1.0))
        return NoiseMoments("cap", iso=iso, rank_one=s2 * ew2 - iso, sphere_map=self.sphere_map,
                            clip_norm=self.clip_norm)

    def orthogonal_energy(self, ew2: float) -> float:
        """E||R||^2 of the part of V orthogonal to the input direction (unit-sphere mechanisms: 1 - E[W^2])."""
        return 1.0 - ew2

    def calibration_values(self) -> dict[str, Any]:
        cal = self.calibration
        return {"p": cal.p, "q": cal.q, "unbiasing_scale": 1.0 / cal.m,
                "mse_unit_sphere": cal.mse, "mse_at_clip_norm": self.clip_norm ** 2 * cal.mse,
                "work_dim": self.work_dim}

    def mse(self, input_norm: float | None = None) -> float:
        """Closed-form E||upload - x||^2 for an input of norm ``input_norm`` <= C after clipping (default C).

        round: C^2 (MSE_unit + 1) - ||x||^2 (the rounding is part of the noise); normalise: C^2 MSE_unit.
        """
        c2 = self.clip_norm ** 2
        if self.sphere_map == "normalise":
            return c2 * self.calibration.mse
        r = self.clip_norm if input_norm is None else min(float(input_norm), self.clip_norm)
        return c2 * (self.calibration.mse + 1.0) - r * r

    def assumptions(self) -> tuple[str, ...]:
        rule = ("x is clipped to ||x|| <= C and rounded to +-x/||x|| with probabilities (1 +- ||x||/C)/2 (Duchi et al. "
                "2018), so the upload is unbiased for the clipped x" if self.sphere_map == "round" else
                "x is normalised to x/||x||; the upload is unbiased for C x/||x||")
        return super().assumptions() + (
            f"Inputs: {rule}; a zero input gets a uniformly random direction.",
            ("The likelihood ratio of any two inputs is e^eps, 1 or e^-eps and depends only on which inputs' caps "
            "contain the output: exactly eps-LDP on the sphere and, by the rounding, on the ball."),
        )

    def cap_log_likelihood(self, y: np.ndarray, c: np.ndarray) -> np.ndarray:
        """PrivUnit, PrivUnitG, Duchi: exact log density ratio of the upload to the mechanism's base law.

        The upload is y = C V / m. Given the unit direction u, V's density relative to its base law (uniform on the
        sphere for PrivUnit/Duchi, N(0, I) for PrivUnitG, whose truncation acts on <V, u> alone) is r(<V, u>) with
        r(s) = p/q for s >= threshold and (1-p)/(1-q) below. The code c (the clean projected input, or a class mean)
        gives u = +c/|c| with probability a = (1 + min(1, |c|/C))/2 and -c/|c| otherwise under the ``round`` sphere
        map (a = 1 under ``normalise``); a zero code gives a uniform u, whose average ratio is exactly 1. So
        log P[y | c] = log(a r(s) + (1 - a) r(-s)) + log base(y), s = <y, c/|c|> m / C; the base term is the same
        for every code and dropped.
        """
        cal = self.calibration
        clip = float(self.clip_norm)
        inside, outside = math.log(cal.p) - math.log(cal.q), math.log1p(-cal.p) - math.log1p(-cal.q)
        norms = np.sqrt((c * c).sum(axis=1))
        zero = norms < 1e-30
        unit = c / np.where(zero, 1.0, norms)[:, None]
        s = (y @ unit.T) * (cal.m / clip)  # (N, M): <V, u>
        a = (1.0 + np.minimum(1.0, norms / clip)) / 2.0 if self.sphere_map == "round" else np.ones_like(norms)
        log_r = np.where(s >= cal.threshold, inside, outside)
        log_r_flip = np.where(-s >= cal.threshold, inside, outside)
        with np.errstate(divide="ignore"):
            out = np.logaddexp(np.log(a)[None, :] + log_r, np.log1p(-a)[None, :] + log_r_flip)
        out[:, zero] = 0.0
        return out

    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The float cap law (`cap_log_likelihood`); the secure samplers declare their own."""
        return self.cap_log_likelihood(uploads, codes)

    def likelihood_note(self) -> str:
        """Exact for the float sampler; a secure sampler without its own likelihood gets the float law, labelled."""
        return FLOAT_CAP_NOTE if getattr(self, "sampler", "float") == "secure" else ""

    def audit_pair(self) -> tuple[np.ndarray, np.ndarray, str, tuple[Component, ...]]:
        """The cap family's audit pair (x0, x1, its description, the low-bit detectors): -C*e_1 vs
        C*(1/2,1/2,1/2,1/2,0,...) with the shared float32 offset of coordinates 0-3 (`shared_offset_consistent`) as
        the low-bit distinguisher at k >= 4; the antipodal pair, without it, below."""
        k = self.work_dim
        x0 = np.zeros(k)
        x0[0] = -self.clip_norm
        extra: tuple[Component, ...] = ()
        if k < SHARED_BLOCK:
            x1 = -x0
            pair = (f"C*e_1 vs -C*e_1 on the sphere of radius C in {k} dimensions (randomiser stage; no low-bit "
                    "detector below 4 dimensions)")
        else:
            x1 = np.zeros(k)
            x1[:SHARED_BLOCK] = 0.5 * self.clip_norm
            low = Component("shared float32 offset of coordinates 0-3 (consistency with x1)", 1,
                            lambda y: shared_offset_consistent(y).astype(np.float64))
            extra = (low,)
            pair = (f"-C*e_1 vs C*(1/2,1/2,1/2,1/2,0,...) on the sphere of radius C in {k} dimensions "
                    "(randomiser stage)")
        return x0, x1, pair, extra

    def audit_sample(self, c: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The randomiser on float32 inputs, as the pipeline's normalise stage hands them over (a float64 batch
        would make u float64 and the offset b a float64 that no float32 grid holds, which is not what a client
        computes)."""
        return self.randomise(np.asarray(c, dtype=np.float32), rng).values

    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """`audit_pair`; the exact likelihood-ratio class 1[<y,u0> >= tau] - 1[<y,u1> >= tau] (the ratio is e^eps,
        1 or e^-eps) at full (working) dimension, plus the low-bit distinguisher."""
        # PrivUnit and Duchi (float): pair x0 = -C e_1, x1 = C (1/2, 1/2, 1/2, 1/2, 0, ...) (k >= 4; else antipodal).
        # The likelihood ratio of two inputs depends only on which caps contain the output:
        # eps * (1[<y, u0> >= tau] - 1[<y, u1> >= tau]), tau = C/m * threshold (the cap boundary in output units).
        # Low-bit distinguisher (float sampler): the upload is fl32(f (Z - <Z,u> u)) + fl32(u_j * fl32(C/m W)) with a
        # per-row float32 factor f; for u1 the four block coordinates get the SAME float32 offset b = fl32(C/(2m) W),
        # so every block coordinate that nearly cancels b is exactly A_i + b and lies on b's coarser grid, whereas from
        # x0 they are plain products fl32(f Z_j) with free low bits (:func:`shared_offset_consistent`: probability 1
        # from x1, ~0.82 from x0 at k = 16). No known constant enters, so the per-row renormalisation f, which hides
        # the single-coordinate product test of PrivUnitG, does not help. Secure Duchi (the sign-vector grid) passes:
        # its coordinates are +-fl32(C/m). Audited on the randomiser's domain (a projection is public pre-processing).
        k = self.work_dim
        x0, x1, pair, extra = self.audit_pair()
        u0, u1 = x0 / self.clip_norm, x1 / self.clip_norm
        tau = self.clip_norm / self.calibration.m * self.calibration.threshold

        def indicator(y: np.ndarray) -> np.ndarray:
            z = y.astype(np.float64)
            return (z @ u0 >= tau).astype(np.float64) - (z @ u1 >= tau).astype(np.float64)

        comp = Component(f"likelihood-ratio class 1[<y,u0> >= {tau:.6g}] - 1[<y,u1> >= {tau:.6g}] (full dimension {k})",
                         1, indicator)
        return AuditPlan(x0, x1, self.audit_sample, k, (comp,), None, pair, extra=extra)
