"""A point's result summaries from its traffic (results.json): what the clients' ledgers say they charged and
refused (`ledger_summary`), the record ids behind what the server saw (`referee_rows`: the shuffler's key under
federation.shuffle, for scoring and accounting only), who did not deliver (`faults`), where the replies ran (`placement_of`), which randomness
the clients stated (`randomness_of`), and the rows each repetition released (`sent_rows`, for the accounting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext.client import upload_rows
from fl_privtext.config import FederationConfig
from fl_privtext.memory import CHUNK_ROWS, distinct, drop_mapped_pages
from fl_privtext.privacy.report import json_number
from fl_privtext.traffic import Collected

if TYPE_CHECKING:  # the types only: the orchestrator prepares the point and collects its traffic
    from fl_privtext.client.prepared import Prepared

__all__ = [
    "expected_rows",
    "faults",
    "ledger_summary",
    "placement_of",
    "randomness_of",
    "referee_rows",
    "sent_rows",
    "shuffled",
    "shuffled_cohort_users",
]


def shuffled(c: Collected) -> bool:
    """Whether this seed's uploads went through the shuffler (federation.shuffle)."""
    return any(r.revealed is not None for r in c.rounds)


def referee_rows(c: Collected, ids: np.ndarray) -> np.ndarray:
    """Record ids of uploads as the server saw them (``ids``): themselves without a shuffler; under
    federation.shuffle, the shuffler's key (`Round.revealed`). For scoring and accounting only."""
    ids = np.asarray(ids, np.int64)
    if not shuffled(c):
        return ids
    seen = np.concatenate([r.uploads["rows"] for r in c.rounds])
    true = np.concatenate([r.revealed if r.revealed is not None else r.uploads["rows"] for r in c.rounds])
    uniq, first = np.unique(seen, return_index=True)
    pos = np.searchsorted(uniq, ids)
    if len(ids) and (pos.max() >= len(uniq) or not np.array_equal(uniq[pos], ids)):
        raise ValueError("referee_rows: an upload id this seed's rounds never carried.")
    return true[first[pos]]



