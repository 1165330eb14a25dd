"""Issue #38 item 3: what auto's selection saves must not change what it computes (`fl_privtext.server.selection`).

- `group_folds` gives GroupKFold's folds, index for index, on random cases (equal sizes, string users, 2-5 folds);
  a greedy that breaks ties between equal-sized users the other way does not.
- Scoring the candidates fold by fold gives each one's per-upload scores bit for bit as scoring it alone.
- `HeldOutModel` (one per held-out fold, its classes batched) gives the per-class loop's clean estimates bit for bit.
- One pass: auto sums every upload once (the folds' sums; the final fit is their total), where it summed them twice;
  the model it ships is the explicit learner's up to float rounding (1e-12 relative), and bit for bit where the
  selection read a sample (its own pass over every upload then).
- Under a cap law a moment fit computes E[v v^T] once per statistics object, a held-out fold no standard error, and
  the D x D moment matrices written in place are the plain expressions' bytes. No Ray."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.model_selection import GroupKFold

from fl_privtext.privacy import make_mechanism
from fl_privtext.rng import generator
from fl_privtext.server import learners, make_learner, select, selection, training
from fl_privtext.server.learners import LDA, Centroid, ClassStats, Constant, label_rr_matrix
from fl_privtext.server.noise import NoiseLaw, noise_law
from fl_privtext.server.selection import FoldStats, HeldOutModel, Users, clean_accuracy, group_folds
from fl_privtext.server.training import fit_learner


def _groups(seed: int) -> tuple[np.ndarray, int]:
    g = np.random.default_rng(seed)
    n, users = int(g.integers(5, 2000)), int(g.integers(3, 400))
    kind = seed % 4
    if kind == 0:
        groups = g.integers(0, users, n)
    elif kind == 1:  # every user the same size: the ties decide everything
        groups = np.repeat(np.arange(n // 5 + 1), 5)[:n]
    elif kind == 2:
        groups = g.choice(np.array([f"user-{i}" for i in range(users)]), n)
    else:  # a few large users and many small ones
        groups = g.zipf(1.6, n) % users
    return groups, int(g.integers(2, 6))


def _sklearn_greedy_reversed_ties(groups: np.ndarray, folds: int) -> list[np.ndarray]:
    """Known-bad: GroupKFold's greedy with equal-sized users taken in their own order (not the reverse)."""
    _, inv = np.unique(groups, return_inverse=True)
    sizes = np.bincount(inv)
    order = np.lexsort((np.arange(len(sizes)), -sizes))
    load, fold_of = np.zeros(folds), np.zeros(len(sizes), np.int64)
    for u in order:
        fold_of[u] = int(np.argmin(load))
        load[fold_of[u]] += sizes[u]
    return [np.flatnonzero(fold_of[inv] == f) for f in range(folds)]


def test_group_folds_are_group_kfolds_index_for_index_and_a_tie_order_flip_is_not():
    differs = 0
    for seed in range(300):
        groups, folds = _groups(seed)
        if len(np.unique(groups)) < folds:
            continue
        want = list(GroupKFold(n_splits=folds).split(np.zeros((len(groups), 1)), None, groups))
        got = group_folds(groups, folds)
        assert len(got) == len(want) == folds
        for (tr, te), (wtr, wte) in zip(got, want, strict=True):
            assert np.array_equal(tr, wtr) and np.array_equal(te, wte), seed
        bad = _sklearn_greedy_reversed_ties(groups, folds)
        differs += any(not np.array_equal(b, te) for b, (_, te) in zip(bad, want, strict=True))
    assert differs > 20, differs  # the tie order matters, and the comparison sees it
    with pytest.raises(ValueError):
        group_folds(np.array([0, 0, 1]), 3)


