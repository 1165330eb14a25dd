"""The client's privacy ledger: what it released about each of its users, enforced before every release.

Basic composition (Dwork & Roth 2014, Thm 3.16): every release of a user's data adds its worst-case epsilon to that
user's total; a release that would take any user it concerns past ``client.max-epsilon`` is refused before anything
is computed. A release without a finite guarantee (a label in the clear, a Phase A update the server sees in the
clear) costs inf. A repeated request (the same key: scope, kind, seed, round, what was asked) gets the stored answer
back, not fresh noise, and costs nothing more.

Persistence: one directory per (node, scope) under the node's state directory: ``ledger.npz`` (user ids, totals,
answered keys) rewritten atomically (temp file + ``os.replace``) under an exclusive ``flock``, and ``answers/<key>.npz``
with each stored answer. A restarted client (a new Ray actor, a restarted SuperNode) reads the same files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fl_privtext.client.policy import Refused


class Ledger:
    """Per-user totals of one node under one policy entry (``scope``)."""

    def __init__(self, state_dir: str | os.PathLike[str], node: int, scope: str):
        self.dir = Path(state_dir) / f"node-{int(node)}" / scope
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "ledger.npz"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.dir / ".lock", "a+") as fh:
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
