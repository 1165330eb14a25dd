"""Secure (grid, exact) PrivUnitG: exact cap probability, exact conditional sampling, unbiasedness, MSE, and the
low-bit audit that flags the float sampler and passes the secure one."""

import math

import numpy as np
import pytest
from scipy import special, stats

from fl_privtext.privacy import audit_mechanism, exact, make_mechanism
from fl_privtext.privacy.commands import audit as cli_audit
from fl_privtext.privacy.mechanisms.privunitg import secure_cap_probability, secure_privunitg_calibration
from fl_privtext.privacy.mechanisms.sphere import SECURE_SCALE, TWO53, sample_secure_caps
from tests.samplers import float_mechanism

ALPHA = 1e-6


def dlap_pmf(t: float, half: int) -> np.ndarray:
    """pmf of DLap(t) (P(x) ~ exp(-|x|/t)) on -half..half, closed form (the rest is < e^-60)."""
    a = math.exp(-1.0 / t)
    n = np.arange(-half, half + 1, dtype=np.float64)
    return (1 - a) / (1 + a) * a ** np.abs(n)


def sum_pmf(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact pmf of the sum of k i.i.d. DLap(SECURE_SCALE) by repeated direct convolution; its support."""
    half = int(60 * SECURE_SCALE)
    one = dlap_pmf(SECURE_SCALE, half)
    pmf = one
    for _ in range(k - 1):
        pmf = np.convolve(pmf, one)
    return np.arange(-k * half, k * half + 1), pmf


def test_cap_probability_against_direct_convolution_and_a_known_bad_value():
    support, pmf = sum_pmf(4)
    for g in (-300, 0, 1, 57, 400, 2000):
        assert secure_cap_probability(4, g) == pytest.approx(pmf[support >= g].sum(), rel=1e-11, abs=1e-15)
    # the Gaussian approximation of the same tail is measurably wrong: the exact value is needed
    sd = math.sqrt(4 * 2 * math.exp(-1 / SECURE_SCALE)) / (1 - math.exp(-1 / SECURE_SCALE))
    assert abs(secure_cap_probability(4, 400) - special.ndtr(-399.5 / sd)) > 1e-4


@pytest.mark.parametrize(("eps", "k"), [(1.0, 3), (4.0, 5), (0.5, 8)])
def test_cap_probability_is_the_exact_convolution(eps, k):
    cal = secure_privunitg_calibration(eps, k, eps / 2)
    support, pmf = sum_pmf(k)
    q = float(pmf[support >= cal.threshold].sum())
    assert cal.q == pytest.approx(q, rel=1e-10, abs=1e-13)
    # p is a multiple of 2^-53 (the exact coin), and the realised epsilon is at most the target, within 1e-12
    assert cal.p * TWO53 == round(cal.p * TWO53)
    assert eps - 1e-12 < cal.epsilon <= eps
    # m is E[S]/k under the p-mixture of the two conditional laws
    cap = support >= cal.threshold
    es = cal.p * (pmf[cap] * support[cap]).sum() / q + (1 - cal.p) * (pmf[~cap] * support[~cap]).sum() / (1 - q)
    assert cal.m == pytest.approx(es / k, rel=1e-9)


def test_conditional_sampler_matches_the_exact_law():
    k, n = 3, 200_000
    cal = secure_privunitg_calibration(1.0, k, 0.5)
    x = sample_secure_caps(n, k, cal, exact.SecureBits(bytes(range(32))))
    assert np.array_equal(x, np.rint(x))
    s = x.sum(axis=1)
    cap = s >= cal.threshold
    assert stats.binomtest(int(cap.sum()), n, cal.p).pvalue > ALPHA
    support, pmf = sum_pmf(k)
    for side, sel in ((True, cap), (False, ~cap)):
        mask = (support >= cal.threshold) == side
        sup, pm = support[mask], pmf[mask] / pmf[mask].sum()
        edges = np.searchsorted(np.cumsum(pm), np.linspace(0, 1, 21)[1:-1])  # 20 equiprobable-ish bins
        cuts = sup[edges]
        expected = np.diff(np.concatenate([[0.0], np.cumsum(pm)[edges], [1.0]])) * sel.sum()
        observed = np.bincount(np.searchsorted(cuts, s[sel], side="left"), minlength=cuts.size + 1)
        assert stats.chisquare(observed, expected).pvalue > ALPHA, side
    # coordinates are exchangeable and the output is sign-symmetric only through the vertex (none here)
    assert np.abs(x.mean(axis=0) - x.mean()).max() < 6 * x.std() / math.sqrt(n)


def test_secure_output_is_unbiased_and_its_mse_matches_the_closed_form():
    k, n = 8, 100_000
    mech = make_mechanism("privunitg", epsilon=2.0, dim=k, clip_norm=1.5, sampler="secure")
    x = np.linspace(-1.0, 1.0, k).astype(np.float32)
    x *= 0.9 / np.linalg.norm(x)
    y = mech.privatize(np.tile(x, (n, 1)), np.random.default_rng(3)).astype(np.float64)
    se = y.std(axis=0) / math.sqrt(n)
    assert (np.abs(y.mean(axis=0) - x) < 5 * se).all()
    err = ((y - x) ** 2).sum(axis=1)
    assert err.mean() == pytest.approx(mech.mse(0.9), rel=0.03)
    # outputs lie on the grid: y / (C/m) is an integer vector (up to the float32 cast)
    grid = y / (mech.clip_norm / mech.calibration.m)
    assert np.abs(grid - np.rint(grid)).max() < 1e-6 * np.abs(grid).max()


def test_reports_say_float_safe_only_for_the_secure_privunitg():
    sec = make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="secure").report().to_json()
    flt = make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="float").report().to_json()
    assert sec["float_safe"] is True and flt["float_safe"] is False
    cal = secure_privunitg_calibration(1.0, 16, 0.5)
    assert sec["epsilon_worst_case"] <= 1.0 and sec["epsilon_worst_case"] > 1.0 - 1e-12
    assert cal.p < 1 and any("sign vertex" in a for a in sec["assumptions"])
    for name in ("privunit", "duchi"):
        assert float_mechanism(name, epsilon=1.0, dim=16).report().to_json()["float_safe"] is False
    with pytest.raises(ValueError, match="sampler"):
        make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="exact")


def test_audit_flags_the_float_privunitg_and_passes_the_secure_one():
    flt = audit_mechanism(make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="float"), np.random.default_rng(0),
                          samples=100_000)
    assert flt.verdict == "violation", flt.to_json()
    (det,) = flt.detectors
    assert det.bound.count_den == 0 and det.bound.lower_bound > 5.0  # y_1 never leaves the float32 product image
    assert 0.9 < flt.components[0].bound.lower_bound <= 1.0  # the calibration itself is tight and correct
    sec = audit_mechanism(make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="secure"),
                          np.random.default_rng(0), samples=50_000)
    assert sec.verdict == "pass", sec.to_json()
    assert sec.detectors[0].bound.lower_bound <= 1.0


def test_secure_privunitg_gives_no_false_violation_over_20_seeds():
    mech = make_mechanism("privunitg", epsilon=1.0, dim=4, sampler="secure")
    verdicts = [audit_mechanism(mech, np.random.default_rng(s), samples=5_000).verdict for s in range(20)]
    assert verdicts == ["pass"] * 20


def test_cli_contract_float_violation_secure_pass():
    params = {"epsilon": "1", "dim": "16"}
    flt = cli_audit("privunitg", {**params, "sampler": "float"}, samples=None, seed=0)
    sec = cli_audit("privunitg", {**params, "sampler": "secure"}, samples=None, seed=0)
    assert flt["verdict"] == "violation" and sec["verdict"] == "pass"
    assert flt["epsilon_lower_bound"] > 5.0 and sec["epsilon_lower_bound"] <= 1.0


def test_float_coin_resolution_is_not_needed_by_the_secure_coin():
    # the coin threshold p * 2^53 is an exact integer; the realised epsilon uses that p
    cal = secure_privunitg_calibration(3.0, 16, 1.5)
    p = round(cal.p * TWO53) / TWO53
    assert p == cal.p
    assert cal.epsilon == pytest.approx((special.logit(p) - special.logit(cal.q)), abs=1e-12)


def test_secure_privunitg_refuses_epsilons_its_exact_sampler_cannot_reach_in_bounded_work():
    from fl_privtext.privacy import make_mechanism

    make_mechanism("privunitg", epsilon=8.0, dim=50, sampler="secure").report()  # ~200 draws per upload: fine
    # the refusal names the range (to 0.1) and the float option, in one line
    with pytest.raises(ValueError, match=r"^privunitg with sampler='secure' supports epsilon <= 9\.7 at dim=50 "
                                         r"\(at epsilon=16 .* draws per upload.*sampler='float'[^\n]*$"):
        make_mechanism("privunitg", epsilon=16.0, dim=50, sampler="secure").report()


def test_secure_privunitg_never_uploads_a_negative_zero():
    """A -0.0 would reveal the sign vertex s_i where X_i = 0: inputs e_1 and -e_1 (s_1 = +1 vs -1 surely) give
    zeros in coordinate 1 in ~1% of rows, and those must be bitwise identical (+0.0). The old construction
    (x * s with s = -1.0) fails the same check."""
    from fl_privtext.privacy.mechanisms.sphere import signed_scaled

    mech = make_mechanism("privunitg", epsilon=1.0, dim=16, sampler="secure")
    zeros = []
    for sign in (1.0, -1.0):
        x = np.zeros((20_000, 16), np.float32)
        x[:, 0] = sign
        y = mech.privatize(x, np.random.default_rng(0))
        z = y[:, 0][y[:, 0] == 0]
        assert z.size > 50
        zeros.append(np.signbit(z).sum())
        assert not np.any(np.signbit(y) & (y == 0))
    assert zeros == [0, 0]
    # the check has power: multiplying by a -1.0 sign keeps the zero's sign bit
    xs = np.array([[0.0, 3.0]])
    assert np.signbit((xs * np.array([[-1.0, 1.0]]))[0, 0])
    out = signed_scaled(xs.copy(), np.array([[-1.0, 1.0]]), 2.0, exact.SecureBits(bytes(range(32))))
    assert out[0, 0] == 0 and not np.signbit(out[0, 0]) and out[0, 1] == 6.0


def test_sign_vertex_is_unbiased():
    """E[s] = r (the input rounding of the secure PrivUnitG), within the 32-bit coin's 2^-32."""
    from fl_privtext.privacy.mechanisms.sphere import signed_scaled

    r = np.tile(np.array([-0.9, -0.3, 0.0, 0.5, 1.0]), (200_000, 1))
    s = signed_scaled(np.ones_like(r), r.copy(), 1.0, exact.SecureBits(bytes(range(32))))
    se = np.sqrt((1 - r[0] ** 2) / r.shape[0]) + 1e-12
    assert np.all(np.abs(s.mean(axis=0) - r[0]) < 5 * se + 1e-9)


# ------------------------------------------------------------------------------------ secure Duchi (sign cube)
@pytest.mark.parametrize(("eps", "k"), [(1.0, 3), (1.0, 4), (2.5, 7), (0.5, 16), (1.0, 384)])
def test_secure_duchi_calibration_is_the_exact_binomial_tail(eps, k):
    from fl_privtext.privacy.mechanisms.privunit import secure_duchi_calibration

    cal = secure_duchi_calibration(eps, k)
    j = np.arange(k + 1)
    pmf = stats.binom.pmf(j, k, 0.5)
    s = 2 * j - k
    cap = s >= 1
    assert cal.q == pytest.approx(pmf[cap].sum(), rel=1e-12)
    assert cal.p * TWO53 == round(cal.p * TWO53)
    assert eps - 1e-12 < cal.epsilon <= eps
    es = cal.p * (pmf[cap] * s[cap]).sum() / cal.q + (1 - cal.p) * (pmf[~cap] * s[~cap]).sum() / (1 - cal.q)
    assert cal.m == pytest.approx(es / k, rel=1e-9)
    assert cal.mse == pytest.approx(k / cal.m**2 - 1, rel=1e-12)


def test_secure_duchi_sampler_matches_the_exact_pmf_and_a_wrong_pmf_is_rejected():
    from fl_privtext.privacy.mechanisms.privunit import SignDraws, secure_duchi_calibration

    k, n = 4, 400_000
    cal = secure_duchi_calibration(1.0, k)
    bits = exact.SecureBits(bytes(range(32)))
    x = sample_secure_caps(n, k, cal, bits, draws=SignDraws(bits))
    assert set(np.unique(x)) == {-1.0, 1.0}
    idx = ((x > 0).astype(np.int64) << np.arange(k)).sum(axis=1)
    observed = np.bincount(idx, minlength=1 << k)
    vertices = ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1) * 2 - 1
    cap = vertices.sum(axis=1) >= 1

    def expected(q: float) -> np.ndarray:
        return n * 2.0**-k * np.where(cap, cal.p / q, (1 - cal.p) / (1 - q))

    assert stats.chisquare(observed, expected(cal.q)).pvalue > ALPHA
    # power: the hemisphere's q = 1/2, wrong on the cube of even dimension (ties), is rejected
    assert stats.chisquare(observed, expected(0.5) * n / expected(0.5).sum()).pvalue < ALPHA


