"""The orchestrator: the one place that calls the stages in data-flow order (data -> extract -> privacy -> client ->
federation -> server -> attacks -> report), and the only package allowed to import a stage above another.

`preparation` derives what both sides know from the config (dataset, roles, shards, cached features); `point` runs
one experiment point over any transport (the Flower adapters of `fl_privtext.federation`, or the plain in-process
loop `run_plain`); `secure` is the same point in the secure-aggregation mode (``server.aggregate = secagg``);
`federated` orders a point's Flower traffic, `runner` runs points in one simulation, `clients` / `apps` are the
Flower apps with the orchestrator inside.

The names below are the package's face (``pipeline.prepare``, ``pipeline.run_plain``, ``pipeline.attack``, ...),
each defined in the stage that owns it and resolved on first use:
a light submodule (`clients`, which every Ray actor imports before its first reply) must not pull torch and HF
datasets through this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fl_privtext.attacks.eavesdropper import attack, attacked_uploads
    from fl_privtext.client import UPLOAD_KEYS
    from fl_privtext.pipeline.point import (
        Collected,
        collect_point,
        evaluate_point,
        on_device,
        on_device_wanted,
        plain_on_device,
        run_plain,
        run_point,
        train_point,
    )
    from fl_privtext.pipeline.preparation import Prepared, data_key, load, prepare
    from fl_privtext.report.referee import EXACT_BY, EXACT_INTERVAL, exact_candidates, exact_on_device
    from fl_privtext.report.summaries import referee_rows, shuffled
    from fl_privtext.server import Trained
    from fl_privtext.server.ondevice import OnDeviceRound, on_device_seed, shipped_model
    from fl_privtext.server.pseudonyms import server_users
    from fl_privtext.traffic import CollectRound, Observed, OnRound, Round

# name -> the module that defines it
_FACE: dict[str, str] = {
    "UPLOAD_KEYS": "fl_privtext.client",
    "Trained": "fl_privtext.server",
    "CollectRound": "fl_privtext.traffic",
    "Observed": "fl_privtext.traffic",
    "OnRound": "fl_privtext.traffic",
    "Round": "fl_privtext.traffic",
    "EXACT_BY": "fl_privtext.report.referee",
    "EXACT_INTERVAL": "fl_privtext.report.referee",
    "Collected": "fl_privtext.pipeline.point",
    "OnDeviceRound": "fl_privtext.server.ondevice",
    "attack": "fl_privtext.attacks.eavesdropper",
    "attacked_uploads": "fl_privtext.attacks.eavesdropper",
    "collect_point": "fl_privtext.pipeline.point",
    "evaluate_point": "fl_privtext.pipeline.point",
    "exact_candidates": "fl_privtext.report.referee",
    "exact_on_device": "fl_privtext.report.referee",
    "on_device": "fl_privtext.pipeline.point",
    "on_device_seed": "fl_privtext.server.ondevice",
    "on_device_wanted": "fl_privtext.pipeline.point",
    "plain_on_device": "fl_privtext.pipeline.point",
    "referee_rows": "fl_privtext.report.summaries",
    "run_plain": "fl_privtext.pipeline.point",
    "run_point": "fl_privtext.pipeline.point",
    "server_users": "fl_privtext.server.pseudonyms",
    "shipped_model": "fl_privtext.server.ondevice",
    "shuffled": "fl_privtext.report.summaries",
    "train_point": "fl_privtext.pipeline.point",
    "Prepared": "fl_privtext.pipeline.preparation",
    "data_key": "fl_privtext.pipeline.preparation",
    "load": "fl_privtext.pipeline.preparation",
    "prepare": "fl_privtext.pipeline.preparation",
}

__all__ = [
    "EXACT_BY",
    "EXACT_INTERVAL",
    "UPLOAD_KEYS",
    "CollectRound",
    "Collected",
    "Observed",
    "OnDeviceRound",
    "OnRound",
    "Prepared",
    "Round",
    "Trained",
    "attack",
    "attacked_uploads",
    "collect_point",
    "data_key",
    "evaluate_point",
    "exact_candidates",
    "exact_on_device",
    "load",
    "on_device",
    "on_device_seed",
    "on_device_wanted",
    "plain_on_device",
    "prepare",
    "referee_rows",
    "run_plain",
    "run_point",
    "server_users",
    "shipped_model",
    "shuffled",
    "train_point",
]


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'fl_privtext.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value
