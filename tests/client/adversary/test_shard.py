"""The client owns its shard (issue #34 item 5): a malicious ServerApp, in a real Flower simulation of the shipped
ClientApp, asks each client for its users' uploads under ANOTHER partition into clients (another
``federation.partition`` or ``run.seed``, with or without a client-data snapshot of that partition, or the honest
request pointing at that snapshot). Before, a client prepared its shard from the request, so the same users were
charged in several clients' ledgers (measured: 779 of 800 users past a cap of 40 summed over four ledgers, none
past 40 in one). Now every such request is refused with ``refused: shard mismatch`` and no user appears in two
ledgers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig

CLIENTS = 4
BASE = {"run.progress": False, "federation.num-clients": CLIENTS, "privacy.label-epsilon": 1.0,
        "client.max-epsilon": 40.0, "client.on-device": False, "run.baseline": False}


def _moved(cfg: ExperimentConfig, **federation: Any) -> ExperimentConfig:
    return dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, **federation))


def _run(cfg: ExperimentConfig, state_dir: str) -> dict[str, Any]:
    from flwr.app import ConfigRecord, Context, Message
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fl_privtext.federation import simulation
    from fl_privtext.federation.requests import query as _query
    from fl_privtext.federation.requests import wait_for_nodes as _wait_for_nodes
    from fl_privtext.pipeline import runner
    from fl_privtext.pipeline.clients import build_app

    simulation.quiet_env()
    server_cfg = runner._server_view(cfg)
    dirichlet = _moved(server_cfg, partition="dirichlet")
    reseeded = dataclasses.replace(server_cfg, run=dataclasses.replace(server_cfg.run, seed=1))
    honest_snapshot, other_snapshot = runner._snapshot(cfg), runner._snapshot(_moved(cfg, partition="dirichlet"))
    requests = {"honest": (server_cfg, honest_snapshot), "dirichlet": (dirichlet, ""),
                "dirichlet+snapshot": (dirichlet, other_snapshot), "swapped snapshot": (server_cfg, other_snapshot),
                "run.seed": (reseeded, "")}
    out: dict[str, Any] = {name: [] for name in requests}
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        for node in _wait_for_nodes(grid, CLIENTS):
            for name, (request, snapshot) in requests.items():
                msg = Message(_query(request, snapshot, task=ConfigRecord({"seed": 0, "round": 0})),
                              dst_node_id=node, message_type="query.upload")
                (reply,) = list(grid.send_and_receive([msg], timeout=120))
                out[name].append(str(reply.error.reason) if reply.has_error() else
                                 reply.content.array_records["upload"]["rows"].numpy().copy())

    init_args: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False,
                                 "num_cpus": os.cpu_count() or 1, "num_gpus": 0}
    simulation.init_ray(init_args, policy=runner._client_policy([cfg]), state_dir=state_dir)
    run_simulation(server_app=app, client_app=build_app(), num_supernodes=CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0}, "init_args": init_args})
    return out


def _charged_users(state_dir: str) -> dict[str, set[int]]:
    """Every user charged in each node's ledgers (all scopes), read from the clients' own state."""
    out: dict[str, set[int]] = {}
    for path in Path(state_dir).glob("node-*/**/ledger.npz"):
        node = path.relative_to(state_dir).parts[0]
        with np.load(path) as z:
            out.setdefault(node, set()).update(int(u) for u, e in zip(z["users"], z["epsilon"], strict=True) if e > 0)
    return out


@pytest.fixture(scope="module")
def shard_attack(tmp_path_factory):
    cfg = ExperimentConfig.from_flat({**BASE, "extractor.cache-dir": str(tmp_path_factory.mktemp("cache"))})
    state = str(tmp_path_factory.mktemp("state"))
    return cfg, _run(cfg, state), state


def test_the_attack_has_power_a_client_preparing_from_the_request_holds_other_clients_users(shard_attack):
    # the old `_data_for` prepared the shard from the request: under the requested partition, client i holds users
    # that the honest partition gives to another client, so they would be charged in two ledgers
    from fl_privtext import pipeline

    cfg, _, _ = shard_attack
    honest = pipeline.prepare(cfg, features="none").client
    moved = pipeline.prepare(_moved(cfg, partition="dirichlet"), features="none").client
    owner = {int(u): i for i, s in enumerate(honest.shards) for u in honest.user_of(s)}
    elsewhere = {int(u) for i, s in enumerate(moved.shards) for u in moved.user_of(s) if owner[int(u)] != i}
    assert len(elsewhere) > len(owner) // 2


def test_a_request_for_another_shard_is_refused_and_no_user_is_charged_in_two_ledgers(shard_attack):
    cfg, out, state = shard_attack
    assert all(isinstance(r, np.ndarray) and len(r) for r in out["honest"]), out["honest"]
    for name in ("dirichlet", "dirichlet+snapshot", "swapped snapshot", "run.seed"):
        assert out[name] == ["refused: shard mismatch"] * CLIENTS, (name, out[name])
    charged = _charged_users(state)
    assert len(charged) == CLIENTS
    nodes = sorted(charged)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            assert not charged[a] & charged[b], (a, b, sorted(charged[a] & charged[b])[:10])
    from fl_privtext import pipeline

    honest = pipeline.prepare(cfg, features="none").client
    assert set().union(*charged.values()) == {int(u) for s in honest.shards for u in honest.user_of(s)}
