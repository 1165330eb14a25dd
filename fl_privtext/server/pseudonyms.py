"""Whom the server can name: the user pseudonym it attaches to each upload it saw (its learners' groups, the
eavesdropper's users). Under federation.shuffle a report carries a fresh pseudonym of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the type only: the orchestrator prepares the point
    from fl_privtext.client.prepared import Prepared

__all__ = ["server_users"]


def server_users(prep: Prepared, seen: np.ndarray) -> np.ndarray:
    """The user pseudonym the server can attach to each upload it saw: the account of a record id, or, for a
    shuffled report (an id >= the number of records, `fl_privtext.federation.shuffler`), the report's own fresh
    pseudonym (disjoint from every account: one report, one 'user')."""
    seen = np.asarray(seen, np.int64)
    n = len(prep.ds)
    users = prep.ds.user_index.reshape(-1)
    return np.where(seen >= n, seen, users[np.minimum(seen, n - 1)])

