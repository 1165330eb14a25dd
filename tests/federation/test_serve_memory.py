"""The server loop's memory across the points of one federation (`fl_privtext.federation.server_app.serve`).

A point's uploads live until the server's computation of that point is done. When the computation is slower than
the traffic (OME's 3,840-bit uploads, 10 epochs per seed), a sweep must not run ahead collecting point after point:
that kept every collected point's uploads queued (the driver reached 18 GB after 4 points of the OME Intent sweep).

The clients here are the real ClientApp (`fl_privtext.federation.client_app.app`, its handlers and mods), reached
through an in-process Grid that answers each query as it is pushed; the server's computation is handed to an
executor that runs a job only when its result is asked for (the slowest server possible), so what the loop keeps
alive is decided by the loop alone, not by timing.
"""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import pytest
from flwr.app import Context, Message, RecordDict

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.eavesdropper import EavesdroppingGrid
from fl_privtext.federation.server_app import Job, transport
from fl_privtext.pipeline.clients import app as client_app
from fl_privtext.pipeline.federated import serve, serve_point
from tests.federation.grids import PushPullGrid

CLIENT_SEED = 604_918_273
NUM_CLIENTS = 2


class _InProcessGrid(PushPullGrid):
    """Answers each pushed query at once with the real ClientApp of its node (partition = node id - 1)."""

    def __init__(self, num_nodes: int) -> None:
        self.nodes = list(range(1, num_nodes + 1))
        self.replies: dict[str, Message] = {}
        self._ids = itertools.count()

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = f"m{next(self._ids)}"
            msg.metadata.__dict__["_message_id"] = mid
            node = msg.metadata.dst_node_id
            context = Context(run_id=1, node_id=node, state=RecordDict(), run_config={}, node_config={
                "partition-id": node - 1, "num-partitions": len(self.nodes), "client-seed": CLIENT_SEED})
            self.replies[mid] = client_app(msg, context)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(mid) for mid in list(message_ids) if mid in self.replies]




class _OnDemand(Future):  # type: ignore[type-arg]
    """A Future whose job runs only when its result is asked for: a server that never catches up on its own."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self._job: Job | None = job

    def result(self, timeout: float | None = None) -> Any:
        if self._job is not None:
            job, self._job = self._job, None  # drop the job (and the uploads its closure holds) once it ran
            try:
                self.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - delivered through the Future, as an executor does
                self.set_exception(exc)
        return super().result(timeout)


@pytest.fixture(autouse=True)
def _client_policy(points, monkeypatch, tmp_path):
    # the clients' own policy (issue #22): what a simulation's workers get in their environment
    from fl_privtext.client import POLICY_ENV, STATE_ENV, ClientPolicy

    monkeypatch.setenv(POLICY_ENV, ClientPolicy.from_points(points).to_json())
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "client-state"))


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    # Messages are built by a running ServerApp, whose process knows its run; stand in for it here
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)


@pytest.fixture(scope="module")
def points(cache_dir) -> list[ExperimentConfig]:
    base = ExperimentConfig.from_flat({
        "privacy.mechanism": "ome", "privacy.lam": 100.0, "federation.num-clients": NUM_CLIENTS,
        "server.epochs": 1, "server.on-device": False, "attack.enabled": False, "run.seeds": 2,
        "server.learner": "centroid", "run.baseline": False,
        "run.progress": False, "extractor.cache-dir": str(cache_dir)})
    pipeline.prepare(base, features="extract")  # the clients read the cached features (as after the driver's fill)
    return [ExperimentConfig.from_flat({"privacy.epsilon": e}, base) for e in (0.5, 1.0, 2.0, 4.0, 8.0)]


def test_a_slow_server_keeps_the_uploads_of_at_most_one_point_besides_the_one_in_traffic(points):
    uploads: dict[int, list[weakref.ref[Any]]] = {}  # point -> its rounds' uploads (what the server received)
    alive_at_start: list[tuple[int, list[int]]] = []

    def on_round(i: int, seed: int, rnd: int, arrived: pipeline.Round, seconds: float) -> None:
        if i not in uploads:  # point i's first round is in: which earlier points still hold their uploads
            gc.collect()
            alive_at_start.append((i, [p for p, refs in uploads.items() if any(r() is not None for r in refs)]))
        uploads.setdefault(i, []).append(weakref.ref(arrived.uploads["features"]))

    out = serve(_InProcessGrid(NUM_CLIENTS), points, submit=_OnDemand, on_round=on_round)
    # the traffic of point i waited for the computation of point i-2: only point i-1 is still pending
    assert alive_at_start == [(0, []), (1, [0]), (2, [1]), (3, [2]), (4, [3])]
    results = [f.result() for f in out]
    assert [r["per_seed"][0]["output_dim"] for r in results] == [50 * 10] * len(points)  # OME: 50 dims x 10 bits
    gc.collect()
    assert all(r() is None for refs in uploads.values() for r in refs)


def test_the_eavesdroppers_recording_is_empty_once_a_point_is_collected(points):
    eaves = EavesdroppingGrid(_InProcessGrid(NUM_CLIENTS))
    evaluate = serve_point(transport(eaves, points[0]))
    assert eaves.observations == []  # its uploads are in the point's Observed; the messages' copies are released
    point = evaluate()
    assert [s["messages_observed"] for s in point["per_seed"]] == [NUM_CLIENTS] * points[0].run.seeds
    assert [s["uploads_observed"] for s in point["per_seed"]] == [s["uploads_received"] for s in point["per_seed"]]


def test_how_far_the_server_lags_does_not_change_the_results(points):
    at_once = serve(_InProcessGrid(NUM_CLIENTS), points[:3])  # computed right after each point's traffic
    lagging = [f.result() for f in serve(_InProcessGrid(NUM_CLIENTS), points[:3], submit=_OnDemand)]
    for a, b in zip(at_once, lagging, strict=True):
        assert [s["utility"] for s in a["per_seed"]] == [s["utility"] for s in b["per_seed"]]
        assert a["privacy"] == b["privacy"]


def test_streamed_uploads_give_the_plain_loops_results_at_two_chunk_sizes(points, monkeypatch):
    """Issue #38: each reply's representations are spilled to disk as it arrives, merged into row order and read
    back by the server and the eavesdropper in chunks of `fl_privtext.memory.CHUNK_ROWS` rows. The chunk size must
    not change a number: at 3 rows (many short chunks, the last one short) and at the default, the served point
    equals the plain in-memory loop (same client seed), training and attacks."""
    import numpy as np

    from fl_privtext import memory

    cfg = ExperimentConfig.from_flat({"run.client-seed": CLIENT_SEED, "attack.enabled": True,
                                      "attack.families": "logistic", "attack.extra": False, "attack.epochs": 3},
                                     points[0])
    plain = pipeline.run_plain(cfg)["per_seed"]
    for chunk in (3, memory.CHUNK_ROWS):
        monkeypatch.setattr(memory, "CHUNK_ROWS", chunk)
        mapped: list[bool] = []
        t = transport(EavesdroppingGrid(_InProcessGrid(NUM_CLIENTS)), cfg,
                      on_round=lambda seed, rnd, r, dt, mapped=mapped: mapped.append(
                          isinstance(r.uploads["features"], np.memmap)))
        served = serve_point(t)()["per_seed"]
        assert mapped == [True] * cfg.run.seeds  # the streaming path ran: the server's uploads are a file's map
        for fl, pl in zip(served, plain, strict=True):
            assert fl["utility"] == pl["utility"], chunk
            assert fl["attacks"] == pl["attacks"], chunk
