"""The client's privacy ledger: what it released about each of its users, enforced before every release.

Basic composition (Dwork & Roth 2014, Thm 3.16): every release of a user's data adds its worst-case epsilon to that
user's total; a release that would take any user it concerns past ``client.max-epsilon`` is refused before anything
is computed. A release without a finite guarantee (a label in the clear, a Phase A update the server sees in the
clear) costs inf. A repeated request (the same key: scope, kind, seed, round, what was asked) gets the stored answer
back, not fresh noise, and costs nothing more.

One total per USER, over every policy entry (issue #34): the totals live per node (the client, whose users are fixed
by its policy), not per entry, so a policy change (a new cap, another point of a sweep, another run on the same
state directory) never starts a user from zero; a cap is checked against the user's total over all entries. Stored
answers are kept per entry (``scope``): a replay is only ever of the same point's answer.

Persistence: ``node-<n>/ledger.npz`` (user ids, totals) rewritten atomically (temp file + ``os.replace``) under an
exclusive ``flock`` of the node; ``node-<n>/<scope>/answers/<key>.npz`` with each stored answer;
``node-<n>/refusals.jsonl`` (one JSON line per refusal: the reason sent and the client's own detail) and
``node-<n>/client.log`` (the traces of internal errors). A restarted client (a new Ray actor, a restarted SuperNode)
reads the same files; `summary` reads a whole state directory (``fl-privtext ledger DIR``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.client.policy import Refused


class Ledger:
    """Per-user totals of one node (over every policy entry); releases and stored answers of entry ``scope``."""

    def __init__(self, state_dir: str | os.PathLike[str], node: int, scope: str):
        self.node_dir = node_dir(state_dir, node)
        self.dir = self.node_dir / scope
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.node_dir / "ledger.npz"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.node_dir / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.path.exists():
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        with np.load(self.path) as z:
            return z["users"], z["epsilon"]

    def _write(self, users: np.ndarray, eps: np.ndarray) -> None:
        _atomic_npz(self.path, users=users, epsilon=eps)

    def totals(self) -> tuple[np.ndarray, np.ndarray]:
        """(user ids, their totals), sorted by id."""
        with self._locked():
            return self._read()

    def max_total(self) -> float:
        _, eps = self.totals()
        return float(eps.max()) if len(eps) else 0.0

    def bind(self, name: str, value: str) -> str:
        """The value first bound to ``name`` in this entry (``value`` if none was: it is bound now)."""
        with self._locked():
            return bind_once(self.dir / f"bound-{name}.txt", value)

    def ordinal(self, name: str, value: str) -> int:
        """The position of ``value`` among the distinct values seen under ``name`` in this entry, in the order they
        first came (0 for the first; a new value is appended now). The seeded mode keys a secure-sum vector's noise
        by its session's ordinal instead of the participants' node ids, which Flower draws at random per run: the
        same run gives the same noise, and a session over a new set still draws new noise."""
        with self._locked():
            path = self.dir / f"ordinals-{name}.txt"
            seen = path.read_text().splitlines() if path.exists() else []
            if value in seen:
                return seen.index(value)
            with open(path, "a") as fh:  # appended under the node's lock
                fh.write(value + "\n")
            return len(seen)

    def stored(self, key: str) -> dict[str, np.ndarray] | None:
        """The answer stored under ``key`` (a repeated request), or None."""
        path = self.dir / "answers" / f"{key}.npz"
        if not path.exists():
            return None
        with np.load(path) as z:
            return {k: z[k] for k in z.files}

    def release(self, key: str, cap: float,
                compute: Callable[[Callable[[np.ndarray], np.ndarray]], tuple[dict[str, np.ndarray], np.ndarray, float]]
                ) -> tuple[dict[str, np.ndarray], float, float, bool]:
        """A release under ``key``: a key already answered returns its stored answer and charges nothing; else
        ``compute(spent)`` gives (answer, users, epsilon), ``epsilon`` is charged to every entry of ``users`` (one
        per release: repeats count again) unless a user would pass ``cap`` (`Refused`: the answer is dropped,
        nothing leaves), and the answer is stored. ``spent(user ids)`` gives those users' totals so far, so that
        ``compute`` can keep a release within every user's remaining budget. Computing is not releasing: only the
        returned answer leaves. Returns (answer, the largest charge to one user by this release, the largest total
        after it, replayed)."""
        with self._locked():
            old = self.stored(key)
            ids, eps = self._read()
            if old is not None:
                return old, 0.0, float(eps.max()) if len(eps) else 0.0, True

            def spent(users: np.ndarray) -> np.ndarray:
                users = np.asarray(users, np.int64)
                pos = np.clip(np.searchsorted(ids, users), 0, max(len(ids) - 1, 0))
                known = (pos < len(ids)) & (ids[pos] == users) if len(ids) else np.zeros(len(users), bool)
                return np.where(known, eps[pos] if len(ids) else 0.0, 0.0)

            answer, users, epsilon = compute(spent)
            add_ids, counts = np.unique(np.asarray(users, np.int64), return_counts=True)
            all_ids = np.union1d(ids, add_ids)
            totals = np.zeros(len(all_ids), np.float64)
            totals[np.searchsorted(all_ids, ids)] = eps
            pos = np.searchsorted(all_ids, add_ids)
            cost = counts * float(epsilon)  # counts >= 1: inf stays inf
            after = totals[pos] + cost
            if len(after) and float(after.max()) > cap * (1 + 1e-12):
                worst = int(np.argmax(after))
                raise Refused("budget exhausted", f"user {int(add_ids[worst])} would reach epsilon {after[worst]:.6g} (has "
                              f"{totals[pos][worst]:.6g}, this release costs {cost[worst]:.6g}) past this "
                              f"client's client.max-epsilon = {cap:g}")
            totals[pos] = after
            self._write(all_ids, totals)  # charged before the answer is stored: a crash in between has charged an
            _atomic_npz(self.dir / "answers" / f"{key}.npz", **answer)  # answer never sent (conservative)
            return (answer, float(cost.max()) if len(cost) else 0.0, float(totals.max()) if len(totals) else 0.0,
                    False)


def node_dir(state_dir: str | os.PathLike[str], node: int) -> Path:
    """The directory of one node's ledger."""
    return Path(state_dir) / f"node-{int(node)}"


