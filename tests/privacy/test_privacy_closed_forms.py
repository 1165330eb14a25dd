"""Closed forms against the papers (OME Theorem 1, SUE/OUE, DPNR Theorems 1-2) and exhaustive enumeration."""

import itertools
import math

import numpy as np
import pytest

from fl_privtext.privacy import amplified_epsilon, label_rr_report, make_mechanism, per_bit_epsilon
from fl_privtext.privacy.calibration import per_bit_epsilon_terms

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)


def ome(eps: float, lam: float, dim: int = 50, **kw):
    return make_mechanism("ome", epsilon=eps, lam=lam, dim=dim, **kw)


def test_ome_probabilities_paper_values():
    p1, p2, q = ome(1.0, 100.0).probabilities()
    assert p1 == pytest.approx(0.990099, abs=1e-6)
    assert p2 == pytest.approx(1.0e-6, rel=1e-5)
    assert q == pytest.approx(0.009881, abs=1e-6)
    rep = ome(1.0, 100.0).report().to_json()
    assert (rep["p1"], rep["p2"], rep["q"]) == (p1, p2, q)


def test_ome_probabilities_move_with_lambda_as_in_figure_3():
    lams = (1.0, 10.0, 50.0, 100.0)
    probs = np.array([ome(1.0, lam).probabilities() for lam in lams])
    assert np.all(np.diff(probs[:, 0]) > 0)  # p1 rises
    assert np.all(np.diff(probs[:, 1]) < 0)  # p2 falls
    assert np.all(np.diff(probs[:, 2]) < 0)  # q falls


def test_ome_bit_parity_is_zero_based():
    p, q = ome(1.0, 100.0, dim=2).bit_probabilities()
    p1, p2, q0 = ome(1.0, 100.0, dim=2).probabilities()
    assert p[0] == p1 and p[1] == p2 and p[2] == p1 and p[19] == p2
    assert np.all(q == q0) and p.shape == (20,)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize(("lam", "r", "expected"), [
    (100.0, 50, 3451.4), (10.0, 50, 1703.4), (50.0, 50, 2929.1),
    (10.0, 768, 26163.6), (50.0, 768, 44990.5), (100.0, 768, 53013.4),
])
def test_ome_true_epsilon(eps, lam, r, expected):
    rep = ome(eps, lam, dim=r).report()
    assert rep.epsilon_worst_case == pytest.approx(expected, abs=0.05)
    assert rep.epsilon_nominal == eps
    # closed form for lam >= 10: (r l / 2) ln(lam (lam^2 - lam + 1))
    assert rep.epsilon_worst_case == pytest.approx(r * 10 / 2 * math.log(lam * (lam * lam - lam + 1)), rel=1e-9)
    assert rep.published_claim_note is not None and f"{rep.epsilon_worst_case:.6g}" in rep.published_claim_note


@pytest.mark.parametrize("eps", EPSILONS)
def test_ome_lambda_one_is_about_half_epsilon(eps):
    rep = ome(eps, 1.0).report()
    assert rep.epsilon_worst_case == pytest.approx(eps / 2, rel=0.01)
    assert rep.epsilon_worst_case == pytest.approx(500 * math.log((1 + math.exp(eps / 500)) / 2), rel=1e-12)
    assert rep.published_claim_note is None


