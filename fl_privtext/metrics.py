"""Utility, attack, fairness and empirical-privacy metrics (pure numpy).

Empirical privacy follows the papers: DPNR/Coavoux report 1 - X for demographic attributes (X = attacker accuracy)
and 1 - F for entities (F = F1 over presence labels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape or y_true.size == 0:
        raise ValueError(f"accuracy needs two non-empty arrays of one shape, got {y_true.shape} and {y_pred.shape}.")
    return float((y_true == y_pred).mean())


COUNT_CHUNK = 1 << 16  # rows widened to int64 at a time by `confusion` and `majority_class`


def confusion(y_true: np.ndarray, y_pred: np.ndarray, k: int) -> np.ndarray:
    """(k, k) int64 counts of (true class, predicted class) over the rows of two (N,) class-index arrays, in any
    integer type. Counted `COUNT_CHUNK` rows at a time: the same integers as ``np.bincount(y_true * k + y_pred)``
    over int64 copies of both, without those copies (issue #38: ~32 bytes a row at once, 0.9 GB for the 29M target
    uploads an attribute attack scores at ten million synthetic users). A class index outside [0, k) raises."""
    y_true, y_pred = np.asarray(y_true).reshape(-1), np.asarray(y_pred).reshape(-1)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"confusion needs two arrays of one length; got {y_true.shape} and {y_pred.shape}.")
    cm = np.zeros(k * k, np.int64)
    for a in range(0, len(y_true), COUNT_CHUNK):
        t, p = y_true[a : a + COUNT_CHUNK], y_pred[a : a + COUNT_CHUNK]
        if len(t) and (min(t.min(), p.min()) < 0 or max(t.max(), p.max()) >= k):
            raise ValueError(f"confusion needs class indices in [0, {k}).")
        cm += np.bincount(t.astype(np.int64) * k + p, minlength=k * k)
    return cm.reshape(k, k)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int | None = None) -> float:
    """Macro-averaged F1 over the classes present in ``y_true`` or ``y_pred`` (sklearn's convention), from their
    `confusion` counts (chunked: no int64 copy of either array)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    k = int(num_classes if num_classes is not None else max(int(y_true.max()), int(y_pred.max())) + 1)
    return macro_f1_from_confusion(confusion(y_true, y_pred, k))


def macro_f1_from_confusion(cm: np.ndarray) -> float:
    """Macro-F1 of a (k, k) confusion matrix (row = true class, column = prediction), as `macro_f1`."""
    k = cm.shape[0]
    tp = np.diag(cm).astype(float)
    support, predicted = cm.sum(axis=1), cm.sum(axis=0)
    present = (support + predicted) > 0
    denom = support + predicted
    f1 = np.divide(2 * tp, denom, out=np.zeros(k), where=denom > 0)
    return float(f1[present].mean())


def multilabel_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Micro F1 over presence labels of a (N, K) 0/1 matrix (DPNR/Coavoux's entity F1)."""
    y_true, y_pred = np.asarray(y_true, bool), np.asarray(y_pred, bool)
    tp = float((y_true & y_pred).sum())
    denom = float(y_true.sum() + y_pred.sum())
    return 2 * tp / denom if denom > 0 else 0.0


def bincount(y: np.ndarray, minlength: int = 0) -> np.ndarray:
    """``np.bincount(y, minlength=minlength)`` of non-negative integers ``y`` (N,) in any integer type, counted
    `COUNT_CHUNK` values at a time: the same int64 counts, without np.bincount's intp copy of a narrower ``y`` (8
    bytes a value: the server's labels are held in int8, issue #38). A negative value raises, as there."""
    y = np.asarray(y).reshape(-1)
    counts = np.zeros(max(int(minlength), int(y.max()) + 1 if len(y) else 0), np.int64)
    for a in range(0, len(y), COUNT_CHUNK):
        counts += np.bincount(y[a : a + COUNT_CHUNK], minlength=len(counts))
    return counts


def majority_class(y: np.ndarray) -> int | np.generic:
    """The most frequent value of ``y`` (N,) (the smallest of those tied), ``np.unique(y, return_counts=True)``'s
    ``values[counts.argmax()]``. Non-negative integers are counted by `np.bincount` `COUNT_CHUNK` rows at a time
    (the same value, without np.unique's sorted copy: 8 bytes a training upload of the server's int64 labels, issue
    #38); anything else through np.unique."""
    y = np.asarray(y).reshape(-1)
    if y.dtype.kind not in "iu" or not len(y) or y.min() < 0:
        values, counts = np.unique(y, return_counts=True)
        return values[counts.argmax()]  # type: ignore[no-any-return]
    return y.dtype.type(bincount(y).argmax())


def majority_baseline(y_train: np.ndarray, y_eval: np.ndarray) -> float:
    """Accuracy on ``y_eval`` of always predicting the most frequent class of ``y_train`` (what the attacker knows)."""
    return float((np.asarray(y_eval) == majority_class(y_train)).mean())


def binomial_interval(p: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper-Pearson interval of the accuracy of a fixed predictor with true rate ``p`` observed ``n`` times.

    Used as: "attacker accuracy is within the interval the majority baseline would produce by chance"."""
    from scipy import stats  # scipy.stats: about 1.3 s to import, for the two intervals here only

    k = round(p * n)
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def clip_interval(low: float, high: float) -> tuple[float, float]:
    """An accuracy's (or probability's) interval clipped to [0, 1]: a normal-approximation band around a debiased
    estimate (the randomized-response counts, `fl_privtext.ondevice`) can reach past either end, and an accuracy
    below 0 or above 1 is no possible value (issue #36: [-0.009, 0.545] was printed)."""
    return min(max(float(low), 0.0), 1.0), min(max(float(high), 0.0), 1.0)


def group_accuracy(y_true: np.ndarray, y_pred: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    """Task accuracy inside each group of a private attribute (groups: (N,) labels)."""
    out: dict[str, float] = {}
    for g in np.unique(groups):
        mask = groups == g
        out[str(g)] = float((y_true[mask] == y_pred[mask]).mean())
    return out


def group_accuracy_by_code(y_true: np.ndarray, y_pred: np.ndarray, codes: np.ndarray, classes: Sequence[str]
                           ) -> dict[str, float]:
    """`group_accuracy` with the groups given as (N,) integer ``codes`` into ``classes`` (their names): the same
    dict (the present groups in the order of their names, as np.unique orders them) without an (N,) array of
    names (8 bytes a record, and an object sort; issue #38)."""
    codes = np.asarray(codes).reshape(-1)
    if len(codes) and codes.min() < 0:  # a negative code names a class from the end: the names' own path
        return group_accuracy(y_true, y_pred, np.asarray(classes, dtype=object)[codes])
    present = np.flatnonzero(np.bincount(codes, minlength=len(classes))) if len(codes) else np.zeros(0, np.int64)
    by_name: dict[str, list[int]] = {}
    for c in present:
        by_name.setdefault(str(classes[int(c)]), []).append(int(c))
    out: dict[str, float] = {}
    for name in sorted(by_name):
        mask = np.isin(codes, by_name[name]) if len(by_name[name]) > 1 else codes == by_name[name][0]
        out[name] = float((y_true[mask] == y_pred[mask]).mean())
    return out


def fairness_gap(per_group: dict[str, float]) -> float:
    """Largest difference in task accuracy between two groups (0 = parity)."""
    vals = list(per_group.values())
    return float(max(vals) - min(vals)) if len(vals) > 1 else 0.0


def ldp_attack_ceiling(epsilon: float, num_classes: int) -> float:
    """Largest accuracy any attacker can reach against a uniform k-ary secret under epsilon-LDP (e^eps/(e^eps+k-1))."""
    if math.isinf(epsilon):
        return 1.0
    return math.exp(epsilon) / (math.exp(epsilon) + num_classes - 1) if epsilon < 700 else 1.0


def mean_ci95(values: list[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t confidence interval of the mean over independent runs
    (splits x seeds; sample std with ddof = 1). One value: half-width nan (no interval from one run)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"mean_ci95 needs a non-empty 1-D array of finite values; got shape {x.shape}.")
    if x.size == 1:
        return float(x[0]), math.nan
    from scipy import stats  # scipy.stats: about 1.3 s to import, for the two intervals here only

    half = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), half
