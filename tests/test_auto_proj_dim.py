"""``privacy.proj-dim = auto``: k from the public rows and the mechanism's noise law (`fl_privtext.public`)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import make_mechanism
from fl_privtext.privacy.projection import fit_pca
from fl_privtext.public import PublicSpec, auto_proj_dim, choose_proj_dim, resolved_signal
from fl_privtext.server.learners import Centroid
from fl_privtext.server.noise import noise_law

D, K = 64, 4
SEPARATION = 1.0


def test_resolved_signal_is_the_wiener_weighted_variance():
    assert resolved_signal(np.array([1.0, 0.25]), 0.0, 1) == pytest.approx(1.25)
    # 1 / (1 + 1) + 0.25^2 / (0.25 + 1) = 0.5 + 0.05
    assert resolved_signal(np.array([1.0, 0.25]), 1.0, 1) == pytest.approx(0.55)
    # n uploads divide the noise: 100 uploads at noise 100 are one upload at noise 1
    assert resolved_signal(np.array([1.0, 0.25]), 100.0, 100) == pytest.approx(0.55)


def _population(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm rows: K classes apart along 3 of 64 directions, a decaying spectrum everywhere (the public rows
    are the same law, unlabelled)."""
    means = np.zeros((K, D))
    means[:, :3] = SEPARATION * np.random.default_rng(0).standard_normal((K, 3))  # the same classes in every draw
    g = np.random.default_rng(seed)
    y = g.integers(0, K, n)
    x = means[y] + g.standard_normal((n, D)) / np.sqrt(1.0 + np.arange(D))
    return x / np.linalg.norm(x, axis=1, keepdims=True), y


def _mechanism(public: np.ndarray, epsilon: float):
    def at(k: int):
        return make_mechanism("privunitg", epsilon=epsilon, dim=D, sampler="float", projection="pca", proj_dim=k,
                              projector=fit_pca(public, k, source="synthetic public rows"), public_data="synthetic")
    return at


def test_k_grows_with_epsilon_and_with_the_number_of_uploads():
    public, _ = _population(4000, 0)
    by_eps = [choose_proj_dim(public, _mechanism(public, e), 4000).k for e in (0.5, 2.0, 8.0, 20.0)]
    assert by_eps == sorted(by_eps) and by_eps[0] < by_eps[-1], by_eps
    by_n = [choose_proj_dim(public, _mechanism(public, 2.0), n).k for n in (100, 10_000, 10**7)]
    assert by_n == sorted(by_n) and by_n[0] < by_n[-1], by_n


def _on_device_accuracy(k: int, epsilon: float, public: np.ndarray, seed: int) -> float:
    """The server's centroid from n privatized uploads at width k, applied to clean test inputs."""
    mech = _mechanism(public, epsilon)(k)
    x, y = _population(6000, 10 + seed)
    test, yt = _population(3000, 100 + seed)
    g = np.random.default_rng(seed)
    u = np.asarray(mech.privatize(x.astype(np.float32), g), np.float64)
    model = Centroid(num_classes=K, noise=noise_law(mech, D, u.mean(axis=0), g)).fit(u, y)
    clean = np.asarray(mech.expected(test.astype(np.float32)), np.float64)
    return float(((clean @ model.w_clean.T + model.b_clean).argmax(1) == yt).mean())


def test_the_chosen_k_beats_the_full_width_and_is_near_the_best_fixed_k():
    public, _ = _population(4000, 1)
    eps = 0.5
    chosen = choose_proj_dim(public, _mechanism(public, eps), 6000).k
    acc = {k: np.mean([_on_device_accuracy(k, eps, public, s) for s in range(3)]) for k in (2, 4, 8, 16, 32, D)}
    assert chosen < D
    # the known-bad choice (no reduction: the noise of 64 coordinates) loses clearly; the rule is near the best
    # (measured: k = 8 0.594, k = 16 0.597, k = 32 0.522, full width 0.529)
    assert acc[chosen] > acc[D] + 0.04, (chosen, acc)
    assert acc[chosen] >= max(acc.values()) - 0.02, (chosen, acc)


@pytest.mark.parametrize(("sets", "match"), [
    ({"privacy.projection": "random", "privacy.proj-dim": "auto"}, "needs privacy.projection = pca"),
    ({"privacy.proj-dim": "auto"}, "needs privacy.projection = pca"),
    ({"privacy.projection": "pca", "privacy.proj-dim": "automatic", "privacy.public-data": "imdb"},
     "an integer .* or auto"),
    ({"privacy.projection": "pca", "privacy.proj-dim": "auto", "privacy.public-data": "imdb",
      "server.aggregate": "secagg"}, "give privacy.proj-dim an integer"),
])
def test_auto_is_refused_where_it_cannot_be_computed(sets, match):
    with pytest.raises(ValueError, match=match):
        ExperimentConfig.from_flat(sets)


def test_auto_runs_end_to_end_and_reports_the_k_it_chose(data_root):
    sets = {"privacy.mechanism": "privunitg", "privacy.epsilon": "2", "privacy.projection": "pca",
            "privacy.proj-dim": "auto", "privacy.public-data": "imdb", "data.root": str(data_root),
            "server.epochs": "3", "attack.enabled": "false", "run.progress": "false"}
    cfg = ExperimentConfig.load(None, sets)
    assert ExperimentConfig.from_flat(cfg.to_flat()).privacy.proj_dim == "auto"
    prep = pipeline.prepare(cfg)
    dim = int(np.asarray(prep.features).shape[1])
    auto = auto_proj_dim(PublicSpec.of(cfg), dim)
    assert auto.uploads == round(len(prep.ds) * (1 - cfg.data.test_frac - cfg.data.aux_frac))
    out = pipeline.run_plain(cfg, prep)
    assert out["per_seed"][0]["output_dim"] == auto.k < dim
    projector = out["privacy"]["parameters"]["projector"]
    assert projector["method"] == "pca" and f"k = {auto.k} by privacy.proj-dim = auto" in projector["source"]