@pytest.mark.parametrize("eps", (0.5, 1.0, 4.0))
def test_sue_oue_paper_and_textbook_calibration(eps):
    r, l = 50, 10
    sue_p = make_mechanism("sue", epsilon=eps, dim=r).report()
    oue_p = make_mechanism("oue", epsilon=eps, dim=r, calibration="paper").report()
    sue_t = make_mechanism("sue", epsilon=eps, dim=r, calibration="textbook").report()
    oue_t = make_mechanism("oue", epsilon=eps, dim=r, calibration="textbook").report()
    assert sue_p.epsilon_worst_case == pytest.approx(l * eps / 2, rel=1e-9)
    assert oue_p.epsilon_worst_case == pytest.approx(l * eps / 4, rel=0.01)
    assert sue_t.epsilon_worst_case == pytest.approx(eps, rel=1e-9)
    assert oue_t.epsilon_worst_case == pytest.approx(eps / 2, rel=0.01)
    assert sue_p.calibration["delta_f"] == 2 * r and sue_t.calibration["delta_f"] == r * l
    assert sue_p.published_claim_note is not None and oue_p.published_claim_note is not None
    assert sue_t.published_claim_note is None and oue_t.published_claim_note is None
    # SUE: p + q = 1, p = e^a/(1+e^a); OUE: p = 1/2, q = 1/(1+e^a)
    a = eps / (2 * r)
    assert sue_p.calibration["p"] == pytest.approx(math.exp(a) / (1 + math.exp(a)))
    assert sue_p.calibration["p"] + sue_p.calibration["q"] == pytest.approx(1.0)
    assert oue_p.calibration["p"] == 0.5 and oue_p.calibration["q"] == pytest.approx(1 / (1 + math.exp(a)))


@pytest.mark.parametrize("eps", EPSILONS)
def test_bitrr_is_exact(eps):
    mech = make_mechanism("bitrr", epsilon=eps, dim=50)
    rep = mech.report()
    assert rep.calibration["flip_probability"] == pytest.approx(1 / (1 + math.exp(eps / 500)))
    assert rep.epsilon_worst_case == pytest.approx(eps, rel=1e-9)
    assert rep.epsilon_nominal == eps and rep.published_claim_note is None


@pytest.mark.parametrize("k", (2, 4, 768))
@pytest.mark.parametrize("eps", (0.5, 1.0, 3.0))
def test_laplace_dpnr_is_k_times_epsilon(k, eps):
    rep = make_mechanism("laplace-dpnr", epsilon=eps, dim=k, sampler="float").report()
    assert rep.epsilon_nominal == eps
    assert rep.epsilon_worst_case == pytest.approx(k * eps)
    assert rep.calibration["noise_scale"] == pytest.approx(1 / eps)
    assert "k = " in rep.published_claim_note


def test_laplace_dpnr_code_is_unbounded_and_serialised_as_inf():
    rep = make_mechanism("laplace-dpnr-code", epsilon=1.0, dim=8).report()
    assert math.isinf(rep.epsilon_worst_case) and not rep.bounded
    assert rep.to_json()["epsilon_worst_case"] == "inf"
    assert "y - min(y)" in rep.published_claim_note


@pytest.mark.parametrize("eps", (0.1, 1.0, 8.0))
@pytest.mark.parametrize("clip", (0.5, 1.0, 3.0))
def test_laplace_l1_and_box_are_exact(eps, clip):
    l1 = make_mechanism("laplace-l1", epsilon=eps, clip_norm=clip, sampler="float").report()
    assert l1.epsilon_worst_case == pytest.approx(eps) and l1.epsilon_nominal == eps
    assert l1.calibration["noise_scale"] == pytest.approx(2 * clip / eps)
    assert l1.published_claim_note is None
    box = make_mechanism("laplace-box", epsilon=eps, dim=16, low=-clip, high=clip, sampler="float").report()
    assert box.epsilon_worst_case == pytest.approx(eps)
    assert box.calibration["noise_scale"] == pytest.approx(16 * 2 * clip / eps)


def test_word_dropout_amplification_dpnr_value():
    assert amplified_epsilon(1.0, 0.5) == pytest.approx(math.log(0.5 * math.e + 0.5))
    assert round(amplified_epsilon(1.0, 0.5), 3) == 0.620
    assert amplified_epsilon(768.0, 0.5) == pytest.approx(767.3, abs=0.05)
    assert amplified_epsilon(2.0, 0.0) == 2.0 and amplified_epsilon(2.0, 1.0) == 0.0
    assert math.isinf(amplified_epsilon(math.inf, 0.3))


