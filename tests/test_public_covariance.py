"""Public data on the secure-aggregation path: the corpus's rows by users who are not simulated
(``privacy.public-data = NAME:other-users``, `fl_privtext.public.public_dataset`) and lda from a secure sum without
a second moment, whose covariance comes from the public rows (`fl_privtext.server.aggregate.public_within`)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.client.aggregate import PUBLIC_TAIL, StatsLayout, share_noise_std, user_statistics
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline.preparation import load
from fl_privtext.public import OTHER_USERS_MAX_ROWS, PublicSpec, public_dataset
from fl_privtext.server.aggregate import Aggregate, fit_from_aggregate, learner_for
from fl_privtext.server.aggregate_selection import select_from_folds

K, D = 4, 12


def _cfg(**sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat({"privacy.projection": "pca", "privacy.proj-dim": 8, **sets})


def test_other_users_rows_are_the_corpus_without_any_simulated_user(data_root):
    cfg = _cfg(**{"data.name": "blog", "data.root": str(data_root), "data.options.max_rows": 3000,
                  "privacy.public-data": "blog:other-users"})
    pub = public_dataset(PublicSpec.of(cfg))
    simulated = set(np.unique(load(cfg).user_ids).tolist())
    assert len(pub) == OTHER_USERS_MAX_ROWS  # 60,000 posts: far more rows than the cap remain
    assert not simulated & set(np.unique(pub.user_ids).tolist())
    assert np.array_equal(public_dataset(PublicSpec.of(cfg)).user_ids, pub.user_ids)  # a fixed subsample
    # more simulated rows -> fewer public users, still disjoint
    big = _cfg(**{"data.name": "blog", "data.root": str(data_root), "data.options.max_rows": 20000,
                  "privacy.public-data": "blog:other-users"})
    others = public_dataset(PublicSpec.of(big))
    assert not set(np.unique(load(big).user_ids).tolist()) & set(np.unique(others.user_ids).tolist())


@pytest.mark.parametrize("public, match", [
    ("default", "disjoint"),  # the simulated corpus itself
    ("imdb:other-users", "expected a dataset name"),  # another corpus's "other users": not what it says
    ("default:others", "expected a dataset name"),
])
def test_public_data_that_is_not_disjoint_or_malformed_is_refused(public, match):
    with pytest.raises(ValueError, match=match):
        public_dataset(PublicSpec.of(_cfg(**{"privacy.public-data": public})))


def test_other_users_of_a_corpus_whose_users_are_all_simulated_is_refused():
    with pytest.raises(ValueError, match="0 rows of 'default' are by users who are not simulated"):
        public_dataset(PublicSpec.of(_cfg(**{"privacy.public-data": "default:other-users"})))


def _anisotropic(g: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Classes separated along directions of SMALL variance, with large shared variance elsewhere: the centroid
    rule is confused by the large directions, lda is not."""
    y = g.integers(0, K, n)
    scale = np.r_[np.full(K, 0.15), np.full(D - K, 1.0)]
    x = g.normal(0, 1, (n, D)) * scale + 0.25 * np.eye(K, D)[y] + 0.3 * np.eye(D)[K]
    return x, y


def _accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    e = model.export()
    return float(np.mean((xn @ e["weight_0"].T + e["bias_0"]).argmax(1) == y))


def _noisy_sum(g: np.random.Generator, x: np.ndarray, y: np.ndarray, layout: StatsLayout, eps: float) -> np.ndarray:
    clean = user_statistics(x, y, np.arange(len(y)), layout)
    sigma = share_noise_std(eps, 1e-5, layout.sensitivity, 1)
    return np.concatenate([clean + g.normal(0, sigma, clean.shape), [1, sigma ** 2, 0]])


def test_lda_from_the_public_covariance_beats_the_centroid_and_a_wrong_covariance_does_not(gen):
    x, y = _anisotropic(gen, 20000)
    test_x, test_y = _anisotropic(gen, 4000)
    public_x, _ = _anisotropic(gen, 5000)  # unlabelled public rows of the same domain
    pn = public_x / np.linalg.norm(public_x, axis=1, keepdims=True)
    public = np.cov(pn, rowvar=False)
    lay = StatsLayout(K, D)  # no second moment in the sum
    agg = Aggregate.of(_noisy_sum(gen, x, y, lay, 1.0), lay)
    with pytest.raises(ValueError, match="second moment .* or public data"):
        fit_from_aggregate("lda", agg)
    lda, name = fit_from_aggregate("lda", agg, public)
    centroid, _ = fit_from_aggregate("centroid", agg)
    assert name == "lda" and learner_for("auto", lay, True) == "lda" and learner_for("auto", lay) == "centroid"
    a_lda, a_centroid = _accuracy(lda, test_x, test_y), _accuracy(centroid, test_x, test_y)
    assert a_lda > a_centroid + 0.08, (a_lda, a_centroid)
    # known-bad: the covariance of another domain (the large and small directions swapped) is worse than none
    wrong_x = public_x[:, ::-1]
    wrong = np.cov(wrong_x / np.linalg.norm(wrong_x, axis=1, keepdims=True), rowvar=False)
    a_wrong = _accuracy(fit_from_aggregate("lda", agg, wrong)[0], test_x, test_y)
    assert a_wrong < a_lda - 0.08, (a_wrong, a_lda)
    with pytest.raises(ValueError, match="public covariance is"):
        fit_from_aggregate("lda", agg, public[:3, :3])


def test_the_selection_from_two_folds_uses_the_public_covariance(gen):
    x, y = _anisotropic(gen, 20000)
    public_x, _ = _anisotropic(gen, 5000)
    public = np.cov(public_x / np.linalg.norm(public_x, axis=1, keepdims=True), rowvar=False)
    lay = StatsLayout(K, D, folds=2, fold_seed=3)
    total = _noisy_sum(gen, x, y, lay, 1.0)
    assert total.shape == (lay.size + PUBLIC_TAIL,)
    with pytest.raises(ValueError, match="or a public covariance"):
        select_from_folds(total, lay)
    name, cands = select_from_folds(total, lay, seed=1, public=public, redraws=10, draws=1000)
    assert name == "lda" and cands["lda"]["beats_constant"]
    assert cands["lda"]["accuracy"] > cands["centroid"]["accuracy"] > cands["constant"]["accuracy"]
