"""PrivUnitG, PrivUnit and Duchi et al.: closed forms, exact samplers, audits at full dimension, MSE, unbiasedness."""

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import integrate, special, stats

from fl_privtext.privacy import audit_mechanism, make_mechanism
from fl_privtext.privacy.mechanisms.privunit import PrivUnit, duchi_calibration, privunit_calibration
from fl_privtext.privacy.mechanisms.privunitg import PrivUnitG, privunitg_calibration
from fl_privtext.privacy.mechanisms.sphere import (
    CapCalibration,
    cap_inner_products,
    cap_threshold,
    to_sphere,
    truncated_normal,
)
from tests.samplers import float_mechanism

ALPHA = 1e-6
CAP = ("privunitg", "privunit", "duchi")


def unit(d, rng):
    x = rng.standard_normal(d)
    return x / np.linalg.norm(x)


# ------------------------------------------------------------------------------------------------ closed forms
@pytest.mark.parametrize(("eps", "mse"), [(1.0, 4861), (4.0, 334), (10.0, 72)])
def test_privunitg_mse_table_of_issue_11_at_d768(eps, mse):
    mech = make_mechanism("privunitg", epsilon=eps, dim=768, sampler="float")
    assert round(mech.report().calibration["mse_unit_sphere"]) == mse


@pytest.mark.parametrize("name", CAP)
@pytest.mark.parametrize("d", (2, 3, 16, 384))
@pytest.mark.parametrize("eps", (0.1, 1.0, 4.0, 16.0))
def test_calibration_is_exact(name, d, eps):
    rep = float_mechanism(name, epsilon=eps, dim=d).report()
    p, q = rep.calibration["p"], rep.calibration["q"]
    assert math.log(p * (1 - q) / (q * (1 - p))) == pytest.approx(eps, rel=1e-9)
    assert rep.epsilon_worst_case == pytest.approx(eps, rel=1e-9) and rep.epsilon_nominal == eps
    assert rep.published_claim_note is None and rep.delta == 0.0


@pytest.mark.parametrize("d", (3, 16, 384))
def test_thresholds_match_the_cap_probabilities(d):
    g = make_mechanism("privunitg", epsilon=2.0, dim=d, sampler="float").report().calibration
    assert stats.norm.sf(g["threshold_over_sigma"]) == pytest.approx(g["q"], rel=1e-9)
    assert g["gamma"] == pytest.approx(g["threshold_over_sigma"] / math.sqrt(d)) and g["sigma"] == 1 / math.sqrt(d)
    u = make_mechanism("privunit", epsilon=2.0, dim=d).report().calibration
    a = (d - 1) / 2  # <V, u> = 2B - 1, B ~ Beta(a, a)
    assert stats.beta.sf((1 + u["gamma"]) / 2, a, a) == pytest.approx(u["q"], rel=1e-7)


@pytest.mark.parametrize("d", (3, 16, 100))
def test_privunit_m_matches_numerical_integration(d):
    cal = privunit_calibration(2.0, d, 0.7)
    dens = lambda w: (1 - w * w) ** ((d - 3) / 2) / special.beta(0.5, (d - 1) / 2)
    cap_mean = integrate.quad(lambda w: w * dens(w), cal.threshold, 1)[0]
    assert cal.m == pytest.approx((cal.p / cal.q - (1 - cal.p) / (1 - cal.q)) * cap_mean, rel=1e-8)
    assert cal.mse == pytest.approx(1 / cal.m ** 2 - 1)


def test_privunitg_closed_form_moments_match_numerical_integration():
    eps, d, eps0 = 3.0, 50, 0.9
    cal = privunitg_calibration(eps, d, eps0)
    t, p, q = cal.threshold, cal.p, cal.q
    phi = stats.norm.pdf
    dens = lambda w: phi(w) * (p / q if w >= t else (1 - p) / (1 - q))
    m = integrate.quad(lambda w: w * dens(w), -40, t)[0] + integrate.quad(lambda w: w * dens(w), t, 40)[0]
    ew2 = integrate.quad(lambda w: w * w * dens(w), -40, t)[0] + integrate.quad(lambda w: w * w * dens(w), t, 40)[0]
    assert cal.m == pytest.approx(m, rel=1e-8)
    assert cal.mse == pytest.approx((d - 1 + ew2) / m ** 2 - 1, rel=1e-8)


