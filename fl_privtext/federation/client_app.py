"""The ClientApp: a virtual client holding a shard of users, privatizing their representations before upload.

The server's query carries the experiment config (so `run_simulation`, `flwr run` and deployment behave alike) and
the (seed, round); the client finds its users from its ``partition-id``, privatizes them in batches on this side
and replies with the privatized features, the (optionally randomized) labels and the row ids. Nothing else leaves.
"""

from __future__ import annotations

import functools
import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline import Prepared, client_upload, prepare

app = ClientApp()


@functools.lru_cache(maxsize=2)
def _prepared(flat_items: tuple) -> Prepared:
    # Long-lived Ray actors reuse this: the dataset, shards and memory-mapped features load once per actor.
    return prepare(ExperimentConfig.from_flat(dict(flat_items)), features="cached")


def _prep_key(cfg: ExperimentConfig) -> tuple:
    # Only what determines data, roles, shards and features (not epsilon), so a sweep reuses one Prepared.
    flat = cfg.to_flat()
    keep = ("data.", "extractor.", "federation.num-clients", "federation.partition", "federation.alpha", "run.seed")
    return tuple(sorted((k, v) for k, v in flat.items() if k.startswith(keep)))


@app.query("prepare")
def warm_up(msg: Message, context: Context) -> Message:
    """Load the dataset, shards and cached features into this actor before the first upload round."""
    t0 = time.perf_counter()
    _prepared(_prep_key(ExperimentConfig.from_flat(dict(msg.content.config_records["config"]))))
    return Message(RecordDict({"stats": MetricRecord({"prepare_s": time.perf_counter() - t0})}), reply_to=msg)


@app.query("upload")
def upload(msg: Message, context: Context) -> Message:
    cfg = ExperimentConfig.from_flat(dict(msg.content.config_records["config"]))
    task = msg.content.config_records["task"]
    client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    num_partitions = int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    if num_partitions != cfg.federation.num_clients:
        raise ValueError(
            f"This SuperNode says num-partitions={num_partitions} but federation.num-clients="
            f"{cfg.federation.num_clients}; start the federation with as many SuperNodes as clients."
        )
    t0 = time.perf_counter()
    prep = _prepared(_prep_key(cfg))
    t1 = time.perf_counter()
    up = client_upload(prep, client, int(task["round"]), int(task["seed"]), cfg)  # type: ignore[arg-type]
    t2 = time.perf_counter()
    content = RecordDict(
        {
            "upload": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in up.arrays().items()}),
            "stats": MetricRecord({"num_uploads": len(up.rows), "input_dim": up.input_dim,
                                   "prepare_s": t1 - t0, "privatize_s": t2 - t1}),
        }
    )
    return Message(content, reply_to=msg)
