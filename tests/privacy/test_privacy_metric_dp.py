"""Multivariate Laplace (Feyisetan) and Purkayastha: true LDP epsilon, exact samplers, audits, MSE."""

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import integrate, stats

from fl_privtext.privacy import audit_mechanism, make_mechanism
from fl_privtext.privacy.commands import privacy_report
from fl_privtext.privacy.mechanisms.metric_dp import (
    MultivariateLaplace,
    Purkayastha,
    log_angular_normaliser,
    purkayastha_angles,
    purkayastha_log_density,
    purkayastha_mean_cosine,
)
from fl_privtext.privacy.stage import Stage
from tests.samplers import float_mechanism

ALPHA = 1e-6


def unit(d, rng):
    x = rng.standard_normal(d)
    return x / np.linalg.norm(x)


# ------------------------------------------------------------------------------------------------ closed forms
def test_privacy_report_contract_of_issue_11():
    pk = privacy_report("purkayastha", {"epsilon": "1", "dim": "16"})
    assert pk["epsilon_nominal"] == 1.0 and pk["epsilon_worst_case"] == pytest.approx(math.pi)
    mv = privacy_report("mvlaplace", {"epsilon": "1", "dim": "16"})
    assert mv["epsilon_nominal"] == 1.0 and mv["epsilon_worst_case"] == pytest.approx(2.0)
    assert "pi x eps" in pk["published_claim_note"] and "2 x eps" in mv["published_claim_note"]
    json.dumps(pk), json.dumps(mv)


@pytest.mark.parametrize("eps", (0.1, 1.0, 7.5))
def test_worst_case_is_diameter_times_nominal(eps):
    assert make_mechanism("purkayastha", epsilon=eps, dim=5).report().epsilon_worst_case == pytest.approx(math.pi * eps)
    assert make_mechanism("mvlaplace", epsilon=eps, dim=5).report().epsilon_worst_case == pytest.approx(2 * eps)
    assert make_mechanism("mvlaplace", epsilon=eps, dim=5, clip_norm=0.5).report().epsilon_worst_case == \
        pytest.approx(eps)  # ball of radius 1/2: diameter 1


@pytest.mark.parametrize("n", (0, 1, 2, 5, 14))
@pytest.mark.parametrize("kappa", (0.3, 2.0, 40.0))
def test_angular_normaliser_recursion_matches_quadrature(n, kappa):
    direct = integrate.quad(lambda t: math.exp(-kappa * t) * math.sin(t) ** n, 0, math.pi, epsabs=0, epsrel=1e-12,
                            limit=200)[0]
    assert log_angular_normaliser(n, kappa) == pytest.approx(math.log(direct), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("d", "kappa"), [(2, 1.0), (16, 1.0), (384, 4.0), (768, 50.0)])
def test_density_normalises_and_mean_cosine_in_log_space(d, kappa):
    # d = 768: sin^766 underflows in linear space; the log-space density still integrates to 1.
    t = np.linspace(0, math.pi, 400_001)
    f = np.exp(purkayastha_log_density(t, d, kappa))
    assert np.isfinite(f).all()
    assert integrate.trapezoid(f, t) == pytest.approx(1.0, rel=1e-6)
    assert purkayastha_mean_cosine(d, kappa) == pytest.approx(integrate.trapezoid(f * np.cos(t), t), rel=1e-5,
                                                              abs=1e-9)


def test_mvlaplace_mse_closed_form():
    mech = make_mechanism("mvlaplace", epsilon=2.0, dim=10)
    assert mech.mse() == 10 * 11 / 4 and mech.report().calibration["mse"] == mech.mse()


