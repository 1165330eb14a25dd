"""The server's side of the on-device protocol, one seed at a time: which test records each client is asked about
(`on_device_requests`), the model shipped and the clients' randomized-response answers debiased and summed
(`on_device_seed`; their side is `fl_privtext.client.ondevice`), and which model the reported figure is of
(`shipped_model`). The transport that carries the model and the answers is the orchestrator's ``evaluate_round``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext.client.ondevice import answer_half
from fl_privtext.memory import drop_mapped_pages
from fl_privtext.ondevice import stale_replies, summarize, summarize_private
from fl_privtext.server.ondevice_selection import choose
from fl_privtext.server.training import Trained
from fl_privtext.traffic import Collected

if TYPE_CHECKING:  # the types only: the orchestrator prepares the point and collects its traffic
    from fl_privtext.client.prepared import Prepared

__all__ = ["OnDeviceRound", "on_device_requests", "on_device_seed", "shipped_model"]


def on_device_requests(prep: Prepared, c: Collected) -> dict[int, np.ndarray]:
    """Per node, the test users' records it uploaded in this seed (the server knows roles, never features)."""
    test = prep.roles == "test"
    parts: dict[int, list[np.ndarray]] = {}
    for r in c.rounds:
        for node, rows in r.senders.items():
            parts.setdefault(int(node), []).append(np.asarray(rows[test[rows]]))
            drop_mapped_pages(rows)  # the senders are a map of the round's spill (issue #38): its pages go back
    merged = {node: np.unique(np.concatenate(p)) for node, p in parts.items()}
    return {node: rows for node, rows in merged.items() if len(rows)}


OnDeviceRound = Callable[..., list[Any]]  # (model, rows per node, seed, stage="all") -> replies


def on_device_seed(trained: Trained, requests: dict[int, np.ndarray], seed: int, evaluate_round: OnDeviceRound,
                   users: np.ndarray) -> dict[str, Any]:
    """One seed of the on-device protocol; with ``trained.candidates`` (server.select-on = clients) in two stages:
    the select half of the test users chooses (`fl_privtext.server.ondevice_selection`), the report half
    measures the chosen model. ``users``: the user of each record id (the server's accounting of who was charged,
    by the public half rule). Keys starting with "_" are internal (charged rows, raw replies)."""

    def eps_of(r: dict[str, Any]) -> float:
        return float(np.asarray(r["answer"]["count-epsilon"]).reshape(-1)[0])

    def charged_rows(replies: list[Any], half: int | None) -> list[tuple[np.ndarray, float]]:
        out = []
        for r in replies:
            if "answer" in r and r["node"] in requests:
                rows = requests[r["node"]]
                out.append((rows if half is None else rows[answer_half(users[rows]) == half], eps_of(r)))
        return out

    t0 = time.perf_counter()
    if trained.candidates:
        const = trained.constant_estimate  # the server's own estimate: the constant is not sent
        sent = {n: m for n, m in trained.candidates.items() if const is None or n != "constant"}
        picked = evaluate_round(replace(trained, candidates=sent), requests, seed, "select") if sent else []
        stale = stale_replies(picked, list(sent.values()))
        chosen, selection = choose(fresh(picked, stale), list(sent), constant=const)
        selection["dropped"] = trained.utility.get("on_device_candidates_dropped", [])  # export not finite
        replies = evaluate_round(replace(trained, model=trained.candidates[chosen]), requests, seed, "report")
        stale += stale_replies(replies, trained.candidates[chosen])
        result = {**summarize_private(fresh(replies, stale)), "learner": chosen, "selection": selection}
        charged = charged_rows(picked, 0) + charged_rows(replies, 1)
        replies = picked + replies
    else:
        replies = evaluate_round(trained, requests, seed)
        if any("counts" in r for r in replies):  # old clients (no policy): confusion counts over the listed rows
            result = summarize([r["counts"] for r in replies if "counts" in r], trained.majority_class,
                               len(requests))
            stale = []
        else:
            stale = [] if trained.model is None else stale_replies(replies, trained.model)
            result = summarize_private(fresh(replies, stale))
        charged = charged_rows(replies, None)
    if stale:  # answers about an earlier point's model (replayed by the clients' policy): not this model's figure
        result["stale_replies"] = sorted(set(stale))
        if not result.get("available", True):
            result["reason"] = (f"no test client answered for this model: {len(set(stale))} replayed their answer "
                                "about an earlier point's model (a client answers once per point, seed and stage), "
                                "any other refused; the referee's exact figure stands")
    return {**result, "seconds": time.perf_counter() - t0, "_charged": charged, "_replies": replies}


def fresh(replies: list[Any], stale: list[int]) -> list[Any]:
    """The replies but the answers about another model (`fl_privtext.ondevice.stale_replies`)."""
    return [r for r in replies if not ("answer" in r and int(r["node"]) in stale)]


def shipped_model(trained: Trained, result: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The model the server sent for the reported on-device figure: the clients' choice among the candidates
    (server.select-on = clients, ``result["learner"]``), else the server's model."""
    if trained.candidates and "learner" in result:
        return trained.candidates[str(result["learner"])]
    return trained.model
