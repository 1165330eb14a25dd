"""The constant-predictor check: closed forms against scores computed from actual constant predictions."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext import metrics
from fl_privtext.constant import constant_f1, matches_constant, modal_share


def _f1_per_class(truth: np.ndarray, pred: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros(k)
    for c in range(k):
        tp = np.sum((truth == c) & (pred == c))
        denom = np.sum(truth == c) + np.sum(pred == c)
        out[c] = 2 * tp / denom if denom else 0.0
    return out


@pytest.mark.parametrize("counts", [(744, 100, 80, 50, 26), (605, 395), (179, 300, 521)])
def test_closed_forms_equal_the_scores_of_a_constant_predictor(counts):
    k = len(counts)
    truth = np.repeat(np.arange(k), counts)
    pred = np.zeros_like(truth)  # always class 0
    a = metrics.accuracy(truth, pred)
    per_class = _f1_per_class(truth, pred, k)
    weighted = float(np.sum(per_class * np.bincount(truth, minlength=k) / len(truth)))
    assert constant_f1(a, "binary") == pytest.approx(per_class[0])
    assert constant_f1(a, "weighted", k) == pytest.approx(weighted)
    assert constant_f1(a, "macro", k) == pytest.approx(metrics.macro_f1(truth, pred, k))


def test_published_cape_dp_rows_are_constant_and_base_rows_are_not():
    # CAPE Table 3 (TP-UK): DP target 0.744 / weighted F1 0.635; DP gender attacker 0.605 / binary F1 0.754
    assert matches_constant(0.744, 0.635, "weighted", 5)["constant"]
    assert matches_constant(0.605, 0.754, "binary")["constant"]
    # rounding: 0.6035 / 0.7527 is constant at 4 printed digits; printed as 0.604 / 0.753 (3 digits) it still is,
    # while 0.604 / 0.750 is not (a constant with accuracy in [0.6035, 0.6045] has F1 in [0.7527, 0.7535])
    assert matches_constant(0.6035, 0.7527, "binary", decimals=4)["constant"]
    assert matches_constant(0.604, 0.753, "binary")["constant"]
    assert not matches_constant(0.604, 0.750, "binary")["constant"]
    # CAPE gender attacker 0.603 / 0.751 misses by 0.0005 beyond rounding: near-constant, not constant
    near = matches_constant(0.603, 0.751, "binary")
    assert not near["constant"] and near["gap"] < 0.002
    # a classifier that learned something: Base target 0.818 / 0.776, where a constant would score 0.736
    base = matches_constant(0.818, 0.776, "weighted", 5)
    assert not base["constant"] and base["gap"] > 0.03


def test_modal_share_and_bad_input():
    assert modal_share(np.array([1, 1, 1])) == 1.0
    assert modal_share(np.array([0, 1, 1, 2])) == 0.5
    with pytest.raises(ValueError, match="average must be one of binary, weighted, macro"):
        constant_f1(0.5, "micro")
    with pytest.raises(ValueError, match="accuracy must lie in"):
        constant_f1(1.5, "binary")
    with pytest.raises(ValueError, match="non-empty"):
        modal_share(np.array([]))