def test_bad_parameters_raise_full_sentences():
    with pytest.raises(ValueError, match="requires dim"):
        make_mechanism("purkayastha", epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        make_mechanism("mvlaplace", epsilon=0.0, dim=3)
    with pytest.raises(ValueError, match="dim must be an integer >= 2"):
        make_mechanism("purkayastha", epsilon=1.0, dim=1)


# ----------------------------------------------------------------------------------------------------- samplers
def _grid_cdf(d, kappa):
    t = np.linspace(0, math.pi, 200_001)
    f = np.exp(purkayastha_log_density(t, d, kappa))
    c = integrate.cumulative_trapezoid(f, t, initial=0.0)
    return lambda x: np.interp(x, t, c / c[-1])


@pytest.mark.parametrize(("d", "kappa"), [(2, 0.5), (3, 1.0), (3, 30.0), (16, 1.0), (16, 60.0), (384, 2.0),
                                          (768, 200.0)])
def test_purkayastha_angles_goodness_of_fit(d, kappa):
    rng = np.random.default_rng(1)
    theta = purkayastha_angles(40_000, d, kappa, rng)
    assert np.all((theta >= 0) & (theta <= math.pi)) and np.isfinite(theta).all()
    cdf = _grid_cdf(d, kappa)
    assert stats.kstest(theta, cdf).pvalue > ALPHA
    assert stats.kstest(theta, _grid_cdf(d, kappa * 1.5)).pvalue < ALPHA  # power: a 50% wrong kappa is rejected


def test_purkayastha_output_is_on_the_sphere_with_uniform_orthogonal_part():
    mech = make_mechanism("purkayastha", epsilon=3.0, dim=8)
    rng = np.random.default_rng(2)
    u = unit(8, rng)
    y = mech.privatize(np.tile(u * 5.0, (40_000, 1)), rng).astype(np.float64)  # any norm: normalised first
    assert np.allclose(np.linalg.norm(y, axis=1), 1.0, atol=1e-5)
    theta = np.arccos(np.clip(y @ u, -1, 1))
    assert stats.kstest(theta, _grid_cdf(8, 3.0)).pvalue > ALPHA
    # the orthogonal part, normalised, is uniform on S^6: one coordinate of it is Beta(3, 3) on [-1, 1]
    e = unit(8, rng)
    e -= (e @ u) * u
    e /= np.linalg.norm(e)
    perp = y - np.outer(y @ u, u)
    c = (perp @ e) / np.linalg.norm(perp, axis=1)
    assert stats.kstest(c, stats.beta(3, 3, loc=-1, scale=2).cdf).pvalue > ALPHA
    assert abs((y @ u).mean() - purkayastha_mean_cosine(8, 3.0)) < 5 * (y @ u).std() / math.sqrt(y.shape[0])


def test_mvlaplace_radius_and_direction():
    eps, d = 1.5, 6
    mech = make_mechanism("mvlaplace", epsilon=eps, dim=d)
    rng = np.random.default_rng(3)
    x = 0.3 * unit(d, rng)
    noise = mech.privatize(np.tile(x, (40_000, 1)), rng).astype(np.float64) - x
    r = np.linalg.norm(noise, axis=1)
    assert stats.kstest(r, stats.gamma(d, scale=1 / eps).cdf).pvalue > ALPHA
    assert stats.kstest(r, stats.gamma(d, scale=1.05 / eps).cdf).pvalue < ALPHA  # power
    assert stats.kstest(noise[:, 2] / r, stats.beta((d - 1) / 2, (d - 1) / 2, loc=-1, scale=2).cdf).pvalue > ALPHA
    mse = (r ** 2).mean()
    assert abs(mse / mech.mse() - 1) < 0.05


def test_mvlaplace_clips_to_the_ball():
    mech = make_mechanism("mvlaplace", epsilon=1.0, dim=3, clip_norm=2.0)
    rel = mech.release(np.array([[30.0, 40.0, 0.0], [0.3, 0.4, 0.0]]), np.random.default_rng(0))
    assert rel.info()["normalise"]["clipped_rows"] == 1
    assert np.allclose(rel.stages[0].values[0], [1.2, 1.6, 0.0])


@pytest.mark.parametrize("name", ("mvlaplace", "purkayastha"))
def test_no_nan_or_inf_at_extremes(name):
    rng = np.random.default_rng(4)
    for d, eps in ((2, 1e-4), (2, 500.0), (768, 500.0), (768, 1e-3)):
        x = rng.standard_normal((64, d)).astype(np.float32)
        x[0] = 0.0
        x[1] *= 1e30
        y = make_mechanism(name, epsilon=eps, dim=d).privatize(x, rng)
        assert y.dtype == np.float32 and np.isfinite(y).all()


# --------------------------------------------------------------------------------------------------- audits
@dataclass(frozen=True, kw_only=True)
class HotMVLaplace(MultivariateLaplace):
    """Test-only: samples with rate 1.3 * epsilon (noise / 1.3) but reports epsilon."""

    def randomise(self, c, rng):
        return MultivariateLaplace(epsilon=1.3 * self.epsilon, dim=self.dim, clip_norm=self.clip_norm).randomise(c, rng)


@dataclass(frozen=True, kw_only=True)
class HotPurkayastha(Purkayastha):
    """Test-only: samples with kappa = 1.3 * epsilon but reports epsilon."""

    def randomise(self, c, rng):
        return Purkayastha(epsilon=1.3 * self.epsilon, dim=self.dim).randomise(c, rng)


def audit(mech, n, seed=0, **kw):
    # calibration of the real-valued mechanism; the float32 low-bit leak is tested separately below
    return audit_mechanism(mech, np.random.default_rng(seed), samples=n, low_bits=kw.pop("low_bits", False), **kw)


@pytest.mark.parametrize(("name", "eps", "d"), [("mvlaplace", 1.0, 2), ("mvlaplace", 0.5, 16), ("purkayastha", 1.0, 2),
                                                ("purkayastha", 0.5, 16)])
def test_true_ldp_epsilon_passes_and_the_per_distance_claim_fails(name, eps, d):
    mech = make_mechanism(name, epsilon=eps, dim=d)
    res = audit(mech, 200_000, claimed_epsilon=mech.epsilon_worst_case)
    assert res.verdict == "pass", res.to_json()
    if d == 2:  # in 2 dimensions the worst-case events are likely: the audit is tight and refutes the nominal claim
        assert res.epsilon_lower_bound > 0.9 * mech.epsilon_worst_case
        assert audit(mech, 200_000, seed=1).verdict == "violation"


@pytest.mark.parametrize(("cls", "eps"), [(HotMVLaplace, 0.5), (HotPurkayastha, 0.5)])
def test_miscalibrated_metric_mechanisms_are_caught_at_their_ldp_epsilon(cls, eps):
    mech = cls(epsilon=eps, dim=2)
    res = audit(mech, 300_000, seed=2, claimed_epsilon=mech.epsilon_worst_case)
    assert res.verdict == "violation", res.to_json()
    assert res.epsilon_lower_bound <= 1.3 * mech.epsilon_worst_case


def test_float_noise_is_reported_unsafe_and_the_low_bit_audit_flags_mvlaplace():
    for name in ("privunitg", "privunit", "duchi", "mvlaplace", "purkayastha"):
        rep = float_mechanism(name, epsilon=1.0, dim=4).report()
        assert rep.float_safe is False and any("float_safe is false" in a for a in rep.assumptions)
    mech = make_mechanism("mvlaplace", epsilon=1.0, dim=2)
    res = audit(mech, 100_000, low_bits=True, claimed_epsilon=mech.epsilon_worst_case)
    assert res.verdict == "violation" and res.detectors and res.detectors[0].bound.lower_bound > 4.0


# --------------------------------------------------------------------- low-bit audit of the float Purkayastha
class Float64Purkayastha(Purkayastha):
    """Test-only: the same mechanism composed in float64 and rounded to float32 once (no float32 sum of a shared
    offset). Not claimed float-safe; it only lacks the artefact the shared-offset detector looks for."""

    def randomise(self, c, rng):
        u = np.asarray(c, dtype=np.float64)
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        theta = purkayastha_angles(u.shape[0], u.shape[1], self.epsilon, rng)
        v = rng.standard_normal(u.shape)
        v -= np.einsum("ij,ij->i", v, u)[:, None] * u
        v *= (self.clip_norm * np.sin(theta) / np.linalg.norm(v, axis=1))[:, None]
        return Stage((v + (self.clip_norm * np.cos(theta))[:, None] * u).astype(np.float32), {"method": "float64"})


def test_low_bit_audit_flags_the_float_purkayastha_over_20_seeds():
    """From x1 = C (1/2,1/2,1/2,1/2,0,...) the block coordinates share the float32 offset fl32(C cos T)/2: never
    inconsistent; from x0 = -C e_1 ~19% of rows are. Certified above the LDP value pi eps at every seed."""
    mech = make_mechanism("purkayastha", epsilon=1.0, dim=16)
    for seed in range(20):
        res = audit(mech, 20_000, seed=seed, low_bits=True, claimed_epsilon=mech.epsilon_worst_case)
        (det,) = res.detectors
        assert res.verdict == "violation" and det.bound.count_den == 0, (seed, res.to_json())
        assert det.bound.lower_bound > 1.5 * mech.epsilon_worst_case
        assert res.whole_vector.bound.lower_bound <= mech.epsilon_worst_case  # the calibration itself holds


def test_shared_offset_detector_has_no_false_violations_without_the_artefact():
    """20 seeds, 0 false violations: (a) the float Purkayastha from -C e_1 vs -C e_2, two laws equal up to a swap of
    coordinates 0 and 1, which the statistic ignores (it fires on ~19% of rows under both); (b) the float64-composed
    variant on the audit's own pair, whose block coordinates share no float32 offset: the full audit passes at pi eps.
    The float32 sampler on the same pair and samples is the known-bad variant (previous test)."""
    from fl_privtext.privacy.audit import event_lower_bound, shared_offset_consistent

    k, n = 16, 20_000
    mech = make_mechanism("purkayastha", epsilon=1.0, dim=k)
    x0, x2 = np.zeros((n, k), np.float32), np.zeros((n, k), np.float32)
    x0[:, 0] = x2[:, 1] = -1.0
    safe = Float64Purkayastha(epsilon=1.0, dim=k)
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        s0 = shared_offset_consistent(mech.randomise(x0, rng).values).astype(np.float64)
        s2 = shared_offset_consistent(mech.randomise(x2, rng).values).astype(np.float64)
        assert 0.15 < 1.0 - s0.mean() < 0.25 and 0.15 < 1.0 - s2.mean() < 0.25
        assert event_lower_bound(s0, s2, alpha=0.05).lower_bound <= mech.epsilon, seed
        res = audit(safe, 20_000, seed=seed, low_bits=True, claimed_epsilon=safe.epsilon_worst_case)
        assert res.verdict == "pass" and res.detectors[0].bound.lower_bound <= safe.epsilon, (seed, res.to_json())


def test_purkayastha_has_no_secure_sampler_and_its_report_carries_the_low_bit_bound():
    from fl_privtext.client.upload import mechanism_for
    from fl_privtext.config import ExperimentConfig, PrivacyConfig
    from fl_privtext.privacy.commands import audit as cli_audit
    from fl_privtext.public import PublicSpec

    with pytest.raises(ValueError, match="'purkayastha' has no secure sampler") as err:
        make_mechanism("purkayastha", epsilon=1.0, dim=16, sampler="secure")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="'purkayastha' has no secure sampler"):
        cli_audit("purkayastha", {"epsilon": "1", "dim": "16", "sampler": "secure"}, samples=None, seed=0)
    # a run with the default privacy.sampler = secure builds it without the parameter, as privunit: float_safe false
    cfg = ExperimentConfig(privacy=PrivacyConfig(mechanism="purkayastha", epsilon=1.0))
    assert cfg.privacy.sampler == "secure"
    rep = mechanism_for(PublicSpec.of(cfg), 16).report().to_json()
    assert rep["float_safe"] is False and "sampler" not in rep["parameters"]
    low = rep["low_bit_audit"]
    assert low["epsilon_lower_bound"] > 3 * low["epsilon_worst_case"] == pytest.approx(3 * math.pi)