def bind_once(path: Path, value: str) -> str:
    """The text first written to ``path`` (``value`` if none was: written now, atomically). The caller serialises
    concurrent writers (a node's lock, or one message at a time)."""
    if path.exists():
        return path.read_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    os.replace(tmp, path)
    return value


def log_refusal(state_dir: str | os.PathLike[str], node: int, kind: str, exc: Refused) -> None:
    """Append a refusal (the reason sent, the client's own detail) to the node's ``refusals.jsonl``."""
    path = node_dir(state_dir, node) / "refusals.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"time": time.time(), "node": int(node), "kind": kind, "reason": exc.reason,
                       "detail": exc.detail})
    with open(path, "a") as fh:
        fh.write(line + "\n")


def log_error(state_dir: str | os.PathLike[str], node: int, kind: str, trace: str) -> None:
    """Append an internal error's full trace to the node's own ``client.log`` (never to a reply)."""
    path = node_dir(state_dir, node) / "client.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {kind}: internal error, refused\n{trace}\n")


def summary(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Every node's ledger under ``state_dir``: how many users were charged, the largest total of one user (over
    every entry), each node's figures and every refusal logged (``fl-privtext ledger DIR``)."""
    root = Path(state_dir)
    if not root.is_dir():
        raise ValueError(f"{state_dir} is not a clients' state directory (no such directory).")
    nodes = sorted(root.glob("node-*"), key=lambda p: int(p.name.removeprefix("node-")))
    if not nodes:
        raise ValueError(f"{state_dir} holds no client ledger (expected node-<n>/ folders, as "
                         "`fl-privtext run --client-state DIR` writes).")
    users: dict[int, float] = {}
    per_node, refusals = [], []
    for d in nodes:
        ids, eps = np.zeros(0, np.int64), np.zeros(0)
        if (d / "ledger.npz").exists():
            with np.load(d / "ledger.npz") as z:
                ids, eps = z["users"], z["epsilon"]
        for u, e in zip(ids.tolist(), eps.tolist(), strict=True):
            users[u] = users.get(u, 0.0) + e  # a user on two nodes would be summed (it never is: shards are pinned)
        per_node.append({"node": int(d.name.removeprefix("node-")), "users": len(ids),
                         "max_epsilon_charged": float(eps.max()) if len(eps) else 0.0})
        if (d / "refusals.jsonl").exists():
            refusals += [json.loads(line) for line in (d / "refusals.jsonl").read_text().splitlines() if line.strip()]
    top = max(users.values(), default=0.0)
    return {"users": len(users), "max_epsilon_charged": top, "nodes": per_node, "refusals": refusals}


def _atomic_npz(path: Path, **arrays: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
