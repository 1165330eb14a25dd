"""Amplification by shuffling: the reference table of issue #24 (authors' code, central delta 1e-6), the divergence
formula against brute-force enumeration, and the composition over rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fl_privtext.privacy.amplification import (
    _divergence,
    compose_rounds,
    fmt21_closed_form,
    fmt21_epsilon,
    shuffle_guarantee,
    wang24_epsilon,
)

# (eps0, n) -> Wang et al. VLDB'24, computed with the authors' code (issue #24)
WANG24 = [(1.0, 10**5, 0.012), (4.0, 10**5, 0.118), (4.0, 10**6, 0.034), (8.0, 10**6, 0.304), (8.0, 10**4, 8.0)]


def _sig2(x: float) -> float:
    return float(f"{x:.2g}")


@pytest.mark.parametrize(("eps0", "n", "ref"), WANG24)
def test_wang24_reproduces_reference_to_two_significant_digits(eps0: float, n: int, ref: float) -> None:
    assert _sig2(wang24_epsilon(eps0, n, 1e-6)) == _sig2(ref)


def test_fmt21_closed_form_is_the_published_1_003_and_numeric_bounds_are_ordered() -> None:
    assert _sig2(fmt21_closed_form(8.0, 10**6, 1e-6)) == 1.0
    assert round(fmt21_closed_form(8.0, 10**6, 1e-6), 3) == 1.003
    assert _sig2(fmt21_epsilon(4.0, 10**5, 1e-6)) == 0.17  # reference 0.173
    for eps0, n, _ in WANG24:
        w, f, cf = wang24_epsilon(eps0, n, 1e-6), fmt21_epsilon(eps0, n, 1e-6), fmt21_closed_form(eps0, n, 1e-6)
        assert w <= f <= cf <= eps0


def test_no_amplification_when_clones_are_too_few() -> None:
    assert fmt21_epsilon(8.0, 10**4, 1e-6) == 8.0
    assert _sig2(wang24_epsilon(8.0, 10**4, 1e-6)) == 8.0  # 7.99998: nothing worth claiming


def test_amplification_grows_with_n_and_shrinks_with_delta() -> None:
    e = [wang24_epsilon(2.0, n, 1e-6) for n in (10**3, 10**4, 10**5)]
    assert e[0] > e[1] > e[2]
    assert wang24_epsilon(2.0, 10**4, 1e-9) > wang24_epsilon(2.0, 10**4, 1e-6)


@pytest.mark.parametrize(("c", "eps", "eps0"), [(0, 0.5, 1.0), (7, 0.3, 2.0), (40, 0.2, 4.0), (13, 0.0, 1.5)])
def test_divergence_matches_brute_force_enumeration(c: int, eps: float, eps0: float) -> None:
    a = math.exp(eps0) / (math.exp(eps0) + 1)
    k = np.arange(c + 2)
    b = stats.binom.pmf(k, c, 0.5)
    b_shift = stats.binom.pmf(k - 1, c, 0.5)
    p = a * b_shift + (1 - a) * b  # user 1 on its own side w.p. a: first coordinate A + 1
    q = (1 - a) * b_shift + a * b
    brute = float(np.maximum(p - math.exp(eps) * q, 0).sum())
    assert _divergence(np.array([float(c)]), eps, eps0)[0] == pytest.approx(brute, abs=1e-12)


def test_composition_over_rounds() -> None:
    assert compose_rounds(0.3, 1e-6, 1, 1e-6) == (0.3, 1e-6)
    eps, d = compose_rounds(0.01, 1e-7, 1000, 1e-6)
    assert eps < 1000 * 0.01 and d == pytest.approx(1000 * 1e-7 + 1e-6)
    g = shuffle_guarantee(8.0, 10**6, 1e-6, 10)
    assert g.as_dict()["against"] == "server" and g.as_dict()["via"] == "shuffle"
    assert g.epsilon_total <= 10 * g.epsilon + 1e-12 and g.epsilon <= 0.31


def test_approximate_local_dp_adds_n_times_local_delta() -> None:
    g0 = shuffle_guarantee(4.0, 10**5)
    g = shuffle_guarantee(4.0, 10**5, local_delta=1e-12)
    assert g.delta == pytest.approx(1e-6 + 10**5 * (math.exp(g.epsilon) + 1) * (1 + math.exp(-4.0) / 2) * 1e-12)
    assert g.delta > g0.delta
    with pytest.raises(ValueError, match="local_delta"):
        shuffle_guarantee(4.0, 10**5, local_delta=1e-3)


@pytest.mark.parametrize(("eps0", "n", "delta"), [(0.0, 10, 1e-6), (1.0, 0, 1e-6), (1.0, 10, 0.0), (1.0, 2.5, 1e-6)])
def test_bad_input_raises(eps0: float, n: int, delta: float) -> None:
    with pytest.raises(ValueError):
        wang24_epsilon(eps0, n, delta)