def _data(seed: int, n: int = 1800, d: int = 12, k: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    g = np.random.default_rng(seed)
    y = g.integers(0, k, n)
    x = g.standard_normal((k, d))[y] * 0.6 + g.standard_normal((n, d)) * 1.3
    return x.astype(np.float32), y, np.arange(n) // 6, k


@pytest.mark.parametrize("label_epsilon", [0.0, 2.0])
def test_scoring_fold_by_fold_gives_each_candidate_its_own_scores_bit_for_bit(label_epsilon: float):
    x, y, groups, k = _data(3)
    law = NoiseLaw.diagonal(np.full(x.shape[1], 1.2))
    rr = label_rr_matrix(k, label_epsilon) if label_epsilon else None
    makers = {n: (lambda n=n: make_learner(n, num_classes=k, noise=law, label_rr=rr, seed=0, linear_c=0.01))
              for n in ("constant", "centroid", "lda", "linear")}
    splits = selection._splits(Users(groups), 3)
    cleans: dict[str, list[tuple[float, float]]] = {}
    together = selection._oof_all(makers, x, y, splits, FoldStats(x, y, splits), rr, law, k, cleans)
    for name, make in makers.items():
        alone_cleans: dict[str, list[tuple[float, float]]] = {}
        alone = selection._oof_all({name: make}, x, y, splits, FoldStats(x, y, splits), rr, law, k, alone_cleans)
        assert np.array_equal(together[name][0], alone[name][0]) and np.array_equal(together[name][1], alone[name][1])
        assert cleans[name] == alone_cleans[name]


def _clean_accuracy_per_class(export: dict[str, np.ndarray], raw: ClassStats, k: int, law: NoiseLaw,
                              label_rr: np.ndarray | None, seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    """The reference: `clean_accuracy`'s linear branch as written before the batching, one class at a time."""
    lda = LDA(num_classes=k, noise=law, label_rr=label_rr)
    lda.stats = st = raw.prepared(law.variance, label_rr)
    sigma, _ = lda.clean_within()
    s_up = st.within()
    counts = np.maximum(st.counts, 1.0)
    pi = np.clip(st.counts, 0.0, None) / max(float(np.clip(st.counts, 0.0, None).sum()), 1e-12)
    m = st.means
    g = generator(int(seed), "clean-accuracy", k)
    std = np.asarray(export["std"], np.float64)
    w = np.asarray(export["weight_0"], np.float64) / std
    b = np.asarray(export["bias_0"], np.float64) - w @ np.asarray(export["mean"], np.float64)
    z = g.standard_normal((draws, k))
    a = w @ sigma @ w.T
    spread = float(np.clip(np.linalg.eigvalsh((a + a.T) / 2), 0.0, None).sum())
    acc, unresolved = 0.0, 0.0
    for c in range(k):
        cov = a - w @ s_up @ w.T / counts[c]
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        root = vec * np.sqrt(np.clip(lam, 0.0, None))
        pred = (w @ m[c] + b + z @ root.T).argmax(axis=1)
        acc += pi[c] * float(np.mean(pred == c))
        if spread > 1e-300:
            unresolved = max(unresolved, float(-np.clip(lam, None, 0.0).sum()) / spread)
    return acc, unresolved


def test_the_batched_clean_estimates_are_the_per_class_loops_bit_for_bit():
    seen = set()
    for seed in range(24):
        g = np.random.default_rng(seed)
        k, d, n = int(g.integers(2, 11)), int(g.integers(3, 40)), int(g.integers(300, 2500))
        y = g.integers(0, k, n)
        x = (g.standard_normal((k, d))[y] * g.uniform(0.1, 1.0) + g.standard_normal((n, d))).astype(np.float32)
        law = NoiseLaw.diagonal(np.full(d, g.uniform(0.2, 1.4)))
        rr = label_rr_matrix(k, 2.0) if seed % 3 == 0 else None
        held = ClassStats.raw(x[n // 2:], y[n // 2:], k)
        shared = HeldOutModel(held, k, law, rr, seed=seed)
        for learner in (LDA, Centroid, Constant):
            export = learner(num_classes=k, noise=law, label_rr=rr).fit(x[: n // 2], y[: n // 2]).export()
            want = _clean_accuracy_per_class(export, held, k, law, rr, seed=seed)
            assert shared.accuracy(export) == want, (seed, learner.name)
            assert clean_accuracy(export, x[n // 2:], y[n // 2:], k, law, rr, seed=seed) == want
            seen.add(round(want[0], 3))
    assert len(seen) > 20  # the cases differ: a comparison of constants would not test anything


def test_first_argmax_hits_count_what_argmax_answers_ties_nan_and_inf_included():
    g = np.random.default_rng(0)
    for case in range(600):
        k, draws = int(g.integers(1, 12)), int(g.integers(1, 60))
        scores = g.integers(-2, 3, (k, k, draws)).astype(np.float64)  # small integers: many ties
        for share, value in ((0.1 * (case % 3 == 0), np.nan), (0.1 * (case % 5 == 0), np.inf), (0.1, -0.0)):
            scores[g.random(scores.shape) < share] = value
        want = np.count_nonzero(scores.argmax(axis=1) == np.arange(k)[:, None], axis=1)
        assert np.array_equal(selection._first_argmax_hits(scores), want), case


def test_the_row_max_and_the_constants_one_row_are_the_full_rows_numbers():
    g = np.random.default_rng(1)
    for _ in range(300):
        n, k = int(g.integers(1, 3000)), int(g.integers(1, 30))
        s = g.standard_normal((n, k)) * g.uniform(0.1, 100)
        s[g.random(s.shape) < 0.01] = np.nan
        assert np.array_equal(selection._row_max(s), s.max(axis=1, keepdims=True), equal_nan=True)
        b = np.log(g.dirichlet(np.ones(k)) + 1e-3)
        full = np.tile(b, (n, 1))
        full = full - full.max(axis=1, keepdims=True)
        one = b[None, :] - b[None, :].max(axis=1, keepdims=True)
        assert np.array_equal(full - np.log(np.exp(full).sum(axis=1, keepdims=True)),
                              np.broadcast_to(one - np.log(np.exp(one).sum(axis=1, keepdims=True)), (n, k)))


def test_held_out_models_sharing_their_score_buffer_give_a_fresh_ones_estimates():
    g = np.random.default_rng(2)
    k, d, n = 5, 9, 1200
    y = g.integers(0, k, n)
    x = (g.standard_normal((k, d))[y] * 0.5 + g.standard_normal((n, d))).astype(np.float32)
    law = NoiseLaw.diagonal(np.full(d, 0.6))
    scratch: dict[str, np.ndarray] = {}
    for fold in range(3):
        held = ClassStats.raw(x[fold::3], y[fold::3], k)
        export = LDA(num_classes=k, noise=law).fit(np.delete(x, np.s_[fold::3], 0), np.delete(y, np.s_[fold::3])).export()
        shared = HeldOutModel(held, k, law, scratch=scratch).accuracy(export)
        assert shared == HeldOutModel(held, k, law).accuracy(export) == _clean_accuracy_per_class(export, held, k, law,
                                                                                                 None)
    assert scratch["scores"].shape == (k, k, 2000)


def _counting_raw(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    rows: list[int] = []
    orig = learners.ClassStats.raw.__func__  # type: ignore[attr-defined]

    def raw(cls: type[ClassStats], x: np.ndarray, y: np.ndarray, num_classes: int) -> ClassStats:
        rows.append(len(x))
        return orig(cls, x, y, num_classes)

    monkeypatch.setattr(learners.ClassStats, "raw", classmethod(raw))
    return rows


def _lda_case() -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    x, y, groups, k = _data(5, n=2400, d=16)
    mech = make_mechanism("gaussian", epsilon=50.0, delta=1e-5, clip_norm=1.0, sampler="float")
    return x, y, groups, {"num_classes": k, "mechanism": mech, "input_dim": x.shape[1], "seed": 0}


def _heads(model: Any) -> dict[str, np.ndarray]:
    return {n: getattr(model, n) for n in ("w_noisy", "b_noisy", "w_clean", "b_clean")}


def test_auto_sums_every_upload_once_and_ships_the_explicit_learners_model_to_rounding(monkeypatch):
    x, y, groups, kw = _lda_case()
    rows = _counting_raw(monkeypatch)
    model, chosen, scores = fit_learner("auto", x, y, groups, **kw)
    assert chosen == "lda" and scores["lda"]["scored"], scores
    assert sum(rows) == len(y), rows  # the three held-out folds, nothing else: one pass over the uploads
    rows.clear()
    explicit, _, _ = fit_learner("lda", x, y, groups, **kw)
    assert sum(rows) == len(y)
    for name, want in _heads(explicit).items():
        got = _heads(model)[name]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * float(np.abs(want).max()), err_msg=name)
    assert model.record == explicit.record or all(
        model.record["clean_variance"][key] == pytest.approx(explicit.record["clean_variance"][key], rel=1e-12)
        for key in ("estimate", "standard_error", "used"))
    # known-bad: a winner fitted from the folds' training sums of one fold (not their total) is not that model
    folds = selection._splits(Users(groups), 3)
    partial = make_learner("lda", num_classes=kw["num_classes"], noise=explicit.law).fit_stats(
        FoldStats(x, y, folds).training(0, kw["num_classes"]))
    assert np.abs(partial.w_clean - explicit.w_clean).max() > 1e-6 * np.abs(explicit.w_clean).max()


def test_where_the_selection_reads_a_sample_the_winner_is_fitted_on_every_upload_bit_for_bit(monkeypatch):
    x, y, groups, kw = _lda_case()
    monkeypatch.setattr(training, "CV_MAX_UPLOADS", 1200)
    rows = _counting_raw(monkeypatch)
    model, chosen, _ = fit_learner("auto", x, y, groups, **kw)
    sampled = sum(rows)
    assert chosen == "lda" and sampled > len(y) and sampled - len(y) <= 1300, rows  # the sample's folds + a pass
    explicit, _, _ = fit_learner("lda", x, y, groups, **kw)
    for name, want in _heads(explicit).items():
        assert np.array_equal(_heads(model)[name], want), name


def test_on_wide_uploads_nothing_is_kept_between_candidates_and_the_scores_are_the_same(monkeypatch):
    """The memory bounds (`FoldStats.held_rows` beyond ``FOLD_ROWS_BYTES``, D x D matrices beyond ``MEMO_BYTES``:
    converted and built again per candidate, as before the batching) change no score, clean estimate or choice."""
    x, y, groups, k = _data(11)
    law = NoiseLaw.diagonal(np.full(x.shape[1], 1.2))
    makers = {n: (lambda n=n: make_learner(n, num_classes=k, noise=law, seed=0)) for n in ("constant", "centroid", "lda")}
    want = select(makers, x, y, groups, law=law, num_classes=k)
    monkeypatch.setattr(selection, "FOLD_ROWS_BYTES", 0)
    monkeypatch.setattr(selection, "MEMO_BYTES", 0)
    monkeypatch.setattr(learners, "MEMO_BYTES", 0)
    splits = selection._splits(Users(groups), 3)
    assert not FoldStats(x, y, splits).keeps_rows
    assert select(makers, x, y, groups, law=law, num_classes=k) == want


def test_a_cap_laws_directions_are_computed_once_per_statistics_and_no_held_out_fold_computes_a_standard_error(
        monkeypatch):
    """Under a cap law (PrivUnitG) the noisy head's noise covariance and the clean covariance both scale E[v v^T]
    (`NoiseLaw.directions`): computed once per statistics object (a fold's centroid and lda, the winner's total),
    not once for each; `HeldOutModel` reads the clean covariance without its standard error (`LDA.clean_covariance`).
    The scores, clean estimates, choice and shipped heads are those of recomputing everything each time (the memo
    switched off: ``MEMO_BYTES`` 0)."""
    x, y, groups, k = _data(7, n=2400, d=16)
    mech = make_mechanism("privunitg", epsilon=4.0, dim=16, sampler="float")
    kw: dict[str, Any] = {"num_classes": k, "mechanism": mech, "input_dim": 16, "seed": 0}
    x = np.asarray(mech.privatize(x / np.linalg.norm(x, axis=1, keepdims=True), generator(0, "t")), np.float32)
    calls = {"directions": 0, "se": 0}
    directions, se = NoiseLaw.directions, learners._Moments._clean_se

    def counted(name: str, f: Any) -> Any:
        def g(*a: Any) -> Any:
            calls[name] += 1
            return f(*a)
        return g

    monkeypatch.setattr(NoiseLaw, "directions", counted("directions", directions))
    monkeypatch.setattr(learners._Moments, "_clean_se", counted("se", se))
    model, chosen, scores = fit_learner("auto", x, y, groups, **kw)
    assert model.law.structured and chosen == "lda", (model.law, chosen)
    # 3 folds' training sums (centroid and lda share them) + 3 held-out folds + the winner's total
    assert calls == {"directions": 7, "se": 4}, calls
    monkeypatch.setattr(learners, "MEMO_BYTES", 0)  # every derived matrix made again where it is asked
    calls.update(directions=0, se=0)
    again, chosen_again, scores_again = fit_learner("auto", x, y, groups, **kw)
    assert calls["directions"] > 7  # known-bad count: without the memo they are computed for each use
    assert chosen_again == chosen and scores_again == scores
    for name, want in _heads(again).items():
        assert np.array_equal(_heads(model)[name], want), name
    assert model.record == again.record


def test_the_in_place_moment_matrices_are_the_plain_expressions_byte_for_byte():
    """`NoiseLaw.directions` and ``covariance``, `ClassStats.within`, the clean covariance and `soft_eigen` write
    their D x D results in place (fewer fresh arrays, each faulted in under the pinned mmap threshold): the bytes of
    the plain expressions they replace, on random cap laws and statistics (signed zeros and all)."""
    for seed in range(12):
        g = np.random.default_rng(seed)
        d, k, n = int(g.integers(2, 40)), int(g.integers(2, 8)), int(g.integers(50, 900))
        mech = make_mechanism("privunitg", epsilon=float(g.uniform(0.5, 8.0)), dim=d, sampler="float")
        law = noise_law(mech, d, np.zeros(d), generator(seed, "law"))
        assert law.structured
        y = g.integers(0, k, n)
        x = (g.standard_normal((k, d))[y] + g.standard_normal((n, d)) * 3).astype(np.float32)
        lda = LDA(num_classes=k, noise=law).fit(x, y)
        st, mo = lda.stats, law.moments
        second = st.second / max(st.n, 1.0)
        a, b = mo.iso, mo.rank_one
        vv = (np.asarray(second, np.float64) - a * np.eye(d)) / b
        vv = (vv + vv.T) / 2
        dirs = vv + np.eye(d) * ((1.0 - float(np.trace(vv))) / d)
        assert law.directions(second).tobytes() == dirs.tobytes()
        r2 = mo.clip_norm ** 2 if mo.sphere_map == "normalise" else law.input_norm2
        assert law.covariance(second).tobytes() == (a * np.eye(d) + (b - r2) * dirs).tobytes()
        m = st.means
        within = (st.second - (m.T * st.counts) @ m) / max(st.n - k, 1.0)
        assert st.within().tobytes() == within.tobytes()
        w, counts = np.clip(st.counts, 0.0, None) / max(st.n, 1.0), np.maximum(st.counts, 1.0)
        clean = r2 * dirs - (m.T * w) @ m + within * float((w / counts).sum())
        assert lda.clean_covariance().tobytes() == ((clean + clean.T) / 2).tobytes()
        vecs = np.linalg.eigh((clean + clean.T) / 2)[1]
        assert learners.soft_eigen(clean, 0.0)[1].tobytes() == vecs.tobytes()
