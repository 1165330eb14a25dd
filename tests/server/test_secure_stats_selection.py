"""Model selection from a secure sum (server.aggregate = secagg, server.learner = auto): the two-fold encoding
keeps the sum's sensitivity (`fl_privtext.client.aggregate`), and the selection from aggregates
(`fl_privtext.server.aggregate_selection`) ships the shrunk moment head estimated best unless it is significantly
worse than the constant: a head that answers as the constant does when the data carry no signal, a resolved head
when they do (also where the gate "beats the constant significantly" kept the constant), and never the learner whose
rule is below the majority (the AG news defect of issue #24)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fl_privtext.client.aggregate import (
    PUBLIC_TAIL,
    StatsLayout,
    share_noise_std,
    stats_input,
    user_fold,
    user_statistics,
)
from fl_privtext.privacy.projection import random_projection
from fl_privtext.server.aggregate import Aggregate, denoised_means
from fl_privtext.server.aggregate_selection import candidate_rule, held_out_accuracy, select_from_folds

K, D = 3, 8


@pytest.mark.parametrize("second", [False, True])
def test_two_fold_vectors_keep_the_sensitivity(gen, second):
    lay = StatsLayout(K, D, second, folds=2, fold_seed=3)
    assert lay.sensitivity == StatsLayout(K, D, second).sensitivity and lay.size == 2 * lay.block_size
    n = 80
    x, y, u = gen.normal(0, 1, (n, D)), gen.integers(0, K, n), gen.integers(0, 16, n)
    base = user_statistics(x, y, u, lay)
    # the folds sum to the unsplit statistics
    one = StatsLayout(K, D, second)
    for a, b in zip(lay.split(base), one.split(user_statistics(x, y, u, one)), strict=True):
        if b is not None:
            np.testing.assert_allclose(a, b, atol=1e-12)
    worst = 0.0
    for trial in range(300):
        victim = int(gen.integers(0, 16))
        keep = u != victim
        m = int(gen.integers(1, 6))
        # replaced records: any number, any labels; every other trial under another id (the user may change fold)
        new_id = victim if trial % 2 else 100 + trial
        x2 = np.vstack([x[keep], gen.normal(0, 1, (m, D)) * (10.0 if trial % 4 < 2 else 1.0)])
        y2 = np.concatenate([y[keep], gen.integers(0, K, m)])
        u2 = np.concatenate([u[keep], np.full(m, new_id)])
        worst = max(worst, float(np.linalg.norm(user_statistics(x2, y2, u2, lay) - base)))
    assert worst <= lay.sensitivity + 1e-9
    # attained within one fold: one record replaced by its opposite (x x^T is unchanged)
    a = np.eye(1, D)
    diff = user_statistics(a, np.array([0]), np.array([7]), lay) - user_statistics(-a, np.array([0]), np.array([7]),
                                                                                   lay)
    assert np.linalg.norm(diff) == pytest.approx(2.0)
    # known-bad encoding: every user's counts and sums plus fold 0's again (overlapping blocks) exceed their
    # sensitivity 2 (by sqrt(2))
    fold0 = int(np.flatnonzero(user_fold(np.arange(50), 3) == 0)[0])

    def overlap(v: np.ndarray) -> np.ndarray:
        return np.concatenate([lay.split_fold(v, 0)[0] + lay.split_fold(v, 1)[0], lay.split_fold(v, 0)[0],
                               (lay.split_fold(v, 0)[1] + lay.split_fold(v, 1)[1]).ravel(),
                               lay.split_fold(v, 0)[1].ravel()])
    pa = user_statistics(a, np.array([0]), np.array([fold0]), lay)
    pb = user_statistics(-a, np.array([0]), np.array([fold0]), lay)
    assert np.linalg.norm(overlap(pa) - overlap(pb)) == pytest.approx(2.0 * math.sqrt(2.0))


def test_the_fold_rule_is_public_balanced_and_per_user(gen):
    ids = np.arange(20000)
    f = user_fold(ids, 11)
    np.testing.assert_array_equal(f, user_fold(ids, 11))  # anyone can recompute it
    assert stats.binomtest(int(f.sum()), len(f), 0.5).pvalue > 1e-4
    assert np.mean(f != user_fold(ids, 12)) == pytest.approx(0.5, abs=0.02)  # another seed, another split
    # records of one user always land in its fold, whatever they are
    users = np.repeat(np.arange(40), 3)
    lay = StatsLayout(K, D, folds=2, fold_seed=11)
    vec = user_statistics(gen.normal(0, 1, (120, D)), gen.integers(0, K, 120), users, lay)
    counts0 = lay.split_fold(vec, 0)[0].sum()
    assert counts0 == pytest.approx(float(np.sum(user_fold(np.arange(40), 11) == 0)))


def _population(g: np.random.Generator, n: int, signal: float, aniso: bool) -> tuple[np.ndarray, np.ndarray]:
    """Imbalanced classes (0.6 / 0.25 / 0.15); class means ``signal`` apart. ``aniso``: the separating direction is
    the high-variance one, where the nearest-centroid rule (isotropic variance) falls below the majority."""
    y = g.choice(K, n, p=[0.6, 0.25, 0.15])
    sd = np.full(D, 0.15)
    if aniso:
        sd[0] = 1.2
    x = g.normal(0, 1, (n, D)) * sd
    x[:, 7] += 1.0
    x[:, 0] += signal * ((y == 1).astype(float) - (y == 2))
    x[:, 1] += (0.3 if aniso else 1.0) * signal * (y == 2)
    return x, y


def _sum(g: np.random.Generator, x: np.ndarray, y: np.ndarray, eps: float, seed: int) -> tuple[np.ndarray, StatsLayout]:
    lay = StatsLayout(K, D, True, folds=2, fold_seed=seed)
    clean = user_statistics(x, y, np.arange(len(y)), lay)
    sigma = share_noise_std(eps, 1e-5, lay.sensitivity, 1)
    return np.concatenate([clean + g.normal(0, sigma, clean.shape), [1.0, sigma ** 2, 0.0]]), lay


def _true_accuracy(total: np.ndarray, lay: StatsLayout, name: str, x: np.ndarray, y: np.ndarray) -> float:
    w, b = candidate_rule(name, Aggregate.of(total, lay))
    return float(np.mean((stats_input(x) @ w.T + b).argmax(1) == y))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selection_from_aggregates_is_harmless_without_signal_and_picks_a_learner_with_it(seed):
    g = np.random.default_rng(seed)
    picks = {}
    for signal, aniso in ((0.0, False), (0.3, False), (0.3, True), (1.0, True)):
        x, y = _population(g, 6000, signal, aniso)
        total, lay = _sum(g, x, y, 1.0, seed)
        name, cands = select_from_folds(total, lay, seed=seed)
        assert set(cands) == {"constant", "centroid", "lda"} and not cands["constant"]["beats_constant"]
        picks[(signal, aniso)] = name
        xt, yt = _population(g, 20000, signal, aniso)
        acc = {n: _true_accuracy(total, lay, n, xt, yt) for n in cands}
        # the chosen rule is never below the majority by more than sampling error
        assert acc[name] >= acc["constant"] - 0.02
        # the moment head estimated best on device ships unless it is significantly worse than the constant
        head = max(("centroid", "lda"), key=lambda n: cands[n]["accuracy"])
        assert name == ("constant" if cands[head]["worse_than_constant"] else head)
        if signal == 0.0 and name != "constant":  # no signal: the shrunk head falls back to the prior
            w, b = candidate_rule(name, Aggregate.of(total, lay))
            assert np.mean((stats_input(xt) @ w.T + b).argmax(1) == 0) > 0.95, name
        # the held-out estimates (of the rules fitted on one fold) track the shipped rules' true accuracies, and
        # say on which side of the constant each one is
        for n in cands:
            assert cands[n]["accuracy"] == pytest.approx(acc[n], abs=0.1)
            if abs(acc[n] - acc["constant"]) > 0.05:
                assert (cands[n]["advantage"] > 0) == (acc[n] > acc["constant"])
    assert picks[(0.3, False)] in ("centroid", "lda")
    assert picks[(0.3, True)] != "centroid"  # its rule is below the majority there (the AG news defect)
    assert picks[(1.0, True)] == "lda"


def test_a_resolved_head_ships_where_the_significance_gate_kept_the_constant():
    """Issue #37 item 3: the selection ships the head estimated best on device, the constant only where no head is
    estimated better. The earlier rule (a head only where it beats the constant by z standard errors, one-sided 95%,
    Bonferroni: ``beats_constant``) had no power at the sizes that matter: on this weak-signal population it kept the
    constant in most seeds although the shipped head is 5-6 points above it on fresh users (blog 10k at central
    epsilon 1, MiniLM: the constant in 7 of 10 repetitions, 34.9% exact, against 54.6% now; secagg_selection.md)."""
    gate_kept_constant = 0
    for seed in range(6):
        g = np.random.default_rng(seed)
        x, y = _population(g, 6000, 0.15, False)
        total, lay = _sum(g, x, y, 1.0, seed)
        name, cands = select_from_folds(total, lay, seed=seed)
        xt, yt = _population(g, 20000, 0.15, False)
        assert name != "constant"
        assert _true_accuracy(total, lay, name, xt, yt) > _true_accuracy(total, lay, "constant", xt, yt) + 0.04
        gate_kept_constant += not any(cands[n]["beats_constant"] for n in ("centroid", "lda"))
    assert gate_kept_constant >= 3  # the known-bad rule: the constant, 5-6 points below, in most seeds


def test_selection_known_bad_variants():
    """Without the constant as a candidate (the old rule: centroid when there is no second moment), the anisotropic
    population gets a rule below the majority; the held-out criterion on the FITTING fold (no cross-validation)
    cannot see the noise it fitted and rates a no-signal learner above what it achieves."""
    g = np.random.default_rng(5)
    x, y = _population(g, 6000, 0.3, True)
    total, lay = _sum(g, x, y, 1.0, 5)
    xt, yt = _population(g, 20000, 0.3, True)
    assert _true_accuracy(total, lay, "centroid", xt, yt) < _true_accuracy(total, lay, "constant", xt, yt) - 0.05
    # in-sample scoring of a learner fitted on pure noise (noise sum at epsilon 0.05, tiny sample)
    x0, y0 = _population(g, 300, 0.0, False)
    noisy, lay0 = _sum(g, x0, y0, 0.05, 5)
    agg = Aggregate.of(noisy, lay0, fold=0)
    w, b = candidate_rule("centroid", agg)
    c, s, m = lay0.split_fold(noisy, 0)
    c1, s1, m1 = lay0.split_fold(noisy, 1)
    assert m is not None and m1 is not None
    inside = held_out_accuracy(w, b, c, s, m, agg.noise_var)
    held = held_out_accuracy(w, b, c1, s1, m1, agg.noise_var)
    assert inside > held + 0.05


def test_deviation_noise_includes_the_shared_grand_mean():
    """The James-Stein factor of `denoised_means` uses the variance of a class DEVIATION's added noise,
    v ((1 - w_k)^2 / c_k^2 + (K - 1) / n^2), not the class mean's v / c_k^2 (checked by simulation): the grand mean
    shares the class's noise."""
    g = np.random.default_rng(3)
    counts, v = np.array([300.0, 120.0, 80.0]), 50.0
    n, w = counts.sum(), counts / counts.sum()
    e = g.normal(0.0, 1.0, (20000, 3)) * (math.sqrt(v) / counts)  # noise of each class mean, one coordinate
    dev = e - (e @ w)[:, None]
    want = v * ((1.0 - w) ** 2 / counts ** 2 + 2 / n ** 2)
    np.testing.assert_allclose(dev.var(axis=0), want, rtol=0.05)
    assert not np.allclose(dev.var(axis=0), v / counts ** 2, rtol=0.3)  # the old noise term