def test_secure_duchi_is_unbiased_float_safe_and_uploads_only_two_values():
    k, n = 8, 100_000
    mech = make_mechanism("duchi", epsilon=2.0, dim=k, clip_norm=1.5, sampler="secure")
    x = np.linspace(-1.0, 1.0, k).astype(np.float32)
    x *= 0.9 / np.linalg.norm(x)
    y = mech.privatize(np.tile(x, (n, 1)), np.random.default_rng(3)).astype(np.float64)
    se = y.std(axis=0) / math.sqrt(n)
    assert (np.abs(y.mean(axis=0) - x) < 5 * se).all()
    assert ((y - x) ** 2).sum(axis=1).mean() == pytest.approx(mech.mse(0.9), rel=0.03)
    assert set(np.unique(np.abs(y))) == {float(np.float32(mech.clip_norm / mech.calibration.m))}
    rep = mech.report().to_json()
    assert rep["float_safe"] is True and 2.0 - 1e-12 < rep["epsilon_worst_case"] <= 2.0
    assert any("half-cube" in a for a in rep["assumptions"])
    flt = make_mechanism("duchi", epsilon=2.0, dim=k, sampler="float").report().to_json()
    assert flt["float_safe"] is False and not any("No secure sampler" in a for a in flt["assumptions"])