@pytest.mark.parametrize("d", (2, 7, 768))
def test_duchi_matches_the_paper_and_privunit_with_a_hemisphere(d):
    eps = 1.5
    cal = duchi_calibration(eps, d)
    b = (math.exp(eps) + 1) / (math.exp(eps) - 1) * math.sqrt(math.pi) * d * math.exp(
        special.gammaln((d - 1) / 2 + 1) - special.gammaln(d / 2 + 1)) / 2  # Duchi et al. (2018), B
    assert 1 / cal.m == pytest.approx(b, rel=1e-10)
    half = privunit_calibration(eps, d, eps)  # eps0 = eps -> q = 1/2, gamma = 0
    assert half.q == 0.5 and abs(half.threshold) < 1e-12 and half.m == pytest.approx(cal.m, rel=1e-10)


@pytest.mark.parametrize("name", ("privunitg", "privunit"))
def test_p_is_optimised(name):
    mech = float_mechanism(name, epsilon=4.0, dim=128)
    best = mech.calibration
    eps0 = math.log(best.p / (1 - best.p))
    f = privunitg_calibration if name == "privunitg" else privunit_calibration
    for e0 in (eps0 - 0.05, eps0 + 0.05, 0.5, 3.5):
        assert f(4.0, 128, e0).mse >= best.mse
    assert best.mse < duchi_calibration(4.0, 128).mse  # and it beats the hemisphere (Duchi)


def test_the_mse_table_of_issue_11():
    # Unit L2 inputs at d = 768: analytic Gaussian (delta 1e-5, Delta_2 = 2) and L1 Laplace with C = sqrt(d) (the
    # L1 ball that contains the unit L2 sphere; variance 2 b^2 per coordinate, b = 2C/eps).
    d = 768
    table = {1.0: (4861, 42_750, 4.7e6), 4.0: (334, 3591, 2.95e5), 10.0: (72, 768, 4.7e4)}
    for eps, (pug_t, gauss_t, lap_t) in table.items():
        gauss = make_mechanism("gaussian", epsilon=eps, delta=1e-5, sampler="float").noise_std ** 2 * d
        lap = 2 * d * (2 * math.sqrt(d) / eps) ** 2
        pug = make_mechanism("privunitg", epsilon=eps, dim=d, sampler="float").calibration.mse
        assert round(pug) == pug_t and gauss == pytest.approx(gauss_t, rel=2e-3) and lap == pytest.approx(lap_t, rel=0.01)
        assert pug < gauss < lap


def test_report_contract_and_parameters():
    rep = make_mechanism("privunitg", epsilon=1.0, dim=16, clip_norm=2.0, sampler="float").report().to_json()
    for key in ("p", "q", "gamma", "sigma", "unbiasing_scale", "mse_unit_sphere", "mse_at_clip_norm", "work_dim"):
        assert key in rep
    assert rep["parameters"]["projection"] == "none" and rep["parameters"]["proj_dim"] is None
    assert rep["mse_at_clip_norm"] == pytest.approx(4 * rep["mse_unit_sphere"])
    assert rep["output_dim"] == 16 and rep["epsilon_worst_case"] == pytest.approx(1.0)


def test_bad_parameters_raise_full_sentences():
    with pytest.raises(ValueError, match="requires dim"):
        make_mechanism("privunitg", epsilon=1.0, sampler="float")
    with pytest.raises(ValueError, match="dim must be an integer >= 2"):
        make_mechanism("privunit", epsilon=1.0, dim=1)
    with pytest.raises(ValueError, match="epsilon <= 20"):
        make_mechanism("duchi", epsilon=40.0, dim=4, sampler="float")
    with pytest.raises(ValueError, match="sphere_map must be one of round, normalise"):
        make_mechanism("privunitg", epsilon=1.0, dim=4, sphere_map="clip", sampler="float")
    with pytest.raises(ValueError, match="Expected 4 columns"):
        make_mechanism("privunitg", epsilon=1.0, dim=4, sampler="float").privatize(np.zeros((2, 5)), np.random.default_rng(0))


# ----------------------------------------------------------------------------------------------------- samplers
@pytest.mark.parametrize("t", (-1.0, 0.0, 0.5, 3.0, 9.0))
def test_truncated_normal_is_exact(t):
    rng = np.random.default_rng(1)
    upper = rng.random(60_000) < 0.5
    w = truncated_normal(t, upper, rng)
    assert np.all(w[upper] >= t) and np.all(w[~upper] < t) and np.isfinite(w).all()
    hi, lo = stats.truncnorm(t, np.inf), stats.truncnorm(-np.inf, t)
    assert stats.kstest(w[upper], hi.cdf).pvalue > ALPHA
    assert stats.kstest(w[~upper], lo.cdf).pvalue > ALPHA
    assert stats.kstest(w[upper], stats.truncnorm(t + 0.1, np.inf).cdf).pvalue < ALPHA  # power


