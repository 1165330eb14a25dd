"""Model selection under randomized labels: scored against the TRUE label through the known RR channel
(fl_privtext.server.selection), so a learner that fits the label noise is not chosen."""

from __future__ import annotations

import numpy as np

from fl_privtext.server import make_learner, select
from fl_privtext.server.learners import label_rr_matrix


def _world(seed: int, signal: float, eps: float = 0.5):
    g = np.random.default_rng(seed)
    n, k, d = 6000, 4, 8
    y = g.choice(k, n, p=[0.55, 0.15, 0.15, 0.15])
    x = g.normal(size=(n, d))
    x[:, 0] += signal * (y == 1)
    rr = label_rr_matrix(k, eps)
    noisy = np.array([g.choice(k, p=rr[t]) for t in y])
    return x, y, noisy, rr, np.arange(n) // 2


def _makers(rr, noise, k=4):
    return {name: (lambda name=name: make_learner(name, num_classes=k, noise=noise, label_rr=rr, seed=0))
            for name in ("constant", "linear", "centroid")}


def test_without_signal_the_corrected_score_keeps_the_constant_the_plain_one_does_not():
    x, y, noisy, rr, groups = _world(0, signal=0.0)
    makers = _makers(rr, np.zeros(x.shape[1]))
    best, scores = select(makers, x, noisy, groups, label_rr=rr)
    assert best == "constant"
    # known-bad: the plain log-loss against the randomized labels prefers a model of the noise (the linear fit to
    # the uploaded labels predicts their near-uniform law) over the debiased prior
    _, plain = select(makers, x, noisy, groups)
    assert plain["linear"]["log_loss"] < plain["constant"]["log_loss"]
    # the corrected accuracy estimates the true one: the constant's is the true majority share
    assert abs(scores["constant"]["accuracy"] - np.mean(y == 0)) < 0.05


def test_with_signal_a_debiasing_learner_beats_the_constant_on_the_true_label():
    x, y, noisy, rr, groups = _world(1, signal=3.0, eps=2.0)
    best, scores = select(_makers(rr, np.zeros(x.shape[1])), x, noisy, groups, label_rr=rr)
    assert best != "constant" and scores[best]["accuracy"] > scores["constant"]["accuracy"] + 0.05
    fitted = make_learner(best, num_classes=4, noise=np.zeros(x.shape[1]), label_rr=rr, seed=0).fit(x, noisy)
    assert np.mean(fitted.logits(x).argmax(1) == y) > np.mean(y == 0) + 0.05