def test_secure_duchi_gives_no_false_violation_over_20_seeds():
    mech = make_mechanism("duchi", epsilon=1.0, dim=8, sampler="secure")
    results = [audit_mechanism(mech, np.random.default_rng(s), samples=5_000) for s in range(20)]
    assert [r.verdict for r in results] == ["pass"] * 20
    assert all(r.detectors and r.detectors[0].bound.lower_bound <= 1.0 for r in results)


def test_cli_contract_for_duchi_and_privunit():
    params = {"epsilon": "1", "dim": "16"}
    flt = cli_audit("duchi", {**params, "sampler": "float"}, samples=200_000, seed=0)
    sec = cli_audit("duchi", {**params, "sampler": "secure"}, samples=None, seed=0)
    assert flt["verdict"] == "violation" and sec["verdict"] == "pass"
    assert flt["epsilon_lower_bound"] > 7.0 and sec["epsilon_lower_bound"] <= 1.0
    pu = cli_audit("privunit", params, samples=200_000, seed=0)
    assert pu["verdict"] == "violation" and pu["epsilon_lower_bound"] > 7.0
    with pytest.raises(ValueError, match="'privunit' has no secure sampler") as err:
        cli_audit("privunit", {**params, "sampler": "secure"}, samples=None, seed=0)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="'privunit' has no secure sampler"):
        make_mechanism("privunit", epsilon=1.0, dim=16, sampler="secure")


