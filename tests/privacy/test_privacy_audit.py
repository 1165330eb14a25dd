"""Empirical epsilon audits: correct mechanisms pass, known-bad ones are caught (the audit has power)."""

from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from fl_privtext.privacy import audit_mechanism, event_lower_bound, make_mechanism
from fl_privtext.privacy.audit import cp_lower, cp_upper
from fl_privtext.privacy.mechanisms import Gaussian, LaplaceL1
from tests.samplers import float_mechanism


@dataclass(frozen=True, kw_only=True)
class MiscalibratedLaplaceL1(LaplaceL1):
    """Test-only: noise scale divided by 1.3 (true epsilon 1.3 * epsilon) while still claiming epsilon."""

    @property
    def noise_scale(self) -> float:
        return super().noise_scale / 1.3


@dataclass(frozen=True, kw_only=True)
class MiscalibratedGaussian(Gaussian):
    """Test-only: sigma halved."""

    @property
    def noise_std(self) -> float:
        return super().noise_std / 2.0


def run(mech, samples=None, seed=0, low_bits=True):
    return audit_mechanism(mech, np.random.default_rng(seed), samples=samples, low_bits=low_bits)


@pytest.mark.parametrize(("name", "params", "samples"), [
    ("laplace-l1", {"epsilon": 1.0, "dim": 4, "sampler": "secure"}, 30_000),
    ("laplace-l1", {"epsilon": 4.0, "clip_norm": 0.5, "dim": 2, "sampler": "secure"}, 30_000),
    ("laplace-box", {"epsilon": 1.0, "dim": 3, "sampler": "secure"}, 30_000),
    ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 2, "sampler": "secure"}, 20_000),
    ("bitrr", {"epsilon": 1.0, "dim": 2}, 300_000),
    ("ome", {"epsilon": 1.0, "lam": 1.0, "dim": 5}, 100_000),
    ("sue", {"epsilon": 1.0, "dim": 5, "calibration": "textbook"}, 100_000),
    ("oue", {"epsilon": 1.0, "dim": 5, "calibration": "textbook"}, 100_000),
    ("none", {"dim": 4}, 20_000),
])
def test_correct_mechanisms_pass(name, params, samples):
    res = run(make_mechanism(name, **params), samples)
    assert res.verdict == "pass", res.to_json()
    assert res.epsilon_lower_bound <= res.epsilon_claimed
    out = res.to_json()
    for key in ("mechanism", "epsilon_claimed", "epsilon_lower_bound", "verdict", "samples", "alpha"):
        assert key in out
    assert out["samples"] == samples and out["alpha"] == 0.05


@pytest.mark.parametrize(("name", "params", "samples"), [
    ("laplace-l1", {"epsilon": 1.0, "dim": 8}, 1_000_000),
    ("laplace-l1", {"epsilon": 4.0, "clip_norm": 0.5}, 300_000),
    ("laplace-box", {"epsilon": 1.0, "dim": 8}, 300_000),
    ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 8}, 300_000),
])
def test_float_sampler_calibration_passes_without_the_low_bit_test(name, params, samples):
    # the ideal real-valued mechanism is correctly calibrated; its float32 realisation is not DP (next test)
    res = run(float_mechanism(name, **params), samples, low_bits=False)
    assert res.verdict == "pass", res.to_json()
    assert not res.detectors


@pytest.mark.parametrize(("name", "params"), [
    ("laplace-l1", {"epsilon": 1.0, "dim": 4}),
    ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 4}),
])
def test_low_bit_distinguisher_flags_the_float_sampler_and_passes_the_secure_one(name, params):
    flt = run(float_mechanism(name, **params), 200_000)
    assert flt.verdict == "violation", flt.to_json()
    (det,) = flt.detectors
    # Pr[y cannot come from x1] is 0 under x1 and ~1/4 under x0: only the sample size limits the certificate
    assert det.bound.count_den == 0 and det.bound.lower_bound > 7.0
    assert not float_mechanism(name, **params).report().float_safe
    sec = run(make_mechanism(name, sampler="secure", **params), 20_000)
    assert sec.verdict == "pass", sec.to_json()
    assert sec.detectors[0].bound.lower_bound <= params["epsilon"]
    assert make_mechanism(name, sampler="secure", **params).report().float_safe


@pytest.mark.parametrize(("name", "params"), [("laplace-l1", {"epsilon": 1.0, "dim": 2}),
                                             ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 2})])
def test_secure_samplers_give_no_false_violation_over_20_seeds(name, params):
    mech = make_mechanism(name, sampler="secure", **params)
    verdicts = [run(mech, 5_000, seed=s).verdict for s in range(20)]
    assert verdicts == ["pass"] * 20


