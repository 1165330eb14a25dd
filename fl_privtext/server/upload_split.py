"""The server's uploads split for its training (`fl_privtext.server.training.train_server`): which uploads train
and which test (by their record's role), the training uploads' labels and pseudonyms (the learners' groups), and the
test uploads' record ids (the referee's scoring), built in one pass over the uploads a chunk at a time.

Why (issue #38): the whole-array expressions held ~40 bytes an upload at once before the learners' pass (a test
mask over every record and over every upload, its complement, every upload's pseudonym and account in int64, the
training uploads' pseudonyms and labels, the training positions: ~1 GB at ten million users, 36.6M uploads), and
the pages of the round's maps of record ids and labels that the reads faulted in stayed in the driver's RSS. Here
the positions, pseudonyms and record ids are held in int32 where their values fit (int64 otherwise), the training
labels in int8 (int64 on the wire: 7 bytes a training upload more, 0.2 GB at ten million users), the masks a chunk
at a time, and the maps' pages are dropped after each chunk. The same values in the same order: the learners' folds,
class counts and per-user counts do not depend on the integer width (the learners that fit on rows, linear and the
MLP, widen their labels to int64, as they were given them before)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fl_privtext.memory import CHUNK_ROWS, drop_mapped_pages
from fl_privtext.server.pseudonyms import server_users

if TYPE_CHECKING:  # the type only: the orchestrator prepares the point
    from fl_privtext.client.prepared import Prepared

__all__ = ["SPLIT_CHUNK", "UploadSplit", "split_uploads"]

SPLIT_CHUNK = CHUNK_ROWS * 16  # uploads a chunk: a few MB of temporaries


@dataclass
class UploadSplit:
    """(U_tr,) ``train`` and (U_te,) ``test``: positions of the training / test uploads in the server's arrays, in
    upload order; ``labels`` (U_tr,): the training uploads' labels (int8, int64 where a value does not fit);
    ``groups`` (U_tr,): their pseudonyms (`server_users`); ``test_rows`` (U_te,): the test uploads' record ids (the
    referee's key)."""

    train: np.ndarray
    test: np.ndarray
    labels: np.ndarray
    groups: np.ndarray
    test_rows: np.ndarray


class _Column:
    """A column filled chunk by chunk in ``dtype`` (int32, or int8 for labels), widened to int64 (once, the same
    values) if a value needs it."""

    def __init__(self, size: int, dtype: type[np.signedinteger] = np.int32) -> None:
        self.values: np.ndarray = np.empty(size, dtype)
        self.filled = 0

    def add(self, chunk: np.ndarray) -> None:
        info = np.iinfo(self.values.dtype)
        if len(chunk) and self.values.dtype != np.int64 and (chunk.min() < info.min or chunk.max() > info.max):
            wide = np.empty(len(self.values), np.int64)  # untouched beyond what is filled, as the int32 one
            wide[: self.filled] = self.values[: self.filled]
            self.values = wide
        self.values[self.filled : self.filled + len(chunk)] = chunk
        self.filled += len(chunk)

    def done(self) -> np.ndarray:
        return self.values[: self.filled]


def split_uploads(prep: Prepared, rows: np.ndarray, labels: np.ndarray, seen: np.ndarray | None = None,
                  chunk: int | None = None) -> UploadSplit:
    """Split the uploads whose record ids are ``rows`` (the referee's key, `report.referee_rows`) and labels
    ``labels`` (U,) by their record's role (``test``, or training otherwise), ``chunk`` uploads at a time (default
    `SPLIT_CHUNK`). ``seen``: the ids as the server saw them (its pseudonyms, `server_users`); None: ``rows``,
    whose pseudonyms are their records' accounts.
    Equal, value for value, to ``te = (prep.roles == "test")[rows]``, ``np.flatnonzero(~te)``,
    ``np.flatnonzero(te)``, ``labels[~te]``, ``server_users(prep, seen)[~te]`` (``user_index[rows][~te]``
    without ``seen``) and ``rows[te]``."""
    step = chunk or SPLIT_CHUNK
    u = len(rows)
    if len(labels) != u or (seen is not None and len(seen) != u):
        raise ValueError(f"split_uploads needs one label and one seen id per upload; got {u} rows, {len(labels)} "
                         f"labels, {None if seen is None else len(seen)} seen ids.")
    # a first pass counts the test uploads, so that each column is allocated at its own length: columns of every
    # upload's length, sliced, kept the whole buffers alive through the training (24 bytes an upload held where
    # ~14 are filled: 0.35 GB more at ten million synthetic users, issue #38)
    n_test = 0
    for a in range(0, u, step):
        n_test += int(np.count_nonzero(prep.roles[np.asarray(rows[a : a + step], np.int64)] == "test"))
        drop_mapped_pages(rows)
    train, test, groups, test_rows = _Column(u - n_test), _Column(n_test), _Column(u - n_test), _Column(n_test)
    y = _Column(u - n_test, np.int8)  # class codes: one byte each (int64 on the wire)
    users_of = prep.ds.user_index.reshape(-1)  # without seen: the record's account, as `server_users` of rows
    for a in range(0, u, step):
        r = np.asarray(rows[a : a + step], np.int64)
        te = np.asarray(prep.roles[r] == "test", bool)  # the chunk's roles only (Roles: one byte a record)
        tr = ~te
        train.add(np.flatnonzero(tr) + a)
        test.add(np.flatnonzero(te) + a)
        test_rows.add(r[te])
        y.add(np.asarray(labels[a : a + step])[tr])
        users = users_of[r] if seen is None else server_users(prep, np.asarray(seen[a : a + step]))
        groups.add(users[tr])
        for m in (rows, labels, seen):  # the round's maps (Flower path): their pages back to the page cache
            if m is not None:
                drop_mapped_pages(m)
    return UploadSplit(train.done(), test.done(), y.done(), groups.done(), test_rows.done())
