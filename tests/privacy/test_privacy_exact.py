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


STAGES = {  # knobs that send every draw past the faster stages (each margin is multiplied by t >= 1)
    "float64": {"MARGIN32": 1.0, "ACCEPT_TOL32": 100.0},
    "long-double": {"MARGIN32": 1.0, "MARGIN": 0.5, "ACCEPT_TOL32": 100.0},
    "decimal": {"MARGIN32": 1.0, "MARGIN": 0.5, "LD_MARGIN": 0.5, "ACCEPT_TOL32": 100.0, "ACCEPT_TOL": 100.0},
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_each_exact_stage_alone_has_the_same_pmf(monkeypatch, stage):
    """Every draw decided by the float64, long-double or decimal stage (the float32 / float64 ones skipped): same
    distribution."""
    for knob, value in STAGES[stage].items():
        monkeypatch.setattr(exact, knob, value)
    n = 8_000 if stage == "decimal" else 200_000
    bits = exact.SecureBits(bytes(range(32)))
    assert gof(exact.discrete_laplace(n, 2.0, bits), lambda ks: dlap_pmf(2.0, ks), 10) > ALPHA
    assert gof(exact.discrete_gaussian(n // 2, 1.5, bits), lambda ks: dgauss_pmf(1.5, ks), 6) > ALPHA
    if stage != "decimal":
        assert gof(exact.discrete_gaussian(n, 5.0, bits), lambda ks: dgauss_pmf(5.0, ks), 20) > ALPHA


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


# ----------------------------------------------------------------------------- grid-scale noise (sigma ~ 2^24.5)
BIG = 0.3 / exact.grid_for(0.3)  # the scale in grid steps of a release with noise 0.3: in [2^24, 2^25)


def binned_gof(draws: np.ndarray, cdf, scale: float) -> float:
    """Chi-square on bins of width scale/4 over +-4 scale (plus tails), probabilities from ``cdf`` at the
    half-integers between bins."""
    edges = np.round(np.arange(-4.0, 4.01, 0.25) * scale) + 0.5
    probs = np.diff(np.concatenate([[0.0], cdf(edges), [1.0]]))
    obs = np.bincount(np.searchsorted(edges, draws), minlength=edges.size + 1)
    return float(stats.chisquare(obs, probs * draws.size).pvalue)


def gauss_cdf(sigma: float):
    # the discrete Gaussian's CDF at half-integers equals the normal CDF there up to e^(-2 pi^2 sigma^2) (Poisson sum)
    return lambda x: stats.norm.cdf(x / sigma)


def lap_cdf(t: float):
    q = math.exp(-1.0 / t)

    def cdf(x: np.ndarray) -> np.ndarray:  # P(Y <= x) at half-integers x, exactly
        k = np.floor(np.abs(x))
        tail = q ** (k + 1) / (1 + q)  # P(Y >= k + 1) = P(Y <= -(k + 1))
        return np.where(x < 0, tail, 1.0 - tail)

    return cdf


def test_grid_scale_gaussian_matches_closed_form_and_low_bits_are_uniform():
    draws = exact.discrete_gaussian(2_000_000, BIG, exact.SecureBits(bytes(range(32))))
    assert np.all(draws == np.round(draws))
    assert binned_gof(draws, gauss_cdf(BIG), BIG) > ALPHA
    # residues mod 64 (the uniform remainder's low bits, the sign): uniform up to ~e^(-2 pi^2 (sigma/64)^2)
    assert stats.chisquare(np.bincount(np.mod(draws, 64).astype(np.int64), minlength=64)).pvalue > ALPHA
    assert abs(np.mean(draws)) < 5 * BIG / math.sqrt(draws.size)


def test_grid_scale_laplace_matches_closed_form_and_low_bits_are_uniform():
    t = BIG
    draws = exact.discrete_laplace(2_000_000, t, exact.SecureBits(bytes(range(32))))
    assert binned_gof(draws, lap_cdf(t), t) > ALPHA
    assert stats.chisquare(np.bincount(np.mod(draws, 64).astype(np.int64), minlength=64)).pvalue > ALPHA


def test_grid_scale_known_bad_variants_fail_the_same_checks():
    """The checks have power at 2M draws: a 1% larger sigma fails, and so does a biased acceptance (exact discrete
    Laplace proposals, CKS acceptance exp(-0.9 E) in float64)."""
    bits = exact.SecureBits(bytes(range(32)))
    assert binned_gof(exact.discrete_gaussian(2_000_000, 1.01 * BIG, bits), gauss_cdf(BIG), BIG) < ALPHA
    t = float(math.floor(BIG) + 1)
    y = exact.discrete_laplace(3_000_000, t, bits)
    e = (np.abs(y) - BIG * BIG / t) ** 2 / (2 * BIG * BIG)
    u = (bits.words(y.size) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    biased = y[u < np.exp(-0.9 * e)][:2_000_000]
    assert binned_gof(biased, gauss_cdf(BIG), BIG) < ALPHA
    assert binned_gof(exact.discrete_laplace(2_000_000, 1.01 * t, bits), lap_cdf(t), t) < ALPHA


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_grid_scale_agrees_with_opendp(kind):
    """Two-sample chi-square at the grid scale: 1,000,000 of ours vs 100,000 of OpenDP's (the reference)."""
    ours = (exact.discrete_laplace if kind == "laplace" else exact.discrete_gaussian)(1_000_000, BIG,
                                                                                      exact.SecureBits())
    ref = _opendp(kind, BIG, 100_000)
    edges = np.round(np.arange(-4.0, 4.01, 0.5) * BIG) + 0.5
    table = np.array([np.bincount(np.searchsorted(edges, a), minlength=edges.size + 1) for a in (ours, ref)])
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_keystream_into_a_buffer_is_the_same_stream():
    a, b = exact.SecureBits(bytes(range(32))), exact.SecureBits(bytes(range(32)))
    buf = np.empty(1002, dtype=np.uint64)
    np.testing.assert_array_equal(a.words(1000), b.words(1000, buf))
    np.testing.assert_array_equal(a.words(7), b.words(7))


def test_proposal_scale_is_the_nearest_power_of_two():
    for sigma, t in ((0.3, 1.0), (1.5, 2.0), (2.9, 4.0), (BIG, 2.0 ** round(math.log2(BIG)))):
        assert exact.proposal_scale(sigma) == t
        assert 2 ** -0.5 <= t / max(sigma, 1.0) <= 2 ** 0.5 or sigma < 1