@pytest.mark.parametrize(("d", "q"), [(2, 0.3), (3, 0.1), (16, 0.05), (384, 0.01), (384, 0.5)])
def test_cap_inner_products_are_exact(d, q):
    rng = np.random.default_rng(2)
    upper = rng.random(40_000) < 0.5
    w = cap_inner_products(d, q, upper, rng)
    gamma, a = cap_threshold(d, q), (d - 1) / 2
    assert np.all(w[upper] >= gamma) and np.all(w[~upper] < gamma)
    base = stats.beta(a, a, loc=-1, scale=2)  # <V, u> for V uniform on the sphere
    assert stats.kstest(w[upper], lambda x: (base.cdf(x) - (1 - q)) / q).pvalue > ALPHA
    assert stats.kstest(w[~upper], lambda x: np.minimum(base.cdf(x) / (1 - q), 1.0)).pvalue > ALPHA


def test_to_sphere_round_keeps_sign_with_probability_one_plus_norm_over_two():
    rng = np.random.default_rng(3)
    x = np.zeros((100_000, 4), np.float32)
    x[:, 1] = 0.4
    x[:10] = 0.0  # zero rows -> uniform random direction
    u, info = to_sphere(x, rng, "round")
    assert np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-6) and info["zero_rows"] == 10
    keep = (u[10:, 1] > 0).sum()
    assert stats.binomtest(int(keep), 100_000 - 10, 0.7).pvalue > ALPHA
    assert info["flipped_rows"] == 100_000 - 10 - keep
    v, _ = to_sphere(x * 2.5, rng, "round", radius=2.5)
    assert stats.binomtest(int((v[10:, 1] > 0).sum()), 100_000 - 10, 0.7).pvalue > ALPHA


def test_privunitg_output_distribution():
    # Along u: the p / (1-p) mixture of truncated normals, times C/m; orthogonal to u: N(0, (C/m)^2).
    mech = make_mechanism("privunitg", epsilon=2.0, dim=32, sphere_map="normalise", sampler="float")
    cal, scale = mech.calibration, 1.0 / mech.calibration.m
    rng = np.random.default_rng(4)
    u = unit(32, rng)
    y = mech.privatize(np.tile(u, (40_000, 1)), rng).astype(np.float64)
    along = y @ u / scale
    t, p, q = cal.threshold, cal.p, cal.q

    def cdf(w):
        return np.where(w < t, (1 - p) * stats.norm.cdf(w) / (1 - q),
                        (1 - p) + p * (stats.norm.cdf(w) - (1 - q)) / q)

    assert stats.kstest(along, cdf).pvalue > ALPHA
    e = unit(32, rng)
    e -= (e @ u) * u
    e /= np.linalg.norm(e)
    assert stats.kstest(y @ e / scale, "norm").pvalue > ALPHA


@pytest.mark.parametrize("name", ("privunit", "duchi"))
def test_privunit_outputs_lie_on_the_scaled_sphere_with_the_right_inner_products(name):
    mech = float_mechanism(name, epsilon=1.0, dim=8, sphere_map="normalise")
    rng = np.random.default_rng(5)
    u = unit(8, rng)
    y = mech.privatize(np.tile(u, (40_000, 1)), rng).astype(np.float64) * mech.calibration.m
    assert np.allclose(np.linalg.norm(y, axis=1), 1.0, atol=1e-5)
    w = y @ u
    cal, a = mech.calibration, 3.5
    base = stats.beta(a, a, loc=-1, scale=2)
    assert stats.binomtest(int((w >= cal.threshold).sum()), w.size, cal.p).pvalue > ALPHA
    cdf = lambda x: np.where(x < cal.threshold, (1 - cal.p) * base.cdf(x) / (1 - cal.q),
                             (1 - cal.p) + cal.p * (base.cdf(x) - (1 - cal.q)) / cal.q)
    assert stats.kstest(w, cdf).pvalue > ALPHA


# ----------------------------------------------------------------------------------------------- MSE and bias
@pytest.mark.parametrize("eps", (1.0, 4.0))
def test_privunitg_empirical_mse_within_5_percent_of_closed_form_at_d384(eps):
    mech = make_mechanism("privunitg", epsilon=eps, dim=384, sampler="float")
    rng = np.random.default_rng(6)
    x = unit(384, rng)
    y = mech.privatize(np.tile(x, (4000, 1)), rng).astype(np.float64)
    mse = ((y - x) ** 2).sum(axis=1).mean()
    closed = mech.mse()
    assert closed == pytest.approx(mech.calibration.mse)  # unit input, C = 1
    assert abs(mse / closed - 1) < 0.05, (mse, closed)


