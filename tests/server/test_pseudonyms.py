"""The user pseudonym the server attaches to each upload (`fl_privtext.server.pseudonyms`)."""

from types import SimpleNamespace

import numpy as np


def test_server_users_in_chunks_equal_the_whole_array_answer(monkeypatch):
    """Issue #38: `server_users` fills its int64 answer a chunk at a time (no whole-array temporaries); the same
    values and dtype as the one expression over every upload, across chunk boundaries, for record ids (their
    account) and shuffled reports (ids >= the number of records: their own pseudonym), ids held narrow or wide."""
    from fl_privtext.server import pseudonyms

    g = np.random.default_rng(0)
    n = 1000
    users = np.sort(g.integers(0, 300, n)).astype(np.int64)
    prep = SimpleNamespace(ds=type("DS", (), {"user_index": users, "__len__": lambda self: n})())
    seen = np.concatenate([g.integers(0, n, 700), n + g.permutation(500)])
    g.shuffle(seen)
    want = np.where(seen >= n, seen, users[np.minimum(seen, n - 1)])  # the whole-array expression
    for chunk in (7, 64, 1 << 14):
        monkeypatch.setattr(pseudonyms, "CHUNK_ROWS", chunk)
        for ids in (seen.astype(np.int64), seen.astype(np.int32)):
            got = pseudonyms.server_users(prep, ids)
            assert got.dtype == np.int64 and np.array_equal(got, want)
    assert pseudonyms.server_users(prep, np.zeros(0, np.int64)).dtype == np.int64
