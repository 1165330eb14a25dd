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
    # the constant, or a moment head whose label-RR-aware shrinkage leaves only the prior: it answers as the
    # constant (the majority) on fresh points
    shipped = make_learner(best, num_classes=4, noise=np.zeros(x.shape[1]), label_rr=rr, seed=0).fit(x, noisy)
    e = shipped.export()
    fresh = np.random.default_rng(99).normal(size=(5000, x.shape[1]))
    assert best in ("constant", "centroid")
    assert ((fresh @ e["weight_0"].T + e["bias_0"]).argmax(1) == 0).mean() > 0.95
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


def test_clean_accuracy_estimate_matches_the_heads_accuracy_on_clean_points():
    """`clean_accuracy` from held-out NOISY uploads (noise variance 4 per coordinate against a clean within-class
    sd of 0.5) and the noise law: within 0.02 of the head's accuracy on fresh clean points (the Gaussian model
    holds here); known-bad: the same estimate with a law that omits the noise (the uploads' covariance taken as the
    clean one) understates the head by more than 0.05."""
    from fl_privtext.server.noise import NoiseLaw
    from fl_privtext.server.selection import clean_accuracy

    g = np.random.default_rng(0)
    d, v = 5, 4.0
    mu = np.array([[0.0] * d, [0.8] + [0.0] * (d - 1)])

    def clean(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = (g.random(n) < 0.35).astype(np.int64)
        return mu[y] + g.normal(0.0, 0.5, (n, d)), y

    w = np.array([[0.0] * d, [3.2] + [0.0] * (d - 1)])  # the Bayes direction, a threshold off the Bayes one
    b = np.array([0.0, -1.0])
    head = {"mean": np.zeros(d, np.float32), "std": np.ones(d, np.float32), "weight_0": w.astype(np.float32),
            "bias_0": b.astype(np.float32)}
    xt, yt = clean(200_000)
    truth = float(np.mean((xt @ w.T + b).argmax(1) == yt))
    xc, y = clean(40_000)
    x = xc + g.normal(0.0, np.sqrt(v), xc.shape)
    est, unresolved = clean_accuracy(head, x, y, 2, NoiseLaw.diagonal(np.full(d, v)))
    assert abs(est - truth) < 0.02 and unresolved < 0.5, (est, truth, unresolved)
    wrong, _ = clean_accuracy(head, x, y, 2, NoiseLaw.diagonal(np.zeros(d)))
    assert wrong < truth - 0.05, (wrong, truth)
