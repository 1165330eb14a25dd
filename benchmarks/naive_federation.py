"""The naive Flower design as a baseline for `bench_federation.py --naive-users N`: one SuperNode per user, each
uploading one 384-d L1-Laplace vector, against our design doing the same work (SuperNodes holding shards of users,
queries sent through a bounded window).

Same work in both: user u's representation is the same fixed 384-d vector (a deterministic function of u), privatized
by the platform's `laplace-l1` mechanism at epsilon 1 with the node's own OS-entropy generator, as the platform's
clients do: one call per node (a node of the naive design holds one user; ours privatize a shard in one call). The
server checks that it received every user exactly once, with 384 finite values each.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fl_privtext.privacy import make_mechanism

DIM = 384
EPSILON = 1.0

client_app = ClientApp()


def user_vectors(users: range) -> np.ndarray:
    """(len(users), DIM) float32: user u's fixed representation (cheap, identical whichever node computes it)."""
    u = np.arange(users.start, users.stop, dtype=np.float64)[:, None]
    k = np.arange(1, DIM + 1, dtype=np.float64)[None, :]
    return np.sin(u * 0.618 * k + k).astype(np.float32)


def user_uploads(users: range) -> tuple[np.ndarray, np.ndarray]:
    """The node's users privatized in one mechanism call, and their user ids."""
    # the float sampler, as when the figures in benchmarks/README.md were measured
    mech = make_mechanism("laplace-l1", epsilon=EPSILON, dim=DIM, sampler="float")
    feats = mech.privatize(user_vectors(users), np.random.default_rng())  # OS entropy, as the platform's clients
    return feats.astype(np.float32, copy=False), np.arange(users.start, users.stop, dtype=np.int64)


@client_app.query("ping")
def ping(msg: Message, context: Context) -> Message:
    """The warm-up query: an empty reply, so that every actor has loaded this ClientApp before the timed round."""
    return Message(RecordDict({"pong": ConfigRecord({})}), reply_to=msg)


@client_app.query("upload")
def upload(msg: Message, context: Context) -> Message:
    task = msg.content.config_records["task"]
    users = int(task["users"])  # type: ignore[arg-type]
    part, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    lo, hi = part * users // parts, (part + 1) * users // parts  # contiguous shards; one user each when parts=users
    feats, rows = user_uploads(range(lo, hi))
    return Message(RecordDict({"upload": ArrayRecord({"features": Array(feats), "rows": Array(rows)})}),
                   reply_to=msg)


def complete(parts: list[dict[str, np.ndarray]], users: int) -> bool:
    """Every user's upload arrived exactly once, DIM finite values each."""
    if not parts:
        return False
    rows = np.sort(np.concatenate([p["rows"] for p in parts]))
    feats = np.concatenate([p["features"] for p in parts])
    return bool(np.array_equal(rows, np.arange(users)) and feats.shape == (users, DIM) and np.isfinite(feats).all())


def run(design: str, users: int, nodes: int, window: int) -> dict[str, Any]:
    """One simulation of ``design`` ("naive": Flower's send_and_receive of one query per node, as a plain
    ServerApp would; "ours": ``window`` queries in flight). Returns the number of uploads, completeness and the
    timings in seconds: ``total_s`` (Ray start to shutdown) = ``ray_start_s`` + ``flower_start_s`` (until the
    ServerApp runs: state, node registration) + ``warmup_s`` (one ping per actor: the actors' start-up and
    their first load of the ClientApp, the same in both designs) + ``round_s`` (the first upload query sent to the
    last reply) + ``shutdown_s`` (Flower stops its threads, Ray shuts down) + the ServerApp's own checks."""
    from flwr.simulation import run_simulation

    from fl_privtext.federation.inflight import send_windowed
    from fl_privtext.federation.requests import wait_for_nodes as _wait_for_nodes
    from fl_privtext.federation.simulation import init_ray as _init_ray
    from fl_privtext.federation.simulation import quiet_env as _quiet_env

    _quiet_env()
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        out["flower_start_s"] = time.perf_counter() - t_sim
        ids = _wait_for_nodes(grid, nodes)
        t1 = time.perf_counter()
        # warm-up, identical in both designs: one ping per actor (Flower gives each pending message to a free
        # actor), so the round below times the per-user work, not the actors' start-up
        pings = [Message(RecordDict({}), dst_node_id=n, message_type="query.ping") for n in ids[:actors]]
        warm = list(grid.send_and_receive(pings))
        if len(warm) != len(pings) or any(r.has_error() for r in warm):
            raise RuntimeError("the warm-up pings did not all come back")
        out["warmup_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        msgs = (Message(RecordDict({"task": ConfigRecord({"users": users})}), dst_node_id=n,
                        message_type="query.upload") for n in ids)
        replies = (list(grid.send_and_receive(list(msgs))) if design == "naive"
                   else send_windowed(grid, msgs, window=window))
        out["round_s"] = time.perf_counter() - t1
        parts = [{k: a.numpy() for k, a in r.content.array_records["upload"].items()} for r in replies
                 if not r.has_error()]
        out["uploads"] = int(sum(len(p["rows"]) for p in parts))
        out["complete"] = complete(parts, users)
        out["main_done"] = time.perf_counter()

    actors = os.cpu_count() or 1  # one CPU per virtual client: as many actors as cores
    init_args: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
                                 "num_cpus": actors}
    _init_ray(init_args, threads=1)
    t_sim = time.perf_counter()
    out["ray_start_s"] = t_sim - t0
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=nodes,
                   backend_config={"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0}, "init_args": init_args})
    t_end = time.perf_counter()
    out["shutdown_s"] = t_end - out.pop("main_done")
    out["total_s"] = t_end - t0
    return out
