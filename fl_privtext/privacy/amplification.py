"""Privacy amplification by shuffling: the central (epsilon, delta) a shuffler buys against the server.

Setting (the shuffle model): n users each send ONE report R(x_i) of a pure eps0-LDP randomiser R to a trusted
shuffler, which strips the sender and forwards a uniformly random permutation of the n reports to the server.
Neighbouring relation (central, against the server): two datasets that differ in one user's input (replacement).
Guarantee: the shuffled multiset is (epsilon, delta)-DP with the epsilon computed below, for EVERY pure eps0-LDP R.

Both bounds reduce the shuffled output to a pair of two-dimensional distributions (the "clone" reduction):
conditioned on C = c "clones" among the other n - 1 users, A ~ Bin(c, 1/2) of which look like user 1 with input
x^0 and c - A like x^1; user 1 itself lands on its own side with probability a = e^eps0 / (e^eps0 + 1). Then
    P = a (A + 1, c - A) + (1 - a) (A, c - A + 1),     Q = the mirror image,
and delta(eps) = E_C[ D_{e^eps}(P_c || Q_c) ] (hockey-stick divergence; P and Q are mirror images, so the two
directions are equal). Epsilon is the smallest eps whose delta(eps) <= delta (binary search; delta(eps) is
non-increasing in eps). The two published bounds differ only in the clone probability:

* ``fmt21_epsilon`` -- Feldman, McMillan, Talwar, "Hiding among the clones" (FOCS 2021), clone reduction:
  C ~ Bin(n - 1, e^-eps0), computed exactly over every c (no interval discretisation). The authors' numerical
  code discretises C into intervals charged at their ends and starts its binary search at the closed form
  (``fmt21_closed_form``, Thm 3.1), so its published figures are at or above this one; where its search never
  succeeds it returns the closed form itself (1.003 at eps0 8, n 1e6 is the closed form).
* ``wang24_epsilon`` -- Wang et al., "Privacy amplification via shuffling: unified, simplified, and tightened"
  (VLDB 2024), variation-ratio reduction with the general-LDP parameters (p, beta, q) = (e^eps0,
  (e^eps0 - 1)/(e^eps0 + 1), e^eps0): each other user is a clone with probability 2 beta / (p - 1) = 2/(e^eps0 + 1)
  (about twice FMT21's), everything else unchanged; computed exactly (no intervals). Tightest of the two; the
  platform reports it (``shuffle_guarantee``).

Both are upper bounds for pure eps0-LDP randomisers only. FMT 2023's extension to general randomisers carries an
erratum and is not used. Approximate-DP local randomisers (the Gaussian at (eps0,
delta0)): FMT21 Thm 3.8 (arXiv 2012.12803) -- eps as for a pure eps0-LDP randomiser, delta grown by
n (e^eps + 1)(1 + e^-eps0 / 2) delta0 (``shuffle_guarantee``'s ``local_delta``); ``shuffle_guarantee`` puts the Wang'24 eps in
its place, an ASSUMPTION not validated this session (Wang'24's own approximate-LDP treatment was not checked); with
delta0 > ~1e-12 at n = 1e6 the extra delta is not small and the guarantee is weak; the report shows it.

Several records per user: the unit of privacy is the user, so the bound is applied to what ONE user releases in
the round -- its composed local epsilon (basic composition: k records at eps_r each give a k eps_r-LDP report
vector, one "report" of the shuffle model) -- never per record. Rounds: each round is a fresh shuffle of fresh
reports; the per-round (eps, delta) compose over T rounds by the advanced composition theorem (Dwork, Rothblum,
Vadhan 2010; ``compose_rounds``), or basic composition when that is smaller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


def _check(eps0: float, n: int, delta: float) -> None:
    if not (isinstance(eps0, (int, float)) and eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 (local epsilon) must be a finite number > 0, got {eps0!r}.")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (number of shuffled reports) must be an integer >= 1, got {n!r}.")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")


def _divergence(c: np.ndarray, eps: float, eps0: float) -> np.ndarray:
    """D_{e^eps}(P_c || Q_c) for an array of clone counts c (0 where eps >= eps0)."""
    if eps >= eps0:
        return np.zeros(c.shape)
    a = 1.0 / (1.0 + math.exp(-eps0))
    e = math.exp(eps)
    # P(k)/Q(k) > e^eps  <=>  k > (e^eps e^eps0 - 1)(c + 1) / ((e^eps0 - 1)(e^eps + 1)), k = first coordinate
    thr = (e * math.exp(eps0) - 1.0) * (c + 1) / (math.expm1(eps0) * (1.0 + e))
    kmin = np.floor(thr) + 1
    s0 = stats.binom.sf(kmin - 2, c, 0.5)  # P(A >= kmin - 1)
    s1 = stats.binom.sf(kmin - 1, c, 0.5)  # P(A >= kmin)
    return np.maximum(a * s0 + (1 - a) * s1 - e * ((1 - a) * s0 + a * s1), 0.0)


def _grid(n: int, clone_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """Clone counts c worth evaluating and their Bin(n - 1, clone_prob) masses (the rest is charged at 1)."""
    m = n - 1
    mean, sd = m * clone_prob, math.sqrt(m * clone_prob * (1 - clone_prob))
    lo, hi = max(0, int(mean - 12 * sd - 20)), min(m, int(mean + 12 * sd + 20))
    c = np.arange(lo, hi + 1)
    return c.astype(float), stats.binom.pmf(c, m, clone_prob)


def _delta(eps: float, eps0: float, grid: tuple[np.ndarray, np.ndarray]) -> float:
    c, w = grid
    return float(np.dot(w, _divergence(c, eps, eps0)) + max(0.0, 1.0 - w.sum()))


def _search(eps0: float, n: int, delta: float, clone_prob: float, tol: float) -> float:
    if n < 2:
        return float(eps0)
    grid = _grid(n, clone_prob)
    if _delta(eps0 * (1 - 1e-12), eps0, grid) > delta:
        return float(eps0)  # no amplification
    lo, hi = 0.0, float(eps0)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if _delta(mid, eps0, grid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def fmt21_epsilon(eps0: float, n: int, delta: float, *, tol: float = 1e-5) -> float:
    """Central epsilon of n shuffled pure eps0-LDP reports, FMT21 clone bound computed exactly (upper bound,
    within tol)."""
    _check(eps0, n, delta)
    return _search(float(eps0), int(n), delta, math.exp(-eps0), tol)


def fmt21_closed_form(eps0: float, n: int, delta: float) -> float:
    """FMT21 Theorem 3.1: for eps0 <= ln(n / (16 ln(2/delta))), eps <= ln(1 + (e^eps0 - 1)/(e^eps0 + 1)
    (8 sqrt(e^eps0 ln(4/delta) / n) + 8 e^eps0 / n)); eps0 outside that regime (no amplification claimed)."""
    _check(eps0, n, delta)
    if eps0 > math.log(n / (16 * math.log(2 / delta))):
        return float(eps0)
    e0 = math.exp(eps0)
    return min(float(eps0), math.log1p((e0 - 1) / (e0 + 1) * (8 * math.sqrt(e0 * math.log(4 / delta) / n) + 8 * e0 / n)))


def wang24_epsilon(eps0: float, n: int, delta: float, *, tol: float = 1e-5) -> float:
    """Central epsilon of n shuffled pure eps0-LDP reports, Wang et al. VLDB'24 bound (upper bound, within tol)."""
    _check(eps0, n, delta)
    return _search(float(eps0), int(n), delta, 2.0 / (math.exp(eps0) + 1.0), tol)


