"""Public projection before noise (privacy.projection = random | pca, privacy.proj-dim = k)."""

import numpy as np
import pytest

from fl_privtext.client import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import make_mechanism
from fl_privtext.privacy.commands import privacy_report
from fl_privtext.privacy.projection import fit_pca, random_projection
from fl_privtext.public import PublicSpec

NEW = ("privunitg", "privunit", "duchi", "mvlaplace", "purkayastha")


def test_random_projection_is_public_deterministic_and_jl_scaled():
    a, b, c = random_projection(64, 8, 0), random_projection(64, 8, 0), random_projection(64, 8, 1)
    assert np.array_equal(a.matrix, b.matrix) and a.fingerprint == b.fingerprint
    assert not np.allclose(a.matrix, c.matrix)
    assert np.allclose(a.matrix.T @ a.matrix, 8.0 * np.eye(8))  # sqrt(d/k) Q with Q orthonormal: d/k = 8
    assert np.trace(a.matrix @ a.matrix.T) == pytest.approx(64.0)  # E||P^T x||^2 = ||x||^2 for isotropic x
    assert np.all(a.mean == 0) and a.source == "random, public seed 0"


def test_fit_pca_recovers_a_planted_subspace():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((20, 3)))[0]
    x = 5.0 + rng.standard_normal((2000, 3)) * [10, 8, 6] @ basis.T + 0.01 * rng.standard_normal((2000, 20))
    proj = fit_pca(x, 3, source="'planted'")
    assert np.allclose(proj.matrix.T @ proj.matrix, np.eye(3))
    assert np.linalg.svd(basis.T @ proj.matrix, compute_uv=False) == pytest.approx(np.ones(3), abs=1e-4)
    assert np.allclose(proj.mean, x.mean(axis=0)) and "planted" in proj.source
    with pytest.raises(ValueError, match="non-empty source"):
        fit_pca(x, 3, source=" ")
    with pytest.raises(ValueError, match=r"proj_dim must be an integer in \[1, 20\]"):
        fit_pca(x, 21, source="x")


@pytest.mark.parametrize("name", NEW)
def test_random_projection_changes_width_not_epsilon(name):
    plain = make_mechanism(name, epsilon=2.0, dim=64)
    mech = make_mechanism(name, epsilon=2.0, dim=64, projection="random", proj_dim=8, proj_seed=3)
    assert mech.output_dim == 8
    rep = mech.report().to_json()
    assert rep["epsilon_worst_case"] == pytest.approx(plain.report().epsilon_worst_case)
    assert rep["parameters"]["projection"] == "random" and rep["parameters"]["proj_dim"] == 8
    assert rep["parameters"]["projector"]["source"] == "random, public seed 3"
    y = mech.privatize(np.random.default_rng(0).standard_normal((50, 64)), np.random.default_rng(1))
    assert y.shape == (50, 8) and np.isfinite(y).all()


def test_projected_privunitg_is_unbiased_for_the_projected_input():
    mech = make_mechanism("privunitg", epsilon=4.0, dim=32, projection="random", proj_dim=8, clip_norm=10.0, sampler="float")
    rng = np.random.default_rng(2)
    x = rng.standard_normal(32) * 0.2
    target = mech.projector.apply(x[None])[0].astype(np.float64)
    assert np.linalg.norm(target) < 10.0  # inside the ball: no clipping
    y = mech.privatize(np.tile(x, (40_000, 1)), rng).astype(np.float64)
    se = y.std(axis=0) / np.sqrt(y.shape[0])
    assert np.all(np.abs(y.mean(axis=0) - target) < 5 * se)


def test_pca_projection_needs_public_data_and_a_matching_projector():
    rng = np.random.default_rng(3)
    public = rng.standard_normal((500, 16))
    proj = fit_pca(public, 4, source="'ag_news'")
    mech = make_mechanism("privunitg", epsilon=1.0, dim=16, projection="pca", proj_dim=4, public_data="ag_news",
                          projector=proj, sampler="float")
    assert mech.privatize(rng.standard_normal((5, 16)), rng).shape == (5, 4)
    params = mech.report().to_json()["parameters"]
    assert params["public_data"] == "ag_news" and params["projector"]["fingerprint"] == proj.fingerprint
    with pytest.raises(ValueError, match="needs public_data"):
        make_mechanism("privunitg", epsilon=1.0, dim=16, projection="pca", proj_dim=4, sampler="float")
    with pytest.raises(ValueError, match="pca map from 16 to 8"):
        make_mechanism("privunitg", epsilon=1.0, dim=16, projection="pca", proj_dim=8, public_data="x", projector=proj, sampler="float")
    unfitted = make_mechanism("privunitg", epsilon=1.0, dim=16, projection="pca", proj_dim=4, public_data="ag_news", sampler="float")
    assert unfitted.report().output_dim == 4  # the report does not need the fitted map
    with pytest.raises(ValueError, match="fitted on public data before privatizing"):
        unfitted.privatize(rng.standard_normal((5, 16)), rng)


def test_bad_projection_parameters():
    with pytest.raises(ValueError, match="projection must be one of none, random, pca"):
        make_mechanism("duchi", epsilon=1.0, dim=8, projection="svd", proj_dim=2, sampler="float")
    with pytest.raises(ValueError, match=r"proj_dim must be an integer in \[2, dim=8\]"):
        make_mechanism("duchi", epsilon=1.0, dim=8, projection="random", proj_dim=9, sampler="float")
    with pytest.raises(ValueError, match="need projection = 'random' or 'pca'"):
        make_mechanism("duchi", epsilon=1.0, dim=8, proj_dim=4, sampler="float")


