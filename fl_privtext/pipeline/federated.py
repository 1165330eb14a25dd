"""The orchestrator's side of the Flower path: the order in which one point's traffic and computation run
(`serve_point`), over the transport the Flower adapters offer (`fl_privtext.federation.server_app.PointTransport`),
and `serve`, the server loop with it (the ClientApp with the orchestrator's data preparation is
`fl_privtext.pipeline.clients.build_app`).

The adapters in `fl_privtext.federation` never call up into this package: `serve` hands them `serve_point`, and the
ClientApp gets `fl_privtext.pipeline.prepare` through its data mod (`fl_privtext.federation.client_data`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fl_privtext.config import ExperimentConfig
from fl_privtext.federation import server_app
from fl_privtext.federation.server_app import Job, PointTransport
from fl_privtext.pipeline import secure
from fl_privtext.pipeline.point import collect_point, evaluate_point, on_device, on_device_wanted, train_point
from fl_privtext.pipeline.preparation import prepare


def serve_point(t: PointTransport) -> Job:
    """One experiment point's traffic (every seed, every round) now; returns the computation still to do on it:
    train and evaluate on what the server received, attack what the eavesdropper observed.
    ``server.aggregate = secagg``: the secure-aggregation mode (`fl_privtext.pipeline.secure.serve_point`): no
    uploads at all, one secure sum of noisy class statistics per seed."""
    cfg = t.cfg
    if cfg.server.aggregate == "secagg":
        return secure.serve_point(t)
    prep = prepare(cfg, features="none")  # the server knows users and roles, never texts or features
    t.shuffle(prep.roles)
    training = t.train_encoder(prep)
    collected = collect_point(cfg, t.collect_round, t.eavesdrop, start_seed=t.start_seed, on_round=t.on_round)
    trained = answers = None
    if on_device_wanted(prep, cfg):  # the model must reach the clients while the federation runs
        trained = train_point(prep, cfg, collected)
        answers = on_device(prep, cfg, collected, trained, t.evaluate_round)

    def evaluate() -> dict[str, Any]:
        point = evaluate_point(prep, cfg, collected, trained, answers, phase_a_central=training.get("central"))
        point["training"] = training
        t.keep(point)
        return point

    return evaluate


def serve(grid: Any, points: Sequence[ExperimentConfig], **kwargs: Any) -> list[Any]:
    """Every point through the same federation (`fl_privtext.federation.server_app.serve`), in `serve_point`'s
    order; keyword arguments as there."""
    return server_app.serve(grid, points, run_point=serve_point, **kwargs)