@pytest.mark.parametrize("name", CAP)
def test_mse_for_ball_inputs_and_unbiasedness(name):
    # Input of norm 0.6 inside the ball of radius C = 2: rounding included, E[y] = x and
    # E||y - x||^2 = C^2 (MSE_unit + 1) - ||x||^2.
    mech = make_mechanism(name, epsilon=3.0, dim=24, clip_norm=2.0)
    rng = np.random.default_rng(7)
    x = 0.6 * unit(24, rng)
    n = 40_000
    y = mech.privatize(np.tile(x, (n, 1)), rng).astype(np.float64)
    err = ((y - x) ** 2).sum(axis=1)
    assert abs(err.mean() / mech.mse(0.6) - 1) < 0.05
    # unbiased: every coordinate's mean within 5 standard errors (Bonferroni-safe at d = 24)
    se = y.std(axis=0) / math.sqrt(n)
    assert np.all(np.abs(y.mean(axis=0) - x) < 5 * se)


@pytest.mark.parametrize("name", CAP)
def test_no_nan_or_inf_at_extremes(name):
    rng = np.random.default_rng(8)
    for d, eps in ((2, 1e-4), (2, 20.0), (3, 20.0), (768, 20.0), (768, 1e-3)):
        mech = float_mechanism(name, epsilon=eps, dim=d)
        x = rng.standard_normal((64, d)).astype(np.float32)
        x[0] = 0.0
        x[1] *= 1e30
        y = mech.privatize(x, rng)
        assert y.dtype == np.float32 and np.isfinite(y).all()
        assert mech.report().epsilon_worst_case == pytest.approx(eps, rel=1e-6)


# --------------------------------------------------------------------------------------------------- audits
@dataclass(frozen=True, kw_only=True)
class MiscalibratedPrivUnitG(PrivUnitG):
    """Test-only: calibrated for 1.3 * epsilon while still claiming epsilon."""

    def calibrate(self) -> CapCalibration:
        return make_mechanism("privunitg", epsilon=1.3 * self.epsilon, dim=self.dim, sampler="float").calibration


@dataclass(frozen=True, kw_only=True)
class WrongCapPrivUnit(PrivUnit):
    """Test-only: cap threshold from the area formula of S^(d-2) (off by one dimension): the true cap is smaller."""

    def calibrate(self) -> CapCalibration:
        good = super().calibrate()
        gamma = float(1 - 2 * special.betaincinv((self.dim - 2) / 2, (self.dim - 2) / 2, good.q))
        a = (self.dim - 1) / 2
        q_true = float(stats.beta.sf((1 + gamma) / 2, a, a))
        return CapCalibration(good.p, q_true, gamma, good.m, good.mse)


def audit(mech, n, seed=0, **kw):
    return audit_mechanism(mech, np.random.default_rng(seed), samples=n, **kw)


@pytest.mark.parametrize(("name", "eps", "d", "n"), [
    ("privunitg", 1.0, 384, 60_000), ("privunitg", 4.0, 64, 100_000), ("privunit", 2.0, 64, 100_000),
    ("duchi", 1.0, 32, 100_000),
])
def test_cap_mechanisms_pass_the_audit_at_full_dimension(name, eps, d, n):
    # the calibration of the ideal mechanism; privunitg's float32 low bits fail the full audit
    # (tests/privacy/test_privacy_sphere_secure.py)
    res = audit(float_mechanism(name, epsilon=eps, dim=d), n, low_bits=False)
    assert res.verdict == "pass", res.to_json()
    assert 0.9 * eps < res.epsilon_lower_bound <= eps  # tight: the statistic is the likelihood-ratio class


def test_miscalibrated_privunitg_is_caught():
    mech = MiscalibratedPrivUnitG(epsilon=1.0, dim=64, sampler="float")
    assert mech.report().epsilon_worst_case == pytest.approx(1.3)  # the report stays honest
    res = audit(mech, 100_000, seed=1, low_bits=False)
    assert res.verdict == "violation", res.to_json()
    assert 1.0 < res.epsilon_lower_bound <= 1.3


def test_privunit_with_approximate_cap_area_is_caught():
    mech = WrongCapPrivUnit(epsilon=2.0, dim=4)
    assert mech.report().epsilon_worst_case > 2.3  # 2.31: the report computes it from the realised cap
    res = audit(mech, 200_000, seed=2, low_bits=False)  # the calibration alone (the float low bits fail too)
    assert res.verdict == "violation", res.to_json()
    assert 2.0 < res.composed_lower_bound <= 2.31


