import math

import numpy as np
import pytest

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


def test_chunked_confusion_and_macro_f1_equal_the_int64_bincount_they_replace(monkeypatch):
    """`confusion` counts a chunk at a time in the arrays' own types (issue #38): the same (k, k) integers as the
    one bincount over int64 copies, so the same macro-F1, also across chunk edges; a class out of range raises
    (the old flat index could land in another class's cell)."""
    g = np.random.default_rng(3)
    monkeypatch.setattr(metrics, "COUNT_CHUNK", 7)  # many chunks, a short last one
    for dtype in (np.int8, np.uint8, np.int32, np.int64):
        k = 5
        y, p = g.integers(0, k, 1001).astype(dtype), g.integers(0, k, 1001).astype(dtype)
        flat = np.bincount(y.astype(np.int64) * k + p.astype(np.int64), minlength=k * k).reshape(k, k)
        assert np.array_equal(metrics.confusion(y, p, k), flat)
        assert metrics.macro_f1(y, p, k) == metrics.macro_f1_from_confusion(flat)
        assert metrics.macro_f1(y, p) == metrics.macro_f1_from_confusion(flat)  # k from the values
    with pytest.raises(ValueError, match="class indices"):
        metrics.confusion(np.array([0, 1]), np.array([0, 3]), 3)


def test_majority_class_by_counts_is_np_uniques_first_most_frequent_value(monkeypatch):
    monkeypatch.setattr(metrics, "COUNT_CHUNK", 3)
    g = np.random.default_rng(4)
    for y in (g.integers(0, 6, 500).astype(np.int8), g.integers(0, 4, 500), np.array([2, 2, 1, 1, 0]),
              np.array([-1, -1, 3]), np.array([True, False, True]), np.array([0.5, 0.5, 1.0])):
        values, counts = np.unique(y, return_counts=True)
        got = metrics.majority_class(y)
        assert got == values[counts.argmax()] and np.asarray(got).dtype == y.dtype
    assert metrics.majority_class(np.array([2, 2, 1, 1, 0])) == 1  # a tie goes to the smaller value


def test_group_accuracy_by_code_is_group_accuracy_of_the_names():
    """The same dict (values and key order) as `group_accuracy` over the (N,) names it no longer builds; two codes
    of one name are one group, as np.unique of the names makes them."""
    g = np.random.default_rng(5)
    classes = ("zeta", "alpha", "mid", "alpha", "unused")
    codes = g.integers(0, 4, 300).astype(np.int8)
    y, p = g.integers(0, 3, 300), g.integers(0, 3, 300).astype(np.int8)
    names = np.asarray(classes, dtype=object)[codes]
    want = metrics.group_accuracy(y, p, names)
    got = metrics.group_accuracy_by_code(y, p, codes, classes)
    assert got == want and list(got) == list(want) == ["alpha", "mid", "zeta"]
