"""Users -> virtual clients (Flower SuperNodes): each client holds whole users, every row lands on exactly one client.

The assignment of USERS to clients is done by flwr-datasets partitioners on a small per-user Hugging Face dataset
(one row per user: its id and, for Dirichlet, its majority label); users are then expanded back to their rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fl_privtext.data.schema import TextDataset
from fl_privtext.data.splits import seed_generator
from fl_privtext.memory import narrowest

__all__ = ["SCHEMES", "partition_users", "row_dtype", "user_majority_labels"]

SCHEMES = ("iid", "dirichlet", "natural", "shard", "linear", "square", "exponential")
LABEL_SCHEMES = ("dirichlet", "shard")  # skew the label distribution: need a task label
SIZE_SCHEMES = {"linear": "LinearPartitioner", "square": "SquarePartitioner", "exponential": "ExponentialPartitioner"}


def _validate_rows(rows: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    if rows is None:
        return np.arange(n, dtype=np.int64)
    r = np.asarray(rows)
    if r.dtype == bool:
        if r.shape != (n,):
            raise ValueError(f"A boolean row mask must have shape ({n},), got {r.shape}.")
        return np.flatnonzero(r).astype(np.int64)
    if r.ndim != 1 or (r.size and not np.issubdtype(r.dtype, np.integer)):
        raise ValueError(
            f"rows must be a 1-D array of row indices (or a boolean mask), got shape {r.shape} dtype {r.dtype}."
        )
    r = np.sort(r.astype(np.int64))
    if r.size and (r[0] < 0 or r[-1] >= n):
        raise ValueError(f"rows must be indices in [0, {n - 1}]; got values in [{r[0]}, {r[-1]}].")
    if r.size > 1 and (np.diff(r) == 0).any():
        raise ValueError("rows must not repeat a row index (every row goes to exactly one client).")
    return r


def user_majority_labels(labels: np.ndarray, user_of_row: np.ndarray, num_users: int) -> np.ndarray:
    """(U,) the most frequent label of each user (ties -> the smallest label; a user with only -1 rows -> -1)."""
    labels = np.asarray(labels, dtype=np.int64)
    k = int(labels.max()) + 2 if labels.size else 1  # column 0 holds label -1
    counts = np.zeros((num_users, k), dtype=np.int64)
    np.add.at(counts, (user_of_row, labels + 1), 1)
    labelled = counts[:, 1:]
    out = np.where(labelled.sum(axis=1) > 0, labelled.argmax(axis=1) if labelled.shape[1] else -1, -1)
    return out.astype(np.int64)


def _fill_empty(client_of_user: np.ndarray, num_clients: int) -> np.ndarray:
    """Move users from the largest clients to empty ones so that every client holds at least one user."""
    sizes = np.bincount(client_of_user, minlength=num_clients)
    for empty in np.flatnonzero(sizes == 0):
        donor = int(sizes.argmax())
        victim = int(np.flatnonzero(client_of_user == donor)[-1])
        client_of_user[victim] = empty
        sizes[donor] -= 1
        sizes[empty] += 1
    return client_of_user


def partition_users(
    ds: TextDataset,
    rows: Sequence[int] | np.ndarray | None = None,
    *,
    num_clients: int | None,
    scheme: str = "iid",
    alpha: float = 0.5,
    seed: int | np.random.Generator,
) -> list[np.ndarray]:
    """Row indices (ascending; `row_dtype`: int32 below 2**31 records) per virtual client for the rows `rows` of
    `ds` (None: all rows).

    Every row appears exactly once, all rows of a user go to the same client, and every client gets >= 1 user.

    - "iid": users shuffled (seeded), then `IidPartitioner` deals them into equal-size (by users) shards.
    - "dirichlet": `DirichletPartitioner` over users keyed by each user's majority label, with concentration `alpha`
      (small alpha -> each client sees few labels); clients left empty by the draw get a user from the largest client.
    - "natural": `NaturalIdPartitioner` on the user id gives one partition per user, in user-id order; with
      `num_clients` = None / 0 (or the number of users) each user is its own client, with fewer clients consecutive
      users (in id order, no randomness) are grouped into `num_clients` equal-size (by users) clients.

    - "shard": `ShardPartitioner` (McMahan et al. 2017's pathological split): users sorted by majority label, cut
      into 2 shards per client, each client gets 2 shards (so about 2 labels).
    - "linear" / "square" / "exponential": flwr-datasets' size-based partitioners: client i gets a number of
      (shuffled) users proportional to i+1, (i+1)^2 or e^i (unequal client sizes).

    More clients than users raises ValueError naming both numbers. Seeded and reproducible.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"Unknown partition scheme {scheme!r}; valid schemes are {list(SCHEMES)}.")
    rows_ = None if rows is None else _validate_rows(rows, len(ds))
    every = rows_ is None or len(rows_) == len(ds)  # all rows (sorted, distinct, in range: exactly 0..N-1)
    if every:  # every user is present: the renumbering is the dataset's own index (no copy, no sort of N rows)
        user_of_row = ds.user_index.reshape(-1)
        num_users = ds.num_users
    else:  # users of these rows, renumbered 0.. in user-id order (the dataset's cached index: integers, not strings)
        assert rows_ is not None
        present, user_of_row = np.unique(ds.user_index[rows_], return_inverse=True)
        user_of_row = user_of_row.reshape(-1)
        num_users = len(present)
    if num_users == 0:
        raise ValueError("Cannot partition an empty set of rows into clients.")
    if scheme == "natural" and (
        num_clients is None or (not isinstance(num_clients, bool) and num_clients == 0)
    ):
        num_clients = num_users  # flat configs cannot say None: 0 also means "one client per user"
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients!r}.")
    num_clients = int(num_clients)
    if num_clients > num_users:
        raise ValueError(
            f"num_clients={num_clients} is more than the {num_users} users in the selected rows; each client needs at "
            f"least one whole user (use at most {num_users} clients)."
        )

    import datasets
    from flwr_datasets.partitioner import (
        DirichletPartitioner,
        IidPartitioner,
        NaturalIdPartitioner,
        ShardPartitioner,
    )

    rng = seed_generator(seed, "data", "partition_users", scheme)
    client_of_user = np.full(num_users, -1, dtype=np.int64)
    if scheme == "natural":
        uniq = np.empty(num_users, dtype=ds.user_ids.dtype)  # the present users' ids, sorted
        uniq[user_of_row] = ds.user_ids if rows_ is None else ds.user_ids[rows_]
        part = NaturalIdPartitioner(partition_by="user_id")
        part.dataset = datasets.Dataset.from_dict({"user_id": uniq.tolist()})
        assert part.num_partitions == num_users
        pos = {u: i for i, u in enumerate(uniq.tolist())}
        # natural partition k (one user) -> client: contiguous runs of partitions, as np.array_split would cut them
        group = np.repeat(
            np.arange(num_clients), [len(c) for c in np.array_split(np.arange(num_users), num_clients)]
        )
        for pid, natural_id in part.partition_id_to_natural_id.items():
            client_of_user[pos[natural_id]] = group[pid]
    else:
        order = rng.permutation(num_users)  # per-user table in a random order (IID shards are contiguous)
        columns: dict[str, np.ndarray] = {"uid": order}
        if scheme in LABEL_SCHEMES:
            if not ds.has_labels:
                raise ValueError(
                    f"scheme {scheme!r} skews the label distribution, but dataset {ds.name!r} has no task label; "
                    "use 'iid' or 'natural'."
                )
            labels = ds.label_codes if rows_ is None else ds.label_codes[rows_]
            majority = user_majority_labels(labels, user_of_row, num_users)
            columns["label"] = majority[order]
        if scheme == "dirichlet":
            if (
                isinstance(alpha, bool)
                or not isinstance(alpha, (int, float, np.floating))
                or not float(alpha) > 0
            ):
                raise ValueError(f"alpha (Dirichlet concentration) must be a number > 0, got {alpha!r}.")
            partitioner: Any = DirichletPartitioner(
                num_partitions=num_clients,
                partition_by="label",
                alpha=float(alpha),
                min_partition_size=0,  # empty clients are refilled below instead of re-drawing
                self_balancing=False,
                shuffle=False,
                seed=int(rng.integers(2**32)),
            )
        elif scheme == "shard":
            if num_users < 2 * num_clients:
                raise ValueError(f"scheme 'shard' deals 2 shards of users per client: {num_clients} clients need at "
                                 f"least {2 * num_clients} users, got {num_users}.")
            partitioner = ShardPartitioner(num_partitions=num_clients, partition_by="label",
                                           num_shards_per_partition=2, keep_incomplete_shard=True, shuffle=True,
                                           seed=int(rng.integers(2**32)))
        elif scheme in SIZE_SCHEMES:
            import flwr_datasets.partitioner as partitioners

            partitioner = getattr(partitioners, SIZE_SCHEMES[scheme])(num_partitions=num_clients)
        else:
            partitioner = IidPartitioner(num_partitions=num_clients)
        if scheme == "shard":  # the shards are cut from the users sorted by label
            by_label = np.argsort(columns["label"], kind="stable")
            columns = {k: v[by_label] for k, v in columns.items()}
        partitioner.dataset = _user_table(columns, f"{scheme}-{num_users}-{num_clients}")
        try:
            for pid in range(num_clients):  # flwr-datasets' public API: one partition (a Dataset) per client
                # [:] reads the column in one batch (a lazy Column converts row by row: 3.4 s per 200k users)
                uid = partitioner.load_partition(pid).with_format("numpy")[:]["uid"]  # an empty one: float64
                client_of_user[np.asarray(uid, dtype=np.int64)] = pid
        except ValueError as exc:
            raise ValueError(f"flwr-datasets' {type(partitioner).__name__} cannot split {num_users} users into "
                             f"{num_clients} clients: {str(exc).splitlines()[0]}") from None
        left = np.flatnonzero(client_of_user < 0)  # users no partition took (a shard remainder): dealt in turn
        client_of_user[left] = np.arange(len(left)) % num_clients
        client_of_user = _fill_empty(client_of_user, num_clients)

    # per row, its client in the narrowest type (2 bytes a record for up to 32,767 clients, not 8: issue #38)
    client_of_row = narrowest(client_of_user)[user_of_row]
    by_client, bounds = _stable_order(client_of_row, num_clients, row_dtype(len(ds)))
    del client_of_row
    if every:  # the positions are the row ids: the shards are views of one array (no second copy of N ids)
        return np.split(by_client, bounds)
    assert rows_ is not None
    rows_ = rows_.astype(by_client.dtype)
    return [rows_[part] for part in np.split(by_client, bounds)]


