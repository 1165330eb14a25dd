"""The untrusted server: asks every client to upload, trains the task model, and hosts the eavesdropper.

`serve` is the whole server loop; `app` is the ServerApp for `flwr run .` (config from the run config);
`fl_privtext.federation.runner` builds an equivalent ServerApp around `serve` for `fl-privtext run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp
from tqdm.auto import tqdm

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.eavesdropper import EavesdroppingGrid

app = ServerApp()


def _wait_for_nodes(grid: Grid, n: int, timeout_s: float = 600.0) -> list[int]:
    t0 = time.monotonic()
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes[:n] if len(nodes) == n else nodes
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"Only {len(nodes)} of {n} SuperNodes connected within {timeout_s:.0f} s.")
        time.sleep(1.0)


def collect(grid: EavesdroppingGrid, nodes: Sequence[int], cfg: ExperimentConfig, seed: int,
            rnd: int) -> tuple[dict[str, np.ndarray], int]:
    """One round: query every node for its users' uploads; return what the server received, concatenated."""
    flat = ConfigRecord(dict(cfg.to_flat()))
    msgs = [
        Message(RecordDict({"config": flat, "task": ConfigRecord({"seed": seed, "round": rnd})}),
                dst_node_id=node, message_type="query.upload")
        for node in nodes
    ]
    replies = list(grid.send_and_receive(msgs))
    errors = [r.error.reason for r in replies if r.has_error()]
    if errors or len(replies) != len(msgs):
        raise RuntimeError(f"{len(errors)} client(s) failed, {len(replies)}/{len(msgs)} replied: {errors[:3]}")
    parts = [{k: a.numpy() for k, a in r.content["upload"].items()} for r in replies]
    parts = [p for p in parts if len(p["rows"])]
    input_dim = max(int(r.content["stats"]["input_dim"]) for r in replies)
    return {k: np.concatenate([p[k] for p in parts]) for k in pipeline.UPLOAD_KEYS}, input_dim


def serve(grid: Grid, points: Sequence[ExperimentConfig], *,
          on_result: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run every experiment point (config x seed) through the same federation; one result dict per point.

    A sweep passes many points, paying Flower/Ray start-up once. Every point is a full federated pass: clients
    privatize and upload anew, the server trains on what it receives, the eavesdropper attacks what it saw.
    """
    eaves = EavesdroppingGrid(grid)
    results: list[dict[str, Any]] = []
    for i, cfg in enumerate(points):
        results.append(serve_point(eaves, cfg))
        if on_result is not None:
            on_result(i, results[-1])
    return results


def serve_point(eaves: EavesdroppingGrid, cfg: ExperimentConfig) -> dict[str, Any]:
    t_start = time.perf_counter()
    prep = pipeline.prepare(cfg, features="none")  # the server knows users and roles, never texts or features
    n_users = len(np.unique(prep.ds.user_ids))
    nodes = _wait_for_nodes(eaves, cfg.federation.num_clients)
    per_seed: list[dict[str, Any]] = []
    seeds = [cfg.run.seed + s for s in range(cfg.run.seeds)]
    bar = tqdm(total=len(seeds) * cfg.federation.rounds, desc="rounds", disable=not cfg.run.progress, leave=False)
    for seed in seeds:
        eaves.reset()
        t0 = time.perf_counter()
        received = []
        for rnd in range(cfg.federation.rounds):
            arrays, input_dim = collect(eaves, nodes, cfg, seed, rnd)
            received.append(arrays)
            bar.update()
        up = {k: np.concatenate([r[k] for r in received]) for k in pipeline.UPLOAD_KEYS}
        t1 = time.perf_counter()
        utility = pipeline.train_and_evaluate(prep, up["features"], up["labels"], up["rows"], seed, cfg)
        t2 = time.perf_counter()
        seen = eaves.uploads()
        if len(seen["rows"]) != len(up["rows"]) or not np.array_equal(seen["rows"], up["rows"]):
            raise RuntimeError("The eavesdropper's record differs from what the server received.")
        attacks = pipeline.attack(prep, seen["features"], seen["rows"], seed, cfg) if cfg.attack.enabled else {}
        t3 = time.perf_counter()
        per_seed.append({
            "seed": seed, "utility": utility, "attacks": attacks,
            "uploads_received": int(len(up["rows"])), "uploads_observed": int(len(seen["rows"])),
            "messages_observed": len(eaves.observations), "bytes_observed": eaves.bytes_observed,
            "output_dim": int(up["features"].shape[1]),
            "timing": {"federation_s": t1 - t0, "train_s": t2 - t1, "attack_s": t3 - t2},
        })
    bar.close()
    report = pipeline.mechanism_for(cfg, input_dim).report()
    releases = cfg.federation.rounds if cfg.federation.schedule == "repeat" else 1
    return {
        "config": cfg, "per_seed": per_seed, "num_users": n_users, "num_records": len(prep.ds),
        "privacy": pipeline.privacy_summary(prep, report, cfg, releases),
        "dataset": {"name": prep.ds.name, "label_names": list(prep.ds.label_names),
                    "attributes": {a.name: {"kind": a.kind, "classes": list(a.classes)} for a in prep.ds.attributes}},
        "server_s": time.perf_counter() - t_start,
    }


@app.main()
def main(grid: Grid, context: Context) -> None:
    """`flwr run .`: the run config (pyproject [tool.flwr.app.config] + overrides) is the experiment config."""
    from fl_privtext.report import finalize

    cfg = ExperimentConfig.from_flat(dict(context.run_config))
    t0 = time.perf_counter()
    (result,) = serve(grid, [cfg])
    finalize(result, cfg, total_s=time.perf_counter() - t0, output=cfg.run.output or None)
