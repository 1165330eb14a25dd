"""On-disk embedding cache keyed by dataset content and extractor identity.

Layout of a cache directory (argument > env ``FL_PRIVTEXT_CACHE`` > ``~/.cache/fl_privtext``)::

    <cache_dir>/<key>.npy        # (N, dim) float32, dataset row order; read with np.load(mmap_mode="r")
    <cache_dir>/<key>.json       # sidecar: dataset fingerprint, extractor identity, shape, dtype, created,
                                 # chunk_rows and chunk_sha256 (a checksum per block of chunk_rows rows)
    <cache_dir>/<key>.lock       # flock target so that concurrent processes compute a key once
    <cache_dir>/<key>.parts/     # finished chunks of an extraction in progress (resumable; removed when done)
    <cache_dir>/file_hashes/     # memoised sha256 of model files (only in the resolved default dir)

``key = sha256(canonical JSON of {fingerprint, identity, layout})``: any change of the dataset content or of
anything that changes the extractor's outputs (model file hashes, pooling, max_length, tokenizer rules, code
version) gives a new key, i.e. invalidates the entry. Writes go to a temp file in the same directory and are
renamed with ``os.replace`` (atomic on POSIX), so readers never see a partial file and concurrent writers of
one key are safe.

Integrity: every entry records a sha256 per block of rows. `extract_cached` verifies them (and that every value is
finite) each time it maps an entry; a damaged block is reported in one line and re-extracted in place, so a bit
flipped on disk or a NaN written into the file never reaches a client. Entries written before checksums existed
are checked for finiteness and then given their checksums.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fl_privtext.datafiles import resolve_cache_dir
from fl_privtext.memory import drop_dataset_pages, drop_mapped_pages
from fl_privtext.progress import progress_bar

if TYPE_CHECKING:
    from fl_privtext.extract.base import Extractor

try:  # POSIX only; elsewhere concurrent processes may compute the same key twice (still safe).
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

RESUME_CHUNK = 1024  # rows per resumable extraction chunk: an interruption loses at most one chunk
# Rows to extract below which `extract_cached` keeps a GIL-holding extractor (GloVe) in this process rather than
# starting a pool of processes: a worker is a fresh interpreter that imports the package (torch included) and
# loads the vectors, ~4-5 s of CPU at load ~4, while one core extracts ~30,000 synthetic rows/s, so on 2 cores a
# pool gains from ~300,000 rows (200,000 synthetic users are 731,742 rows).
POOL_MIN_ROWS = 300_000
LAYOUT_VERSION = 1
_TMP_SUFFIX = ".tmp"
_STALE_TMP_AGE_S = 24 * 3600.0


def _atomic_write_bytes(path: Path, write: Any) -> None:
    """Call ``write(file)`` on a temp file next to ``path``, fsync, then ``os.replace`` it onto ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------------------------
# Content hashes of model files (part of an extractor's identity)