@pytest.mark.parametrize("name", CAP)
def test_inputs_outside_the_ball_are_clipped(name):
    mech = make_mechanism(name, epsilon=4.0, dim=6, clip_norm=1.0)
    rng = np.random.default_rng(9)
    x = 5.0 * unit(6, rng)
    rel = mech.release(np.tile(x, (40_000, 1)), rng)
    assert rel.info()["normalise"]["clipped_rows"] == 40_000
    y = rel.values.astype(np.float64)
    se = y.std(axis=0) / math.sqrt(y.shape[0])
    assert np.all(np.abs(y.mean(axis=0) - x / 5.0) < 5 * se)  # unbiased for the clipped input


@pytest.mark.parametrize("rule", ("round", "normalise"))
def test_to_sphere_handles_huge_and_tiny_rows(rule):
    rng = np.random.default_rng(10)
    x = np.zeros((4, 3), np.float32)
    x[0] = [3e30, 4e30, 0]  # squares overflow float32
    x[1] = [3e-40, 4e-40, 0]  # denormal: 1/norm would overflow float32 -> treated as zero
    x[2] = [0.3, 0.4, 0.0]
    u, info = to_sphere(x, rng, rule)
    assert np.isfinite(u).all() and np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-6)
    assert np.allclose(np.abs(u[0]), [0.6, 0.8, 0.0]) and info["zero_rows"] == 2


# ------------------------------------------------------------------------------------ low-bit (float) audit
@pytest.mark.parametrize(("name", "params"), [
    ("privunit", {}), ("duchi", {}), ("privunit", {"clip_norm": 0.7, "sphere_map": "normalise"}),
    ("duchi", {"clip_norm": 3.0}),
])
def test_low_bit_audit_flags_the_float_privunit_and_duchi(name, params):
    """From x1 = C (1/2,1/2,1/2,1/2,0,...) the four block coordinates share one float32 offset: never inconsistent;
    from x0 = -C e_1 they are free products and ~18% of rows are inconsistent: certified far above eps = 1."""
    res = audit(float_mechanism(name, epsilon=1.0, dim=16, **params), 200_000, seed=3)
    assert res.verdict == "violation", res.to_json()
    (det,) = res.detectors
    assert det.bound.count_den == 0 and det.bound.lower_bound > 7.0
    assert 0.9 < res.components[0].bound.lower_bound <= 1.0  # the calibration itself is tight and correct


def test_shared_offset_statistic_is_exact_on_constructed_rows_and_has_power():
    from fl_privtext.privacy.audit import shared_offset_consistent

    rng = np.random.default_rng(4)
    n = 100_000
    b = rng.uniform(0.5, 2.0, n).astype(np.float32)
    a64 = 1.5 * rng.normal(size=(n, 4))
    a = (a64 - a64.mean(axis=1, keepdims=True)).astype(np.float32)  # orthogonal to the block, as in the mechanism
    shared = (a + b[:, None]).astype(np.float32)  # fl32(A_j + b): consistent by construction
    assert np.abs(shared).min() < 1e-3  # and rows with cancelling coordinates (the tested case) do occur
    assert shared_offset_consistent(shared).all()
    free = rng.normal(size=(n, 4)).astype(np.float32)  # no shared offset
    assert 0.05 < 1.0 - shared_offset_consistent(free).mean() < 0.5


@pytest.mark.parametrize("name", ("privunit", "duchi", "purkayastha"))
def test_float_reports_carry_the_low_bit_bound_that_the_audit_reproduces(name):
    """The report's documented low-bit lower bound is what its command measures (same seed, 1e6 samples)."""
    from fl_privtext.privacy.commands import audit as cli_audit
    from fl_privtext.privacy.commands import privacy_report

    params = {"epsilon": "1", "dim": "16", **({"sampler": "float"} if name == "duchi" else {})}
    rep = privacy_report(name, params)
    assert rep["float_safe"] is False
    low = rep["low_bit_audit"]
    assert low["epsilon_lower_bound"] > 10 * low["epsilon_claimed"]
    sets = "".join(f" --set {k}={v}" for k, v in params.items())
    assert low["command"] == f"fl-privtext audit {name}{sets} --seed 0"
    res = cli_audit(name, params, samples=None, seed=0)
    assert res["samples"] == low["samples_per_input"] and res["verdict"] == "violation"
    assert res["epsilon_lower_bound"] == pytest.approx(low["epsilon_lower_bound"], abs=0.01)
    assert "low_bit_audit" not in make_mechanism("duchi", epsilon=1.0, dim=16, sampler="secure").report().to_json()
