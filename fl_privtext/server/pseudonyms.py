"""Whom the server can name: the user pseudonym it attaches to each upload it saw (its learners' groups, the
eavesdropper's users). Under federation.shuffle a report carries a fresh pseudonym of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fl_privtext.memory import CHUNK_ROWS

if TYPE_CHECKING:  # the type only: the orchestrator prepares the point
    from fl_privtext.client.prepared import Prepared

__all__ = ["server_users"]


def server_users(prep: Prepared, seen: np.ndarray) -> np.ndarray:
    """The user pseudonym the server can attach to each upload it saw: the account of a record id, or, for a
    shuffled report (an id >= the number of records, `fl_privtext.federation.shuffler`), the report's own fresh
    pseudonym (disjoint from every account: one report, one 'user'). Int64, filled `CHUNK_ROWS` at a time: the
    whole-array expression's temporaries (the clipped ids, the gathered accounts, the mask: 17 bytes an upload
    beside the answer's 8) were held at once in the server's training (issue #38); the same values."""
    seen = np.asarray(seen)
    n = len(prep.ds)
    users = prep.ds.user_index.reshape(-1)
    out = np.empty(len(seen), np.int64)
    for i in range(0, len(seen), CHUNK_ROWS):
        c = slice(i, i + CHUNK_ROWS)
        s = seen[c].astype(np.int64, copy=False)
        out[c] = np.where(s >= n, s, users[np.minimum(s, n - 1)])
    return out

