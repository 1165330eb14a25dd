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
from fl_privtext.federation.secagg_train import train_phase_secagg
from fl_privtext.pipeline.clients import build_app
from fl_privtext.privacy import PrivacyReport
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
    server = dataclasses.replace(cfg, client=ClientConfig())
    out = train_phase_secagg(grid, server, pipeline.prepare(server, features="none"))
    yield cfg, out, grid, state
    mp.undo()


def test_rounds_complete_and_a_dropout_is_survived_and_reported(run):
    _, out, _, _ = run
    r1, r2 = out["per_round"]
    assert "aborted" not in r1, r1["aborted"]
    assert r1["contributors"] == NODES and r1["dropped"] == []
    assert r2["contributors"] == [101, 202, 303] and r2["dropped"] == [404]
    assert r2["reasons"][404] == "refused: internal error"  # the client's exception text stays on the client
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
    for v in views:  # uniform on [0, 2^32): mean 1/2, variance 1/12 of the range, within 5 standard errors (the
        # masks are the OS's randomness, unseeded: the old fixed bound, 3.3 standard errors, failed once at 3.6)
        u = v / 2**32
        se_mean, se_var = np.sqrt(1 / 12 / len(u)), np.sqrt((1 / 80 - 1 / 144) / len(u))
        assert abs(u.mean() - 0.5) < 5 * se_mean and abs(u.var() - 1 / 12) < 5 * se_var, (u.mean(), u.var())


def test_config_rules():
    with pytest.raises(ValueError, match="needs train.secagg"):
        ExperimentConfig.from_flat({"train.dp-mode": "client", "train.dp-clip": 1.0})
    with pytest.raises(ValueError, match="needs train.dp-clip"):
        ExperimentConfig.from_flat({"train.secagg": True})
    with pytest.raises(ValueError, match="dp-mode"):
        ExperimentConfig.from_flat({"train.dp-mode": "both"})
    with pytest.raises(ValueError, match="secagg-min-clients"):
        ExperimentConfig.from_flat({"client.secagg-min-clients": 1})


PUBLIC_DECLARATIONS = {"noise-multiplier", "clip", "min-clients", "charged"}  # the client's policy, no user data


def test_no_per_client_metric_reaches_the_server_in_the_clear(run):
    """dp-mode = client: the server's Grid receives SecAgg+ protocol messages only; beside each masked vector, a
    constant example count and the client's policy declarations; no validation loss/accuracy, no per-client count."""
    cfg, out, grid, _ = run
    assert {m.metadata.message_type for m in grid.sent} == {"train"}  # no federated validation was asked for
    assert all(secagg.SECAGG_CONFIGS in m.content.config_records for m in grid.sent)
    assert out["federated_validation"].startswith("none: train.dp-mode = client")
    assert out["selected_round"] == cfg.train.rounds and all(r["val_accuracy"] == -1.0 for r in out["per_round"])
    replies = [r for r in grid.replies if not r.has_error()]
    assert len(replies) == 4 * 4 + (4 + 4 + 3 + 3)  # round 1: 4 stages x 4 clients; round 2: 404 fails at stage 3
    for r in replies:
        declared = r.content.config_records.get("fitres.metrics")
        assert declared is None or set(declared) == PUBLIC_DECLARATIONS
        assert set(r.content.metric_records) <= {"fitres.num_examples"}
        assert all(dict(m) == {"num_examples": 1} for m in r.content.metric_records.values())
    # the dropout's reply is the gate's fixed line: no metric, no exception text either
    assert [r.error.reason for r in grid.replies if r.has_error()] == ["refused: internal error"]


def test_a_client_refuses_clear_phase_a_messages_in_client_mode(run):
    """Asked anyway (a server that departs from the protocol), the client refuses both a plain update and
    validation metrics in the clear: only noisy secure sums leave it in this mode."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

    cfg, _, grid, _ = run
    arrays = ArrayRecord({"w": Array(np.zeros(2, np.float32))})
    content = RecordDict({"arrays": arrays, "config": ConfigRecord({**cfg.to_flat(), "server-round": 1})})
    for kind in ("train", "evaluate"):  # straight to the node's ClientApp: the recorded server view stays as it was
        msg = Message(content, dst_node_id=NODES[0], message_type=kind, group_id="clear")
        msg.metadata.__dict__["_message_id"] = f"clear-{kind}"
        reply = grid.app(msg, grid.contexts[NODES[0]])
        assert reply.has_error() and reply.error.reason == "refused: clear release under secure aggregation"


def test_accounting_charges_the_accountants_composed_epsilon_and_the_ledgers_agree(run):
    """results.json's per-user Phase A charge is the accountant's central epsilon of this run (RDP-composed over
    its rounds, each with its actual contributors); the clients' ledgers (basic composition at n = min clients)
    charge at least that, and the summary states their largest total."""
    from fl_privtext import pipeline
    from fl_privtext.privacy.distributed import epsilon_of, round_rho
    from fl_privtext.report.accounting import privacy_summary

    cfg, out, _, state = run
    g, c = out["guarantee"], out["central"]
    rhos = [round_rho(noise_multiplier=4.0, clip=0.5, min_clients=3, contributors=k, step=g["grid_step"],
                      dim=g["dim"]) for k in (4, 3)]
    assert c["epsilon"] == pytest.approx(epsilon_of(rhos, cfg.train.dp_delta))
    prep = pipeline.prepare(cfg, features="none")
    rep = PrivacyReport(mechanism="rr", epsilon_nominal=1.0, epsilon_worst_case=1.0)
    phase_a = np.flatnonzero(prep.roles != "test")
    per_user = privacy_summary(rep, cfg.privacy, cfg.federation, cfg.train, prep.ds.user_index, 0, [], 1,
                               phase_a_rows=phase_a,
                               phase_a_central=c)["composition"]["per_user"]
    assert per_user["max_epsilon_phase_a"] == pytest.approx(c["epsilon"])
    assert per_user["max_epsilon_total"] == pytest.approx(c["epsilon"])  # nothing else released here
    assert per_user["max_delta_phase_a"] == cfg.train.dp_delta
    scope = ClientPolicy.from_points([cfg]).entries[0].scope
    largest = max(float(Ledger(state, part, scope).totals()[1].max()) for part in range(len(NODES)))
    assert c["client_ledger_max_epsilon"] == pytest.approx(largest) == per_user["max_epsilon_phase_a_ledger"]
    assert largest >= c["epsilon"]