def test_float_calibration_audits_give_no_false_violation_over_20_seeds():
    for name, params in (("laplace-l1", {"epsilon": 1.0, "dim": 4}), ("bitrr", {"epsilon": 1.0, "dim": 2}),
                         ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 2})):
        mech = float_mechanism(name, **params)
        assert [run(mech, 20_000, seed=s, low_bits=False).verdict for s in range(20)] == ["pass"] * 20, name


def test_laplace_audit_is_tight():
    res = run(make_mechanism("laplace-l1", epsilon=1.0, dim=8, sampler="float"), 1_000_000, low_bits=False)
    assert 0.95 < res.epsilon_lower_bound <= 1.0


@pytest.mark.parametrize("eps", (0.5, 1.0, 2.0))
def test_miscalibrated_laplace_is_a_violation(eps):
    mech = MiscalibratedLaplaceL1(epsilon=eps, dim=8)
    assert mech.report().epsilon_worst_case == pytest.approx(1.3 * eps)  # the report is honest about it
    res = run(mech, 1_000_000, seed=1, low_bits=False)
    assert res.verdict == "violation", res.to_json()
    assert eps < res.epsilon_lower_bound <= 1.3 * eps


def test_miscalibrated_gaussian_is_a_violation():
    res = run(MiscalibratedGaussian(epsilon=1.0, delta=1e-5, sampler="float"), 500_000)
    assert res.verdict == "violation", res.to_json()


def test_ome_lambda_100_claimed_eps_1_is_a_violation():
    mech = make_mechanism("ome", epsilon=1.0, lam=100.0, dim=5)
    res = run(mech, 100_000)
    assert res.verdict == "violation"
    assert res.epsilon_lower_bound > 100  # composed per-bit bounds; the true value is 345.1
    assert res.epsilon_lower_bound <= mech.report().epsilon_worst_case
    assert res.whole_vector is not None and res.whole_vector.bound.lower_bound > 5  # gross detector agrees
    odd = next(c for c in res.components if "p=9.99999e-07" in c.label)
    assert odd.multiplicity == 25 and odd.bound.lower_bound > 4  # one odd bit: true 9.2, N limits the certificate


@pytest.mark.parametrize("k", (4, 16))
def test_laplace_dpnr_is_a_violation(k):
    res = run(make_mechanism("laplace-dpnr", epsilon=1.0, dim=k, sampler="float"), 300_000, low_bits=False)
    assert res.verdict == "violation"
    assert 1.0 < res.epsilon_lower_bound <= k


def test_laplace_dpnr_code_is_a_violation_near_the_sample_limit():
    res = run(make_mechanism("laplace-dpnr-code", epsilon=1.0, dim=8), 100_000)
    assert res.verdict == "violation"
    assert res.epsilon_lower_bound > 0.9 * res.max_certifiable  # unbounded: only N limits the certificate


def test_sue_paper_calibration_is_a_violation():
    res = run(make_mechanism("sue", epsilon=1.0, dim=5), 200_000)
    assert res.verdict == "violation" and res.epsilon_lower_bound <= 5.0


def test_audit_is_reproducible():
    mech = make_mechanism("laplace-box", epsilon=2.0, dim=3, sampler="float")
    a, b = run(mech, 20_000, seed=3).to_json(), run(mech, 20_000, seed=3).to_json()
    assert a == b


def test_audit_rejects_bad_settings():
    mech = make_mechanism("laplace-l1", epsilon=1.0, sampler="float")
    with pytest.raises(ValueError, match="samples must be an integer >= 1000"):
        run(mech, 10)
    with pytest.raises(ValueError, match=r"alpha must be in the open interval \(0, 1\)"):
        audit_mechanism(mech, np.random.default_rng(0), alpha=1.5)


def test_clopper_pearson_bounds():
    n, a = 1000, 0.025
    assert cp_lower(np.array(0), n, a) == 0.0 and cp_upper(np.array(n), n, a) == 1.0
    assert cp_upper(np.array(0), n, a) == pytest.approx(1 - a ** (1 / n))
    ci = stats.binomtest(300, n).proportion_ci(confidence_level=1 - 2 * a, method="exact")
    assert cp_lower(np.array(300), n, a) == pytest.approx(ci.low)
    assert cp_upper(np.array(300), n, a) == pytest.approx(ci.high)


def test_event_lower_bound_on_identical_distributions_is_small():
    rng = np.random.default_rng(4)
    s0, s1 = rng.normal(size=100_000), rng.normal(size=100_000)
    assert event_lower_bound(s0, s1, alpha=0.05).lower_bound < 0.05
