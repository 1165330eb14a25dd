"""Malicious ServerApps against the REAL ClientApp in real Flower simulations (Ray backend), issue #22.

The malicious server uses only messages the protocol allows (query.upload, query.evaluate, train). One simulation
runs every attack against the defended ClientApp (`build_app()`, the shipped one) and one against the OLD,
obedient behaviour (`build_app(defend=False)`): each attack must fail against the first and succeed against the
second (the tests' power). Tiny data: the embedded default dataset, 2 clients.

The clients' policy: laplace-l1 epsilon 1, label RR epsilon 1, one round, one repetition (seed 0), on-device
answers with count-epsilon 1, cap client.max-epsilon = 40 (a user with 8 records spends 16 on the honest upload and
8 on the on-device answer).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import numpy as np
import pytest

from fl_privtext.client import ClientData, ClientPolicy, mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.public import PublicSpec


def _per_record(cfg: ExperimentConfig, data: Any) -> float:
    """What one honest upload of a record costs: the mechanism's true worst-case epsilon plus the label's."""
    rep = mechanism_for(PublicSpec.of(cfg), int(data.features.shape[1])).report()
    return float(rep.epsilon_worst_case) + cfg.privacy.label_epsilon


CAP = 40.0
BASE = {"run.progress": False, "federation.num-clients": 2, "privacy.label-epsilon": 1.0,
        "client.max-epsilon": CAP, "client.count-epsilon": 1.0, "run.baseline": False}
REPEATS = 20  # re-query averaging
BISECTION = 24


def _config(cache_dir: Any) -> ExperimentConfig:
    return ExperimentConfig.from_flat({**BASE, "extractor.cache-dir": str(cache_dir)})


def _run(cfg: ExperimentConfig, defend: bool, state_dir: str) -> dict[str, Any]:
    """One simulation of the malicious ServerApp; what it learned, as a dict."""
    import torch
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fl_privtext import pipeline
    from fl_privtext.encoders import build_model, trainable_state
    from fl_privtext.encoders.model import spec_from
    from fl_privtext.federation import simulation
    from fl_privtext.federation.requests import query as _query
    from fl_privtext.federation.requests import wait_for_nodes as _wait_for_nodes
    from fl_privtext.pipeline import runner
    from fl_privtext.pipeline.clients import build_app

    simulation.quiet_env()
    snapshot = runner._snapshot(cfg)
    server_cfg = runner._server_view(cfg)
    out: dict[str, Any] = {"snapshot": snapshot}

    def send(grid: Grid, node: int, kind: str, cfg_: ExperimentConfig, **records: Any) -> Message:
        msg = Message(_query(cfg_, snapshot, **records), dst_node_id=node, message_type=kind)
        (reply,) = list(grid.send_and_receive([msg], timeout=120))
        return reply

    def upload(grid: Grid, node: int, cfg_: ExperimentConfig, seed: int = 0, rnd: int = 0) -> Message:
        return send(grid, node, "query.upload", cfg_, task=ConfigRecord({"seed": seed, "round": rnd}))

    def arrays(reply: Message) -> dict[str, np.ndarray] | str:
        if reply.has_error():
            return str(reply.error.reason)
        return {k: a.numpy() for k, a in reply.content.array_records["upload"].items()}

    def evaluate(grid: Grid, node: int, model: dict[str, np.ndarray], rows: np.ndarray, seed: int = 0) -> Any:
        reply = send(grid, node, "query.evaluate", server_cfg, task=ConfigRecord({"seed": seed}),
                     model=ArrayRecord({k: Array(np.ascontiguousarray(v, np.float32)) for k, v in model.items()}),
                     rows=ArrayRecord({"rows": Array(np.asarray(rows, np.int64))}))
        if reply.has_error():
            return str(reply.error.reason)
        if "answer" in reply.content.array_records:
            return {k: a.numpy().copy() for k, a in reply.content.array_records["answer"].items()}
        return reply.content.array_records["counts"]["confusion"].numpy().copy()

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        node = _wait_for_nodes(grid, cfg.federation.num_clients)[0]
        honest = upload(grid, node, server_cfg)
        out["honest"] = arrays(honest)
        out["honest_ledger"] = dict(honest.content.config_records.get("ledger") or {}) if not honest.has_error() \
            else {}
        none = dataclasses.replace(server_cfg, privacy=dataclasses.replace(server_cfg.privacy, mechanism="none",
                                                                           label_epsilon=0.0))
        out["none"] = arrays(upload(grid, node, none))
        weak = dataclasses.replace(server_cfg, privacy=dataclasses.replace(server_cfg.privacy, epsilon=100.0))
        out["weak"] = arrays(upload(grid, node, weak))
        other = dataclasses.replace(server_cfg, privacy=dataclasses.replace(server_cfg.privacy, mechanism="gaussian"))
        out["other"] = arrays(upload(grid, node, other))
        out["repeats"] = [arrays(upload(grid, node, server_cfg)) for _ in range(REPEATS)]  # replay / averaging
        out["new_seeds"] = [arrays(upload(grid, node, server_cfg, seed=s)) for s in range(1, 4)]
        rows = out["honest"]["rows"] if isinstance(out["honest"], dict) else np.zeros(0, np.int64)
        out["rows"] = rows
        # the clean-data oracle: constant models on ONE target record (label), a one-hot threshold (sign, bisection)
        dim = int(out["honest"]["features"].shape[1]) if isinstance(out["honest"], dict) else 1
        k = 2

        def const(c: int) -> dict[str, np.ndarray]:
            return {"mean": np.zeros(dim), "std": np.ones(dim), "weight_0": np.zeros((k, dim)),
                    "bias_0": np.eye(k)[c]}

        def threshold(j: int, t: float) -> dict[str, np.ndarray]:  # predicts 1 iff x_j > t
            w = np.zeros((k, dim))
            w[1, j] = 1.0
            return {"mean": np.zeros(dim), "std": np.ones(dim), "weight_0": w, "bias_0": np.array([0.0, -t])}

        targets = rows[:10]
        out["label_answers"] = [(evaluate(grid, node, const(0), [r]), evaluate(grid, node, const(1), [r]))
                                for r in targets]
        lo, hi = -1.0, 1.0
        target = int(rows[0]) if len(rows) else 0
        answers = []
        for _ in range(BISECTION):
            mid = (lo + hi) / 2
            a = evaluate(grid, node, threshold(0, mid), [target])
            answers.append(a)
            says_above = isinstance(a, np.ndarray) and int(a[:, 1].sum()) == 1
            lo, hi = (mid, hi) if says_above else (lo, mid)
        out["bisection"] = (lo + hi) / 2
        out["bisection_answers"] = answers
        out["target"] = target
        out["row_targeting"] = evaluate(grid, node, const(0), [target])
        out["evaluate_other_seed"] = evaluate(grid, node, const(0), [target], seed=5)
        # harvesting Phase A: a train message asking for this client's update of a real global model (a small
        # trunk encoder built exactly as the honest server builds it)
        harvest = ExperimentConfig.from_flat({"train.rounds": 1, "train.hidden": 16}, server_cfg)
        flat = {k: v for k, v in harvest.to_flat().items() if not k.startswith("client.")}
        spec = spec_from(pipeline.prepare(harvest, features="none"))
        initial = trainable_state(build_model(harvest.train, spec, torch.Generator().manual_seed(0)))
        out["phase_a_global"] = initial
        out["phase_a_updates"] = []
        for target_node in _wait_for_nodes(grid, cfg.federation.num_clients):
            msg = Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in initial.items()}),
                                      "config": ConfigRecord({**flat, "server-round": 1})}),
                          dst_node_id=target_node, message_type="train")
            (reply,) = list(grid.send_and_receive([msg], timeout=120))
            out["phase_a_updates"].append(
                str(reply.error.reason) if reply.has_error() else
                {k: a.numpy().copy() for k, a in reply.content.array_records["arrays"].items()})
        out["phase_a"] = next((r for r in out["phase_a_updates"] if isinstance(r, str)), "answered")

    policy = ClientPolicy.from_points([cfg]).to_json()
    init_args: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False,
                                 "num_cpus": os.cpu_count() or 1, "num_gpus": 0}
    simulation.init_ray(init_args, policy=policy, state_dir=state_dir)
    run_simulation(server_app=app, client_app=build_app(defend=defend), num_supernodes=cfg.federation.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0}, "init_args": init_args})
    return out


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = _config(cache)
    state = str(tmp_path_factory.mktemp("state-defended"))
    defended = _run(cfg, True, state)
    defended["state_dir"] = state
    old = _run(cfg, False, str(tmp_path_factory.mktemp("state-old")))
    data = ClientData.load(defended["snapshot"])
    return cfg, defended, old, data


def _clean(data: ClientData, rows: np.ndarray) -> np.ndarray:
    return np.asarray(data.features[np.asarray(rows)], np.float64)


def _clipped(cfg: ExperimentConfig, x: np.ndarray) -> np.ndarray:
    mech = mechanism_for(PublicSpec.of(cfg), x.shape[1])
    return np.asarray(mech.expected(x.astype(np.float32)), np.float64)


def test_the_honest_request_is_answered_and_charged(attacks):
    cfg, d, _, data = attacks
    up = d["honest"]
    assert isinstance(up, dict) and len(up["rows"])
    _, counts = np.unique(data.user_of(up["rows"]), return_counts=True)
    # per record: the representation's TRUE epsilon (1, plus the secure sampler's grid rounding) + the label's 1
    assert float(d["honest_ledger"]["charged"]) == pytest.approx(counts.max() * _per_record(cfg, data), rel=1e-12)
    assert float(d["honest_ledger"]["ledger-max"]) <= CAP


def test_requests_for_no_privacy_a_weaker_epsilon_or_another_mechanism_are_refused(attacks):
    cfg, d, old, data = attacks
    for key in ("none", "weak", "other"):
        assert isinstance(d[key], str) and d[key].startswith("refused:"), (key, d[key])
    # power: the old client obeys, and mechanism none sends the clean (clipped) representation
    clean = _clipped(dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, mechanism="none")),
                     _clean(data, old["none"]["rows"]))
    np.testing.assert_allclose(old["none"]["features"], clean, atol=1e-6)
    assert isinstance(old["weak"], dict) and isinstance(old["other"], dict)


def test_requerying_returns_the_stored_answer_and_averaging_gains_nothing(attacks):
    cfg, d, old, data = attacks
    for rep in d["repeats"]:  # the same (point, seed, round): the same answer, not fresh noise
        for k in ("features", "labels", "rows"):
            np.testing.assert_array_equal(rep[k], d["honest"][k])
    assert all(isinstance(s, str) and s.startswith("refused:") for s in d["new_seeds"])  # other repetitions
    clean = _clipped(cfg, _clean(data, d["honest"]["rows"]))
    one = np.abs(d["honest"]["features"] - clean).mean()
    avg = np.abs(np.mean([r["features"] for r in d["repeats"]], axis=0) - clean).mean()
    assert avg == pytest.approx(one)  # residual stays at the noise scale
    # power: the old client answers with fresh noise; averaging REPEATS answers shrinks the residual ~ sqrt(n)
    # (each simulation's first node may hold another partition: every check uses that run's own rows)
    old_clean = _clipped(cfg, _clean(data, old["honest"]["rows"]))
    old_one = np.abs(old["honest"]["features"] - old_clean).mean()
    old_avg = np.abs(np.mean([r["features"] for r in old["repeats"]], axis=0) - old_clean).mean()
    assert old_avg < old_one / np.sqrt(REPEATS) * 1.5
    # label RR averaged by majority: labels right far above the RR rate without the defence
    old_y = np.asarray(data.labels)[old["honest"]["rows"]]
    old_major = (np.mean([r["labels"] for r in old["repeats"]], axis=0) > 0.5).astype(int)
    assert (old_major == old_y).mean() > 0.95
    y = np.asarray(data.labels)[d["honest"]["rows"]]
    def_major = (np.mean([r["labels"] for r in d["repeats"]], axis=0) > 0.5).astype(int)
    keep = np.e / (1 + np.e)  # binary RR at epsilon 1: 0.731
    n = len(y)
    assert abs((def_major == y).mean() - keep) < 4 * np.sqrt(keep * (1 - keep) / n)


def test_the_evaluate_oracle_gives_no_label_sign_or_value(attacks):
    cfg, d, old, data = attacks
    # old: a constant model on one target row returns its true label (that run's own targets)
    old_y = np.asarray(data.labels)[old["rows"][:10]]
    guess_old = np.array([int(np.argmax(a0.sum(axis=1))) for a0, _ in old["label_answers"]])
    assert (guess_old == old_y).all()
    # defended: one answer per (point, seed) over ALL the client's test records: every later request gets the
    # same stored answer, whatever the model or rows
    first = d["label_answers"][0][0]
    assert isinstance(first, dict) and int(first["n"][0]) >= cfg.client.min_count
    for a0, a1 in d["label_answers"]:
        for a in (a0, a1):
            assert {k: v.tolist() for k, v in a.items()} == {k: v.tolist() for k, v in first.items()}
    for a in [*d["bisection_answers"], d["row_targeting"]]:
        assert {k: v.tolist() for k, v in a.items()} == {k: v.tolist() for k, v in first.items()}
    assert isinstance(d["evaluate_other_seed"], str) and d["evaluate_other_seed"].startswith("refused:")
    # bisection: old recovers the coordinate to ~2^-24 of the search interval; defended learns nothing
    x0 = float(_clipped(cfg, _clean(data, [d["target"]]))[0, 0])
    old_x0 = float(_clipped(cfg, _clean(data, [old["target"]]))[0, 0])
    assert abs(old["bisection"] - old_x0) < 1e-6
    assert abs(d["bisection"] - x0) > 1e-3 or abs(x0 - (-1.0)) < 1e-3  # always "not above": pinned at the bottom
    # row targeting: the old client evaluated the one row the server listed
    assert int(old["row_targeting"].sum()) == 1


def test_phase_a_updates_are_refused_under_a_finite_cap(attacks):
    _, d, old, _ = attacks
    # the entry runs no Phase A (train.rounds is pinned), so the request names no entry of the policy
    assert d["phase_a"] in ("refused: policy mismatch", "refused: phase a not allowed"), d["phase_a"]
    assert all(isinstance(r, str) and r.startswith("refused:") for r in d["phase_a_updates"])
    # the power: the obedient client hands over its update of the real global model, in the clear; each client's
    # differs from the global model and from the other's (a function of its own users' texts and labels)
    assert old["phase_a"] == "answered"
    g = old["phase_a_global"]
    deltas = [np.concatenate([(u[k] - g[k]).ravel() for k in g]) for u in old["phase_a_updates"]]
    assert all(np.isfinite(dv).all() and np.abs(dv).max() > 1e-4 for dv in deltas)
    assert np.abs(deltas[0] - deltas[1]).max() > 1e-4


def test_the_ledger_never_exceeds_the_cap_and_persists(attacks):
    cfg, d, _, data = attacks
    from fl_privtext.client import Ledger

    scope = ClientPolicy.from_points([cfg]).entries[0].scope
    assert scope == d["honest_ledger"]["scope"]
    # the attacked node's ledger, read back from its state directory (what a restarted client would read)
    node = next(c for c in range(cfg.federation.num_clients) if np.isin(d["honest"]["rows"], data.shards[c]).all())
    ids, totals = Ledger(d["state_dir"], node, scope).totals()
    assert totals.max() <= CAP
    # exactly: the honest upload (1 + 1 per record) plus ONE on-device answer (1 per test record); nothing else
    rows = np.asarray(data.shards[node])
    expected = np.zeros(len(ids))
    u, c = np.unique(data.user_of(rows), return_counts=True)
    expected[np.searchsorted(ids, u)] += _per_record(cfg, data) * c
    test_rows = rows[np.asarray(data.test)[rows]]
    u, c = np.unique(data.user_of(test_rows), return_counts=True)
    expected[np.searchsorted(ids, u)] += 1.0 * c
    np.testing.assert_allclose(totals, expected)