def _user_table(columns: dict[str, np.ndarray], name: str) -> Any:
    """The per-user table the partitioners read (int64 columns, as ``Dataset.from_dict`` of Python ints types
    them), made from the arrays without a Python int per user and with a fingerprint of its own: ``from_dict``
    of lists made one (36 bytes a user), and a Dataset without a fingerprint hashes its whole table by pickling
    it (several copies: 80-90 bytes a user at once, the generate stage's peak at 10M users, issue #38). The
    fingerprint only names the in-memory table's derived views (no cache file is read or written for it)."""
    import datasets
    import pyarrow as pa

    table = pa.table({k: pa.array(np.asarray(v, np.int64)) for k, v in columns.items()})
    return datasets.Dataset(datasets.table.InMemoryTable(table), fingerprint=f"fl_privtext-users-{name}")


def row_dtype(n: int) -> np.dtype:
    """The integer type of record ids below ``n``: int32 (int64 from 2**31 records). The shards are held by the
    driver through a run (as int64: 8 bytes a record, 0.29 GB at 10M synthetic users, issue #38); their readers
    widen what they take (`fl_privtext.client.upload`), and their digest and snapshot are the int64 ones."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


SORT_ROWS = 1 << 20  # entries of the client column sorted at once (`_stable_order`)


def _stable_order(keys: np.ndarray, num_keys: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(``np.argsort(keys, kind="stable")`` as ``dtype``, the start of each key's run but the first): the same
    order (positions ascend within a key), built `SORT_ROWS` keys at a time: each chunk's stable order goes after the
    earlier chunks' positions of the same key. The whole sort returned int64 and its radix pass took another
    int64 buffer (16 bytes a record at once, for an array then held as 8: issue #38)."""
    counts = np.bincount(keys, minlength=num_keys)
    out = np.empty(len(keys), dtype)
    cursor = np.concatenate(([0], np.cumsum(counts)[:-1]))  # where each key's next position goes
    for lo in range(0, len(keys), SORT_ROWS):
        part = keys[lo : lo + SORT_ROWS]
        order = np.argsort(part, kind="stable")
        here = np.bincount(part, minlength=num_keys)
        first = np.concatenate(([0], np.cumsum(here)[:-1]))  # each key's start within the chunk's order
        out[np.arange(len(part)) + np.repeat(cursor - first, here)] = order + lo
        cursor += here
    return out, np.cumsum(counts)[:-1]
