import math

import numpy as np

from fl_privtext import metrics


def test_macro_f1_matches_hand_computation():
    y = np.array([0, 0, 1, 1, 2])
    p = np.array([0, 1, 1, 1, 0])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp0 -> 0
    assert math.isclose(metrics.macro_f1(y, p), (0.5 + 0.8 + 0.0) / 3)


def test_multilabel_f1_and_majority():
    t = np.array([[1, 0], [0, 1], [1, 1]])
    p = np.array([[1, 0], [0, 0], [1, 0]])
    assert math.isclose(metrics.multilabel_f1(t, p), 2 * 2 / (4 + 2))
    assert metrics.majority_baseline(np.array([1, 1, 0]), np.array([1, 0, 0, 0])) == 0.25


def test_binomial_interval_covers_and_shrinks():
    lo, hi = metrics.binomial_interval(0.5, 100)
    lo2, hi2 = metrics.binomial_interval(0.5, 10_000)
    assert lo < 0.5 < hi and lo < lo2 < 0.5 < hi2 < hi


def test_fairness_gap_and_ldp_ceiling():
    per = metrics.group_accuracy(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0]), np.array(["a", "a", "b", "b"]))
    assert per == {"a": 0.5, "b": 1.0} and metrics.fairness_gap(per) == 0.5
    assert math.isclose(metrics.ldp_attack_ceiling(math.log(3), 2), 0.75)


def test_mean_ci95_covers_the_true_mean_at_its_nominal_rate():
    import pytest

    from fl_privtext.metrics import mean_ci95

    g = np.random.Generator(np.random.PCG64(7))
    hits = 0
    for _ in range(2000):
        m, h = mean_ci95(g.normal(3.0, 2.0, size=5))
        hits += abs(m - 3.0) <= h
    assert 0.93 < hits / 2000 < 0.97  # 95% coverage (binomial sd ~0.005 over 2,000 trials)
    m, h = mean_ci95([1.0, 2.0, 3.0])
    assert m == 2.0 and abs(h - 4.302653 / np.sqrt(3)) < 1e-5  # t(0.975, 2) * sd 1 / sqrt(3)
    with pytest.raises(ValueError, match="non-empty 1-D array"):
        mean_ci95([])
