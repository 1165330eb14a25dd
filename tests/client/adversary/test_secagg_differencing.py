"""Secure sums bound to their SecAgg+ session (issue #34 item 4), against an honest-but-curious server that runs
ordinary SecAgg+ sessions (no protocol deviation) over the REAL ClientApp, Flower's SecAgg+ workflow and mod on an
in-process Grid (`InProcessGrid`, no Ray).

The attack: four Phase B statistics sums over the 3-of-4 subsets of four clients. Were each client's stored vector
replayed into every session, T = (S_1 + .. + S_4) / 3 and v_i = T - S_(without i) would give each client's vector
with one noise share only (epsilon 1.83 at t = 3 for the 1.0 charged). It wins against the old key (no participant
set, no unmask record: the ``old_behaviour`` flag reproduces it) and fails now: each session draws fresh noise and
each client's users are charged once per distinct participant set (3 x epsilon), which covers the composition of
the sums they are in. A sum over fewer selected clients than the client's own minimum is refused."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord

from fl_privtext import pipeline
from fl_privtext.client import POLICY_ENV, STATE_ENV, ClientPolicy, Ledger
from fl_privtext.client.aggregate import StatsLayout
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation import secagg, secagg_stats
from fl_privtext.federation.secagg import SECAGG_TASKS, SecAggAborted, secure_sum
from fl_privtext.pipeline.clients import build_app
from tests.federation.secagg_grid import InProcessGrid

NODES = [101, 202, 303, 404]


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)


def _federation(cache_dir, tmp_path, monkeypatch, min_clients: int) -> dict[str, Any]:
    cfg = ExperimentConfig.from_flat({
        "server.aggregate": "secagg", "federation.num-clients": len(NODES), "run.progress": False,
        "run.baseline": False, "extractor.cache-dir": str(cache_dir), "client.secagg-min-clients": min_clients,
        "server.secagg-threshold": min_clients, "client.min-count": 1, "server.learner": "centroid"})
    prep = pipeline.prepare(cfg, features="extract")
    snapshot = str(prep.client.save(tmp_path))
    monkeypatch.setenv(POLICY_ENV, ClientPolicy.from_points([cfg]).to_json())
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    dim = int(prep.extractor.output_dim(paired=prep.ds.text_pair_column is not None))
    layout = StatsLayout(len(prep.ds.label_names), dim)
    captured: dict[tuple[int, int], np.ndarray] = {}  # (session, node) -> the vector the real task put in
    session = [0]
    offline: set[int] = set()  # nodes that fail at the masked-vector stage (after sharing their keys)

    def recording(msg, ctx):  # type: ignore[no-untyped-def]
        if int(ctx.node_id) in offline:
            raise RuntimeError("lost its connection")
        vec = secagg_stats.stats_vector(msg, ctx)
        captured[(session[0], int(ctx.node_id))] = vec
        return vec

    monkeypatch.setitem(SECAGG_TASKS, secagg_stats.TASK, recording)
    return {"cfg": cfg, "prep": prep, "snapshot": snapshot, "layout": layout, "grid": InProcessGrid(build_app(), NODES),
            "captured": captured, "session": session, "state": tmp_path / "state", "offline": offline}


def _session(fed: dict[str, Any], nodes: list[int], promise: int) -> secagg.SecureSum:
    """One ordinary SecAgg+ session of the Phase B task over ``nodes``, the server driving it itself (so the
    server-side check of `secagg_sum_round` does not stand in for the clients')."""
    from fl_privtext.federation.requests import query as _query
    from fl_privtext.pipeline.secure import clipping_range, stats_request

    cfg, layout = fed["cfg"], fed["layout"]
    content = _query(cfg, fed["snapshot"], **{secagg_stats.RECORD: ConfigRecord(stats_request(cfg, 0, layout,
                                                                                                promise))})
    return secure_sum(fed["grid"], nodes, secagg_stats.TASK, content,
                      clipping_range=clipping_range(fed["prep"], layout, cfg), num_shares=len(nodes),
                      reconstruction_threshold=2)


def _old_behaviour(monkeypatch) -> None:
    """The key before the fix (no participant set) and no unmask record: a stored vector replays into any session."""
    monkeypatch.setattr("fl_privtext.client.aggregate.session_key", lambda participants: "")
    monkeypatch.setattr(secagg, "_unmask_check", lambda record, active: None)


def _subset_differencing(fed: dict[str, Any]) -> tuple[dict[int, np.ndarray], dict[int, list[np.ndarray]]]:
    """Four sessions over the 3-of-4 subsets; returns each node's vector as the server reconstructs it by
    subtraction, and the vectors each node really put in (one per session it was in)."""
    sums: dict[int, np.ndarray] = {}
    for i, left_out in enumerate(NODES):
        fed["session"][0] = i
        out = _session(fed, [n for n in NODES if n != left_out], promise=3)
        assert out.contributors == sorted(n for n in NODES if n != left_out) and not out.dropped
        sums[left_out] = out.total
    everyone = sum(sums.values()) / 3
    recovered = {n: everyone - sums[n] for n in NODES}
    real = {n: [v for (_, m), v in sorted(fed["captured"].items()) if m == n] for n in NODES}
    return recovered, real


def _ledger_max(fed: dict[str, Any], node: int) -> float:
    scope = ClientPolicy.from_points([fed["cfg"]]).entry_for(fed["cfg"]).scope
    return Ledger(str(fed["state"]), NODES.index(node), scope).max_total()


@pytest.mark.parametrize("old", [True, False], ids=["old-key-replays", "bound-to-session"])
def test_subset_differencing_isolates_a_client_only_with_the_old_key(cache_dir, tmp_path, monkeypatch, old):
    fed = _federation(cache_dir, tmp_path, monkeypatch, min_clients=3)
    if old:
        _old_behaviour(monkeypatch)
    recovered, real = _subset_differencing(fed)
    eps = fed["cfg"].client.secagg_epsilon
    for n in NODES:
        assert len(real[n]) == 3  # each client was in three sessions
        sigma = float(np.sqrt(real[n][0][-2]))  # the public tail: sigma_share^2
        err = np.abs(recovered[n] - real[n][0]).max()
        if old:
            # one stored vector in all three sessions: recovered exactly, up to SecAgg+'s grid rounding
            assert all(np.array_equal(v, real[n][0]) for v in real[n])
            assert err < 1e-3 * sigma
            assert _ledger_max(fed, n) == pytest.approx(eps)  # charged once, released with one share of noise
        else:
            # a new participant set is a new release: fresh noise in each session, charged each time
            for a, b in itertools.combinations(real[n], 2):
                assert np.abs(a - b).max() > 0.5 * sigma
            assert min(np.abs(recovered[n] - v).max() for v in real[n]) > 0.5 * sigma
            assert _ledger_max(fed, n) == pytest.approx(3 * eps)  # one charge per distinct participant set
    if not old:  # the same set again is the same session's release: replayed, charged nothing more
        fed["session"][0] = 9
        again = _session(fed, [101, 202, 303], promise=3)
        first = NODES.index(404)  # the session that left 404 out
        assert all(np.array_equal(fed["captured"][(9, n)], fed["captured"][(first, n)]) for n in (101, 202, 303))
        assert again.contributors == [101, 202, 303] and _ledger_max(fed, 101) == pytest.approx(3 * eps)


@pytest.mark.parametrize("old", [True, False], ids=["old-no-check", "checked"])
def test_a_stats_sum_over_fewer_clients_than_the_clients_minimum_is_refused(cache_dir, tmp_path, monkeypatch, old):
    """The clients' policy needs 4; the server promises 4 in its request and runs the session over 3."""
    fed = _federation(cache_dir, tmp_path, monkeypatch, min_clients=4)
    if old:  # the Phase B task before the fix: no check of the real number of clients
        monkeypatch.setattr(secagg_stats, "require_contributors", lambda *a, **k: None)
        monkeypatch.setattr(secagg_stats, "unmask_once", lambda *a, **k: None)
        out = _session(fed, NODES[:3], promise=4)
        assert out.contributors == NODES[:3]  # a sum of 3 vectors each calibrated for 4: less noise than charged
        return
    with pytest.raises(SecAggAborted) as info:
        _session(fed, NODES[:3], promise=4)
    assert str(info.value).count("refused: too few contributors") == 3
    assert all(_ledger_max(fed, n) == 0.0 for n in NODES[:3])  # refused before anything is charged


@pytest.mark.parametrize("old", [True, False], ids=["old-no-record", "unmasked-once"])
def test_a_dropout_after_masking_cannot_be_differenced_against_a_full_session(cache_dir, tmp_path, monkeypatch,
                                                                              old):
    """Session 1 over all four: node 404 shares its keys, then fails before its masked vector (a real dropout,
    survived: the sum is over the other three). Session 2 over the same four, 404 back: the others' vectors are the
    same release (same participant set), so the two sums differ by 404's vector alone. Now the others refuse to
    unmask their vector over a second active set."""
    fed = _federation(cache_dir, tmp_path, monkeypatch, min_clients=3)
    if old:
        _old_behaviour(monkeypatch)
    fed["offline"].add(404)
    first = _session(fed, NODES, promise=3)
    assert first.contributors == [101, 202, 303] and first.dropped == [404]
    fed["offline"].clear()
    fed["session"][0] = 1
    if old:
        second = _session(fed, NODES, promise=3)
        v404 = fed["captured"][(1, 404)]
        assert np.abs((second.total - first.total) - v404).max() < 1e-3 * float(np.sqrt(v404[-2]))
        return
    with pytest.raises(SecAggAborted) as info:
        _session(fed, NODES, promise=3)
    assert str(info.value).count("refused: session already answered") == 3
