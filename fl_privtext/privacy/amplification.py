"""Privacy amplification by shuffling: the central (epsilon, delta) against the server of n shuffled eps0-LDP reports.

Setting. Each of ``n`` users sends ONE report from a pure ``eps0``-LDP local randomizer; a shuffler removes the
senders and permutes the reports before the server sees them. Neighbouring relation: one user's input replaced
(substitution), the other users' inputs arbitrary and fixed. The server's view is the multiset of reports.

Both bounds below reduce, by post-processing, to a pair of distributions over two counts (the "clone" reduction):
every other user independently becomes a *clone* with probability ``r`` (its report is then distributed like the
victim's report on input x0 or on x1, with probability 1/2 each), else it is uninformative. The victim reports
"like x0" with probability ``p * a`` and "like x1" with probability ``a`` (the rest, ``1 - a - p a``, is
uninformative). The view is (k, m): m = how many reports look like x0 or x1, k = how many look like x0.

- Feldman, McMillan, Talwar, "Hiding among the clones", FOCS 2021, numerical analysis (their Section 4 and public
  code): ``r = e^-eps0``, ``p = e^eps0``, ``a = 1 / (1 + e^eps0)``.
- Wang, Wang, Li, Li, Lin, "Unified, simplified, tightened amplification by shuffling" (variation-ratio
  reduction), VLDB 2024, for a generic eps0-LDP randomizer: ``r = 2 / (e^eps0 + 1)`` (more clones, so tighter),
  same ``p`` and ``a``.
Feldman-McMillan-Talwar 2023 ("Stronger privacy amplification by shuffling for Renyi and approximate DP") carries
an erratum for arbitrary randomizers; it is not used here.

This module computes the hockey-stick divergence of that pair EXACTLY (no sampling, no step approximation): for a
fixed m both likelihoods are ``w_m * C(m, k) / 2^m`` times a function linear in k, so the set where P > e^eps Q is a
half-line in k and its mass is two binomial tail probabilities. Mass of C outside the enumerated range (< 1e-15)
is added to delta in full, so the result is an upper bound. Epsilon is found by bisection on delta(eps) (monotone).

Reference values (central delta 1e-6; checked in tests/privacy/test_privacy_amplification.py):

    eps0, n       wang24 here   Wang'24 published   fmt21 (exact)   fmt21-numeric here   FMT21 authors' code
    1,  1e5       0.0124        0.012               0.0153          0.0155               0.016
    4,  1e5       0.118         0.118               0.170           0.173                0.173
    4,  1e6       0.0343        0.034               0.0493          0.0502               0.050
    8,  1e6       0.304         0.304               0.444           1.003                1.003
    8,  1e4       8 (none)      8                   8               8                    8

``fmt21-numeric`` is the authors' published numerical procedure (`fmt21_numeric_epsilon`): the same reduction
evaluated loosely (clone counts grouped in blocks, each charged its worst end, 10 bisection steps from the closed
form). It reproduces the authors' column with blocks of n / 1000 clone counts (`numeric_step`); with blocks of 100
at n = 1e6 the same procedure gives 0.515 at eps0 8 (the published 1.003 is its closed-form start value, returned
when no bisection step succeeds). The exact evaluation (``fmt21``) is never above it. The platform uses ``wang24``
(the tightest bound validated here) unless told otherwise.

Several records per user: the report a user sends in one round is the composition of its records' reports, so the
bound is applied to the user's composed local epsilon (k records x eps0), never per record.

Approximate-DP local randomizers (the Gaussian): FMT21 Theorem 3.8 extends the bound to (eps0, delta0)-LDP reports
with delta_total = delta + (e^eps + 1) (1 + e^-eps0 / 2) n delta0, which is vacuous unless delta0 << delta / n;
`gaussian_shuffle_delta` gives that term so reports can show it.

Composition over rounds: each round is (eps, delta)-DP against the server; R rounds compose by the better of basic
composition and the advanced composition theorem (Dwork, Rothblum, Vadhan 2010), spending ``delta'`` = R delta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOUNDS = ("fmt21", "fmt21-numeric", "wang24")
NUMERIC_ITERATIONS = 10  # fmt21-numeric: bisection steps from the closed form (the authors' published setting)
_TAIL = 1e-16  # mass of C left out of the enumeration on each side (added to delta in full)


def _check(eps0: float, n: int, delta: float) -> None:
    if not (eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 must be a finite number > 0; got {eps0}.")
    if int(n) != n or n < 1:
        raise ValueError(f"n (the number of shuffled users) must be an integer >= 1; got {n}.")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta}.")


def _clone_parameters(eps0: float, bound: str) -> tuple[float, float, float]:
    """(r, p, a) of the clone reduction for a generic eps0-LDP randomizer (module docstring)."""
    p = math.exp(eps0)
    a = 1.0 / (1.0 + p)
    if bound in ("fmt21", "fmt21-numeric"):
        return math.exp(-eps0), p, a
    if bound == "wang24":
        return 2.0 / (p + 1.0), p, a
    raise ValueError(f"bound must be one of {', '.join(BOUNDS)}; got {bound!r}.")


def _divergence_given_clones(c: np.ndarray, eps: float, n: int, r: float, p: float, a: float) -> np.ndarray:
    """Per clone count c (float array), the hockey-stick divergence sum_k max(0, P - e^eps Q) of the outcomes
    with m = c + 1, divided by Pr[C = c]. For the generic reductions (victim never uninformative) this is the
    divergence of the pair conditioned on C = c."""
    from scipy import stats

    g = 1.0 - a - p * a  # victim's uninformative mass (0 for the generic reductions)
    m = c + 1  # reports that look like x0 or x1 when the victim's does
    rho = (n - m) / m * r / (1 - r) if r < 1 else np.zeros_like(m)  # Pr[C = m] / Pr[C = m - 1]
    e = math.exp(eps)
    const = (2 * a + rho * g) - e * (2 * p * a + rho * g)  # P - e^eps Q = w C(m,k)/2^m (const + slope k)
    slope = 2 * a * (p - 1) * (1 + e) / m
    kmin = np.clip(np.floor(-const / slope) + 1, 0, m + 1)  # P > e^eps Q exactly for k >= kmin
    half = stats.binom.sf(kmin - 1, m, 0.5)  # sum_{k >= kmin} C(m,k)/2^m
    half_k = (m / 2) * stats.binom.sf(kmin - 2, m - 1, 0.5)  # sum_{k >= kmin} k C(m,k)/2^m
    return np.maximum(const * half + slope * half_k, 0.0)


def shuffle_delta(eps: float, eps0: float, n: int, bound: str = "wang24") -> float:
    """The smallest delta such that shuffling ``n`` eps0-LDP reports is (eps, delta)-DP, by the given bound
    (an upper bound on the true delta of the reduction; exact up to < 1e-15)."""
    from scipy import stats

    _check(eps0, n, 0.5)
    if eps >= eps0:
        return 0.0
    r, p, a = _clone_parameters(eps0, bound)
    clones = stats.binom(n - 1, r)
    lo = int(max(0, clones.ppf(_TAIL) - 1))
    hi = int(min(n - 1, clones.isf(_TAIL) + 1))
    c = np.arange(lo, hi + 1, dtype=np.float64)  # clones among the others
    body = float(np.sum(clones.pmf(c) * _divergence_given_clones(c, eps, n, r, p, a)))
    left_out = float(clones.cdf(lo - 1) + clones.sf(hi)) if n > 1 else 0.0
    return min(1.0, body + 2 * left_out)


def fmt21_closed_form(eps0: float, n: int, delta: float) -> float:
    """FMT21 Theorem 3.1's closed form, valid for eps0 <= ln(n / (16 ln(4 / delta))) (else eps0). The authors'
    public numerical code starts its bisection here and returns it when no bisection step succeeds: their
    published eps0 = 8, n = 1e6 figure (1.003) is this value, where the exact evaluation gives 0.44."""
    _check(eps0, n, delta)
    if eps0 > math.log(n / (16 * math.log(4 / delta))):
        return eps0
    a = 8 * math.sqrt(math.exp(eps0) * math.log(4 / delta) / n)
    c = 8 * math.exp(eps0) / n
    b = 1 - math.exp(-eps0)
    d = 1 + math.exp(-eps0 - math.log(1 + a + c))
    return math.log(1 + (b / d) * (a + c))


def numeric_step(n: int) -> int:
    """Clone counts per block of `fmt21_numeric_delta` for n users: n / 1000 (100 at n = 1e5, 1000 at 1e6). This is
    the block size with which the authors' procedure gives every FMT21 figure of issue #24's reference table;
    with 100 at n = 1e6 it gives 0.515 at eps0 8 (not the published 1.003), the other figures are unchanged."""
    return max(1, int(n) // 1000)


def fmt21_numeric_delta(eps: float, eps0: float, n: int, delta_cap: float, *, step: int | None = None) -> float:
    """FMT21 Section 4 / Appendix E's numerical upper bound on delta(eps), as published: the clone count
    C ~ Bin(n - 1, e^-eps0) is walked outwards from its mean in blocks of ``step`` counts (alternately above and
    below; the first block above holds step + 1), each block charged its probability mass times the conditional
    divergence of the pair given C = c at its worst end (the divergence is monotone in c, so that is an upper
    bound). The walk stops once the mass not yet covered is below the delta accumulated so far, where, as in the
    published procedure, the mirrored direction (D(Q||P), equal to D(P||Q) by the symmetry k -> c + 1 - k) is
    accumulated at each block's upper end only: it only decides when to stop. The value returned is the worst-end
    sum plus the uncovered mass charged in full (an upper bound); ``delta_cap`` as soon as the sum exceeds it."""
    from scipy import stats

    step = numeric_step(n) if step is None else int(step)
    if step < 1:
        raise ValueError(f"step (clone counts per block) must be >= 1; got {step}.")
    r, p, a = _clone_parameters(eps0, "fmt21")
    mean = (n - 1) * r
    blocks = np.arange(1, max(2, math.ceil(n / step)))
    up_hi = np.ceil(mean + blocks * step)
    up_lo = up_hi - step + (blocks > 1)
    down_lo = np.ceil(mean - blocks * step)
    down_hi = down_lo + step - 1
    lo = np.stack([up_lo, np.maximum(down_lo, 0)], axis=1).reshape(-1)  # order: above 1, below 1, above 2, ...
    hi = np.stack([np.minimum(up_hi, n - 1), down_hi], axis=1).reshape(-1)
    in_scope = np.stack([up_lo <= n - 1, down_hi >= 0], axis=1).reshape(-1)
    lo, hi = lo[in_scope], hi[in_scope]
    clones = stats.binom(n - 1, r)
    mass = clones.cdf(hi) - clones.cdf(lo) + clones.pmf(lo)
    at_lo = _divergence_given_clones(lo, eps, n, 0.0, p, a)  # r = 0: the divergence given C = c exactly
    at_hi = _divergence_given_clones(hi, eps, n, 0.0, p, a)
    worst = np.concatenate([[0.0], np.cumsum(mass * np.maximum(at_lo, at_hi))])  # before block i; after the last
    mirror = np.concatenate([[0.0], np.cumsum(mass * at_hi)])
    covered = np.concatenate([[0.0], np.cumsum(mass)])
    over = np.flatnonzero(worst[:-1] > delta_cap)
    done = np.flatnonzero((1 - covered[:-1] < worst[:-1]) & (1 - covered[:-1] < mirror[:-1]))
    first_over = int(over[0]) if len(over) else len(mass)
    first_done = int(done[0]) if len(done) else len(mass)
    if first_over < len(mass) and first_over <= first_done:
        return delta_cap
    if first_done < len(mass):
        return float(worst[first_done] + 1 - covered[first_done])
    return float(worst[-1])


def fmt21_numeric_epsilon(eps0: float, n: int, delta: float, *, step: int | None = None,
                          iterations: int = NUMERIC_ITERATIONS) -> float:
    """FMT21's numerical analysis as published (their Section 4 and public code): ``iterations`` bisection steps on
    [0, start] with `fmt21_numeric_delta` (a step succeeds when delta(mid) < ``delta``), where start is the closed
    form (`fmt21_closed_form`) where it is valid, else eps0; the upper end is returned, so the start value comes
    back when no step succeeds (eps0 8, n 1e6: 1.003). Reproduces the FMT21 column of issue #24's reference table
    to 2 significant digits (tests/privacy/test_privacy_amplification.py)."""
    _check(eps0, n, delta)
    lo, hi = 0.0, fmt21_closed_form(eps0, n, delta)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if fmt21_numeric_delta(mid, eps0, n, delta, step=step) < delta:
            hi = mid
        else:
            lo = mid
    return hi


def shuffle_epsilon(eps0: float, n: int, delta: float, bound: str = "wang24", *, tol: float = 1e-6) -> float:
    """Central epsilon against the server of ``n`` shuffled eps0-LDP reports at ``delta``: the smallest eps with
    `shuffle_delta` <= delta (bisection to ``tol``, rounded up), and never more than eps0 (the server could read
    the victim's report without the shuffler's help, which is eps0-DP)."""
    _check(eps0, n, delta)
    if bound == "fmt21-numeric":
        return fmt21_numeric_epsilon(eps0, n, delta)
    if shuffle_delta(0.0, eps0, n, bound) <= delta:
        return 0.0
    lo, hi = 0.0, eps0
    if shuffle_delta(hi, eps0, n, bound) > delta:
        return eps0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if shuffle_delta(mid, eps0, n, bound) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def gaussian_shuffle_delta(eps: float, eps0: float, delta0: float, n: int) -> float:
    """FMT21 Theorem 3.8's extra delta for (eps0, delta0)-LDP reports: (e^eps + 1)(1 + e^-eps0 / 2) n delta0."""
    return (math.exp(eps) + 1) * (1 + math.exp(-eps0) / 2) * n * delta0


