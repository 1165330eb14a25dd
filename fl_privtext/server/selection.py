"""Model selection on the server's own uploads: cross-validation grouped by user (sklearn's GroupKFold).

A user's uploads are never split between fitting and scoring. The score is the per-upload accuracy of the
learner's noisy-upload head against the uploaded labels (what the server can check). The constant predictor is
always a candidate: a learner is chosen only when its mean out-of-fold accuracy is strictly above the constant's,
so the server never reports a learner that does worse than the majority on its own held-out users without saying
so (``utility.candidates`` holds every score).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fl_privtext.server.learners import Learner

__all__ = ["cross_validate", "select"]

FOLDS = 3


def cross_validate(make: Callable[[], Learner], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
                   folds: int = FOLDS) -> float:
    """Mean out-of-fold accuracy of the learner ``make()`` over ``folds`` GroupKFold folds (by ``groups``)."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"Cross-validation by user needs uploads of at least 2 users; got {n_groups}.")
    hits = np.zeros(len(y), bool)
    for tr, te in GroupKFold(n_splits=min(folds, n_groups)).split(x, y, groups):
        model = make().fit(x[tr], y[tr])
        hits[te] = model.logits(x[te]).argmax(axis=1) == y[te]
    return float(hits.mean())


def select(makers: dict[str, Callable[[], Learner]], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
           folds: int = FOLDS, order: Sequence[str] | None = None) -> tuple[str, dict[str, Any]]:
    """The candidate with the best out-of-fold accuracy (the constant wins ties: a learner must beat it); returns
    (name, {name: score}). ``makers`` must hold "constant"."""
    if "constant" not in makers:
        raise ValueError("select needs the constant predictor among the candidates.")
    scores = {name: cross_validate(make, x, y, groups, folds) for name, make in makers.items()}
    best = "constant"
    for name in order or makers:
        if name != "constant" and scores[name] > scores[best]:
            best = name
    return best, scores
