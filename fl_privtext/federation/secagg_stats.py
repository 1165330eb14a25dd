"""Phase B through SecAgg+ (``server.aggregate = secagg``): the Flower adapter of `fl_privtext.pipeline.secure`.

Client: the secure-sum task ``phase-b-stats`` (`SECAGG_TASKS`): the client's noisy class statistics
(`fl_privtext.client.aggregate.release_statistics`) under ITS policy and ledger; a request its policy refuses makes
the client leave the protocol (it is listed in ``dropped`` with the ``refused: ...`` reason).
Server: `serve_secagg_point`: per seed one secure sum over every node (`fl_privtext.federation.secagg.secure_sum`),
the learner from it, the on-device evaluation as for uploads (`server_app.evaluate_on_device`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message

from fl_privtext.client import client_seed_from, policy_from, state_dir_from
from fl_privtext.client.aggregate import TASK, StatsLayout, release_statistics
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.secagg import (
    SECAGG_TASKS,
    SecAggAborted,
    require_contributors,
    secure_sum,
    session_participants,
    session_record,
    unmask_once,
)

__all__ = ["TASK", "secagg_sum_round", "serve_secagg_point", "stats_vector"]

RECORD = "stats-task"  # the request's ConfigRecord (`fl_privtext.pipeline.secure.stats_request`)


def stats_vector(msg: Message, context: Context) -> np.ndarray:
    """Client side: this client's vector for the secure sum (noisy statistics + public tail). Bound to the session
    (`release_statistics`): the participant set SecAgg+ shows the client keys the stored vector, so a session over
    another set is a new release, fresh noise, charged; fewer selected or masking clients than the client's own
    ``client.secagg-min-clients`` is refused (``too few contributors``), as is an unmasking with fewer active or
    with another active set than this vector was first unmasked with (`secagg_mod`)."""
    from fl_privtext.federation.client_app import _config, phase_b_data

    cfg = _config(msg)
    task = msg.content.config_records[RECORD]
    client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    nc = dict(context.node_config)
    policy, state_dir = policy_from(nc, dict(context.run_config)), state_dir_from(nc)
    participants = session_participants(msg)
    # the client's own minimum (its policy entry for this request; `release_statistics` refuses a smaller promise)
    require_contributors(context, policy.entry_for(cfg).client.secagg_min_clients, participants)
    data, data_key = phase_b_data(msg, cfg, context)  # after Phase A: the statistics of the trained encoder's r(x)
    layout = StatsLayout(int(task["num-classes"]), int(task["dim"]), bool(task["second"]),  # type: ignore[arg-type]
                         int(task.get("folds", 1)), int(task.get("fold-seed", 0)),  # type: ignore[arg-type]
                         float(task.get("second-weight", 1.0)))  # type: ignore[arg-type]
    vec, stats = release_statistics(
        data, client, cfg, int(task["seed"]), layout=layout,  # type: ignore[arg-type]
        min_contributors=int(task["min-contributors"]), epsilon=float(task["epsilon"]),  # type: ignore[arg-type]
        policy=policy, state_dir=state_dir, client_seed=client_seed_from(nc), data_key=data_key,
        participants=participants)
    unmask_once(context, session_record(state_dir, client, str(stats["scope"]), str(stats["key"])))
    return vec


SECAGG_TASKS[TASK] = stats_vector


def secagg_sum_round(grid: Any, nodes: Sequence[int], cfg: ExperimentConfig, prep: Any, snapshot: str = "",
                     encoder: ArrayRecord | None = None) -> Callable[[int, StatsLayout, int], Any]:
    """The transport of `fl_privtext.pipeline.secure.run_secagg_point` over SecAgg+: the request carries the point's
    config and the task record (and Phase A's ``encoder``, whose r(x) the clients then sum); SecAgg+'s reconstruction threshold is the number of contributors promised (Flower
    needs it below ``num_shares`` = every node: at most n - 1), so the protocol halts below it; the server also
    refuses to use a sum with fewer contributors than promised (an honest-but-curious server keeps its promise)."""
    from fl_privtext.federation.server_app import _query
    from fl_privtext.pipeline.secure import SumResult, clipping_range, stats_request

    def sum_round(seed: int, layout: StatsLayout, need: int) -> SumResult:
        records: dict[str, Any] = {RECORD: ConfigRecord(stats_request(cfg, seed, layout, need))}
        if encoder is not None:
            records["encoder"] = encoder
        content = _query(cfg, snapshot, **records)
        out = secure_sum(grid, nodes, TASK, content, clipping_range=clipping_range(prep, layout, cfg),
                         num_shares=len(nodes), reconstruction_threshold=max(2, min(need, len(nodes) - 1)),
                         timeout=cfg.federation.round_timeout or None)
        if len(out.contributors) < need:
            raise SecAggAborted(f"only {len(out.contributors)} clients contributed, {need} were promised; the sum is "
                                f"not used ({'; '.join(out.reasons.values())[:300]}).")
        return SumResult(out.total, out.contributors, out.dropped, out.rounds, out.bytes)

    return sum_round


def serve_secagg_point(grid: Any, cfg: ExperimentConfig, nodes: Sequence[int], *, snapshot: str = ""
                       ) -> Callable[[], dict[str, Any]]:
    """One point with ``server.aggregate = secagg``: every seed's secure sum and on-device evaluation now (while
    the federation runs); returns the (already done) computation as a job like `server_app.serve_point`."""
    from fl_privtext import pipeline
    from fl_privtext.federation.server_app import evaluate_on_device
    from fl_privtext.federation.training import InjectingGrid, encoder_out_dim, train_phase, training_off
    from fl_privtext.pipeline.secure import run_secagg_point

    if cfg.train.rounds > 0 and cfg.privacy.projection != "none":
        raise ValueError("server.aggregate = secagg after Phase A sums the trained encoder's r(x); a public projection "
                         "(privacy.projection) is fitted to the frozen extractor's features: set privacy.projection "
                         "= none or train.rounds = 0.")
    t0 = time.perf_counter()
    prep = pipeline.prepare(cfg, features="none")  # users, roles and shards; never texts or features
    encoder: ArrayRecord | None = None
    phase_b: Any = grid
    if cfg.train.rounds > 0:  # Phase A first; the secure sums and the on-device queries then carry its encoder
        training = train_phase(grid, cfg)
        encoder = training.pop("encoder_arrays")
        phase_b = InjectingGrid(grid, {"encoder": encoder})
        dim = encoder_out_dim(cfg)
    else:
        training = training_off(cfg)
        dim = int(prep.extractor.output_dim(paired=prep.ds.text_pair_column is not None))

    def evaluate_round(trained: Any, requests: dict[int, np.ndarray], seed: int, stage: str = "all") -> list[Any]:
        # the server does not know which node holds which partition (no uploads, no row ids): the model goes to
        # every node, each answers for all its test users or refuses (fewer than client.min-count of them)
        del requests
        return evaluate_on_device(phase_b, cfg, trained, {int(n): np.zeros(0, np.int64) for n in nodes}, snapshot,
                                  seed, stage)

    point = run_secagg_point(prep, cfg, secagg_sum_round(grid, nodes, cfg, prep, snapshot, encoder), evaluate_round,
                             dim=dim, training=training)
    point["server_s"] = time.perf_counter() - t0
    return lambda: point
