"""On-device inference: E[upload | x] per mechanism (Monte Carlo audit), the torch-free model, the counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_privtext import pipeline
from fl_privtext.client import client_on_device
from fl_privtext.config import ExperimentConfig
from fl_privtext.learn import MLPConfig, train_mlp
from fl_privtext.ondevice import check_model, confusion, mlp_logits, summarize
from fl_privtext.privacy import MECHANISMS, make_mechanism, mechanism_params

DIM = 12
DRAWS = 20_000


def _mechanism(name: str):
    accepted = mechanism_params(name)
    kw = {k: v for k, v in {"epsilon": 3.0, "dim": DIM, "int_bits": 2, "frac_bits": 2, "lam": 100.0,
                            "delta": 1e-5}.items() if k in accepted}
    return make_mechanism(name, **kw)


def _monte_carlo(mech, x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    y = mech.privatize(np.repeat(x, DRAWS, axis=0), g).astype(np.float64).reshape(len(x), DRAWS, -1)
    return y.mean(axis=1), y.std(axis=1, ddof=1) / np.sqrt(DRAWS)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_expected_is_the_mean_of_the_uploads(name):
    mech = _mechanism(name)
    x = (np.random.default_rng(1).standard_normal((3, DIM)) * np.array([[0.05], [0.3], [3.0]])).astype(np.float32)
    mean, se = _monte_carlo(mech, x, seed=2)
    expected = mech.expected(x)
    assert expected.shape == mean.shape and expected.dtype == np.float32
    # 3 x width values; 5 standard errors (plus float32 rounding where the output is deterministic)
    assert np.all(np.abs(mean - expected) <= 5 * se + 1e-5), name


def test_the_audit_catches_a_biased_decoding():
    # Known-bad variants the same check must reject: clean bits for bitrr (ignores q + (p - q) b), the raw
    # direction for purkayastha (ignores E[cos theta] < 1).
    x = (np.random.default_rng(1).standard_normal((3, DIM)) * 0.3).astype(np.float32)
    for name, wrong in (("bitrr", lambda m, x: m.encode(m.normalise(x).values).values),
                        ("purkayastha", lambda m, x: x / np.linalg.norm(x, axis=1, keepdims=True))):
        mech = _mechanism(name)
        mean, se = _monte_carlo(mech, x, seed=3)
        assert not np.all(np.abs(mean - wrong(mech, x)) <= 5 * se + 1e-5), name


def test_numpy_forward_equals_the_torch_model():
    g = np.random.default_rng(0)
    x = g.standard_normal((300, 7)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1)
    for hidden in (0, 16):
        model = train_mlp(x, y, num_classes=3, config=MLPConfig(hidden=hidden, epochs=3),
                          generator=torch.Generator().manual_seed(1))
        params = model.export()
        assert check_model(params) == (1 if hidden == 0 else 2)
        np.testing.assert_allclose(mlp_logits(params, x), model.logits(x), rtol=1e-5, atol=1e-5)


def test_a_centring_server_has_its_clients_centre_too():
    """server.center: the exported model carries the centring, so the client's forward equals the server's model on
    centred inputs, and differs from it on uncentred ones."""
    from fl_privtext.server import server_inputs

    g = np.random.default_rng(2)
    x = (g.standard_normal((200, 6)) + g.standard_normal((200, 1)) * 5).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int64)
    centred = server_inputs(x, ExperimentConfig.from_flat({"server.center": True}))
    model = train_mlp(centred, y, num_classes=2, config=MLPConfig(hidden=8, epochs=3),
                      generator=torch.Generator().manual_seed(1))
    params = {**model.export(), "center": np.ones(1, np.float32)}
    np.testing.assert_allclose(mlp_logits(params, x), model.logits(centred), rtol=1e-4, atol=1e-4)
    assert not np.allclose(mlp_logits(model.export(), x), model.logits(centred), atol=1e-2)


def test_malformed_models_and_inputs_are_refused():
    params = {"mean": np.zeros(3, np.float32), "std": np.ones(3, np.float32),
              "weight_0": np.zeros((2, 3), np.float32), "bias_0": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match="width 3"):
        mlp_logits(params, np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="weight_i/bias_i"):
        mlp_logits({"mean": params["mean"]}, np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        mlp_logits({**params, "weight_0": np.zeros((2, 4), np.float32)}, np.zeros((4, 3), np.float32))


def test_counts_add_up_to_the_closed_form():
    truth, pred = np.array([0, 0, 1, 1, 2, 2, 2]), np.array([0, 1, 1, 1, 2, 0, 2])
    a, b = confusion(truth[:3], pred[:3], 3), confusion(truth[3:], pred[3:], 3)
    out = summarize([a, b], majority_class=2, clients=2)
    assert out["accuracy"] == pytest.approx(5 / 7)
    assert out["majority_baseline"] == pytest.approx(3 / 7)  # always answering class 2
    assert out["num_test_records"] == 7 and out["clients"] == 2
    with pytest.raises(ValueError, match="no test client"):
        summarize([np.zeros((3, 3), np.int64)], majority_class=0, clients=1)


@pytest.fixture(scope="module")
def prep():
    cfg = ExperimentConfig.load(None, {"run.progress": "false"})
    return cfg, pipeline.prepare(cfg, features="extract")


def test_a_client_evaluates_only_records_it_holds(prep):
    cfg, p = prep
    model = {"mean": np.zeros(p.features.shape[1], np.float32), "std": np.ones(p.features.shape[1], np.float32),
             "weight_0": np.zeros((2, p.features.shape[1]), np.float32), "bias_0": np.array([0.0, 1.0], np.float32)}
    mine, theirs = p.shards[0][:5], p.shards[1][:2]
    counts = client_on_device(p.client, 0, mine, model, cfg)
    np.testing.assert_array_equal(counts.sum(axis=0), [0, 5])  # the constant model answers class 1 for all
    with pytest.raises(ValueError, match="does not hold"):
        client_on_device(p.client, 0, np.concatenate([mine, theirs]), model, cfg)


def test_plain_loop_reports_both_protocols(prep):
    cfg, p = prep
    cfg = ExperimentConfig.load(None, {"run.progress": "false", "server.epochs": "5", "attack.enabled": "false",
                                       "privacy.mechanism": "none", "client.count-epsilon": "40"})
    out = pipeline.run_plain(cfg, p)["per_seed"][0]["utility"]
    od = out["on_device"]
    assert od["available"] is True and od["num_test_records"] == out["num_test_uploads"]
    # count-epsilon 40: randomized response flips a bit with probability e^-40, and E[upload | x] = x under no
    # noise: the same predictions
    assert od["accuracy"] == pytest.approx(out["accuracy"], abs=1e-12)
    # count-epsilon 1 (issue #22): the answer is noisy, its reported noise sd is the closed form, and the
    # debiased accuracy lies within its CI of the noise-free one
    noisy = pipeline.run_plain(ExperimentConfig.from_flat({"client.count-epsilon": 1.0}, cfg), p)
    od1 = noisy["per_seed"][0]["utility"]["on_device"]
    p1 = np.e / (1 + np.e)
    assert od1["accuracy_noise_std"] == pytest.approx(np.sqrt(p1 * (1 - p1) / od1["num_test_records"]) / (2 * p1 - 1))
    assert abs(od1["accuracy"] - out["accuracy"]) < 4 * od1["accuracy_noise_std"]
    assert od1["ci95"][0] < od1["accuracy"] < od1["ci95"][1]
    off = ExperimentConfig.load(None, {"run.progress": "false", "server.epochs": "5", "attack.enabled": "false",
                                       "server.on-device": "false"})
    assert pipeline.run_plain(off, p)["per_seed"][0]["utility"]["on_device"]["available"] is False
