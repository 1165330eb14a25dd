"""Closed-form cross-validation of the moment learners (issue #38): each fold's fit from the totals minus the
fold's sums (`fl_privtext.server.selection.FoldStats`) is the refit on the fold's rows, up to float rounding; a
fold that keeps its own sums (it has seen its held-out uploads) is not."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import GroupKFold

from fl_privtext.server.learners import LDA, Centroid, ClassStats, label_rr_matrix
from fl_privtext.server.noise import NoiseLaw
from fl_privtext.server.selection import FoldStats, cross_validate

K, D, N = 3, 6, 360


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    y = g.integers(0, K, N)
    x = g.standard_normal((K, D))[y] * 0.8 + g.standard_normal((N, D)) * 1.5
    return x.astype(np.float32), y, np.arange(N) // 4  # 90 users of 4 uploads


def _softmax_loss(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=1, keepdims=True)
    return -(s - np.log(np.exp(s).sum(axis=1, keepdims=True)))[np.arange(len(y)), y]


@pytest.mark.parametrize("learner", [Centroid, LDA])
@pytest.mark.parametrize("label_epsilon", [0.0, 2.0])
def test_closed_form_folds_equal_the_refit_per_fold_and_a_fold_keeping_its_sums_does_not(learner: type,
                                                                                          label_epsilon: float) -> None:
    x, y, groups = _data(7)
    rr = label_rr_matrix(K, label_epsilon) if label_epsilon else None
    law = NoiseLaw.diagonal(np.full(D, 2.25))

    def make() -> Centroid | LDA:
        return learner(num_classes=K, noise=law, label_rr=rr)

    splits = list(GroupKFold(n_splits=3).split(x, y, groups))
    stats = FoldStats(x, y, splits)
    for f, (tr, te) in enumerate(splits):
        refit = make().fit(x[tr], y[tr])
        closed = make().fit_stats(stats.training(f, K))
        leaky = make().fit_stats(stats.training(f, K) + stats.held_out(f, K))  # forgot to subtract its sums
        assert np.array_equal(closed.stats.counts, refit.stats.counts)
        want = _softmax_loss(refit.logits(x[te]), y[te])
        np.testing.assert_allclose(_softmax_loss(closed.logits(x[te]), y[te]), want, rtol=1e-9, atol=1e-12)
        for key in ("weight_0", "bias_0"):
            np.testing.assert_allclose(closed.export()[key], refit.export()[key], rtol=1e-5, atol=1e-6)
        assert np.abs(_softmax_loss(leaky.logits(x[te]), y[te]) - want).max() > 1e-6  # the known-bad variant
    # and through the public scoring: the same out-of-fold accuracy and log-loss either way
    closed_cv = cross_validate(make, x, y, groups, label_rr=rr)
    refit_cv = cross_validate(make, x, y, groups, label_rr=rr, closed_form=False)
    assert closed_cv["accuracy"] == refit_cv["accuracy"]
    assert closed_cv["log_loss"] == pytest.approx(refit_cv["log_loss"], rel=1e-9)


def test_raw_sums_are_additive_and_prepared_is_of() -> None:
    x, y, _ = _data(3)
    rr = label_rr_matrix(K, 1.0)
    whole = ClassStats.of(x, y, K, np.ones(D), rr)
    parts = (ClassStats.raw(x[:100], y[:100], K) + ClassStats.raw(x[100:], y[100:], K)).prepared(np.ones(D), rr)
    for a, b in ((whole.counts, parts.counts), (whole.sums, parts.sums), (whole.second, parts.second)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert whole.fourth == pytest.approx(parts.fourth, rel=1e-12)
