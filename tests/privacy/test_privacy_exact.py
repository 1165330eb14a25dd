"""The vectorized exact samplers (fl_privtext.privacy.exact): pmf vs closed form, vs OpenDP, the exact path alone."""

import math

import numpy as np
import pytest
from scipy import stats

from fl_privtext.privacy import exact

ALPHA = 1e-6


def dlap_pmf(t: float, ks: np.ndarray) -> np.ndarray:
    q = math.exp(-1.0 / t)
    return (1 - q) / (1 + q) * q ** np.abs(ks)


def dgauss_pmf(sigma: float, ks: np.ndarray) -> np.ndarray:
    support = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    norm = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2)).sum()
    return np.exp(-(ks.astype(float) ** 2) / (2 * sigma**2)) / norm


def gof(draws: np.ndarray, pmf, cut: int) -> float:
    """Chi-square goodness of fit on the cells -cut..cut plus the two tails (probabilities from ``pmf``); cut is
    lowered until every cell expects 5 draws or more (a rarer cell makes the chi-square statistic meaningless)."""
    while cut > 0 and pmf(np.array([cut]))[0] * len(draws) < 5:
        cut -= 1
    ks = np.arange(-cut, cut + 1)
    p = pmf(ks)
    tail = (1.0 - p.sum()) / 2
    obs = np.array([(draws < -cut).sum(), *[(draws == k).sum() for k in ks], (draws > cut).sum()])
    exp_ = np.array([tail, *p, tail]) * len(draws)
    return float(stats.chisquare(obs, exp_).pvalue)


@pytest.mark.parametrize("t", [0.7, 3.0])
def test_discrete_laplace_pmf_matches_closed_form(t):
    draws = exact.discrete_laplace(2_000_000, t, exact.SecureBits())
    assert np.all(draws == np.round(draws))
    assert gof(draws, lambda ks: dlap_pmf(t, ks), int(6 * t) + 2) > ALPHA


@pytest.mark.parametrize("sigma", [0.8, 2.5])
def test_discrete_gaussian_pmf_matches_closed_form(sigma):
    draws = exact.discrete_gaussian(2_000_000, sigma, exact.SecureBits())
    assert gof(draws, lambda ks: dgauss_pmf(sigma, ks), int(4 * sigma) + 1) > ALPHA


def test_exact_path_alone_has_the_same_pmf(monkeypatch):
    """MARGIN = 0.5 sends every draw through the decimal (exact) decision: same distribution."""
    monkeypatch.setattr(exact, "MARGIN", 0.5)
    bits = exact.SecureBits()
    assert gof(exact.discrete_laplace(8_000, 2.0, bits), lambda ks: dlap_pmf(2.0, ks), 10) > ALPHA
    assert gof(exact.discrete_gaussian(4_000, 1.5, bits), lambda ks: dgauss_pmf(1.5, ks), 6) > ALPHA


def test_known_bad_sampler_fails_the_same_check():
    """The check has power: DLap(3.3) draws do not pass as DLap(3)."""
    draws = exact.discrete_laplace(2_000_000, 3.3, exact.SecureBits())
    assert gof(draws, lambda ks: dlap_pmf(3.0, ks), 20) < ALPHA


def _opendp(kind: str, noise: float, n: int) -> np.ndarray:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    dom = dp.vector_domain(dp.atom_domain(T=int), size=n)
    make = dp.m.make_laplace if kind == "laplace" else dp.m.make_gaussian
    metric = dp.l1_distance(T=int) if kind == "laplace" else dp.l2_distance(T=int)
    return np.asarray(make(dom, metric, scale=noise)([0] * n), dtype=np.float64)


@pytest.mark.parametrize(("kind", "noise"), [("laplace", 3.0), ("gaussian", 2.5)])
def test_agrees_with_opendp(kind, noise):
    """Two-sample chi-square (2,000,000 of ours vs 200,000 of OpenDP's, the reference) and both vs the exact pmf."""
    ours = (exact.discrete_laplace if kind == "laplace" else exact.discrete_gaussian)(2_000_000, noise,
                                                                                      exact.SecureBits())
    ref = _opendp(kind, noise, 200_000)
    cut = int(4 * noise)
    edges = np.arange(-cut, cut + 2) - 0.5
    table = np.array([np.histogram(np.clip(a, -cut, cut), edges)[0] for a in (ours, ref)])
    assert stats.chi2_contingency(table).pvalue > ALPHA
    pmf = (lambda ks: dlap_pmf(noise, ks)) if kind == "laplace" else (lambda ks: dgauss_pmf(noise, ks))
    assert gof(ref, pmf, cut) > ALPHA


def test_grid_and_privacy_map():
    for s in (1e-3, 0.7, 1.0, 3.0, 1e6):
        g = exact.grid_for(s)
        assert math.log2(g).is_integer() and 2**24 <= s / g < 2**25
    s, dim = 2.0, 384
    assert exact.laplace_epsilon(s, 2.0, dim) == pytest.approx((2.0 + dim * exact.grid_for(s)) / s, rel=1e-15)
    with pytest.raises(ValueError, match="finite and > 0"):
        exact.grid_for(0.0)


def test_values_are_rounded_to_the_grid_and_noised():
    x = np.random.default_rng(0).normal(size=(2000, 8))
    y = exact.laplace(x, 0.5)
    g = exact.grid_for(0.5)
    assert np.all(y / g == np.round(y / g))
    assert abs(np.mean(y - x)) < 0.05 and np.std(y - x) == pytest.approx(0.5 * math.sqrt(2), rel=0.05)


def test_secure_noise_keyed_by_the_generators_secret_seed():
    """A replay (the client ledger) or a client seed redraws the same exact noise; two calls on one generator, and
    two OS-seeded generators, never share noise."""
    from fl_privtext import rng
    from fl_privtext.privacy import make_mechanism

    mech = make_mechanism("laplace-l1", epsilon=1.0, dim=16, sampler="secure")
    x = np.full((64, 16), 0.01, np.float32)
    a = mech.privatize(x, rng.generator(7, "client", 3))
    b = mech.privatize(x, rng.generator(7, "client", 3))
    np.testing.assert_array_equal(a, b)
    g = rng.generator(7, "client", 3)
    first, second = mech.privatize(x, g), mech.privatize(x, g)
    assert not np.array_equal(first, second)
    assert not np.array_equal(a, mech.privatize(x, rng.generator(7, "client", 4)))
    fresh = [mech.privatize(x, np.random.Generator(np.random.PCG64(np.random.SeedSequence()))) for _ in range(2)]
    assert not np.array_equal(*fresh)
