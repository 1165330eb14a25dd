"""The orchestrator: the one place that calls the stages in data-flow order (data -> extract -> privacy -> client ->
federation -> server -> attacks -> report), and the only package allowed to import a stage above another.

`preparation` derives what both sides know from the config (dataset, roles, shards, cached features); `point` runs
one experiment point over any transport (the Flower adapters of `fl_privtext.federation`, or the plain in-process
loop `run_plain`); `secure` is the same point in the secure-aggregation mode (``server.aggregate = secagg``).
"""

from fl_privtext.client import UPLOAD_KEYS
from fl_privtext.pipeline.point import (
    EXACT_BY,
    EXACT_INTERVAL,
    Collected,
    CollectRound,
    Observed,
    OnDeviceRound,
    OnRound,
    Round,
    attack,
    attacked_uploads,
    collect_point,
    evaluate_point,
    exact_candidates,
    exact_on_device,
    on_device,
    on_device_seed,
    on_device_wanted,
    plain_on_device,
    referee_rows,
    run_plain,
    run_point,
    server_users,
    shipped_model,
    shuffled,
    train_point,
)
from fl_privtext.pipeline.preparation import Prepared, data_key, load, prepare
from fl_privtext.server import Trained

__all__ = [
    "EXACT_BY", "EXACT_INTERVAL", "UPLOAD_KEYS", "CollectRound", "Collected", "Observed", "OnDeviceRound", "OnRound",
    "Prepared", "Round", "Trained", "attack", "attacked_uploads", "collect_point", "data_key", "evaluate_point",
    "exact_candidates", "exact_on_device", "load", "on_device", "on_device_seed", "on_device_wanted",
    "plain_on_device", "prepare", "referee_rows", "run_plain", "run_point", "server_users", "shipped_model",
    "shuffled", "train_point",
]
