"""The server's uploads split for its training (`fl_privtext.server.upload_split`)."""

from types import SimpleNamespace

import numpy as np
import pytest


def _point(n: int, g: np.random.Generator) -> SimpleNamespace:
    from fl_privtext.data.splits import Roles

    users = np.sort(g.integers(0, n // 3, n)).astype(np.int64)
    names = np.array(["train", "test", "aux"])[g.integers(0, 3, n)]
    return SimpleNamespace(ds=type("DS", (), {"user_index": users, "__len__": lambda self: n})(),
                           roles=Roles.of(names), names=names)


def test_split_in_chunks_equals_the_whole_array_expressions(tmp_path):
    """Issue #38: the one chunked pass gives, value for value and in the same order, what `train_server` computed
    with whole-array expressions (test mask, positions, training labels and pseudonyms, test record ids), at any
    chunk size, for record ids and shuffled reports (seen ids >= the number of records), for in-memory arrays and
    for maps of files (the Flower path's spill), with the roles as one byte a record or as their strings."""
    from fl_privtext.server.pseudonyms import server_users
    from fl_privtext.server.upload_split import split_uploads

    g = np.random.default_rng(0)
    n = 1000
    prep = _point(n, g)
    rows = np.sort(g.integers(0, n, 1500)).astype(np.int64)
    labels = g.integers(0, 4, len(rows)).astype(np.int64)
    shuffled = n + g.permutation(len(rows)).astype(np.int64)
    np.save(tmp_path / "rows.npy", rows)
    np.save(tmp_path / "labels.npy", labels)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r"), np.load(tmp_path / "labels.npy", mmap_mode="r")
    for seen in (None, shuffled):
        te = (prep.roles == "test")[rows]
        want = (np.flatnonzero(~te), np.flatnonzero(te), labels[~te],
                server_users(prep, rows if seen is None else seen)[~te], rows[te])
        for chunk in (1, 7, 256, None):
            for r, y in ((rows, labels), mapped):
                for roles in (prep.roles, prep.names):
                    got = split_uploads(SimpleNamespace(ds=prep.ds, roles=roles), r, y, seen, chunk)
                    got_all = (got.train, got.test, got.labels, got.groups, got.test_rows)
                    assert all(np.array_equal(a, b) for a, b in zip(got_all, want, strict=True))
                    assert got.labels.dtype == np.int8  # class codes held in one byte (int64 on the wire)
                    assert got.train.dtype == got.test.dtype == got.groups.dtype == got.test_rows.dtype == np.int32


def test_pseudonyms_beyond_int32_widen_to_int64():
    """A column whose values do not fit int32 (shuffled reports' pseudonyms past 2^31) is held in int64: the
    same values, never wrapped (a known-bad int32 cast would wrap them)."""
    from fl_privtext.server.upload_split import split_uploads

    g = np.random.default_rng(1)
    n = 100
    prep = _point(n, g)
    rows = np.arange(n, dtype=np.int64)
    seen = np.arange(n, dtype=np.int64) + (1 << 31) - 50  # the first 50 fit int32, the rest do not
    te = (prep.roles == "test")[rows]
    got = split_uploads(prep, rows, np.zeros(n, np.int64), seen, chunk=16)
    assert got.groups.dtype == np.int64 and np.array_equal(got.groups, seen[~te])
    assert not np.array_equal(seen[~te].astype(np.int32), seen[~te])  # what the known-bad cast would hold
    labels = np.arange(n, dtype=np.int64) * 3  # past int8 from the 43rd upload: the labels widen the same way
    got = split_uploads(prep, rows, labels, chunk=16)
    assert got.labels.dtype == np.int64 and np.array_equal(got.labels, labels[~te])


def test_split_checks_lengths():
    from fl_privtext.server.upload_split import split_uploads

    prep = _point(30, np.random.default_rng(2))
    with pytest.raises(ValueError, match="one label"):
        split_uploads(prep, np.arange(10), np.zeros(9, np.int64))
