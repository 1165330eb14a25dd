"""Phase A through SecAgg+ with client-side noise (`fl_privtext.federation.secagg_train`), through the real ClientApp
on an in-process Grid: the server only holds noisy sums, a client dropping mid-protocol is survived and accounted,
the clients' ledgers charge the distributed-DP epsilon (a plain Phase A update is refused under the same cap)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fl_privtext.client import POLICY_ENV, STATE_ENV, ClientPolicy, Ledger
from fl_privtext.config import ClientConfig, ExperimentConfig
from fl_privtext.federation import secagg
from fl_privtext.federation.client_app import build_app
from fl_privtext.federation.secagg_train import train_phase_secagg
from fl_privtext.privacy.distributed import distributed_guarantee
from tests.federation.secagg_grid import InProcessGrid

NODES = [101, 202, 303, 404]
SETTINGS = {"federation.num-clients": 4, "train.rounds": 2, "train.hidden": 16, "train.batch-size": 64,
            "train.secagg": True, "train.dp-mode": "client", "train.dp-clip": 0.5, "train.dp-noise-multiplier": 4.0,
            "client.secagg-min-clients": 3, "client.max-epsilon": 50.0, "run.progress": False}


@pytest.fixture(scope="module")
def run(cache_dir, tmp_path_factory):
    from flwr.supercore.task_identity import TaskIdentity

    from fl_privtext import pipeline

    cfg = ExperimentConfig.from_flat({**SETTINGS, "extractor.cache-dir": str(cache_dir)})
    pipeline.prepare(cfg, features="extract")  # the clients read the cached features
    state = tmp_path_factory.mktemp("client-state")
    mp = pytest.MonkeyPatch()
    mp.setenv(POLICY_ENV, ClientPolicy.from_points([cfg]).to_json())
    mp.setenv(STATE_ENV, str(state))
    for name in ("_task_id", "_run_id", "_node_id"):
        mp.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)
    inner = secagg.SECAGG_TASKS["phase-a"]

    def drop_404_in_round_2(msg, ctx):  # type: ignore[no-untyped-def]
        if ctx.node_id == 404 and int(msg.content.config_records["config"]["server-round"]) == 2:
            raise RuntimeError("node 404 lost its connection")
        return inner(msg, ctx)

    mp.setitem(secagg.SECAGG_TASKS, "phase-a", drop_404_in_round_2)
    grid = InProcessGrid(build_app(), NODES)
    # the server does not hold the clients' policy: its [client] section is the default (min clients 2)
    out = train_phase_secagg(grid, dataclasses.replace(cfg, client=ClientConfig()))
    yield cfg, out, grid, state
    mp.undo()


def test_rounds_complete_and_a_dropout_is_survived_and_reported(run):
    _, out, _, _ = run
    r1, r2 = out["per_round"]
    assert "aborted" not in r1, r1["aborted"]
    assert r1["contributors"] == NODES and r1["dropped"] == []
    assert r2["contributors"] == [101, 202, 303] and r2["dropped"] == [404] and "lost its connection" in \
        r2["reasons"][404]
    assert out["secagg"]["dropped"] == [404] and out["secagg"]["message_rounds"] == 8
    assert out["noise_added"] == "client" and "before masking" in out["noise_added_where"]


def test_central_epsilon_uses_the_actual_contributors(run):
    cfg, out, _, _ = run
    c = out["central"]
    assert c["against"] == "server" and c["via"] == "secagg" and c["delta"] == cfg.train.dp_delta
    g = out["guarantee"]
    assert g["contributors"] == [4, 3] and g["declared"] == "every contributor declared the same noise"
    # accounted with the clients' own policy (min clients 3), not the server's config (its [client] default is 2)
    assert g["min_clients"] == 3 and g["noise_multiplier"] == 4.0
    assert g["client_charged_per_round"] == [pytest.approx(g["client_charge_per_round"])]
    common = {"noise_multiplier": 4.0, "clip": 0.5, "min_clients": 3, "step": g["grid_step"], "dim": g["dim"],
              "delta": cfg.train.dp_delta}
    assert c["epsilon"] == pytest.approx(distributed_guarantee(contributors=[4, 3], **common)["epsilon"])
    # fewer contributors = less noise = larger epsilon; more = smaller
    assert distributed_guarantee(contributors=[4, 4], **common)["epsilon"] < c["epsilon"] < \
        distributed_guarantee(contributors=[3, 3], **common)["epsilon"]
    # per round with n = m = 3: rho = 2 / z^2, the Gaussian of noise multiplier z/2 (replace-one, sensitivity 2C),
    # as dp_fedavg_guarantee (tau is negligible at sigma ~ 10^5 grid steps)
    from fl_privtext.privacy.distributed import epsilon_of

    assert g["client_charge_per_round"] == pytest.approx(epsilon_of([2 / 4.0**2], cfg.train.dp_delta), rel=1e-6)


def test_the_clients_ledgers_charge_the_distributed_epsilon(run):
    cfg, out, _, state = run
    scope = ClientPolicy.from_points([cfg]).entries[0].scope
    per_round = out["guarantee"]["client_charge_per_round"]
    assert math.isfinite(per_round) and per_round < cfg.client.max_epsilon
    for part, node in enumerate(NODES):
        _, eps = Ledger(state, part, scope).totals()
        rounds = 1 if node == 404 else 2  # 404 dropped in round 2: that release never happened, nothing charged
        assert len(eps) > 0 and np.allclose(eps, rounds * per_round)


def test_the_server_holds_only_masked_vectors(run):
    from flwr.common import bytes_to_ndarray
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    _, _, grid, _ = run
    views = [np.concatenate([bytes_to_ndarray(b).ravel() for b in r.content.config_records[secagg.SECAGG_CONFIGS]
                             [Key.MASKED_PARAMETERS]])[1:].astype(np.float64)
             for r in grid.replies if not r.has_error() and secagg.SECAGG_CONFIGS in r.content.config_records
             and Key.MASKED_PARAMETERS in r.content.config_records[secagg.SECAGG_CONFIGS]]
    assert len(views) == 7  # 4 + 3 masked vectors; no model update in any reply's arrays
    assert all(len(a) == 0 for r in grid.replies if not r.has_error() for a in r.content.array_records.values()
               if r.metadata.message_type == "train")
    for v in views:  # uniform on [0, 2^32): mean 1/2, variance 1/12 of the range
        u = v / 2**32
        assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01


def test_config_rules():
    with pytest.raises(ValueError, match="needs train.secagg"):
        ExperimentConfig.from_flat({"train.dp-mode": "client", "train.dp-clip": 1.0})
    with pytest.raises(ValueError, match="needs train.dp-clip"):
        ExperimentConfig.from_flat({"train.secagg": True})
    with pytest.raises(ValueError, match="dp-mode"):
        ExperimentConfig.from_flat({"train.dp-mode": "both"})
    with pytest.raises(ValueError, match="secagg-min-clients"):
        ExperimentConfig.from_flat({"client.secagg-min-clients": 1})
