"""Phase B through SecAgg+ (``server.aggregate = secagg``): the Flower adapter of `fl_privtext.pipeline.secure`.

Client: the secure-sum task ``phase-b-stats`` (`SECAGG_TASKS`): the client's noisy class statistics
(`fl_privtext.client.aggregate.release_statistics`) under ITS policy and ledger; a request its policy refuses makes
the client leave the protocol (it is listed in ``dropped`` with the ``refused: ...`` reason).
Server: `secagg_sum_round`: per seed one secure sum over every node (`fl_privtext.federation.secagg.secure_sum`);
the orchestrator (`fl_privtext.pipeline.secure`) fits the learner from it and runs the on-device evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message

from fl_privtext.client import client_seed_from, policy_from, state_dir_from
from fl_privtext.client.aggregate import TASK, StatsLayout, release_statistics
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.client_data import request_config
from fl_privtext.federation.requests import query
from fl_privtext.federation.secagg import (
    SecAggAborted,
    SecureSum,
    require_contributors,
    secure_sum,
    session_participants,
    session_record,
    unmask_once,
)
from fl_privtext.federation.train_handlers import phase_b_data

__all__ = ["TASK", "SumRequest", "secagg_sum_round", "stats_vector"]

RECORD = "stats-task"  # the request's ConfigRecord (`fl_privtext.pipeline.secure.stats_request`)


def stats_vector(msg: Message, context: Context) -> np.ndarray:
    """Client side: this client's vector for the secure sum (noisy statistics + public tail). Bound to the session
    (`release_statistics`): the participant set SecAgg+ shows the client keys the stored vector, so a session over
    another set is a new release, fresh noise, charged; fewer selected or masking clients than the client's own
    ``client.secagg-min-clients`` is refused (``too few contributors``), as is an unmasking with fewer active or
    with another active set than this vector was first unmasked with (`secagg_mod`)."""
    cfg = request_config(msg)
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



# (seed, layout, min contributors) -> the request's task record (`fl_privtext.pipeline.secure.stats_request`)
SumRequest = Callable[[int, StatsLayout, int], dict[str, Any]]


def secagg_sum_round(grid: Any, nodes: Sequence[int], cfg: ExperimentConfig, snapshot: str = "",
                     encoder: ArrayRecord | None = None, *, request: SumRequest,
                     clipping_range: Callable[[StatsLayout], float]) -> Callable[[int, StatsLayout, int], SecureSum]:
    """The transport of `fl_privtext.pipeline.secure.run_secagg_point` over SecAgg+: the request carries the point's
    config and the task record (``request``; and Phase A's ``encoder``, whose r(x) the clients then sum); SecAgg+'s
    reconstruction threshold is the number of contributors promised (Flower needs it below ``num_shares`` = every
    node: at most n - 1), so the protocol halts below it; the server also refuses to use a sum with fewer
    contributors than promised (an honest-but-curious server keeps its promise)."""

    def sum_round(seed: int, layout: StatsLayout, need: int) -> SecureSum:
        records: dict[str, Any] = {RECORD: ConfigRecord(request(seed, layout, need))}
        if encoder is not None:
            records["encoder"] = encoder
        content = query(cfg, snapshot, **records)
        out = secure_sum(grid, nodes, TASK, content, clipping_range=clipping_range(layout),
                         num_shares=len(nodes), reconstruction_threshold=max(2, min(need, len(nodes) - 1)),
                         timeout=cfg.federation.round_timeout or None)
        if len(out.contributors) < need:
            raise SecAggAborted(f"only {len(out.contributors)} clients contributed, {need} were promised; the sum is "
                                f"not used ({'; '.join(out.reasons.values())[:300]}).")
        return out

    return sum_round
