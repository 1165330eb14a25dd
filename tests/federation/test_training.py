"""Phase A through a real Flower simulation: FedAvg rounds of the client-side encoder, then Phase B uploads of its
output; FedAvg's aggregate; DP-FedAvg's clipping and accounting.

One simulation (4 clients) serves two points, so Ray starts once for the module; a second one (1 client) checks
that federated training with one client equals centralized training.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_privtext import pipeline, rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.training import dp_fedavg_guarantee
from fl_privtext.pipeline.runner import run_points
from fl_privtext.public import PublicSpec
from fl_privtext.report import aggregate

FAST = {"server.epochs": 3, "attack.epochs": 3, "run.progress": False, "federation.num-clients": 4,
        "train.rounds": 3, "train.hidden": 16, "train.batch-size": 64, "server.learner": "centroid",
        "run.baseline": False}
DP = {"train.dp-clip": 0.5, "train.dp-noise-multiplier": 1.0, "train.clients-per-round": 2}


def _cfg(cache_dir, **sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat({**FAST, "extractor.cache-dir": str(cache_dir), **sets})


@pytest.fixture(scope="module")
def served(cache_dir):
    cfgs = {"plain": _cfg(cache_dir), "dp": _cfg(cache_dir, **DP, **{"train.defense": "adversarial"}),
            "noval": _cfg(cache_dir, **{"train.val-frac": 0.0}),
            "cape": _cfg(cache_dir, **{"train.defense": "cape", "train.adv-attributes": "gender",
                                       "privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0})}
    results = run_points(list(cfgs.values()), keep_observations=True)
    return {name: (cfg, res) for (name, cfg), res in zip(cfgs.items(), results)}


def test_phase_a_then_phase_b_end_to_end(served):
    _, point = served["plain"]
    res = aggregate(point, total_s=1.0)
    tr = res["training"]
    assert (tr["rounds"], tr["defense"], tr["encoder"], tr["guarantee"]) == (3, "none", "trunk", "none")
    assert "updates unprotected" in tr["guarantee_note"]
    assert len(tr["per_round"]) == 3 and 1 <= tr["selected_round"] <= 3
    assert all(r["updates_observed"] == 4 and r["update_bytes_observed"] > 0 for r in tr["per_round"])
    assert tr["updates_observed"] == 12
    assert all(0 <= r["val_accuracy"] <= 1 for r in tr["per_round"])
    # Phase B uploaded the trained encoder's r(x) (16 wide), privatized; the fresh attacker ran on it
    assert res["federation"]["upload_dim"] == 16
    assert {"gender", "age_group"} <= set(res["attacks"])
    assert 0 <= res["utility"]["accuracy"] <= 1


def test_without_validation_users_the_last_round_is_kept(served):
    # train.val-frac = 0 (e.g. data.split = source): no federated evaluation, nothing to select on
    tr = aggregate(served["noval"][1], total_s=1.0)["training"]
    assert tr["selected_round"] == 3
    assert all(r["val_accuracy"] == -1.0 for r in tr["per_round"])


def test_cape_trains_the_named_attributes_adversary_only(served):
    res = aggregate(served["cape"][1], total_s=1.0)
    assert res["training"]["defense"] == "cape" and "cape" in res["training"]["guarantee_note"]
    keys = set().union(*(r.keys() for r in res["training"]["per_round"]))
    assert "val_adversary_accuracy_gender" in keys and "val_adversary_accuracy_age_group" not in keys
    assert res["privacy"]["epsilon_worst_case"] == pytest.approx(1.0, abs=1e-5)  # laplace-l1 on r(x), secure grid


def test_phase_a_replies_carry_model_parameters_and_counts_only(served):
    _, point = served["plain"]
    for step in point["training"]["kept"]:
        for arrays, weight in step["updates"]:
            assert set(arrays) == set(step["global"])  # parameter names, nothing else
            assert all(a.dtype == np.float32 for a in arrays.values())
            assert weight > 0


def test_fedavg_aggregate_is_the_weighted_mean_of_the_client_models(served):
    _, point = served["plain"]
    for step in point["training"]["kept"]:
        ws = [w for _, w in step["updates"]]
        for k, glob in step["global"].items():
            mean = sum(w / sum(ws) * a[k].astype(np.float64) for a, w in step["updates"])
            np.testing.assert_allclose(glob, mean, rtol=1e-5, atol=1e-6)


def test_dp_fedavg_clips_every_update_and_reports_its_guarantee(served):
    cfg, point = served["dp"]
    tr = point["training"]
    norms = [n for r in tr["per_round"] for n in r["update_norms"]]
    assert len(norms) == 3 * 2  # 2 of 4 clients per round
    assert max(norms) <= 0.5 * (1 + 1e-5)
    g = tr["guarantee"]
    assert g["delta"] == cfg.train.dp_delta
    assert g["epsilon"] == pytest.approx(dp_fedavg_guarantee(noise_multiplier=1.0, num_clients=4,
                                                             clients_per_round=2, rounds=3, delta=1e-5)["epsilon"])
    assert "no formal guarantee" in tr["guarantee_note"]  # adversarial defences


def _rdp_gaussian_epsilon(sigma: float, rounds: int, delta: float) -> float:
    """Closed form: RDP of the Gaussian mechanism, eps_alpha = rounds * alpha / (2 sigma^2), converted with
    Canonne-Kamath-Steinke (as dp-accounting does), minimised over a fine grid of orders."""
    alphas = np.concatenate([np.linspace(1.01, 10, 2000), np.linspace(10, 300, 3000)])
    rdp = rounds * alphas / (2 * sigma**2)
    eps = rdp + np.log1p(-1 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1)
    return float(eps.min())


@pytest.mark.parametrize("z,rounds", [(1.0, 3), (2.0, 50), (4.0, 200)])
def test_dp_fedavg_epsilon_matches_the_closed_form_with_full_participation(z, rounds):
    got = dp_fedavg_guarantee(noise_multiplier=z, num_clients=10, clients_per_round=10, rounds=rounds, delta=1e-5)
    # user-level replace-one: sensitivity 2C, so the Gaussian's multiplier is z / 2
    assert got["epsilon"] == pytest.approx(_rdp_gaussian_epsilon(z / 2, rounds, 1e-5), rel=0.02)


def test_dp_fedavg_epsilon_matches_dp_accounting_with_client_sampling():
    import dp_accounting
    from dp_accounting import rdp

    acct = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(1.5)), 30)
    got = dp_fedavg_guarantee(noise_multiplier=3.0, num_clients=100, clients_per_round=10, rounds=30, delta=1e-6)
    assert got["epsilon"] == pytest.approx(acct.get_epsilon(1e-6), rel=1e-9)
    full = dp_fedavg_guarantee(noise_multiplier=3.0, num_clients=100, clients_per_round=100, rounds=30, delta=1e-6)
    assert got["epsilon"] < full["epsilon"]  # sampling amplifies


def test_one_client_with_full_participation_equals_centralized_training(cache_dir):
    from fl_privtext.encoders import (
        TrainData,
        build_model,
        client_generator,
        defense_mechanism,
        local_train,
        trainable_state,
    )
    from fl_privtext.encoders.model import spec_from
    from fl_privtext.encoders.train import phase_a_rows

    cfg = _cfg(cache_dir, **{"federation.num-clients": 1, "attack.enabled": False, "run.baseline": False,
                             "run.client-seed": 7})  # reproducible client randomness (reaches the clients only)
    (point,) = run_points([cfg], keep_observations=True)
    kept = point["training"]["kept"]
    prep = pipeline.prepare(cfg, features="extract")
    model = build_model(cfg.train, spec_from(prep), rng.torch_generator(cfg.run.seed, "train-init"))
    data = TrainData.from_prepared(prep)
    rows, _ = phase_a_rows(prep, cfg.train, cfg.run.seed, 0)
    for rnd in range(1, cfg.train.rounds + 1):
        local_train(model, data, rows, cfg.train, client_generator(7, 0, rnd, "fit"),
                    mechanism=defense_mechanism(cfg.train, PublicSpec.of(cfg), model.out_dim))
        central = trainable_state(model)
        for k, v in kept[rnd - 1]["global"].items():
            np.testing.assert_allclose(v, central[k], rtol=1e-6, atol=1e-7)
