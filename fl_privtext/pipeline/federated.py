"""The orchestrator's side of the Flower path: the order in which one point's traffic and computation run
(`serve_point`), over the transport the Flower adapters offer (`fl_privtext.federation.server_app.PointTransport`),
and `serve`, the server loop with it (the ClientApp with the orchestrator's data preparation is
`fl_privtext.pipeline.clients.build_app`).

The adapters in `fl_privtext.federation` never call up into this package: `serve` hands them `serve_point`, and the
ClientApp gets `fl_privtext.pipeline.prepare` through its data mod (`fl_privtext.federation.client_data`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fl_privtext.config import ExperimentConfig
from fl_privtext.federation import server_app
from fl_privtext.federation.server_app import Job, PointTransport
from fl_privtext.pipeline import secure
from fl_privtext.pipeline.point import collect_point, evaluate_point, on_device, on_device_wanted, train_point
from fl_privtext.pipeline.preparation import prepare
from fl_privtext.traffic import traffic_key


@dataclass
class Traffic:
    """One point's traffic as the server holds it once the federation has answered: the prepared split, Phase A's
    record, every seed's collection and, where the on-device round ran, the server's models and the clients'
    answers. `SharedTraffic` hands one to every point of its `fl_privtext.traffic.traffic_key`."""

    t: PointTransport
    prep: Any
    training: dict[str, Any]
    collected: list[Any]
    trained: list[Any] | None = None
    answers: list[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def models(self, cfg: ExperimentConfig) -> list[Any]:
        """The server's models, trained once (by the first computation to need them: a worker thread)."""
        with self.lock:
            if self.trained is None:
                self.trained = train_point(self.prep, cfg, self.collected)
            return self.trained

    def evaluate(self, cfg: ExperimentConfig) -> dict[str, Any]:
        """``cfg``'s computation on this traffic: the server's evaluation, the eavesdropper's attacks."""
        t0 = time.perf_counter()
        trained = self.models(cfg)
        train_s = time.perf_counter() - t0  # the server's time on this point counts its training (when it ran here)
        point = evaluate_point(self.prep, cfg, self.collected, trained, self.answers,
                               phase_a_central=self.training.get("central"))
        point["server_s"] += train_s
        point["training"] = dict(self.training)
        self.t.keep(point)
        return point


def collect_traffic(t: PointTransport) -> Traffic:
    """One point's traffic (every seed, every round) now, and the on-device round that must reach the clients while
    the federation runs."""
    cfg = t.cfg
    prep = prepare(cfg, features="none")  # the server knows users and roles, never texts or features
    t.shuffle(prep.roles)
    training = t.train_encoder(prep)
    traffic = Traffic(t, prep, training, collect_point(cfg, t.collect_round, t.eavesdrop, start_seed=t.start_seed,
                                                       on_round=t.on_round))
    if on_device_wanted(prep, cfg):  # the model must reach the clients while the federation runs
        traffic.trained = train_point(prep, cfg, traffic.collected)
        traffic.answers = on_device(prep, cfg, traffic.collected, traffic.trained, t.evaluate_round)
    return traffic


def serve_point(t: PointTransport) -> Job:
    """One experiment point's traffic (every seed, every round) now; returns the computation still to do on it:
    train and evaluate on what the server received, attack what the eavesdropper observed.
    ``server.aggregate = secagg``: the secure-aggregation mode (`fl_privtext.pipeline.secure.serve_point`): no
    uploads at all, one secure sum of noisy class statistics per seed."""
    if t.cfg.server.aggregate == "secagg":
        return secure.serve_point(t)
    traffic = collect_traffic(t)
    return lambda: traffic.evaluate(t.cfg)


class SharedTraffic:
    """`serve_point` for many points, collecting once per `fl_privtext.traffic.traffic_key` (issue #38): points that differ only in the
    eavesdropper's settings run each its attack on the same observed traffic. The eavesdropper is passive, so this
    releases nothing new and charges no ledger (a second collection would have been the clients' replay of the same
    uploads and answers: the same release keys). A traffic is dropped when the computation of its last point is done
    (a sweep serves the points that share one next to each other, `fl_privtext.sweep.run_stored`). Points that differ
    in anything else, ``server.*`` included, are collected apart; secure-aggregation points are never shared."""

    def __init__(self, points: Sequence[ExperimentConfig]):
        self.left = Counter(traffic_key(c.to_flat()) for c in points)  # points of each traffic not yet computed
        self.held: dict[str, Traffic] = {}
        self.lock = threading.Lock()

    def serve_point(self, t: PointTransport) -> Job:
        key = traffic_key(t.cfg.to_flat())
        with self.lock:
            traffic = self.held.get(key)
            alone = traffic is None and self.left[key] < 2
        if t.cfg.server.aggregate == "secagg" or alone:
            return serve_point(t)
        if traffic is None:
            traffic = collect_traffic(t)
            with self.lock:
                self.held[key] = traffic

        def evaluate() -> dict[str, Any]:
            try:
                return traffic.evaluate(t.cfg)
            finally:
                with self.lock:
                    self.left[key] -= 1
                    if self.left[key] == 0:
                        self.held.pop(key, None)

        return evaluate


def serve(grid: Any, points: Sequence[ExperimentConfig], **kwargs: Any) -> list[Any]:
    """Every point through the same federation (`fl_privtext.federation.server_app.serve`), in `serve_point`'s
    order, points that differ only in ``attack.*`` on one collection (`SharedTraffic`); keyword arguments as
    there."""
    return server_app.serve(grid, points, run_point=SharedTraffic(points).serve_point, **kwargs)