def test_mu_changes_nominal_only():
    rep = make_mechanism("laplace-dpnr", epsilon=1.0, dim=768, mu=0.5, sampler="float").report()
    assert rep.epsilon_nominal == pytest.approx(0.620, abs=5e-4)
    assert rep.epsilon_worst_case == pytest.approx(768.0)
    wd = rep.to_json()["word_dropout"]
    assert wd["mu"] == 0.5 and wd["epsilon_amplified_with_true_base"] == pytest.approx(767.3, abs=0.05)
    assert any("word-substitution" in a for a in rep.assumptions)
    assert any("secret" in a for a in rep.assumptions)
    assert any("mask token" in a for a in rep.assumptions)
    assert make_mechanism("laplace-l1", epsilon=1.0, sampler="float").report().word_dropout is None


def test_label_rr_report():
    rep = label_rr_report(4, 1.0)
    p = math.e / (math.e + 3)
    assert rep.calibration["keep_probability"] == pytest.approx(p)
    assert rep.epsilon_worst_case == pytest.approx(1.0) and rep.epsilon_nominal == 1.0


def _exact_block_epsilon(p: np.ndarray, q: np.ndarray) -> float:
    """max over inputs x, x' and outputs y of ln P(y|x) - ln P(y|x'), by enumerating every x and y."""
    d = p.size
    grid = np.array(list(itertools.product((0.0, 1.0), repeat=d)))  # (2^d, d)
    lp, l1p, lq, l1q = np.log(p), np.log1p(-p), np.log(q), np.log1p(-q)
    # ln P(y|x) = sum_j [x y lp + x (1-y) l1p + (1-x) y lq + (1-x)(1-y) l1q]
    log_p = (grid * (lp - l1p - lq + l1q)) @ grid.T + (grid @ (l1p - l1q))[:, None] + (grid @ (lq - l1q))[None, :] \
        + l1q.sum()  # (x, y)
    return float(np.max(log_p.max(axis=0) - log_p.min(axis=0)))


@pytest.mark.parametrize(("name", "params"), [
    ("ome", {"epsilon": 1.0, "lam": 100.0}), ("ome", {"epsilon": 1.0, "lam": 1.0}),
    ("ome", {"epsilon": 5.0, "lam": 10.0}), ("ome", {"epsilon": 0.5, "lam": 2.0}),
    ("sue", {"epsilon": 1.0}), ("oue", {"epsilon": 1.0}), ("oue", {"epsilon": 3.0, "calibration": "textbook"}),
    ("bitrr", {"epsilon": 2.0}),
])
def test_exhaustive_10_bit_block_equals_per_bit_sum(name, params):
    # one value (r = 1) -> one 10-bit block: all 1024 inputs x 1024 outputs
    mech = make_mechanism(name, dim=1, int_bits=4, frac_bits=5, **params)
    p, q = mech.bit_probabilities()
    assert p.size == 10
    exact = _exact_block_epsilon(p, q)
    assert exact == pytest.approx(per_bit_epsilon(p, q), rel=1e-9)
    assert exact == pytest.approx(mech.report().epsilon_worst_case, rel=1e-9)
    # and for a block taken from the middle of an r = 50 code
    p50, q50 = make_mechanism(name, dim=50, **params).bit_probabilities()
    assert _exact_block_epsilon(p50[10:20], q50[10:20]) == pytest.approx(
        float(per_bit_epsilon_terms(p50, q50)[10:20].sum()), rel=1e-9)


def test_per_bit_epsilon_edge_cases():
    assert per_bit_epsilon(np.array([0.3, 0.5]), np.array([0.3, 0.5])) == 0.0
    assert math.isinf(per_bit_epsilon(np.array([1.0]), np.array([0.5])))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        per_bit_epsilon(np.array([1.5]), np.array([0.5]))
