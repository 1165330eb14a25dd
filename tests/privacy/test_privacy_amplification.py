"""Amplification by shuffling: published reference values, exact enumeration, and a real shuffled randomizer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fl_privtext.privacy.amplification import (
    compose_rounds,
    fmt21_closed_form,
    fmt21_numeric_delta,
    fmt21_numeric_epsilon,
    shuffle_delta,
    shuffle_epsilon,
    shuffle_guarantee,
)

# (eps0, n) -> (Wang et al. VLDB'24 published, FMT21 authors' code), central delta 1e-6 (issue #24)
REFERENCE = {(1, 10**5): (0.012, 0.016), (4, 10**5): (0.118, 0.173), (4, 10**6): (0.034, 0.050),
             (8, 10**6): (0.304, 1.003), (8, 10**4): (8.0, 8.0)}


def _two_significant(x: float) -> float:
    return float(f"{x:.2g}")


@pytest.mark.parametrize(("eps0", "n"), list(REFERENCE))
def test_wang24_reproduces_published_values(eps0: float, n: int) -> None:
    assert _two_significant(shuffle_epsilon(eps0, n, 1e-6, "wang24")) == _two_significant(REFERENCE[eps0, n][0])


@pytest.mark.parametrize(("eps0", "n"), list(REFERENCE))
def test_fmt21_exact_never_above_authors_code_nor_closed_form(eps0: float, n: int) -> None:
    exact = shuffle_epsilon(eps0, n, 1e-6, "fmt21")
    assert exact <= REFERENCE[eps0, n][1] + 1e-6
    assert exact <= fmt21_closed_form(eps0, n, 1e-6) + 1e-6
    assert shuffle_epsilon(eps0, n, 1e-6, "wang24") <= exact + 1e-6  # more clones: tighter


@pytest.mark.parametrize(("eps0", "n"), list(REFERENCE))
def test_fmt21_numeric_reproduces_the_authors_column(eps0: float, n: int) -> None:
    """Both columns of the issue's table to 2 significant digits: FMT21's numerical procedure as published."""
    got = shuffle_epsilon(eps0, n, 1e-6, "fmt21-numeric")
    assert got == fmt21_numeric_epsilon(eps0, n, 1e-6)
    assert _two_significant(got) == _two_significant(REFERENCE[eps0, n][1])
    assert got >= shuffle_epsilon(eps0, n, 1e-6, "fmt21") - 1e-6  # the block evaluation is never below the exact


def test_fmt21_numeric_delta_bounds_the_exact_delta_and_block_size_matters() -> None:
    # worst-end blocks: an upper bound on the exact delta of the same reduction, at any block size
    for step in (1, 10, 100, 1000):
        for eps in (0.05, 0.2, 0.5):
            exact = shuffle_delta(eps, 4.0, 10**5, "fmt21")
            assert fmt21_numeric_delta(eps, 4.0, 10**5, 1.0, step=step) >= exact - 1e-15
    # the published 1.003 at eps0 8, n 1e6 needs blocks of n / 1000; blocks of 100 give about 0.515
    assert fmt21_numeric_epsilon(8, 10**6, 1e-6, step=100) == pytest.approx(0.515, abs=5e-3)
    with pytest.raises(ValueError, match="step"):
        fmt21_numeric_delta(0.1, 4.0, 10**5, 1e-6, step=0)


def test_authors_large_eps0_figure_is_their_closed_form() -> None:
    assert fmt21_closed_form(8, 10**6, 1e-6) == pytest.approx(1.003, abs=5e-4)


def _brute_delta(eps: float, n: int, r: float, p: float, a: float) -> float:
    """sum over every view (k, m) of max(0, P - e^eps Q), by enumeration (module docstring's reduction)."""
    g = 1 - a - p * a
    total = 0.0
    clones = stats.binom(n - 1, r)

    def like(k: int, m: int, x0: float, x1: float) -> float:  # Pr[view (k, m)] when the victim looks like x0 w.p. x0
        v = 0.0
        if m >= 1:
            v += clones.pmf(m - 1) * (x0 * stats.binom.pmf(k - 1, m - 1, 0.5) + x1 * stats.binom.pmf(k, m - 1, 0.5))
        return v + (clones.pmf(m) * g * stats.binom.pmf(k, m, 0.5) if m <= n - 1 else 0.0)

    for m in range(n + 1):
        for k in range(m + 1):
            total += max(0.0, like(k, m, p * a, a) - math.exp(eps) * like(k, m, a, p * a))
    return total


@pytest.mark.parametrize("bound", ["fmt21", "wang24"])
@pytest.mark.parametrize(("eps0", "n", "eps"), [(1.0, 12, 0.3), (2.0, 30, 0.8), (3.0, 25, 1.5)])
def test_closed_form_sum_equals_enumeration(bound: str, eps0: float, n: int, eps: float) -> None:
    p = math.exp(eps0)
    r = math.exp(-eps0) if bound == "fmt21" else 2 / (p + 1)
    assert shuffle_delta(eps, eps0, n, bound) == pytest.approx(_brute_delta(eps, n, r, p, 1 / (1 + p)), abs=1e-12)


@pytest.mark.parametrize(("eps0", "n"), [(1.0, 40), (2.0, 200), (3.0, 500)])
def test_bound_covers_shuffled_binary_randomized_response(eps0: float, n: int) -> None:
    """Shuffled binary RR releases the number of ones; its true delta(eps) (exact) never exceeds the bounds."""
    keep = math.exp(eps0) / (1 + math.exp(eps0))
    others = stats.binom.pmf(np.arange(n), n - 1, 1 - keep)  # the other users all hold 0
    ones = np.arange(n + 1)
    x1 = np.zeros(n + 1)
    x0 = np.zeros(n + 1)
    x1[1:] += keep * others
    x1[:-1] += (1 - keep) * others  # victim holds 1
    x0[1:] += (1 - keep) * others
    x0[:-1] += keep * others  # victim holds 0
    for eps in (0.1, 0.3, 0.6):
        truth = max(np.maximum(x1 - math.exp(eps) * x0, 0).sum(), np.maximum(x0 - math.exp(eps) * x1, 0).sum())
        assert truth <= shuffle_delta(eps, eps0, n, "wang24") + 1e-12 <= shuffle_delta(eps, eps0, n, "fmt21") + 2e-12
    assert len(ones) == n + 1


def test_more_users_never_less_private_and_edges() -> None:
    eps = [shuffle_epsilon(2.0, n, 1e-6) for n in (10**3, 10**4, 10**5)]
    assert eps[0] >= eps[1] >= eps[2]
    assert shuffle_epsilon(2.0, 1, 1e-6) == pytest.approx(2.0, abs=1e-5)  # nobody to hide among
    with pytest.raises(ValueError, match="eps0"):
        shuffle_epsilon(0.0, 100, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        shuffle_epsilon(1.0, 100, 0.0)
    with pytest.raises(ValueError, match="bound"):
        shuffle_epsilon(1.0, 100, 1e-6, "fmt23")


def test_rounds_compose_and_user_records_compose_locally() -> None:
    one = shuffle_guarantee(4.0, 10**5, 1e-6, rounds=1)
    assert one.epsilon_total == pytest.approx(shuffle_epsilon(4.0, 10**5, 1e-6))
    many = shuffle_guarantee(4.0, 10**5, 1e-6, rounds=10)
    assert one.epsilon_round < many.epsilon_total <= 10 * many.epsilon_round + 1e-12
    assert many.delta_total <= 1e-6 + 1e-18
    # two records of eps0 = 2 per user and round: the bound is applied to 4, not to 2
    assert shuffle_guarantee(2 * 2.0, 10**5, 1e-6).epsilon_round == one.epsilon_round
    assert compose_rounds(0.1, 1e-8, 100, 1e-7)[0] < 100 * 0.1
    assert shuffle_guarantee(math.inf, 10**5, 1e-6).to_json()["epsilon"] == math.inf