def compose_rounds(eps: float, delta: float, rounds: int, delta_slack: float) -> tuple[float, float]:
    """(eps, delta) of ``rounds`` adaptive uses of an (eps, delta)-DP mechanism: the better of basic composition
    (R eps, R delta) and advanced composition (eps sqrt(2 R ln(1/delta')) + R eps (e^eps - 1), R delta + delta')."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}.")
    basic = (rounds * eps, rounds * delta)
    if rounds == 1 or not 0 < delta_slack < 1:
        return basic
    adv = eps * math.sqrt(2 * rounds * math.log(1 / delta_slack)) + rounds * eps * math.expm1(eps)
    return (adv, rounds * delta + delta_slack) if adv < basic[0] else basic


@dataclass(frozen=True)
class ShuffleGuarantee:
    """Central guarantee against the server of one shuffled round, and over ``rounds`` rounds."""

    local_epsilon: float  # what one user releases per round (its records' epsilons composed)
    n: int
    delta: float
    bound: str
    epsilon_round: float
    epsilon_total: float
    delta_total: float
    rounds: int

    def to_json(self) -> dict[str, object]:
        return {"epsilon": self.epsilon_total, "delta": self.delta_total, "against": "server", "via": "shuffle",
                "epsilon_per_round": self.epsilon_round, "delta_per_round": self.delta, "rounds": self.rounds,
                "local_epsilon_per_user_round": self.local_epsilon, "users_shuffled": self.n,
                "bound": {"fmt21": "Feldman-McMillan-Talwar 2021, numerical (exact evaluation)",
                          "fmt21-numeric": "Feldman-McMillan-Talwar 2021, numerical analysis as published "
                                           "(blocks of 100 clone counts, 10 bisection steps)",
                          "wang24": "Wang et al. VLDB 2024, variation-ratio (exact evaluation)"}[self.bound],
                "composition": "best of basic and advanced composition over rounds"}


def shuffle_guarantee(local_epsilon: float, n: int, delta: float, rounds: int = 1,
                      bound: str = "wang24") -> ShuffleGuarantee:
    """The central guarantee of ``rounds`` shuffled rounds among ``n`` users who each release ``local_epsilon``
    per round (their records composed). Half of ``delta`` goes to the rounds and, over several rounds, half to
    advanced composition's slack."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}.")
    per_round_delta = delta if rounds == 1 else delta / (2 * rounds)
    if not math.isfinite(local_epsilon):
        eps_round = math.inf
    else:
        eps_round = shuffle_epsilon(local_epsilon, n, per_round_delta, bound)
    total, delta_total = compose_rounds(eps_round, per_round_delta, rounds, delta / 2)
    return ShuffleGuarantee(local_epsilon, int(n), per_round_delta, bound, eps_round, total, delta_total, rounds)
