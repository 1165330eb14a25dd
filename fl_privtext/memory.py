"""Process memory: the run's budget (``run.memory-gb``), checked before anything starts, and freed arrays given
back to the operating system (glibc's allocator keeps many of them).

glibc serves an allocation above its mmap threshold with its own mapping, returned to the OS when freed; below it,
from the heap, which keeps freed memory for reuse. The threshold starts at 128 KiB but rises to the size of every
mapped block freed (up to 32 MiB), so after the first large temporary, arrays of a few MiB (a chunk of uploads, a
batch of scores) come from the heap and their memory stays resident after they are freed. Pinning the threshold
(which also switches the rise off) returns them: the driver's peak RSS of the plain loop at 200,000 synthetic users
fell from 2.10 GB to 1.60 GB with the same results (benchmarks/README.md, "Scale"). A no-op where the C library is
not glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import mmap
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # bytes: glibc's own initial value, pinned


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once: ``ctypes.util.find_library`` runs ``ldconfig -p`` in a child process on every
    call, and `drop_object_store_pages` runs after every reply (a fork of the driver each time, whose pages the
    benchmarks' process-tree sampler could count twice while the child lived). OSError where there is none."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def return_freed_arrays() -> bool:
    """Pin glibc's mmap threshold at ``MMAP_THRESHOLD`` for this process; True when it was set (glibc), False
    elsewhere (nothing changed). Idempotent; cheap enough to call before every large stage."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):  # no libc found, or one without mallopt (musl)
        return False