def compose_rounds(epsilon: float, delta: float, rounds: int, delta_slack: float) -> tuple[float, float]:
    """(epsilon, delta) of `rounds` adaptive rounds, each (epsilon, delta)-DP: the smaller of basic composition
    (T eps, T delta) and advanced composition (Dwork-Rothblum-Vadhan 2010, Thm III.3):
    (sqrt(2 T ln(1/delta')) eps + T eps (e^eps - 1), T delta + delta')."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}.")
    if not (0 < delta_slack < 1):
        raise ValueError(f"delta_slack must lie in (0, 1), got {delta_slack!r}.")
    basic = (rounds * epsilon, rounds * delta)
    adv_eps = math.sqrt(2 * rounds * math.log(1 / delta_slack)) * epsilon + rounds * epsilon * math.expm1(epsilon)
    if rounds == 1 or adv_eps >= basic[0]:
        return basic
    return adv_eps, rounds * delta + delta_slack


@dataclass(frozen=True)
class ShuffleGuarantee:
    """Central guarantee against the server of one shuffled round and of all rounds (``via`` = "shuffle")."""

    local_epsilon: float  # the composed local epsilon of ONE user's round report (all its records)
    n: int  # reports shuffled together per round (one per user)
    epsilon: float  # per round
    delta: float  # per round
    rounds: int
    epsilon_total: float
    delta_total: float
    bound: str

    def as_dict(self) -> dict[str, object]:
        return {
            "epsilon": self.epsilon, "delta": self.delta, "against": "server", "via": "shuffle",
            "bound": self.bound, "local_epsilon": self.local_epsilon, "n": self.n, "rounds": self.rounds,
            "epsilon_total": self.epsilon_total, "delta_total": self.delta_total,
            "composition": "advanced (Dwork-Rothblum-Vadhan 2010) or basic, the smaller",
        }

    def to_json(self) -> dict[str, object]:
        """``privacy.central``: totals over the rounds, per-round values beside them."""
        return {"epsilon": self.epsilon_total, "delta": self.delta_total, "against": "server", "via": "shuffle",
                "epsilon_per_round": self.epsilon, "delta_per_round": self.delta, "rounds": self.rounds,
                "local_epsilon_per_user_round": self.local_epsilon, "users_shuffled": self.n,
                "bound": "Wang et al. VLDB 2024, variation-ratio (exact evaluation)",
                "composition": "best of basic and advanced composition over rounds"}


def shuffle_guarantee(local_epsilon: float, n: int, delta: float = 1e-6, rounds: int = 1, *,
                      local_delta: float = 0.0) -> ShuffleGuarantee:
    """Central (eps, delta) against the server of `rounds` rounds of n shuffled reports, one per user, each
    local_epsilon-LDP for the WHOLE user (compose a user's records before calling). Wang'24 bound; an
    (eps0, delta0)-LDP randomiser adds n (e^eps + 1)(1 + e^-eps0/2) delta0 to delta (FMT21 Thm 3.8)."""
    if not (0 <= local_delta < 1):
        raise ValueError(f"local_delta must lie in [0, 1), got {local_delta!r}.")
    eps = wang24_epsilon(local_epsilon, n, delta)
    d = delta + n * (math.exp(eps) + 1) * (1 + math.exp(-local_epsilon) / 2) * local_delta
    if d >= 1:
        raise ValueError(f"local_delta {local_delta} is too large for n = {n}: the shuffled delta would be >= 1.")
    eps_t, d_t = compose_rounds(eps, d, rounds, delta)
    return ShuffleGuarantee(float(local_epsilon), int(n), eps, d, rounds, eps_t, d_t, "wang24")