_HASH_MEMO: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of a file's full content, computed once per (path, mtime, size).

    Memoised in-process and in a small JSON sidecar under ``<default cache dir>/file_hashes/`` (so a Ray actor
    or a second run does not re-read a 90 MB weight file); the sidecar is trusted only while the file's path,
    size and mtime_ns are unchanged. An unwritable cache dir only disables the sidecar.
    """
    p = Path(path).resolve()
    st = p.stat()
    memo_key = (str(p), st.st_size, st.st_mtime_ns)
    with _HASH_LOCK:
        if memo_key in _HASH_MEMO:
            return _HASH_MEMO[memo_key]
    sidecar = (
        resolve_cache_dir() / "file_hashes" / (hashlib.sha256(str(p).encode()).hexdigest()[:32] + ".json")
    )
    digest: str | None = None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        rec = json.loads(sidecar.read_text())
        if (rec["path"], rec["size"], rec["mtime_ns"]) == memo_key:
            digest = str(rec["sha256"])
    if digest is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        digest = h.hexdigest()
        rec = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        try:
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write_bytes(sidecar, lambda f: f.write(json.dumps(rec).encode()))
        except OSError as e:  # read-only home, full disk: the in-process memo still works
            log.debug("could not write hash sidecar %s: %s", sidecar, e)
    with _HASH_LOCK:
        _HASH_MEMO[memo_key] = digest
    return digest


# ------------------------------------------------------------------------------------------------------------
# Embedding cache


class EmbeddingCache:
    """(N, dim) float32 arrays on disk, one ``<key>.npy`` per (dataset fingerprint, extractor identity)."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = resolve_cache_dir(cache_dir)

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.root)!r})"

    @staticmethod
    def key(fingerprint: str, identity: dict[str, Any]) -> str:
        """sha256 hex of the canonical JSON of the dataset fingerprint and the extractor identity."""
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ValueError(f"The dataset fingerprint must be a non-empty string, got {fingerprint!r}.")
        blob = json.dumps(
            {"layout": LAYOUT_VERSION, "fingerprint": fingerprint, "identity": identity},
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npy"

    def meta_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def load(self, key: str) -> np.ndarray | None:
        """Read-only memmap (N, dim) float32 of ``key``; None when absent or unreadable (a miss)."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            # np.memmap cannot map a zero-length payload; a zero-row array is still a valid entry.
            try:
                arr = np.load(path, allow_pickle=False)
                arr.setflags(write=False)
            except (ValueError, OSError, EOFError):
                log.warning("ignoring unreadable cache file %s: %s", path, e)
                return None
        if arr.ndim != 2 or arr.dtype != np.float32:
            log.warning("ignoring cache file %s with shape %s dtype %s", path, arr.shape, arr.dtype)
            return None
        return arr

    def load_rows(self, key: str, rows: Sequence[int] | np.ndarray) -> np.ndarray | None:
        """In-memory copy of just ``rows`` of ``key`` (a virtual client's users), or None on a miss.

        Memmap fancy indexing reads only the pages holding those rows.
        """
        arr = self.load(key)
        if arr is None:
            return None
        return np.array(arr[np.asarray(rows, dtype=np.int64)], dtype=np.float32)

    def store(self, key: str, array: np.ndarray, metadata: dict[str, Any] | None = None) -> np.ndarray:
        """Write ``array`` atomically (temp file + ``os.replace``), then its sidecar; return the memmap."""
        arr = np.ascontiguousarray(array, dtype=np.float32)
        if arr.ndim != 2:
            raise ValueError(f"The cache stores 2-D (N, dim) arrays, got shape {arr.shape}.")
        self.root.mkdir(parents=True, exist_ok=True)
        self._sweep_stale_temps()
        _atomic_write_bytes(self.path(key), lambda f: np.save(f, arr, allow_pickle=False))
        self._write_meta(key, arr.shape, {**(metadata or {}), **_checksums(arr, RESUME_CHUNK)})
        out = self.load(key)
        if out is None:  # pragma: no cover - only if another process wrote garbage under our key
            raise OSError(f"The cache file {self.path(key)} could not be read back after writing it.")
        return out

    def store_parts(self, key: str, parts: Sequence[Path], metadata: dict[str, Any] | None = None) -> np.ndarray:
        """Concatenate the (rows, dim) float32 ``.npy`` files ``parts`` (in order) into ``key``, one part in memory
        at a time (temp file + ``os.replace``, as `store`); return the memmap."""
        shapes = [np.load(p, mmap_mode="r").shape for p in parts]
        dims = {s[1] for s in shapes}
        if len(dims) != 1 or any(len(s) != 2 for s in shapes):
            raise ValueError(f"Extraction chunks disagree on their width: {sorted(dims)}.")
        n, dim = sum(s[0] for s in shapes), dims.pop()
        self.root.mkdir(parents=True, exist_ok=True)
        self._sweep_stale_temps()
        sums: list[str] = []
        finite = [True]

        def write(f: Any) -> None:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, dim)})
            for p in parts:
                block = np.ascontiguousarray(np.load(p), "<f4")  # hashed and written through its buffer, no bytes copy
                sums.append(hashlib.sha256(block.data).hexdigest())  # parts are blocks of chunk_rows rows, in order
                finite[0] = finite[0] and bool(np.isfinite(block).all())
                f.write(block)

        _atomic_write_bytes(self.path(key), write)
        self._write_meta(key, (n, dim), {**(metadata or {}), "chunk_rows": shapes[0][0] if shapes else RESUME_CHUNK,
                                         "chunk_sha256": sums})
        out = self.load(key)
        if out is None:  # pragma: no cover - only if another process wrote garbage under our key
            raise OSError(f"The cache file {self.path(key)} could not be read back after writing it.")
        if finite[0]:  # what `_damaged` would check, checked on the bytes just written: no second read of the file
            _VERIFIED.add(_stamp(self.path(key)))
        return out

    def _write_meta(self, key: str, shape: tuple[int, ...], metadata: dict[str, Any] | None) -> None:
        meta = {
            "key": key,
            "shape": list(shape),
            "dtype": "float32",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(metadata or {}),
        }
        blob = json.dumps(meta, indent=2, sort_keys=True, default=str).encode()
        _atomic_write_bytes(self.meta_path(key), lambda f: f.write(blob))

    def metadata(self, key: str) -> dict[str, Any] | None:
        """The JSON sidecar of ``key``, or None."""
        try:
            return dict(json.loads(self.meta_path(key).read_text()))
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Inter-process lock for computing ``key`` (flock on ``<key>.lock``; no-op without fcntl)."""
        if fcntl is None:  # pragma: no cover
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _sweep_stale_temps(self) -> None:
        # Temp files of interrupted writers never match "<key>.npy", so they are never loaded; delete old
        # ones.
        now = time.time()
        for tmp in self.root.glob(f".*{_TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > _STALE_TMP_AGE_S:
                    tmp.unlink()


class _DatasetLike(Protocol):
    """What extract_cached needs of ``fl_privtext.data.TextDataset``."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def texts(self) -> list[str]: ...

    @property
    def text_pairs(self) -> list[str] | None: ...

    def __len__(self) -> int: ...


def extract_cached(
    ds: _DatasetLike,
    extractor: Extractor,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    progress: bool = True,
    chunk_rows: int = RESUME_CHUNK,
    workers: int = 1,
    pool_min_rows: int = POOL_MIN_ROWS,
) -> np.ndarray:
    """Features of every row of ``ds`` as a read-only memmap (N, dim) float32 in dataset row order.

    Computed with ``extractor.extract(ds.texts, ds.text_pairs)`` on a miss and stored; later calls with the
    same dataset content and extractor identity only map the file (no model forward pass). Concurrent
    processes computing the same key serialise on a file lock, so the extraction runs once.

    ``workers``: processes that extract the chunks of a miss when the extractor's work holds the GIL
    (``processes = True``: GloVe's tokenisation is Python) and at least ``pool_min_rows`` rows are to be extracted
    (a worker's start costs seconds); the features, parts and checksums are the same bits whatever the count (each
    chunk is extracted alone and written in row order). Other extractors (torch) run in the calling thread with its
    torch / BLAS thread counts, which the caller sets (`fl_privtext.pipeline.prepare`: every core, restored after).
    """
    cache = EmbeddingCache(cache_dir)
    identity = extractor.identity()
    key = cache.key(ds.fingerprint, identity)
    n = len(ds)
    hit = cache.load(key)
    if hit is not None and hit.shape[0] == n and _verified(cache, key, hit):
        return hit
    with cache.lock(key):
        hit = cache.load(key)  # another process may have finished (or repaired) it while we waited
        if hit is not None and hit.shape[0] == n:
            bad = _damaged(cache, key, hit)
            out = _repair(cache, key, ds, extractor, bad) if bad else hit
            _VERIFIED.add(_stamp(cache.path(key)))
            return out
        t0 = time.perf_counter()
        meta: dict[str, Any] = {"fingerprint": ds.fingerprint, "identity": identity, "extractor": repr(extractor)}
        out = _extract_resumable(cache, key, ds, extractor, progress=progress, chunk_rows=chunk_rows, metadata=meta,
                                 workers=workers, pool_min_rows=pool_min_rows)
        seconds = time.perf_counter() - t0
        if out.ndim != 2 or out.shape[0] != n:
            raise ValueError(
                f"Extractor {extractor.name!r} returned shape {out.shape} for a dataset of {n} rows; "
                f"expected ({n}, dim)."
            )
        log.info("cached %s features of %d rows in %.1fs at %s", extractor.name, n, seconds, cache.path(key))
        _remove_parts(cache.root / f"{key}.parts")
        return out


def _checksums(arr: np.ndarray, rows: int) -> dict[str, Any]:
    """A sha256 per block of ``rows`` rows of ``arr`` (the sidecar's chunk_rows / chunk_sha256)."""
    sums = []
    for a in range(0, len(arr), rows):
        sums.append(hashlib.sha256(np.ascontiguousarray(arr[a : a + rows], "<f4").data).hexdigest())
        drop_mapped_pages(arr)  # a mapped array read whole would end resident (issue #38)
    return {"chunk_rows": rows, "chunk_sha256": sums}


_VERIFIED: set[tuple[object, ...]] = set()  # entries checked in this process: `_stamp`s


def _stamp(path: Path) -> tuple[object, ...]:
    """The version of an entry: (path, size, mtime_ns) of its ``.npy`` file and of its sidecar (whose checksums
    `_damaged` reads), the sidecar's None when it is missing."""
    def one(p: Path) -> tuple[int, int] | None:
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns

    return str(path.resolve()), one(path), one(path.with_suffix(".json"))


def _verified(cache: EmbeddingCache, key: str, arr: np.ndarray) -> bool:
    """Whether the entry passes `_damaged`'s checks, checked once per process and file version (a sweep maps the
    same entry for every point); a file written since (its mtime changes) is checked again."""
    stamp = _stamp(cache.path(key))
    if stamp in _VERIFIED:
        return True
    if _damaged(cache, key, arr):
        return False
    _VERIFIED.add(_stamp(cache.path(key)))
    return True


def _damaged(cache: EmbeddingCache, key: str, arr: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges of ``arr`` whose checksum differs from the sidecar's or that hold a NaN or infinite value; an
    entry without checksums (older layout) is checked for finiteness only and gets checksums written now."""
    meta = cache.metadata(key) or {}
    rows = int(meta.get("chunk_rows") or RESUME_CHUNK)
    sums = meta.get("chunk_sha256")
    if not isinstance(sums, list) or len(sums) != -(-len(arr) // rows):
        sums = None
    bad = []
    for i, a in enumerate(range(0, len(arr), rows)):
        block = np.asarray(arr[a : a + rows])
        if (sums is not None and hashlib.sha256(np.ascontiguousarray(block, "<f4").data).hexdigest()
                != sums[i]) or not np.isfinite(block).all():
            bad.append((a, min(len(arr), a + rows)))
        drop_mapped_pages(arr)  # the check reads the whole map: its pages go block by block (3M users: +1.2 GB)
    if sums is None and not bad:
        with contextlib.suppress(OSError):
            cache._write_meta(key, arr.shape, {**meta, **_checksums(arr, rows)})
    return bad


def _text_columns(ds: _DatasetLike) -> tuple[Sequence[str], Sequence[str] | None]:
    """The texts (and pairs) to extract: the dataset's lazy Arrow columns when it has them, else its lists."""
    texts = getattr(ds, "text_column", None)
    if texts is None:
        return ds.texts, ds.text_pairs
    return texts, getattr(ds, "text_pair_column", None)


def _repair(cache: EmbeddingCache, key: str, ds: _DatasetLike, extractor: Extractor,
            bad: list[tuple[int, int]]) -> np.ndarray:
    """Re-extract the damaged row ranges into the cache file in place, then rewrite its checksums."""
    path = cache.path(key)
    log.warning("feature cache %s: rows %s failed their checksum or hold non-finite values; re-extracting them",
                path.name, ", ".join(f"{a}-{b - 1}" for a, b in bad[:5]) + (" ..." if len(bad) > 5 else ""))
    texts, pairs = _text_columns(ds)
    arr = np.load(path, mmap_mode="r+", allow_pickle=False)
    for a, b in bad:
        part, _ = _extract_one(extractor, texts[a:b], None if pairs is None else pairs[a:b])
        if part.shape != (b - a, arr.shape[1]) or not np.isfinite(part).all():
            raise ValueError(f"extractor {extractor.name!r} gives non-finite or misshaped features for rows {a}-"
                             f"{b - 1} of the dataset; the cache cannot be repaired from it.")
        arr[a:b] = part
    arr.flush()
    meta = cache.metadata(key) or {}
    cache._write_meta(key, arr.shape, {**meta, **_checksums(arr, int(meta.get("chunk_rows") or RESUME_CHUNK))})
    del arr
    out = cache.load(key)
    if out is None:  # pragma: no cover
        raise OSError(f"The cache file {path} could not be read back after repairing it.")
    return out


def _extract_resumable(cache: EmbeddingCache, key: str, ds: _DatasetLike, extractor: Extractor, *,
                       progress: bool, chunk_rows: int, metadata: dict[str, Any], workers: int = 1,
                       pool_min_rows: int = POOL_MIN_ROWS) -> np.ndarray:
    """Extract in chunks of ``chunk_rows`` rows, each written atomically to ``<key>.parts/`` as soon as it is done;
    chunks found there (from an interrupted run) are reused, so an extraction resumes where it stopped. Chunking
    is the same for every run with the same ``chunk_rows``, so a resumed extraction equals an uninterrupted one bit
    for bit. (``chunk_rows`` is not part of the cache key: it does not change what a row's features are, up to the
    extractor's own batching.)

    Memory stays bounded by one chunk: texts are read chunk by chunk (``ds.text_column`` when the dataset has it,
    a lazy view of its Arrow column) and the finished parts are copied one at a time into the cache file; with a
    pool of processes (``workers``, `extract_cached`), at most two chunks per worker are in flight."""
    n = len(ds)
    texts, pairs = _text_columns(ds)
    if n == 0:
        return cache.store(key, np.asarray(extractor.extract([], None if pairs is None else [], progress=False),
                                           np.float32).reshape(0, -1), metadata)
    parts_dir = cache.root / f"{key}.parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    paths = [parts_dir / f"{start:012d}.npy" for start in range(0, n, chunk_rows)]
    todo = [(start, min(n, start + chunk_rows), path) for start, path in zip(range(0, n, chunk_rows), paths, strict=True)
            if _load_part(path, min(n, start + chunk_rows) - start) is None]
    stats: dict[str, int] = {}  # the extractor's coverage counts (GloVe), summed over the chunks computed here
    rows = sum(b - a for a, b, _ in todo)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}.")
    pooled = getattr(extractor, "processes", False) and workers > 1 and len(todo) > 1 and rows >= pool_min_rows
    chunks = (_pooled_chunks(extractor, texts, pairs, todo, min(workers, len(todo))) if pooled
              else _extract_chunks(extractor, texts, pairs, todo))
    t0 = time.perf_counter()
    with progress_bar(total=n, initial=n - rows, desc=f"extract ({extractor.name})", unit="text",
                      enabled=progress) as bar:
        for (start, stop, path), (part, last) in zip(todo, chunks, strict=True):
            if part.ndim != 2 or part.shape[0] != stop - start:
                raise ValueError(f"Extractor {extractor.name!r} returned shape {part.shape} for {stop - start} "
                                 "rows; expected (rows, dim).")
            _atomic_write_bytes(path, lambda f, a=part: np.save(f, a, allow_pickle=False))
            for k, v in (last or {}).items():
                stats[k] = stats.get(k, 0) + int(v)
            drop_dataset_pages(ds)  # the texts read for this chunk: otherwise the whole file ends resident (issue #38)
            bar.update(stop - start)
    metadata = {**metadata, "extract_seconds": round(time.perf_counter() - t0, 3)}
    if stats:
        metadata["extract_stats"] = stats
    if stats.get("empty_texts"):  # once per dataset (the users' texts), not per chunk or per extract() call
        log.warning("%s: %d of %d texts have no known token; they get the zero vector.", extractor.name,
                    stats["empty_texts"], stats.get("texts", n))
    return cache.store_parts(key, paths, metadata)


def _extract_one(extractor: Extractor, texts: Sequence[str], pairs: Sequence[str] | None
                 ) -> tuple[np.ndarray, dict[str, Any] | None]:
    part = np.ascontiguousarray(extractor.extract(texts, pairs, progress=False), np.float32)
    last = getattr(extractor, "last_stats", None)
    return part, (last.to_json() if last is not None and hasattr(last, "to_json") else None)


def _extract_chunks(extractor: Extractor, texts: Sequence[str], pairs: Sequence[str] | None,
                    todo: Sequence[tuple[int, int, Path]]) -> Iterator[tuple[np.ndarray, dict[str, Any] | None]]:
    """Each chunk's (features, coverage stats), in order, one chunk in memory at a time."""
    for start, stop, _ in todo:
        yield _extract_one(extractor, texts[start:stop], None if pairs is None else pairs[start:stop])


_WORKER: list[Extractor] = []  # in a pool's worker process: the extractor its initializer received


def _start_worker(extractor: Extractor) -> None:
    _WORKER.append(extractor)


def _worker_chunk(texts: list[str], pairs: list[str] | None) -> tuple[np.ndarray, dict[str, Any] | None]:
    return _extract_one(_WORKER[0], texts, pairs)


@contextlib.contextmanager
def _script_hidden() -> Iterator[None]:
    """Start processes inside the block without re-running the caller's script in them. A spawned process imports
    the parent's ``__main__`` from its file (``__file__``, when the script was not run with ``-m``) before it does
    anything else, so a script without an ``if __name__ == "__main__":`` guard would run again in every worker (its
    data loading, its own runs) and then fail; the workers need only this module, so the file is hidden while they
    start (multiprocessing's spawn reads it then, and only then)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(getattr(main, "__spec__", None), "name", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _pooled_chunks(extractor: Extractor, texts: Sequence[str], pairs: Sequence[str] | None,
                   todo: Sequence[tuple[int, int, Path]], workers: int
                   ) -> Iterator[tuple[np.ndarray, dict[str, Any] | None]]:
    """`_extract_chunks`' chunks, computed in ``workers`` processes: the same (features, stats) in the same order
    (each chunk is extracted alone, as in one process, and handed back in ``todo``'s order, not as finished), at
    most two chunks per worker in flight (texts sent, features not yet written). Why processes: GloVe's
    tokenisation is Python and holds the GIL, so threads ran it on one core (1M synthetic users: 121.5 s).
    The workers are spawned (fresh interpreters that import the package and load the vectors, ~5 s of CPU each at
    load 3.5; hence `POOL_MIN_ROWS`), never forked: the driver runs Ray's and gRPC's threads, which a fork would copy
    mid-operation, and a forkserver would stay alive (and resident) for the rest of the run. They are started
    without the caller's script (`_script_hidden`)."""
    ahead: collections.deque[Future[tuple[np.ndarray, dict[str, Any] | None]]] = collections.deque()
    queue = iter(todo)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker, initargs=(extractor,)) as pool:

        def submit() -> None:  # the pool starts a worker at each of its first `workers` submits
            for start, stop, _ in queue:
                ahead.append(pool.submit(_worker_chunk, list(texts[start:stop]),
                                         None if pairs is None else list(pairs[start:stop])))
                return

        with _script_hidden():
            for _ in range(2 * workers):
                submit()
        while ahead:
            chunk = ahead.popleft().result()
            submit()
            yield chunk


def _load_part(path: Path, rows: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        part = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None  # never renamed into place half-written; unreadable means another fault: recompute
    return part if part.ndim == 2 and part.shape[0] == rows and part.dtype == np.float32 else None


def _remove_parts(parts_dir: Path) -> None:
    for p in parts_dir.glob("*"):
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        parts_dir.rmdir()