def release_arrow_memory() -> None:
    """Give the memory Arrow's allocator holds free back to the OS (``pyarrow.default_memory_pool()``'s
    ``release_unused``; a no-op where pyarrow is not imported). Its mimalloc pool keeps what Arrow freed for reuse:
    the dataset's user lookup (the distinct ids, their hash table and sort) left ~87 bytes a user resident in the
    driver through the run (0.26 GB at 3M synthetic users, issue #38), which no later Arrow work reused."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


def drop_mapped_pages(array: Any) -> bool:
    """Drop this process's resident pages of the read-only file mapping under ``array`` (a `numpy.memmap` of the
    feature cache, or a view of one): ``madvise(MADV_DONTNEED)``. The file's pages stay in the OS page cache (no
    process's RSS) and a later read faults them back in from there, with the same bytes: a client's upload reads
    its rows of the whole cache, and without this every Ray actor keeps the pages of every row it ever read
    resident (one copy of the features per actor in the process tree's RSS, issue #38). True when pages were
    dropped; False for anything else (an in-memory array, no mmap.madvise on this platform)."""
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        if getattr(base, "mode", None) in ("c", "copyonwrite"):  # a private mapping: dropping would lose its writes
            return False
        base = getattr(base, "_mmap", None) or getattr(base, "base", None)
    if base is None or base.closed or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    try:
        base.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError):
        return False
    return True


def drop_file_pages(path: str | os.PathLike[str]) -> int:
    """Drop this process's resident pages of every read-only mapping of the file ``path`` (however it was mapped:
    pyarrow's memory map of a dataset's Arrow file has no Python `mmap` to call `drop_mapped_pages` on), found in
    /proc/self/maps: ``madvise(MADV_DONTNEED)``. As there, the pages stay in the OS page cache and a later read
    faults them back with the same bytes; a writable mapping is left alone. The synthetic dataset's Arrow file is
    read whole by its fingerprint and by extraction, and its pages then stayed in the driver's and each actor's
    RSS through the run (0.69 GB at 1M users, issue #38). Returns the bytes advised (0 off Linux or unmapped)."""
    target = os.path.realpath(path)
    return _drop_mappings(lambda perms, name: name == target and "w" not in perms, target)


OBJECT_STORE_PREFIX = "/dev/shm/plasma"  # Ray's shared-memory object store file, mapped by its driver and workers


def drop_object_store_pages(prefix: str = OBJECT_STORE_PREFIX) -> int:
    """Drop this process's resident pages of Ray's shared-memory object store (the ``/dev/shm/plasma*`` file that
    Ray maps into the driver and every worker): ``madvise(MADV_DONTNEED)`` on each shared mapping of it. A shared
    mapping's pages live in the file (tmpfs), not in the process: dropping them unmaps them from this process
    only, and a later access (Ray reading or writing an object there) faults the same bytes back, so nothing Ray
    holds changes. Every reply the driver fetches from a client actor passes through the store; the pages it read
    stayed mapped after the object was freed, counted in the driver's RSS for the rest of the run (67 MB at 1M
    users, ~10x at 10M: the store's footprint grows with the replies, issue #38). Returns the bytes advised (0 off
    Linux or where Ray's store is not mapped, and when no shared-memory page is resident in this process: then
    there is nothing to drop, and /proc/self/maps is not read). ``prefix``: the files whose shared mappings are
    dropped."""
    if _rss_shmem_kib() == 0:  # an actor drops twice per message; /proc/self/status is read in microseconds
        return 0
    return _drop_mappings(lambda perms, name: perms.endswith("s") and name.startswith(prefix), prefix)


def _rss_shmem_kib() -> int:
    """This process's resident shared-memory pages (``RssShmem`` of /proc/self/status, KiB); -1 when unknown."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssShmem:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def _drop_mappings(wanted: Callable[[str, str], bool], needle: str = "") -> int:
    """``madvise(MADV_DONTNEED)`` on every mapping of /proc/self/maps for which ``wanted(perms, path)`` is true
    (``path`` without the kernel's " (deleted)" mark); the bytes advised (0 off Linux). Only the lines that contain
    ``needle`` (a part of every wanted path) are parsed: a Ray worker maps a few thousand regions, and parsing every
    line in Python took ~2 ms, and an actor drops the store's pages twice per message (issue #38)."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    ranges: list[tuple[int, int]] = []
    key = os.fsencode(needle)
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = [b for b in f.read().splitlines() if key in b]
        for raw in lines:
            parts = os.fsdecode(raw).split(maxsplit=5)
            if len(parts) < 6:
                continue
            name = parts[5].removesuffix(" (deleted)")
            if wanted(parts[1], name):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ranges.append((lo, hi))
        libc = _libc()
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    done = 0
    for lo, hi in ranges:
        if madvise(lo, hi - lo, mmap.MADV_DONTNEED) == 0:
            done += hi - lo
    return done


def drop_dataset_pages(ds: Any) -> int:
    """Drop this process's resident pages of the Arrow files a dataset (`fl_privtext.data.TextDataset`) is mapped
    from (`drop_file_pages`): its fingerprint and the extraction read every text, and the attack reads the texts of
    its public and target uploads scattered over the file; those pages otherwise stay in the RSS of the driver and
    of each actor until the process ends (the synthetic file: 0.69 GB at 1M users, issue #38). Rows read later
    fault back in from the page cache. The columns the dataset holds on disk (its users, labels, attributes, and the
    roles and shards of its split: ``ds.held_columns()``, `on_disk`) go too. Returns the bytes advised of the files
    (0 for an in-memory table)."""
    for column in getattr(ds, "held_columns", list)():
        drop_mapped_pages(column)
    files = getattr(getattr(ds, "table", None), "cache_files", None) or ()
    return sum(drop_file_pages(f["filename"]) for f in files if f.get("filename"))


GB = 1024**3
# The calibrated model of a run's peak resident memory, summed over the process tree (driver, Ray, actors), from
# benchmarks/bench_scale.py (GloVe, 50 dimensions, 2 local actors; benchmarks/README.md, issue #38; the earlier
# calibrations, 2.8 float copies a record down to half a copy, are in the sessions' sections there). Since the
# uploads live on disk between stages and the per-record columns are held in their narrowest types, two things grow:
# - the population: integer columns (users, roles, shards, labels, the eavesdropper's record ids, the referee's
#   per-user sums), ``COLUMN_BYTES`` a record plus ``COPIES`` float copies of a representation as a hedge for wider
#   ones (never measured at scale beyond GloVe's 50 dimensions). Measured (twenty-third session, RSS + /dev/shm, at
#   6cc1f6b) at the same reply size (365,893 records), 1M users / 10 clients 1.99 GB and 10M / 100 clients 2.51 GB:
#   17 bytes a record (the eighteenth session's 58 before the uploads, record ids and per-user sums went to disk);
# - one reply: a client's whole upload crosses the driver, its actor and Ray's object store at once (the reply's
#   bytes, their serialised and deserialised copies, the spill's buffer; two actors' replies in flight), about
#   ``REPLY_COPIES`` copies of the largest reply: 1M users with 10 clients (366k records a reply, 79 MB) peaked
#   in the upload rounds at 1.99 GB, 0.33 GB above the same rounds with 100 clients (1.66 GB, 7.9 MB a reply): ~5
#   copies.
# The constants put the estimate above every measured peak, by 7-30% (twenty-third session: 10M / 100 clients 2.51
# GB, estimate 3.24; 1M / 10 1.99: 2.32; 1M / 100 1.74: 1.99; 100k / 100 1.69: 1.86; 10k / 100 1.63: 1.85), as a
# budget check should be, without refusing a run that fits: the twenty-second session's constants (60 bytes a record,
# 7 reply copies) put 10M users at 4.7 GB, refusing under run.memory-gb = 4 a run that peaks at 2.5 (the earlier
# calibrations' figures are in benchmarks/README.md).
BASE_GB = 1.25
ACTOR_GB = 0.3
COPIES = 0.05
COLUMN_BYTES = 20
REPLY_COPIES = 5
REPLY_EXTRA_BYTES = 16  # a reply's labels and record ids, 8 bytes each on the wire


def machine_memory_gb() -> float:
    """What ``run.memory-gb = 0`` (auto) stands for: the memory available to new work on this machine now
    (MemAvailable), or the physical memory where /proc/meminfo is not there."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / GB
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB


def estimate_peak_gb(records: int, dim: int, actors: int, reply_records: int | None = None) -> float:
    """The peak resident memory of a run over ``records`` records of ``dim``-dimensional representations with
    ``actors`` local Ray actors, whose largest reply carries ``reply_records`` uploads (default ``records``: one
    client), by the calibrated model above (GB)."""
    reply = records if reply_records is None else reply_records
    return (BASE_GB + ACTOR_GB * actors + records * (COPIES * 4 * dim + COLUMN_BYTES) / GB
            + reply * REPLY_COPIES * (4 * dim + REPLY_EXTRA_BYTES) / GB)


def check_memory_budget(budget_gb: float, records: int, dim: int, actors: int,
                        reply_records: int | None = None) -> float:
    """The budget in GB (``run.memory-gb``; 0 = `machine_memory_gb`); a run whose estimated peak exceeds it is
    refused in one line, before anything starts, naming the estimate and what to change."""
    budget = budget_gb if budget_gb > 0 else machine_memory_gb()
    need = estimate_peak_gb(records, dim, actors, reply_records)
    if need > budget:
        source = f"run.memory-gb = {budget_gb:g}" if budget_gb > 0 else f"the {budget:.1f} GB this machine has free"
        raise ValueError(f"This run needs about {need:.1f} GB at its peak ({records:,} records of {dim} dimensions, "
                         f"{actors} local actors, up to {reply_records if reply_records is not None else records:,} in one "
                         f"reply; benchmarks/README.md, 'memory') and {source} is less: raise run.memory-gb, or "
                         "simulate fewer users (data.options), more clients (federation.num-clients), or a "
                         "narrower extractor.")
    return budget


# -- arrays on disk between stages ---------------------------------------------------------------------------
# Rows gathered at once by `take_rows` and `Spill.gather` before this process's pages of the mapped source are
# dropped: the transient resident set is at most this many rows' pages (a 50-dimensional float32 row is 200 bytes,
# so 16,384 scattered rows touch at most 64 MiB of pages). The results do not depend on it (rows are copied, not
# computed): tests/test_memory.py checks two sizes.
CHUNK_ROWS = 1 << 14
SPAN_BYTES = 1 << 25  # at most this much of a mapped file between two page drops (`take_rows`)


def _chunk_rows(chunk: int | None) -> int:
    """Rows per chunk: ``chunk``, or `CHUNK_ROWS` where it is None; at least one."""
    step = CHUNK_ROWS if chunk is None else chunk
    if step < 1:
        raise ValueError(f"chunk must be >= 1 row; got {step}.")
    return step


def narrowest(a: np.ndarray, *, copy: bool = True) -> np.ndarray:
    """Integer ``a`` in the narrowest of int8 / int16 / int32 / int64 that holds its values (the same values):
    per-record columns held through a run (labels, users, record ids, attribute values) take 1-4 bytes a record
    instead of 8 (issue #38). Readers that do arithmetic on them widen what they take. ``copy=False``: ``a``
    itself where it is already in that type (``astype``'s rule)."""
    a = np.asarray(a)
    if not len(a) or a.dtype.kind not in "iu":
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return a.astype(t, copy=copy)
    return a.astype(np.int64, copy=copy)


def distinct(a: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """``np.unique(a[rows])`` (``rows`` None: all of ``a``) of an integer (or boolean) array: its sorted distinct
    values in its own dtype, through one sorted copy and a mask (~6 bytes a 4-byte value at the peak, numpy's own
    buffers, unmapped when freed). Why: from numpy 2.3 ``np.unique`` without counts or indices collects the values
    in a C++ hash set, whose nodes are small heap blocks that tracemalloc does not see and glibc keeps after they are
    freed: 19.8 bytes a value at its peak and 12.1 still resident after it returned, for 11.7M int32 user ids (3.9M
    distinct; issue #38: the server's cross-validation sample of users at ten million synthetic users). Other
    dtypes go to ``np.unique``."""
    a = np.asarray(a).reshape(-1)
    if a.dtype.kind not in "biu":
        return np.unique(a if rows is None else a[rows])
    ordered = a.copy() if rows is None else a[rows]
    ordered.sort()
    return ordered[first_of_runs(ordered)]


def first_of_runs(ordered: np.ndarray) -> np.ndarray:
    """(N,) bool: True where sorted ``ordered`` starts a run of equal values (its first entry, where not empty)."""
    first = np.ones(len(ordered), bool)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def positions(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` in int32 (int64 from 2**31 entries), filled `CHUNK_ROWS` entries at a time: no int64
    copy of the positions (8 bytes each: ~0.23 GB for the 29M targets of 10M synthetic users, issue #38)."""
    mask = np.asarray(mask, bool).reshape(-1)
    out = np.empty(int(np.count_nonzero(mask)), np.int32 if len(mask) < 2**31 else np.int64)
    at = 0
    for lo in range(0, len(mask), CHUNK_ROWS):
        rows = np.flatnonzero(mask[lo : lo + CHUNK_ROWS])
        out[at : at + len(rows)] = rows + lo
        at += len(rows)
    return out


def on_disk(a: np.ndarray | Sequence[np.ndarray], folder: str | os.PathLike[str] | None = None) -> np.ndarray:
    """``a`` (the same dtype, shape and values; a sequence of arrays: their concatenation, written part by part)
    as a read-only array over a shared read-only map of a file in ``folder`` (None: the temporary folder), written
    through the page cache and unlinked once mapped (its disk space goes with the map). A per-record column the
    driver holds through a run but reads only in passes (the users, labels, roles and shards of a file-backed
    dataset, `fl_privtext.data.TextDataset.hold`) then costs this process no resident memory between the passes:
    the pages a pass faults in stay in its RSS only until `drop_mapped_pages`. Views of the result keep it (their
    base) and its map alive. Nothing to write (no bytes): an in-memory array."""
    parts = [np.ascontiguousarray(a)] if isinstance(a, np.ndarray) else [np.ascontiguousarray(p) for p in a]
    rows = sum(len(p) for p in parts)
    shape, dtype = (rows, *parts[0].shape[1:]), parts[0].dtype
    if not sum(p.nbytes for p in parts):
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    fd, path = tempfile.mkstemp(prefix="column-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            for p in parts:
                if p.dtype != dtype or p.shape[1:] != shape[1:]:
                    raise ValueError(f"on_disk: parts of {dtype} {shape[1:]} rows; got {p.dtype} {p.shape[1:]}.")
                f.write(p.data)
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    finally:
        os.unlink(path)
    return np.ndarray(shape, dtype, buffer=mapped)


def is_mapped(array: Any) -> bool:
    """Whether ``array`` is a `numpy.memmap` or a view of one (what `take_rows` reads in chunks)."""
    return isinstance(array, np.memmap) or isinstance(getattr(array, "base", None), np.memmap)


def take_rows(array: np.ndarray, index: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """``array[index]`` (``index``: a boolean mask or integer positions) as an in-memory array, read ``chunk``
    rows at a time from a memory-mapped ``array`` whose pages this process drops after each chunk: the resident
    cost is the result, not the result plus every page of the map it touched (which the kernel counts in the
    process's RSS until the map goes). An in-memory ``array`` is indexed at once (the same bytes).

    A chunk also spans at most `SPAN_BYTES` of the file: the kernel maps the cached neighbours of every page a read
    faults in (fault-around, 64 KB by default), so a few thousand rows scattered over the whole file (a client's
    test rows: one every ~10 pages) made the whole file resident at once: 381 MB of the 1M-user feature cache in one
    Ray actor (issue #38), and 64 MB of a 64 MB map for 6,554 rows in the test. Rows are read in file order (an
    unsorted ``index`` is sorted and the result put back in its order: the same array)."""
    index = np.asarray(index)
    if index.dtype == bool:
        index = np.flatnonzero(index)
    if not is_mapped(array):
        return np.asarray(array[index])
    index = index.astype(np.int64, copy=False)  # narrowed positions (`narrowest`) would overflow the span arithmetic
    step = _chunk_rows(chunk)
    out = np.empty((len(index), *array.shape[1:]), array.dtype)
    if not len(index):
        return out
    if bool((index < 0).any()):
        index = np.where(index < 0, index + len(array), index)
    order = None if bool(np.all(index[1:] >= index[:-1])) else np.argsort(index, kind="stable")
    pos = index if order is None else index[order]
    if pos[0] < 0 or pos[-1] >= len(array):
        raise IndexError(f"take_rows: index {int(pos[0] if pos[0] < 0 else pos[-1])} is out of bounds for "
                         f"{len(array)} rows")
    span = max(1, SPAN_BYTES // max(int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize, 1))
    # each chunk is gathered straight from the map into its place (``np.take`` with ``out``; "clip" only so that
    # numpy writes into ``out`` directly instead of through a buffer: every position is in bounds, checked above):
    # ``out[a:b] = array[pos[a:b]]`` made a temporary of every chunk, a fresh mapping of zeroed pages each time
    # (`MMAP_THRESHOLD`), and a second copy; a pass over a map cost ~3x a pass over the same rows in memory (issue #38:
    # the attacks read their targets' uploads from a map on the Flower path, in memory on the plain loop's)
    buffer = None if order is None else np.empty((min(step, len(pos)), *array.shape[1:]), array.dtype)
    a = 0
    while a < len(pos):
        b = max(a + 1, min(a + step, int(np.searchsorted(pos, pos[a] + span, "left"))))
        if order is None:
            np.take(array, pos[a:b], axis=0, out=out[a:b], mode="clip")
        else:
            assert buffer is not None
            np.take(array, pos[a:b], axis=0, out=buffer[: b - a], mode="clip")
            out[order[a:b]] = buffer[: b - a]
        drop_mapped_pages(array)
        a = b
    return out


def is_sorted(a: np.ndarray, *, strict: bool = False, chunk: int | None = None) -> bool:
    """Whether 1-D ``a`` is non-decreasing (``strict``: increasing), read ``chunk`` entries at a time with this
    process's pages of a mapped ``a`` dropped after each: no temporary the size of ``a``. ``np.all(np.diff(a) >= 0)``
    made a difference array and a mask of it (9 bytes an int64 entry) and faulted in every page of a mapped ``a``:
    0.54 GB above the driver's floor at 10M users for the record ids of the round it had just merged (issue #38)."""
    step = _chunk_rows(chunk)
    for i in range(0, len(a), step):
        block = np.asarray(a[max(i - 1, 0) : i + step])  # one entry before the chunk: the order across its boundary
        ok = bool(np.all(block[1:] > block[:-1])) if strict else bool(np.all(block[1:] >= block[:-1]))
        drop_mapped_pages(a)
        if not ok:
            return False
    return True


def read_whole(x: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """``np.array(x)`` (the same dtype, shape and values, in memory), read ``chunk`` rows at a time from a
    memory-mapped ``x`` whose pages this process drops after each (`take_rows` without an index array): the
    resident cost is the copy, not the copy plus every page of the map. An in-memory ``x`` is copied at once."""
    if not is_mapped(x):
        return np.array(x)
    step = _chunk_rows(chunk)
    out = np.empty(x.shape, x.dtype)
    for a in range(0, len(x), step):
        out[a : a + step] = x[a : a + step]
        drop_mapped_pages(x)
    return out


def column_mean(x: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """``x.mean(axis=0, dtype=np.float64)`` with the same bits, read ``chunk`` rows at a time from a memory-mapped
    ``x`` whose pages this process drops after each chunk (`take_rows`). numpy sums a C-ordered array over its
    first axis row after row, one float64 accumulator per column: carrying the running sum in as the first row
    of the next chunk's sum repeats that order exactly (a sum of per-chunk sums would not: its last bits differ,
    and the server's noise law is computed from this mean). An in-memory or non-contiguous ``x`` is averaged at
    once."""
    if not is_mapped(x) or not x.flags.c_contiguous or x.ndim != 2 or not len(x):
        return np.asarray(x.mean(axis=0, dtype=np.float64))
    step = _chunk_rows(chunk)
    total = np.zeros((1, x.shape[1]))
    for a in range(0, len(x), step):
        total = np.sum(np.concatenate([total, np.asarray(x[a : a + step], np.float64)]), axis=0, keepdims=True)
        drop_mapped_pages(x)
    return total[0] / len(x)


def rows_on_disk(source: np.ndarray, index: np.ndarray, folder: str | os.PathLike[str] | None = None,
                 chunk: int | None = None) -> np.ndarray:
    """``source[index]`` (a boolean mask or integer positions) as a read-only map of a file in ``folder`` (a
    `Spill`, copied ``chunk`` rows at a time with this process's pages of a mapped ``source`` dropped after each):
    the copy lives in the OS page cache, and what a reader faults in of it is dropped by `take_rows`,
    `column_mean` or `drop_mapped_pages`, instead of every row being resident (the server's training copy of
    its uploads, the attack's copy of its targets: ~0.6 GB each at 1M users, issue #38). The same bytes."""
    index = np.asarray(index)
    if index.dtype == bool:
        index = np.flatnonzero(index)
    spill = Spill(folder)
    spill.gather(source, index, "rows", chunk)
    return spill.mapped()["rows"]


class Spill:
    """Named arrays appended row block by row block to files in a folder of their own (written through the page
    cache, not held by this process), read back as read-only memory maps (`mapped`). A round's uploads arrive
    reply by reply; spilling each as it arrives lets its message go at once, instead of every reply and then their
    merged copy being resident together (two copies of the round at the server, issue #38). The files are unlinked
    once mapped: their disk space goes with the last reference to the maps."""

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix="spill-", dir=folder)
        self._files: dict[str, BinaryIO] = {}
        self._meta: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self.rows: dict[str, int] = {}

    def append(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Write ``arrays`` (name -> rows) after what each name already holds; a name's dtype and row shape are
        fixed by its first block."""
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            meta = (a.dtype, a.shape[1:])
            if name not in self._files:
                self._files[name] = open(os.path.join(self._dir, name), "wb")  # noqa: SIM115 (closed in mapped)
                self._meta[name], self.rows[name] = meta, 0
            elif meta != self._meta[name]:
                raise ValueError(f"Spill {name!r} holds rows of {self._meta[name][0]} {self._meta[name][1]}; got "
                                 f"{a.dtype} {a.shape[1:]}: every block of a name must have the same dtype and row "
                                 "shape.")
            self._files[name].write(a.data)
            self.rows[name] += len(a)

    def gather(self, source: np.ndarray, index: np.ndarray, name: str, chunk: int | None = None) -> None:
        """Append ``source[index]`` as ``name``, ``chunk`` rows at a time, dropping this process's pages of a
        mapped ``source`` after each (`take_rows`)."""
        step = _chunk_rows(chunk)
        for a in range(0, len(index), step):
            self.append({name: take_rows(source, index[a : a + step], step)})
        if not len(index):
            self.append({name: np.empty((0, *source.shape[1:]), source.dtype)})

    def __del__(self) -> None:  # never mapped (an error on the way): its files go now, not with the cache
        for name, f in getattr(self, "_files", {}).items():
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self._dir, name))
        with contextlib.suppress(OSError, AttributeError):
            os.rmdir(self._dir)

    def mapped(self) -> dict[str, np.ndarray]:
        """Every name's rows as a read-only map of its file (an empty array for a name with no rows); the files
        are closed and unlinked, so the spill takes no further blocks."""
        out: dict[str, np.ndarray] = {}
        for name, f in self._files.items():
            f.close()
            path = os.path.join(self._dir, name)
            dtype, shape = self._meta[name]
            n = self.rows[name]
            out[name] = (np.memmap(path, dtype=dtype, mode="r", shape=(n, *shape)) if n and dtype.itemsize
                         else np.zeros((n, *shape), dtype))
            os.unlink(path)
        self._files.clear()
        os.rmdir(self._dir)
        return out
