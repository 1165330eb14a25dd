"""Scoring every target in bounded memory: row chunks whose results equal the unchunked computation.

At a million users the eavesdropper's targets are millions of uploads; scoring them all at once materialises
(targets x width) float64 intermediates (several GB). Scoring them ``ROW_CHUNK`` rows at a time gives the same
numbers bit for bit: elementwise steps are per row, each BLAS product row only depends on its own row as long as
no chunk is short (OpenBLAS multiplies small matrices with other kernels, which sum in another order, so the last
chunk takes the remainder instead of being short), and ``ROW_CHUNK`` is a multiple of the 8,192-row batches of
`fl_privtext.learn.MLPClassifier.logits`, so the MLP sees the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from fl_privtext.memory import distinct, first_of_runs, narrowest, positions

ROW_CHUNK = 1 << 16  # rows scored at once (a multiple of MLPClassifier.logits' 8,192-row batches)
# target users whose per-user float64 sums or figures are held at once (`fl_privtext.attacks.attribute.user_decisions`,
# the referee's per-user ceilings): (users, k) per block instead of per target user (issue #38)
USER_BLOCK = 1 << 18


def row_chunks(n: int, size: int = ROW_CHUNK) -> Iterator[slice]:
    """Slices covering ``range(n)`` in order, each ``size`` rows long except the last, which holds between
    ``size`` and ``2 * size - 1`` rows (or all ``n`` when ``n < 2 * size``)."""
    if size < 1:
        raise ValueError(f"size must be >= 1 row; got {size}.")
    full = max(n // size - 1, 0)  # chunks of exactly ``size`` rows; the last one takes the rest
    for i in range(full):
        yield slice(i * size, (i + 1) * size)
    yield slice(full * size, n)


def user_blocks(num_users: int, size: int | None = None) -> list[slice]:
    """Consecutive slices of ``range(num_users)``, each ``size`` (default `USER_BLOCK`, read when called) users
    long but the last; one slice when there are none."""
    size = USER_BLOCK if size is None else size
    if size < 1:
        raise ValueError(f"size must be >= 1 user; got {size}.")
    return [slice(lo, min(lo + size, num_users)) for lo in range(0, max(num_users, 1), size)]


def block_rows(inv: np.ndarray, block: slice) -> tuple[np.ndarray, np.ndarray]:
    """For rows whose users are ``inv`` (positions among the users), the rows of the users in ``block`` (a
    `user_blocks` slice): (their mask, in row order; their users' positions within the block)."""
    mine = (inv >= block.start) & (inv < block.stop)
    return mine, inv[mine] - block.start


def distinct_counts(users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(users, return_counts=True)`` with the counts in their narrowest type (`narrowest`): the same
    values from one sorted copy of the users (their own type), the first of each run marked and the runs' starts
    as int32 positions (`positions`), where ``np.unique`` also took int64 starts, their concatenated copy and int64
    differences (~24 bytes a user beside the sort; issue #38: every observed user's budget at 10M users)."""
    users = np.asarray(users).reshape(-1)
    if not len(users):
        return users.copy(), narrowest(np.zeros(0, np.int64))
    ordered = np.sort(users)
    first = first_of_runs(ordered)
    uniq = ordered[first]
    del ordered
    starts = positions(first)
    del first
    counts = np.empty_like(starts)
    np.subtract(starts[1:], starts[:-1], out=counts[:-1])
    counts[-1] = len(users) - starts[-1]
    return uniq, narrowest(counts)


def group_rows(users: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(users[rows], return_inverse=True)``'s two arrays (``rows`` None: every row): the sorted distinct
    users (U,) and each row's position among them (len(rows),), int32 while U < 2**31. One sorted copy of the rows'
    users, then the inverse by binary searches a `row_chunks` chunk at a time: ~21 bytes a row at the peak, where
    ``np.unique`` (a copy to flatten, an argsort, the sorted copy, a cumulative sum) reached ~50."""
    users = np.asarray(users).reshape(-1)
    uniq = distinct(users, rows)
    n = len(users) if rows is None else len(rows)
    inv = np.empty(n, np.int32 if len(uniq) < 2**31 else np.int64)
    for c in row_chunks(n):
        inv[c] = np.searchsorted(uniq, users[c] if rows is None else users[rows[c]])
    return uniq, inv


def group_sizes(inv: np.ndarray, num_groups: int) -> np.ndarray:
    """``np.bincount(inv, minlength=num_groups)`` (each group's rows, for `group_rows`' inverse ``inv``) in the
    narrowest type that holds it (`narrowest`), counted `row_chunks` rows at a time: np.bincount widens ``inv`` to
    int64 whole and answers in int64, 8 bytes a row and 8 a group (~36 bytes a user beside the per-user sums it
    divides, issue #38); the same counts."""
    counts = np.zeros(num_groups, np.int32 if len(inv) < 2**31 else np.int64)
    for c in row_chunks(len(inv)):
        np.add.at(counts, inv[c], 1)
    return narrowest(counts)


def gathered_mean(values: np.ndarray, index: np.ndarray, leaf: int = ROW_CHUNK) -> float:
    """``values[index].mean()`` for a float64 table ``values`` and an (N,) ``index``, without the (N,) float64
    gather (8 bytes a target, issue #38), bit for bit: numpy sums a contiguous float64 array pairwise (halves
    rounded down to a multiple of 8 until a block of at most 128 is summed in 8 lanes), so a subtree of that
    recursion whose range is at most ``leaf`` long, gathered and summed alone, is the same number, and the
    subtrees are added as the recursion adds them (tests/attacks/test_chunks.py compares with numpy's own)."""
    values = np.asarray(values, np.float64)
    leaf = max(leaf, 128)  # numpy's recursion stops at 128: a smaller leaf would split where numpy does not

    def pairwise(lo: int, n: int) -> np.float64:
        if n <= leaf:
            return np.add.reduce(values[index[lo : lo + n]])  # type: ignore[no-any-return]
        half = n // 2
        half -= half % 8
        return pairwise(lo, half) + pairwise(lo + half, n - half)

    n = len(index)
    return float(pairwise(0, n) / n) if n else float(np.float64(np.nan))
