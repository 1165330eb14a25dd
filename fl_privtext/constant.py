"""Constant-predictor check: is a reported (accuracy, F1) pair, or a set of predictions, just one class every time?

A classifier that has learned nothing from noisy inputs falls back to predicting one class (usually the majority).
Its scores are then fixed by that class's share ``a`` of the evaluation data alone (closed forms, F1 of the
predicted class = 2a / (1 + a), every other class 0):

- accuracy = a
- binary F1 (the predicted class is the positive one, sklearn's ``average="binary"``) = 2a / (1 + a)
- weighted F1 (``average="weighted"``) = a * 2a / (1 + a)
- macro F1 over the ``k`` classes present (``average="macro"``) = 2a / ((1 + a) k)

So a published row whose F1 equals the formula at its own accuracy (to the printed precision) is what a constant
predictor scores: e.g. CAPE's DP rows, accuracy 0.744 and weighted F1 0.635 = 2 * 0.744^2 / 1.744.
"""

from __future__ import annotations

from typing import Any

import numpy as np

AVERAGES = ("binary", "weighted", "macro")


def constant_f1(accuracy: float, average: str, num_classes: int = 2) -> float:
    """F1 of a predictor that always outputs one class whose share of the evaluation data is ``accuracy``."""
    if average not in AVERAGES:
        raise ValueError(f"average must be one of {', '.join(AVERAGES)}; got {average!r}.")
    if not 0 <= accuracy <= 1:
        raise ValueError(f"accuracy must lie in [0, 1]; got {accuracy}.")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2; got {num_classes}.")
    f1 = 2 * accuracy / (1 + accuracy) if accuracy > 0 else 0.0
    if average == "weighted":
        return accuracy * f1
    if average == "macro":
        return f1 / num_classes
    return f1


def matches_constant(accuracy: float, f1: float, average: str, num_classes: int = 2,
                     decimals: int = 3) -> dict[str, Any]:
    """Is a reported (accuracy, F1) pair, both rounded to ``decimals``, what a constant predictor scores?

    The true accuracy lies within half a unit of the last digit of the printed one; the constant's F1 is increasing
    in it, so the pair is consistent with a constant predictor when the printed F1 lies in the constant's F1 range
    over that accuracy interval, widened by the F1's own rounding. ``gap`` is the distance to the point formula."""
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0; got {decimals}.")
    half = 0.5 * 10.0 ** -decimals
    lo = constant_f1(max(accuracy - half, 0.0), average, num_classes) - half
    hi = constant_f1(min(accuracy + half, 1.0), average, num_classes) + half
    expected = constant_f1(accuracy, average, num_classes)
    return {"f1_if_constant": expected, "gap": abs(f1 - expected), "constant": lo <= f1 <= hi}


def modal_share(pred: np.ndarray) -> float:
    """Fraction of predictions equal to the most frequent one (1.0: a constant predictor). (N,) class indices."""
    pred = np.asarray(pred)
    if pred.ndim != 1 or pred.size == 0:
        raise ValueError(f"modal_share needs a non-empty (N,) array of class indices; got shape {pred.shape}.")
    _, counts = np.unique(pred, return_counts=True)
    return float(counts.max() / pred.size)