def shuffled_cohort_users(prep: Prepared, federation: FederationConfig) -> int:
    """n of the shuffle bound: the users of the smallest unlinked cohort (train, test) shuffled together in a
    round (`fl_privtext.federation.shuffler`): all of them under schedule = repeat, a 1/rounds share under stream."""
    users = prep.ds.user_index.reshape(-1)
    sizes = [len(distinct(users[prep.roles == role])) for role in ("train", "test") if (prep.roles == role).any()]
    n = min(sizes) if sizes else 1
    return max(1, n // federation.rounds) if federation.schedule == "stream" else n


def ledger_summary(collected: Sequence[Collected], on_device_results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the clients themselves say they charged (their ledgers, issue #22) and what they refused: the largest
    per-user total any client reported after any reply, and every refusal as {node, kind, reason} (with its seed
    and round). In an honest run ``per_user.max_epsilon_charged`` equals the server's
    ``composition.per_user.max_epsilon_total``."""
    entries = [e for c in collected for r in c.rounds for e in r.ledger]
    entries += [r["ledger"] for od in on_device_results for r in od.get("_replies", []) if "ledger" in r]
    tops = [float(e["ledger-max"]) for e in entries if "ledger-max" in e]
    refusals: list[dict[str, Any]] = []
    for c in collected:
        for rnd, r in enumerate(c.rounds):
            refusals.extend({"node": f["node"], "kind": "upload", "reason": f["reason"], "seed": c.seed,
                             "round": rnd} for f in r.failures if f["kind"] == "refused")
        for stop in c.refused:
            refusals.extend({"node": f["node"], "kind": "upload", "reason": f["reason"], "seed": stop["seed"],
                             "round": stop["round"]} for f in stop["failures"])
    for od, c in zip(on_device_results, collected, strict=False):
        refusals.extend({"node": r["node"], "kind": "on-device", "reason": r["reason"], "seed": c.seed}
                        for r in od.get("refusals", []))
    stopped = [{"seed": s["seed"], "round": s["round"]} for c in collected for s in c.refused]
    return {"per_user": {"max_epsilon_charged": json_number(max(tops)) if tops else "not reported"},
            "replies_reporting": len(tops), "refusals": refusals,
            # records a client kept back because their users had spent their budgets (partial releases)
            "records_withheld": sum(int(e.get("withheld", 0)) for e in entries),
            "stopped_at": stopped[0] if stopped else None,
            "note": ("each client's own ledger (basic composition, enforced before every release against "
                     "client.max-epsilon); replies carry what was charged")}


def expected_rows(prep: Prepared, federation: FederationConfig, rnd: int) -> np.ndarray:
    return np.concatenate([upload_rows(prep.client, c, rnd, federation) for c in range(len(prep.shards))])


def sent_rows(prep: Prepared, federation: FederationConfig, c: Collected) -> list[np.ndarray]:
    """Rows released in one repetition, one entry per release, as parts (their concatenation is the list): those
    received in each round, plus the missing rows of a round in which some client timed out (it may have sent
    them). Clients that failed with an error sent nothing. The parts are the rounds' own arrays (on the Flower path
    maps of their spill), not a concatenated int64 copy of every upload's id (8 bytes an upload, and as many of the
    maps' pages faulted in by the copy: the report stage at ten million users, issue #38); the accounting counts
    them a block at a time (`fl_privtext.report.accounting.release_counts`)."""
    parts = []
    for rnd, r in enumerate(c.rounds):
        rows = r.revealed if r.revealed is not None else r.uploads["rows"]
        parts.append(rows)
        if any(f["kind"] == "timeout" for f in r.failures):
            parts.append(missing_rows(prep, federation, rnd, rows))
    return parts if parts else [referee_rows(c, c.received["rows"])]


def missing_rows(prep: Prepared, federation: FederationConfig, rnd: int, received: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(expected_rows(prep, federation, rnd), received)``: the sorted distinct record ids a round
    expected and did not receive, through one mask of ``received`` (marked `CHUNK_ROWS` at a time; sorting and
    hashing millions of ids per round cost more than the rest of the summary at 1M users), client by client
    instead of every expected row's id concatenated in int64 (~10 bytes a record at once, issue #38)."""
    seen = np.zeros(len(prep.ds.user_index), bool)
    for i in range(0, len(received), CHUNK_ROWS):
        seen[np.asarray(received[i : i + CHUNK_ROWS], np.int64)] = True
        drop_mapped_pages(received)  # a round's map (Flower path): its pages back to the page cache (#38)
    parts = []
    for c in range(len(prep.shards)):
        expected = np.asarray(upload_rows(prep.client, c, rnd, federation), np.int64)
        parts.append(expected[~seen[expected]])
    return np.unique(np.concatenate(parts))


def faults(prep: Prepared, federation: FederationConfig, collected: Sequence[Collected]) -> dict[str, Any]:
    """Clients that did not deliver, per seed and round, and the users the server never heard from."""
    failed: list[dict[str, Any]] = []
    user = prep.ds.user_index  # users by their position among the sorted ids: integer work, no string sets
    missing_users = np.zeros(prep.ds.num_users, bool)
    missing_records = 0
    for c in collected:
        heard = np.zeros(prep.ds.num_users, bool)
        ids = c.received["rows"]
        if shuffled(c):
            heard[user[referee_rows(c, ids)]] = True
        else:  # the ids themselves (`referee_rows`), a chunk at a time: no (uploads,) int64 gather of their users
            for i in range(0, len(ids), CHUNK_ROWS):
                heard[user[np.asarray(ids[i : i + CHUNK_ROWS], np.int64)]] = True
                drop_mapped_pages(ids)  # the spill's map: its pages go, as each chunk is read (issue #38)
        for rnd, r in enumerate(c.rounds):
            failed.extend({"seed": c.seed, "round": rnd, **f} for f in r.failures)
            missing = missing_rows(prep, federation, rnd, r.revealed if r.revealed is not None else r.uploads["rows"])
            missing_records += int(missing.size)
            missing_users[user[missing][~heard[user[missing]]]] = True
    lost = np.flatnonzero(missing_users)[:1000]  # the ids of their records only (`user_ids_at`), sorted as str
    # nobody lost (every client delivered): no lookup at all; Arrow's take, even of no row, combined the whole
    # id column in its pool and faulted in its file's pages (~23 bytes a record resident after the report, #38)
    first = np.unique(prep.ds.user_ids_at(np.flatnonzero(np.isin(user, lost)))) if len(lost) else np.zeros(0, str)
    return {"failed_clients": failed, "records_not_received": missing_records,
            "users_not_heard_from": first.tolist(), "num_users_not_heard_from": int(missing_users.sum())}


def placement_of(collected: Sequence[Collected]) -> dict[str, Any]:
    """Where the replies were computed, over every seed and round: replies per Ray node and per host, and the
    client nodes each Ray node served (empty maps in the plain loop, which has no replies)."""
    by_ray: dict[str, int] = {}
    by_host: dict[str, int] = {}
    clients: dict[str, set[int]] = {}
    replies = 0
    for c in collected:
        for r in c.rounds:
            for p in r.placement:
                replies += 1
                by_host[p["host"]] = by_host.get(p["host"], 0) + 1
                if p["ray_node"]:
                    by_ray[p["ray_node"]] = by_ray.get(p["ray_node"], 0) + 1
                    clients.setdefault(p["ray_node"], set()).add(int(p["node"]))
    return {"replies": replies, "replies_by_ray_node": by_ray, "replies_by_host": by_host,
            "clients_by_ray_node": {k: sorted(v) for k, v in clients.items()}}


def randomness_of(configured: str, collected: Sequence[Collected]) -> str:
    """"secret" or "reproducible", as the clients themselves stated it (the server's config never holds the client
    seed); clients that disagree are an error (the seed did not reach every worker). ``configured``
    (``run.randomness``) where no client stated it."""
    seeded = [s for c in collected for r in c.rounds for s in r.seeded]
    if not seeded:
        return configured
    if any(seeded) and not all(seeded):
        raise RuntimeError("Some clients ran with a client seed and some without: the client seed did not reach "
                           "every worker (set FL_PRIVTEXT_CLIENT_SEED on every node, or --node-config client-seed).")
    return "reproducible" if seeded[0] else "secret"