def _two_class(g: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes (0.6 / 0.4) in 50 dimensions, their means 0.1 apart along 10 coordinates against a within-class
    sd of 0.05: a centroid separates them almost perfectly, yet each class mean's added noise norm exceeds its
    deviation from the grand mean at central epsilon 0.1 (the deviation's own noise does not)."""
    y = (g.random(n) < 0.4).astype(np.int64)
    x = g.normal(0.0, 0.05, (n, 50))
    x[:, 0] += 1.0
    x[:, 1:11] += 0.05 * (2 * y[:, None] - 1)
    return x, y


def test_secagg_selection_resolves_heads_below_the_class_noise_and_answers_as_the_constant_without_signal():
    """The default data's defect (every candidate scored alike, the constant chosen at central epsilon 5): the
    deviations' noise was overstated (1 / (1 - w_k)^2), every class mean shrunk to the grand mean, every head the
    constant. At central epsilon 0.1 over 8,000 users the centroid's head now differs from the constant, is chosen
    and is near-perfect on fresh users (the old factor: all candidates 0.605, the shipped head 0.60); at epsilon
    0.005 nothing is resolved and whatever ships answers as the constant does."""
    g = np.random.default_rng(1)
    x, y = _two_class(g, 8000)
    xt, yt = _two_class(g, 20000)
    lay = StatsLayout(2, 50, True, folds=2, fold_seed=1, second_weight=0.5)
    clean = user_statistics(x, y, np.arange(len(y)), lay)
    for eps, signal in ((0.1, True), (0.005, False)):
        sigma = share_noise_std(eps, 1e-5, lay.sensitivity, 1)
        total = np.concatenate([clean + g.normal(0, sigma, clean.shape), [1.0, sigma ** 2, 0.0]])
        name, cands = select_from_folds(total, lay, seed=1)
        if signal:
            assert name in ("centroid", "lda") and cands[name]["beats_constant"]
            assert cands["centroid"]["accuracy"] > cands["constant"]["accuracy"] + 0.1
            assert _true_accuracy(total, lay, "centroid", xt, yt) > 0.9
            m = denoised_means(Aggregate.of(total, lay))
            assert np.linalg.norm(m[1] - m[0]) > 0.0
        else:  # unresolved: whatever ships (a head not significantly worse than the constant) answers as it does
            assert _true_accuracy(total, lay, name, xt, yt) >= _true_accuracy(total, lay, "constant", xt, yt) - 0.01


def test_selection_needs_two_folds_and_the_second_moment():
    with pytest.raises(ValueError, match="two-fold"):
        select_from_folds(np.zeros(StatsLayout(K, D, True).size + PUBLIC_TAIL), StatsLayout(K, D, True))
    with pytest.raises(ValueError, match="folds = 1 or 2"):
        StatsLayout(K, D, folds=3)


def test_projection_then_unit_norm_is_what_the_statistics_hold(gen):
    proj = random_projection(D, 4, 0)
    x, y, u = gen.normal(0, 1, (30, D)), gen.integers(0, K, 30), np.arange(30)
    lay = StatsLayout(K, 4)
    vec = user_statistics(x, y, u, lay, proj)
    z = proj.apply(x).astype(np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    np.testing.assert_allclose(lay.split(vec)[1], np.eye(K)[y].T @ z, atol=1e-5)
    assert math.isclose(float(np.linalg.norm(stats_input(x, proj), axis=1).max()), 1.0, rel_tol=1e-9)
    with pytest.raises(ValueError, match="maps to 4"):
        user_statistics(x, y, u, StatsLayout(K, 5), proj)