def test_secure_duchi_audit_statistic_is_the_exact_likelihood_ratio_and_the_audit_is_tight_for_the_pair():
    """The 16-value log-likelihood ratio of the block signs matches sampled frequencies, and the certified bound
    lies between 0.6 x and 1 x the pair's true privacy loss (max |LLR|), which is below epsilon."""
    from fl_privtext.privacy.audit import plan_for

    mech = make_mechanism("duchi", epsilon=1.0, dim=8, sampler="secure")
    plan = plan_for(mech)
    n = 200_000
    v0 = plan.components[0].statistic(plan.sample(np.tile(plan.x0, (n, 1)), np.random.default_rng(1)))
    v1 = plan.components[0].statistic(plan.sample(np.tile(plan.x1, (n, 1)), np.random.default_rng(2)))
    for v in np.unique(v0):
        c0, c1 = (v0 == v).sum(), (v1 == v).sum()
        if min(c0, c1) > 2000:
            se = math.sqrt(1 / c0 + 1 / c1)
            assert abs(math.log(c0 / c1) - v) < 5 * se, v
    loss = max(np.abs(np.unique(v0)).max(), np.abs(np.unique(v1)).max())
    res = audit_mechanism(mech, np.random.default_rng(0), samples=n)
    assert res.verdict == "pass" and 0.6 * loss < res.epsilon_lower_bound <= loss < 1.0