def test_privacy_report_cli_takes_projection_parameters():
    rep = privacy_report("privunitg", {"epsilon": "1", "dim": "384", "projection": "random", "proj-dim": "16"})
    assert rep["output_dim"] == 16 and rep["parameters"]["proj_dim"] == 16 and rep["work_dim"] == 16


def test_config_keys_reach_the_mechanism_and_others_refuse_them(monkeypatch, tmp_path):
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": "privunitg", "privacy.projection": "random",
                                      "privacy.proj-dim": "8", "privacy.sphere-map": "normalise"})
    mech = mechanism_for(PublicSpec.of(cfg), 32)
    assert mech.output_dim == 8 and mech.sphere_map == "normalise" and mech.projection == "random"
    plain = mechanism_for(PublicSpec.of(ExperimentConfig.from_flat({"privacy.mechanism": "privunitg"})), 32)
    assert plain.output_dim == 32 and plain.projection == "none"
    lap = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.projection": "random",
                                      "privacy.proj-dim": "8"})
    with pytest.raises(ValueError, match="not supported by mechanism 'laplace-l1'"):
        mechanism_for(PublicSpec.of(lap), 32)
    # pca: fitted on the public dataset's features (stubbed here), named in the report
    from fl_privtext import public

    calls = []

    def fake_features(c):
        calls.append(c.privacy.public_data)
        return np.random.default_rng(0).standard_normal((300, 32))

    monkeypatch.setattr(public, "public_features", fake_features)
    monkeypatch.setattr(public, "_FITTED", {})
    pca = ExperimentConfig.from_flat({"privacy.mechanism": "purkayastha", "privacy.projection": "pca",
                                      "privacy.proj-dim": "4", "privacy.public-data": "ag_news",
                                      "extractor.cache-dir": str(tmp_path)})  # the stub's map stored there only
    m1, m2 = mechanism_for(PublicSpec.of(pca), 32), mechanism_for(PublicSpec.of(pca), 32)
    assert m1.output_dim == 4 and "ag_news" in m1.report().parameters["projector"]["source"]
    assert calls == ["ag_news"] and m1.projector is m2.projector  # fitted once per process
    same = ExperimentConfig.from_flat({"privacy.mechanism": "privunitg", "privacy.projection": "pca",
                                       "privacy.proj-dim": "4", "privacy.public-data": "default"})
    with pytest.raises(ValueError, match="disjoint from every simulated user"):
        mechanism_for(PublicSpec.of(same), 32)


@pytest.mark.parametrize(("flat", "needle"), [
    ({"privacy.projection": "svd"}, "none, random, pca"),
    ({"privacy.proj-dim": "8"}, "proj-dim needs privacy.projection"),
    ({"privacy.projection": "random"}, "proj-dim must be >= 2"),
    ({"privacy.projection": "pca", "privacy.proj-dim": "8"}, "needs privacy.public-data"),
    ({"privacy.sphere-map": "clip"}, "round, normalise"),
])
def test_bad_projection_config(flat, needle):
    with pytest.raises(ValueError) as exc:
        ExperimentConfig.from_flat(flat)
    assert needle in str(exc.value)


@pytest.mark.parametrize("mechanism", NEW)
def test_client_uploads_projected_private_vectors(mechanism):
    from fl_privtext.client import ClientData, client_upload

    g = np.random.default_rng(0)
    data = ClientData(shards=[np.arange(30)], labels=g.integers(0, 3, 30), num_classes=3,
                      features=g.normal(size=(30, 12)).astype(np.float32))
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": mechanism, "privacy.epsilon": 2.0,
                                      "privacy.projection": "random", "privacy.proj-dim": "4",
                                      "federation.num-clients": 1, "federation.batch-size": 7})
    up = client_upload(data, 0, 0, 1, cfg)
    assert up.features.shape == (30, 4) and up.input_dim == 12 and np.isfinite(up.features).all()
    assert up.features.dtype == np.float32


def test_a_row_near_the_float32_maximum_projects_finite_with_its_direction():
    # issue #22: the float32 cast of the float64 product overflowed to inf (and the mechanism's expected() to NaN)
    from fl_privtext.privacy.projection import MAX_PROJECTED_NORM, random_projection

    proj = random_projection(16, 4, 0)
    big = np.full((1, 16), np.finfo(np.float32).max / 2, np.float32)
    small = np.full((1, 16), 1.0, np.float32)
    out = proj.apply(np.concatenate([big, small]))
    assert np.isfinite(out).all()
    assert np.linalg.norm(out[0].astype(np.float64)) == pytest.approx(MAX_PROJECTED_NORM, rel=1e-5)
    exact = (small.astype(np.float64) - proj.mean) @ proj.matrix
    o = out[0].astype(np.float64)
    np.testing.assert_allclose(o / np.linalg.norm(o), exact[0] / np.linalg.norm(exact[0]), rtol=1e-5)
    np.testing.assert_allclose(out[1], exact[0], rtol=1e-6)
    with pytest.raises(ValueError, match="non-finite values"):
        proj.apply(np.array([[np.nan] * 16], np.float32))
    with pytest.raises(ValueError, match=r"an \(N, 16\) array"):
        proj.apply(np.zeros((2, 5), np.float32))
