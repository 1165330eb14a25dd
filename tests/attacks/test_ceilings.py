"""LDP ceilings: closed forms against the linear program and the textbook values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import linprog

from fl_privtext.attacks import ceilings


def _lp_ceiling(prior: np.ndarray, eps: float) -> float:
    """max sum pi_z a_z s.t. a_j + e^-eps sum_{z != j} a_z <= 1, 0 <= a <= 1 (every guessing rule under eps-LDP)."""
    k = len(prior)
    e = math.exp(-eps)
    a_ub = np.full((k, k), e) + (1 - e) * np.eye(k)
    res = linprog(-prior, A_ub=a_ub, b_ub=np.ones(k), bounds=[(0, 1)] * k, method="highs")
    return -res.fun


@pytest.mark.parametrize("k", [2, 3, 5])
def test_attribute_ceiling_solves_the_linear_program(k):
    g = np.random.default_rng(k)
    for _ in range(30):
        prior = g.dirichlet(np.full(k, 0.7))
        eps = float(g.choice([0.05, 0.5, 1.0, 2.0, 5.0]))
        assert ceilings.attribute_ceiling(prior, eps) == pytest.approx(_lp_ceiling(prior, eps), abs=1e-9)


def test_attribute_ceiling_textbook_values():
    assert ceilings.attribute_ceiling(np.array([0.5, 0.5]), 1.0) == pytest.approx(math.e / (1 + math.e))
    assert ceilings.attribute_ceiling(np.full(3, 1 / 3), 2.0) == pytest.approx(math.exp(2) / (math.exp(2) + 2))
    assert ceilings.attribute_ceiling(np.array([0.9, 0.1]), 0.01) == pytest.approx(0.9)  # the prior wins
    assert ceilings.attribute_ceiling(np.array([0.5, 0.5]), math.inf) == 1.0
    many = ceilings.attribute_ceiling_many(np.array([[0.5, 0.5], [0.9, 0.1]]), np.array([1.0, 0.01]))
    np.testing.assert_allclose(many, [math.e / (1 + math.e), 0.9])


def test_linkage_ceilings():
    assert ceilings.reidentification_ceiling(1.0, 100) == pytest.approx(math.e / (math.e + 99))
    assert ceilings.reidentification_ceiling(0.0, 100) == pytest.approx(0.01)
    assert ceilings.reidentification_topk_ceiling(0.0, 100, 5) == pytest.approx(0.05)
    assert ceilings.membership_tpr_ceiling(1.0, 0.01) == pytest.approx(math.e * 0.01)
    assert ceilings.membership_tpr_ceiling(1.0, 0.01, delta=1e-3) == pytest.approx(math.e * 0.01 + 1e-3)
    assert ceilings.membership_auc_ceiling(0.0) == pytest.approx(0.5, abs=1e-6)
    # the two bounding lines meet at FPR = 1/(1+e^eps); the area under them is e^eps/(1+e^eps)
    e = math.exp(2.0)
    assert ceilings.membership_auc_ceiling(2.0) == pytest.approx(e / (1 + e), abs=1e-6)
    assert ceilings.membership_auc_ceiling(math.inf) == pytest.approx(1.0)


def test_verdict_flags_only_a_confident_excess_over_a_real_ceiling():
    assert ceilings.verdict(65, 100, 0.5)["violation"]  # 95% CI (0.55, 0.74) lies above 0.5
    assert not ceilings.verdict(60, 100, 0.5)["violation"]  # (0.497, 0.70): not confident
    vac = ceilings.verdict(100, 100, 1.0)
    assert vac["ceiling_vacuous"] and not vac["violation"]
