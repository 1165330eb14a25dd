"""Intervals over users: a clustered bootstrap of an accuracy (issue #37 item 2).

Why: a user's records are not independent (one writer, one topic, one style), so an interval that resamples records
as if they were (the binomial one, or an i.i.d. record bootstrap) is too narrow when accuracy varies between users:
with m records per user and intra-user correlation rho its variance is too small by the design effect
1 + (m - 1) rho. The population the figure speaks about is the users', so the bootstrap resamples TEST USERS, each
with all of its records (Davison & Hinkley 1997, section 3.8; Field & Welsh 2007).

Several seeds (repetitions of a point: the mechanism's noise, the server's training) are a second factor crossed
with the users: every seed evaluates the SAME test users. The statistic is the mean over seeds of each seed's pooled
accuracy (correct records / records), the point estimate's own form. Its interval has two parts:
- users: the percentile interval of replicates that draw ONE multiset of users, applied to every seed (resampling
  the users independently within each seed would treat the seeds' users as different people and shrink the user
  part of the variance by the number of seeds);
- seeds: Student's t on the seeds' accuracies, t_{S-1} * sd / sqrt(S). The seeds are few (3 in a frontier), and a
  bootstrap over 3 values cannot see the spread of a fourth: percentile intervals from resampled seeds covered a
  seed-dominated accuracy 77% of the time at a nominal 95%, this rule 94.5% (tests/test_bootstrap.py, 200
  data sets, 3 seeds), and two runs of the quickstart gave disjoint intervals for one point. With the same users in every seed the seeds' spread
  is the noise and training part alone, so the two parts add: each side of the interval is
  sqrt(user side^2 + seed half-width^2) from the estimate (the users' asymmetry kept), clipped to [0, 1].

Sufficient statistics: per (seed, user), the number of records and of correct ones (`UserCounts`), so a results
file never needs the per-record bits; for other figures pooled over records (an attack's advantage over its prior,
a macro- or micro-F1, issue #37), per-user sums of a few columns (`UserSums`) and the figure as a mean of ratios of
those sums (`Ratios`), one bootstrap for all (`sums_bootstrap`; `counts_bootstrap` is its accuracy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ACCURACY", "Ratios", "UserCounts", "UserSums", "cluster_bootstrap", "counts_bootstrap",
           "counts_dtype", "interval_keys", "seeds_interval", "sums_bootstrap", "user_counts", "user_sums"]

N_BOOT = 2000
_CHUNK_CELLS = 1 << 22  # replicates x users per block: bounds the weight matrix at ~32 MB of float64
_DRAW_BLOCK = 1 << 16  # draws of one replicate gathered at a time (`_gathered_replicate`)
_COUNT_CHUNK = 1 << 16  # records counted at a time (`user_counts`)
_WIDEN_USERS = 1 << 18  # users of narrower (`counts_dtype`) sums widened to float64 at a time (`sums_bootstrap`)


def counts_dtype(most: int) -> type[np.number]:
    """The type to hold per-user sums of 0/1 (or small integer) columns in (non-negative integers, ``most``: an
    upper bound on any of them, e.g. a user's largest number of records): the narrowest unsigned integer type that
    holds ``most`` (uint8 up to 255: 1 byte a sum where float64 took 8; a referee holds (target users x columns)
    per attribute, ~1.3 GB at 8M users in float64, issue #38), float64 beyond uint32's range. The same numbers:
    `sums_bootstrap` widens them to float64 a block of users at a time, where integer sums are exact."""
    for t in (np.uint8, np.uint16, np.uint32):
        if most <= np.iinfo(t).max:
            return t
    return np.float64


@dataclass(frozen=True, eq=False)
class UserCounts:
    """One seed's per-user sufficient statistics of an accuracy: ``users`` (U,) sorted ids, ``n`` (U,) records and
    ``correct`` (U,) correct records of each."""

    users: np.ndarray
    n: np.ndarray
    correct: np.ndarray

    def __post_init__(self) -> None:
        if not (self.users.shape == self.n.shape == self.correct.shape) or self.users.ndim != 1:
            raise ValueError(f"UserCounts needs three 1-D arrays of one length; got {self.users.shape}, "
                             f"{self.n.shape}, {self.correct.shape}.")

    def __eq__(self, other: object) -> bool:  # arrays compare by value (results of two paths are compared whole)
        return isinstance(other, UserCounts) and all(
            np.array_equal(a, b) for a, b in ((self.users, other.users), (self.n, other.n),
                                              (self.correct, other.correct)))

    __hash__ = None  # type: ignore[assignment]

    @property
    def accuracy(self) -> float:
        return float(self.correct.sum()) / float(self.n.sum())


def user_counts(correct: np.ndarray, users: np.ndarray) -> UserCounts:
    """Per-user records and correct records from per-record ``correct`` (N,) bools and ``users`` (N,) integer ids
    (the result's users: sorted and distinct, int64). The ids are sorted in their own type (one copy), each record's
    user found by binary search `_COUNT_CHUNK` records at a time, its counts added per chunk: the same integers as
    ``np.unique(users_int64, return_inverse=True)`` and two bincounts (one float64-weighted), without their
    (N,) int64 and float64 arrays (~40 bytes a test record at once: 0.3 GB for the server's 7.3M test uploads at
    ten million synthetic users, issue #38)."""
    correct, users = np.asarray(correct, bool).reshape(-1), np.asarray(users).reshape(-1)
    if correct.shape != users.shape or correct.size == 0:
        raise ValueError(f"user_counts needs one user per record and >= 1 record; got {correct.shape} and "
                         f"{users.shape}.")
    if users.dtype.kind not in "iu":
        users = users.astype(np.int64)
    ordered = np.sort(users)
    first = np.ones(len(ordered), bool)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    ids = ordered[first]
    del ordered, first
    n, right = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    for a in range(0, len(users), _COUNT_CHUNK):
        at = np.searchsorted(ids, users[a : a + _COUNT_CHUNK])
        n += np.bincount(at, minlength=len(ids))
        right += np.bincount(at[correct[a : a + _COUNT_CHUNK]], minlength=len(ids))
    return UserCounts(ids.astype(np.int64), n, right)


@dataclass(frozen=True, eq=False)
class Ratios:
    """A figure of pooled per-user sums ``s`` (K,): the mean, over the rows r whose denominator is positive, of
    (num[r] . s) / (den[r] . s); undefined (NaN) where no row's is. One row is a ratio of sums (an accuracy: correct
    / records; an advantage: (correct - prior's correct) / records; a micro-F1: 2 tp / (true + predicted)); one row
    per class is a macro-F1 over the classes present (sklearn's convention, `fl_privtext.metrics.macro_f1`). Why
    this form: every figure the platform pools over records is one, so ONE bootstrap (`sums_bootstrap`) serves them
    all from per-user sums. ``low`` / ``high``: the figure's range, where its interval is clipped."""

    num: np.ndarray  # (R, K)
    den: np.ndarray  # (R, K)
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.num.ndim != 2 or self.num.shape != self.den.shape or not self.low < self.high:
            raise ValueError(f"Ratios needs num and den of one (R, K) shape and low < high; got {self.num.shape}, "
                             f"{self.den.shape}, [{self.low}, {self.high}].")

    def __eq__(self, other: object) -> bool:  # arrays compare by value (results of two paths are compared whole)
        return isinstance(other, Ratios) and (self.low, self.high) == (other.low, other.high) and \
            np.array_equal(self.num, other.num) and np.array_equal(self.den, other.den)

    __hash__ = None  # type: ignore[assignment]

    def value(self, pooled: np.ndarray) -> np.ndarray:
        """The figure of ``pooled`` (..., K) sums: (...,), NaN where no denominator is positive."""
        top, bottom = pooled @ self.num.T, pooled @ self.den.T  # (..., R)
        ok = bottom > 0
        ratio = np.divide(top, bottom, out=np.zeros(np.broadcast_shapes(top.shape, bottom.shape)), where=ok)
        rows = ok.sum(axis=-1)
        return np.where(rows > 0, ratio.sum(axis=-1) / np.maximum(rows, 1), np.nan)


ACCURACY = Ratios(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]))  # of UserCounts' columns (n, correct)


@dataclass(frozen=True, eq=False)
class UserSums:
    """One seed's per-user sufficient statistics of figures pooled over records: ``users`` (U,) sorted ids and
    ``sums`` (U, K), the sums over each user's records of K columns (`Ratios` reads them)."""

    users: np.ndarray
    sums: np.ndarray

    def __post_init__(self) -> None:
        if self.users.ndim != 1 or self.sums.ndim != 2 or self.sums.shape[0] != self.users.shape[0]:
            raise ValueError(f"UserSums needs (U,) users and (U, K) sums; got {self.users.shape}, "
                             f"{self.sums.shape}.")

    def __eq__(self, other: object) -> bool:  # arrays compare by value, as UserCounts
        return isinstance(other, UserSums) and np.array_equal(self.users, other.users) and \
            np.array_equal(self.sums, other.sums)

    __hash__ = None  # type: ignore[assignment]


def user_sums(columns: np.ndarray, users: np.ndarray) -> UserSums:
    """Per-user sums of per-record ``columns`` (N, K) over ``users`` (N,) ids."""
    columns, users = np.asarray(columns, np.float64), np.asarray(users, np.int64).reshape(-1)
    if columns.ndim != 2 or columns.shape[0] != users.shape[0] or users.size == 0:
        raise ValueError(f"user_sums needs (N, K) columns, one user per record and >= 1 record; got "
                         f"{columns.shape} and {users.shape}.")
    ids, inv = np.unique(users, return_inverse=True)
    sums = np.zeros((len(ids), columns.shape[1]))
    np.add.at(sums, inv, columns)
    return UserSums(ids, sums)


def interval_keys(figure: str) -> tuple[str, str]:
    """results.json's names of a figure's interval ends: ``ci_low`` / ``ci_high`` for an ``accuracy`` (as
    ``utility`` and ``utility.on_device.exact``), ``<figure>_ci_low`` / ``<figure>_ci_high`` for any other."""
    return ("ci_low", "ci_high") if figure == "accuracy" else (f"{figure}_ci_low", f"{figure}_ci_high")


def counts_bootstrap(per_seed: Sequence[UserCounts], g: np.random.Generator, *, n_boot: int = N_BOOT,
                     level: float = 0.95) -> tuple[float, float]:
    """The ``level`` interval of the mean over seeds of each seed's accuracy (module docstring): the users' part
    by resampling users jointly over seeds, the seeds' part by Student's t; a user absent from a seed counts zero
    records there. `sums_bootstrap` of `ACCURACY`."""
    sums = [UserSums(s.users, np.stack([s.n, s.correct], axis=1).astype(np.float64)) for s in per_seed]
    return sums_bootstrap(sums, {"accuracy": ACCURACY}, g, n_boot=n_boot, level=level)["accuracy"]


def _replicate_counts(g: np.random.Generator, b: int, num_users: int) -> np.ndarray:
    """(b, U) float64: how often each of ``num_users`` users is drawn in each of ``b`` replicates of ``num_users``
    draws with replacement. The same numbers as ``g.integers(U, size=(b, U))`` counted per row: for U < 2**31 numpy
    draws int32 and int64 from the same 32-bit stream, and a row's counts fit in the cache, where one bincount over
    offset ids (b x U bins) ran at memory speed (2.3x slower per replicate block at 5,000 users)."""
    draws = g.integers(num_users, size=(b, num_users), dtype=np.int32 if num_users < 2**31 else np.int64)
    w = np.empty((b, num_users))
    for r in range(b):
        w[r] = np.bincount(draws[r], minlength=num_users)
    return w


def _pooled(g: np.random.Generator, b: int, num_users: int, sums: np.ndarray) -> np.ndarray:
    """(b, S, K) float64: ``b`` replicates' pooled sums from their counts (`_replicate_counts`) by BLAS, ~10x
    einsum's loop; counts and integer sums are exact in any order. Sums held narrower (`counts_dtype`) are widened
    `_WIDEN_USERS` users at a time: the same exact sums."""
    w = _replicate_counts(g, b, num_users)  # (b, U)
    if sums.dtype == np.float64:
        return np.ascontiguousarray(np.matmul(w, sums).transpose(1, 0, 2))
    pooled = np.zeros((b, sums.shape[0], sums.shape[2]))
    for u in range(0, num_users, _WIDEN_USERS):
        pooled += np.matmul(w[:, u : u + _WIDEN_USERS], sums[:, u : u + _WIDEN_USERS].astype(np.float64)
                            ).transpose(1, 0, 2)
    return pooled


def _gathered_replicate(g: np.random.Generator, num_users: int, sums: np.ndarray) -> np.ndarray:
    """(1, S, K) float64: one replicate's pooled sums, sum over its ``num_users`` draws of the drawn user's
    ``sums`` (S, U, K) integers, `_DRAW_BLOCK` draws at a time: the same draws as `_replicate_counts` (numpy draws
    a (b, U) block as b x U consecutive numbers of one stream, so blocks of one replicate's draws are its draws in
    order) and the same sums (integers, exact in float64 in any order) without a (U,) weight or count per
    replicate: the memory of a block, whatever the users (issue #38: 8M target users made one replicate's draws,
    counts and weights ~160 MB per attribute)."""
    dtype = np.int32 if num_users < 2**31 else np.int64
    pooled = np.zeros((sums.shape[0], sums.shape[2]))
    for start in range(0, num_users, _DRAW_BLOCK):
        draws = g.integers(num_users, size=min(_DRAW_BLOCK, num_users - start), dtype=dtype)
        pooled += np.take(sums, draws, axis=1).sum(axis=1, dtype=np.float64)
    return pooled[None]


def sums_bootstrap(per_seed: Sequence[UserSums], figures: dict[str, Ratios], g: np.random.Generator, *,
                   n_boot: int = N_BOOT, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """The ``level`` interval of each figure's mean over seeds (each seed's figure of its pooled sums; module
    docstring): the users' part from ONE set of replicates that draw a multiset of users applied to every seed and
    every figure (a figure's interval and a difference of two figures are read on the same draws), the seeds' part
    by Student's t; a user absent from a seed adds nothing there. A replicate where a seed's figure is undefined
    (only users without records drawn) takes that seed's own figure."""
    if not per_seed:
        raise ValueError("sums_bootstrap needs at least one seed.")
    if not 0 < level < 1 or n_boot < 1:
        raise ValueError(f"sums_bootstrap needs 0 < level < 1 and n_boot >= 1; got {level}, {n_boot}.")
    width = {s.sums.shape[1] for s in per_seed} | {f.num.shape[1] for f in figures.values()}
    if len(width) != 1:
        raise ValueError(f"sums_bootstrap needs one column count across seeds and figures; got {sorted(width)}.")
    first = per_seed[0].users
    if len(per_seed) == 1 and bool(np.all(first[1:] > first[:-1])):
        # one seed whose users are sorted and distinct (as `user_sums` gives them): its sums as they are, not a
        # copy (the attack's referee holds a (target users x columns) block per attribute, issue #38); sums held
        # narrower (integer counts: `counts_dtype`) are widened a block of users at a time below
        ids, sums = first, per_seed[0].sums[None]  # (1, U, K)
    else:
        ids = np.unique(np.concatenate([s.users for s in per_seed]))
        sums = np.zeros((len(per_seed), len(ids), width.pop()))  # (S, U, K)
        for i, s in enumerate(per_seed):
            sums[i, np.searchsorted(ids, s.users)] = s.sums
    num_users = len(ids)
    seed_fig = {name: f.value(sums.sum(axis=1, dtype=np.float64)) for name, f in figures.items()}  # (S,) each
    bad = [name for name, v in seed_fig.items() if np.isnan(v).any()]
    if bad:
        raise ValueError(f"sums_bootstrap: a seed whose figure is undefined (no records): {bad}.")
    stats = {name: np.empty(n_boot) for name in figures}
    chunk = max(1, _CHUNK_CELLS // num_users)
    # beyond _CHUNK_CELLS users a block is one replicate, whose (U,) counts and weights grow with the users: integer
    # sums (`counts_dtype`) are then pooled by gathering the drawn users' rows instead (`_gathered_replicate`)
    gather = num_users > _CHUNK_CELLS and sums.dtype.kind in "iu"
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        pooled = _gathered_replicate(g, num_users, sums) if gather else _pooled(g, b, num_users, sums)  # (b, S, K)
        for name, f in figures.items():
            v = f.value(pooled)  # (b, S)
            stats[name][start:start + b] = np.where(np.isnan(v), seed_fig[name], v).mean(axis=1)
    out = {}
    for name, f in figures.items():
        estimate = float(seed_fig[name].mean())
        lo, hi = np.quantile(stats[name], [(1 - level) / 2, (1 + level) / 2])
        out[name] = _with_seeds(seed_fig[name], max(estimate - lo, 0.0), max(hi - estimate, 0.0), level,
                                f.low, f.high)
    return out


def cluster_bootstrap(correct: np.ndarray, users: np.ndarray, g: np.random.Generator, *,
                      seeds: np.ndarray | None = None, n_boot: int = N_BOOT, level: float = 0.95
                      ) -> tuple[float, float]:
    """(low, high): the ``level`` interval of the accuracy from per-record ``correct`` (N,) bools, the ``users``
    (N,) each record belongs to and, where a point has several repetitions, the ``seeds`` (N,) each record was
    scored in (module docstring: seeds, then users crossed with them). ``g``: the referee's stream
    (`fl_privtext.rng.generator` of the run seed)."""
    correct, users = np.asarray(correct, bool).reshape(-1), np.asarray(users, np.int64).reshape(-1)
    seeds = np.zeros(len(correct), np.int64) if seeds is None else np.asarray(seeds, np.int64).reshape(-1)
    if not (correct.shape == users.shape == seeds.shape):
        raise ValueError(f"cluster_bootstrap needs one user and one seed per record; got {correct.shape}, "
                         f"{users.shape}, {seeds.shape}.")
    per_seed = [user_counts(correct[seeds == s], users[seeds == s]) for s in np.unique(seeds)]
    return counts_bootstrap(per_seed, g, n_boot=n_boot, level=level)


def seeds_interval(accuracy: Sequence[float], low: Sequence[float], high: Sequence[float], level: float = 0.95,
                   *, bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float]:
    """The ``level`` interval of the mean over seeds from each seed's accuracy and its own interval over users
    (``low``, ``high``: e.g. an attack's per-user binomial interval, one answer per user), by the rule of
    `counts_bootstrap` without the per-user counts: each side is sqrt(users' side^2 + seed half-width^2) from the
    mean, the users' side the mean over seeds of that seed's side, the seeds' half-width t_{S-1} sd / sqrt(S);
    clipped to ``bounds`` (the figure's range: [0, 1] for an accuracy, [-1, 1] for an advantage over a prior).
    One seed: its own interval."""
    acc, lo, hi = (np.asarray(v, np.float64).reshape(-1) for v in (accuracy, low, high))
    if not (len(acc) == len(lo) == len(hi) >= 1):
        raise ValueError(f"seeds_interval needs one accuracy, low and high per seed (>= 1); got {len(acc)}, "
                         f"{len(lo)}, {len(hi)}.")
    return _with_seeds(acc, float(np.mean(np.maximum(acc - lo, 0.0))), float(np.mean(np.maximum(hi - acc, 0.0))),
                       level, *bounds)


def _with_seeds(seed_acc: np.ndarray, down: float, up: float, level: float, low: float = 0.0, high: float = 1.0
                ) -> tuple[float, float]:
    """The interval around the mean of ``seed_acc`` (S,) whose users' sides are ``down`` / ``up``: each side in
    quadrature with the seeds' Student t half-width t_{S-1} sd / sqrt(S) (0 for one seed), clipped to [low, high]."""
    from scipy.stats import t as student_t

    estimate, seed_half = float(seed_acc.mean()), 0.0
    if len(seed_acc) >= 2:
        seed_half = float(student_t.ppf((1 + level) / 2, len(seed_acc) - 1) * seed_acc.std(ddof=1)
                          / np.sqrt(len(seed_acc)))
    return (max(low, estimate - float(np.hypot(down, seed_half))),
            min(high, estimate + float(np.hypot(up, seed_half))))
