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
    centred = server_inputs(x, ExperimentConfig.from_flat({"server.center": True}).server)
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
    # the referee's exact figure (issue #37): no privacy, so the model sees x itself, as in the per-upload
    # evaluation of the same test records; it does not move with the clients' randomized response
    assert od["exact"]["accuracy"] == pytest.approx(out["accuracy"], abs=1e-12)
    assert od1["exact"]["accuracy"] == od["exact"]["accuracy"]
    assert od1["exact"]["num_test_records"] == od1["num_test_records"]
    off = ExperimentConfig.load(None, {"run.progress": "false", "server.epochs": "5", "attack.enabled": "false",
                                       "server.on-device": "false"})
    assert pipeline.run_plain(off, p)["per_seed"][0]["utility"]["on_device"]["available"] is False


def _tiny_prepared():
    """Four users, two features, two classes: users a, b, c are test users, d trains (closed-form test below)."""
    from fl_privtext.data.schema import make_text_dataset
    from fl_privtext.pipeline.preparation import Prepared

    users = ["a", "a", "b", "b", "b", "c", "d", "d"]
    x = np.array([[1, 0], [0, 1], [0, 1], [0, 2], [3, 0], [0, 1], [1, 0], [0, 1]], np.float32)
    y = [0, 0, 1, 1, 1, 0, 0, 1]
    ds = make_text_dataset("tiny", texts=[f"t{i}" for i in range(8)], labels=y, label_names=("zero", "one"),
                           user_ids=users)
    roles = np.array(["test"] * 6 + ["train"] * 2)
    return Prepared(ds=ds, roles=roles, shards=[np.arange(8)], extractor=None, features=x)


def test_the_exact_figure_is_the_hand_count():
    """The model predicts the larger coordinate; on the six test records it is right on a (1 of 2), b (2 of 3),
    c (0 of 1): accuracy 3/6. Confusion rows (true 0: [1, 2], true 1: [1, 2]) give F1 2/5 and 4/7."""
    prep = _tiny_prepared()
    model = {"mean": np.zeros(2, np.float32), "std": np.ones(2, np.float32),
             "weight_0": np.eye(2, dtype=np.float32), "bias_0": np.zeros(2, np.float32)}
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": "none"})
    ex = pipeline.exact_on_device(prep, cfg, model, majority_class=1, seed=0)
    assert ex["accuracy"] == pytest.approx(3 / 6)
    assert ex["macro_f1"] == pytest.approx((2 / 5 + 4 / 7) / 2)
    assert ex["majority_baseline"] == pytest.approx(3 / 6)
    assert (ex["num_test_records"], ex["num_test_users"]) == (6, 3)
    assert 0.0 <= ex["ci_low"] <= ex["accuracy"] <= ex["ci_high"] <= 1.0
    assert "simulation only" in ex["by"]
    np.testing.assert_array_equal(ex["_per_user"].correct, [1, 2, 0])
    # Phase A: the referee does not hold the trained encoder's output, and says so instead of a number
    phase_a = pipeline.exact_on_device(prep, ExperimentConfig.from_flat({"train.rounds": 1}, cfg), model, 1, 0)
    assert phase_a["available"] is False and "Phase A" in phase_a["reason"]


def test_results_json_and_the_sweep_table_carry_both_figures(prep, tmp_path):
    """Public contract (issue #37): utility.on_device.exact.{accuracy, ci_low, ci_high} and
    utility.on_device.private.{accuracy, noise_std} in results.json; a sweep row's on_device_exact columns."""
    import json

    from fl_privtext.report import finalize
    from fl_privtext.sweep import row_of, to_csv

    _, p = prep
    cfg = ExperimentConfig.load(None, {"run.progress": "false", "server.epochs": "5", "attack.enabled": "false",
                                       "run.seeds": "2"})
    point = pipeline.run_plain(cfg, p)
    finalize(point, cfg, total_s=0.0, output=tmp_path, echo=False)
    od = json.loads((tmp_path / "results.json").read_text())["utility"]["on_device"]
    ex, priv = od["exact"], od["private"]
    assert ex["ci_low"] <= ex["accuracy"] <= ex["ci_high"] and ex["ci_high"] - ex["ci_low"] > 0
    assert ex["accuracy"] == pytest.approx(np.mean([s["utility"]["on_device"]["exact"]["accuracy"]
                                                    for s in point["per_seed"]]))
    # the server's estimate is the old figure, its noise that of the mean of two seeds' independent answers
    assert priv["accuracy"] == od["accuracy"]
    assert priv["noise_std"] == pytest.approx(od["accuracy_noise_std"] / np.sqrt(2))
    assert "simulation only" in ex["by"] and ex["seeds"] == 2
    row = row_of(json.loads((tmp_path / "results.json").read_text()))
    assert (row["on_device_exact"], row["on_device_exact_ci_low"], row["on_device_exact_ci_high"]) == (
        ex["accuracy"], ex["ci_low"], ex["ci_high"])
    assert "on_device_exact,on_device_exact_ci_low,on_device_exact_ci_high" in to_csv([row]).splitlines()[0]
    assert "exact (simulation)" in (tmp_path / "summary.md").read_text()
    # the per-upload accuracy's interval over test users and seeds (results.json utility.ci_low / ci_high)
    u = json.loads((tmp_path / "results.json").read_text())["utility"]
    assert u["ci_low"] <= u["accuracy"] <= u["ci_high"] and all("ci_low" in s for s in u["per_seed"])


def test_the_referee_reads_the_same_clean_features_where_the_server_holds_none(prep):
    """The Flower server prepares without features (it never holds them); the referee then reads the extraction
    cache, and must score the shipped model exactly as on the driver's own features."""
    cfg, p = prep
    served = pipeline.prepare(cfg, features="none")
    assert served.features is None
    g = np.random.default_rng(4)
    dim = p.features.shape[1]
    model = {"mean": np.zeros(dim, np.float32), "std": np.ones(dim, np.float32),
             "weight_0": g.standard_normal((2, dim)).astype(np.float32), "bias_0": np.zeros(2, np.float32)}
    a = pipeline.exact_on_device(served, cfg, model, majority_class=0, seed=3)
    assert a == pipeline.exact_on_device(p, cfg, model, majority_class=0, seed=3)
    assert 0.3 < a["accuracy"] < 0.9 and a["ci_low"] < a["accuracy"] < a["ci_high"]
