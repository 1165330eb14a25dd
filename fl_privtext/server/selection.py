"""Model selection on the server's own uploads: cross-validation grouped by user (sklearn's GroupKFold).

A user's uploads are never split between fitting and scoring. The score is the out-of-fold log-loss (cross-
entropy, a proper scoring rule) of the learner's noisy-upload head against the uploaded labels, what the server
can check; its accuracy is reported beside it. Why log-loss and not accuracy: under strong local noise a single
upload's Bayes accuracy is capped near the majority (the argmax rarely moves) while the evidence each upload
carries about its class is still there; the log-loss sees it, accuracy does not, and the model the server ships
to the clients (on-device) is chosen on it. The constant predictor (the log prior) is always a candidate: a
learner is chosen only when its out-of-fold log-loss is below the constant's with one-sided 95% confidence
(a paired test on the per-user mean loss differences, Bonferroni over the candidates; users are the independent
units), and then the lowest log-loss among those wins. ``utility.candidates`` holds every score.

What per-upload evidence cannot see: a noise law that UNDERSTATES the mechanism's noise. The moment learners' noisy
head uses the uploads' own covariance whatever the law says (clean estimate + law = uploads'), so only the clean
head, the one shipped on device, is broken by it (tests/test_ondevice_selection.py: 0.54 against 0.80 on clean
data, per-upload log-losses within 0.002). An overstated law does show (its noisy head's covariance exceeds the
uploads') and is not chosen. The law comes from the mechanism's public definition (`fl_privtext.server.noise`), and
the test clients' choice (``server.select-on = clients``) measures the clean heads themselves.

Randomized labels (``privacy.label-epsilon`` > 0, k-ary RR with known R[j, k] = Pr[uploaded k | true j]): the
uploaded labels are noisy, so a learner that predicts the NOISE (near-uniform) would win a plain log-loss against
them while being useless for the true label. The score is therefore forward-corrected (Patrini et al., CVPR 2017):
the learner's predicted true-label distribution p is pushed through the known channel, q = p R, and scored by
-log q[uploaded label], a proper score for p whenever R is invertible (learners fitted to the uploaded labels,
linear and mlp, already predict q and are scored on it; under k-ary RR their argmax is the true label's); the accuracy is debiased by the backward
correction (Natarajan et al., NeurIPS 2013): an upload predicted k with uploaded label l counts R^-1[l, k], whose
expectation is the true-label correctness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fl_privtext.server.learners import Learner

__all__ = ["cross_validate", "select"]

FOLDS = 3


def _oof(make: Callable[[], Learner], x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int,
         label_rr: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per upload: out-of-fold correctness (N,) and log-loss (N,), GroupKFold by ``groups``; with ``label_rr``
    both against the true label (forward-corrected loss, backward-corrected correctness: module docstring)."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"Cross-validation by user needs uploads of at least 2 users; got {n_groups}.")
    hits = np.zeros(len(y))
    loss = np.zeros(len(y))
    inv = None if label_rr is None else np.linalg.inv(label_rr)
    for tr, te in GroupKFold(n_splits=min(folds, n_groups)).split(x, y, groups):
        model = make().fit(x[tr], y[tr])
        s = model.logits(x[te])
        s = s - s.max(axis=1, keepdims=True)
        logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
        pred = s.argmax(axis=1)
        if inv is None:
            hits[te] = pred == y[te]
            loss[te] = -logp[np.arange(len(te)), y[te]]
        else:
            # the predicted law of the UPLOADED label: a learner fitted to the uploaded labels predicts it already
            # (its argmax is the true label's under k-ary RR); a debiasing one predicts the true label's
            p = np.exp(logp)
            q = p if getattr(model, "predicts_uploaded_labels", False) else p @ label_rr
            loss[te] = -np.log(np.maximum(q[np.arange(len(te)), y[te]], 1e-300))
            hits[te] = inv[y[te], pred]
    return hits, loss


def cross_validate(make: Callable[[], Learner], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
                   folds: int = FOLDS, label_rr: np.ndarray | None = None) -> dict[str, float]:
    """Out-of-fold accuracy and log-loss (nats per upload) of the learner ``make()`` over ``folds`` GroupKFold
    folds (by ``groups``); ``label_rr``: the labels' RR matrix (scores against the true label)."""
    hits, loss = _oof(make, x, y, groups, folds, label_rr)
    return {"accuracy": float(hits.mean()), "log_loss": float(loss.mean())}


def _beats(loss: np.ndarray, null: np.ndarray, groups: np.ndarray, tried: int) -> bool:
    """One-sided paired test, per user: is the mean of (loss - null) below 0 at 95% (Bonferroni over ``tried``)?"""
    from scipy import stats

    _, inv = np.unique(groups, return_inverse=True)
    d = np.bincount(inv, weights=loss - null) / np.bincount(inv)
    if len(d) < 2:
        return False
    se = float(d.std(ddof=1)) / np.sqrt(len(d))
    return float(d.mean()) < -float(stats.norm.ppf(1 - 0.05 / max(tried, 1))) * se


def select(makers: dict[str, Callable[[], Learner]], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
           folds: int = FOLDS, order: Sequence[str] | None = None, label_rr: np.ndarray | None = None
           ) -> tuple[str, dict[str, Any]]:
    """The candidate with the lowest out-of-fold log-loss among those that beat the constant (paired, per user,
    one-sided 95%, Bonferroni); the constant when none does. Returns (name, {name: {"accuracy", "log_loss",
    "beats_constant"}}). ``makers`` must hold "constant". ``label_rr``: the uploaded labels' RR matrix, if any."""
    if "constant" not in makers:
        raise ValueError("select needs the constant predictor among the candidates.")
    runs = {name: _oof(make, x, y, groups, folds, label_rr) for name, make in makers.items()}
    null = runs["constant"][1]
    tried = len(makers) - 1
    scores: dict[str, Any] = {}
    for name, (hits, loss) in runs.items():
        scores[name] = {"accuracy": float(hits.mean()), "log_loss": float(loss.mean()),
                        "beats_constant": bool(name != "constant" and _beats(loss, null, groups, tried))}
    best = "constant"
    for name in order or makers:
        if scores[name]["beats_constant"] and (best == "constant"
                                               or scores[name]["log_loss"] < scores[best]["log_loss"]):
            best = name
    return best, scores
