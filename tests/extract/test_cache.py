"""Embedding cache: hits skip the model, keys follow content and identity, writes are atomic and safe."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fl_privtext.extract import EmbeddingCache, GloveExtractor, extract_cached, file_sha256, make_extractor
from fl_privtext.extract import cache as cache_mod
from fl_privtext.extract.cache import resolve_cache_dir
from fl_privtext.extract.transformer import HFExtractor

from .conftest import TinyDataset

TEXTS = ["The cat sat on the mat.", "Stocks fell sharply on Monday.", "", "A new phone was released today."]


class CountingExtractor:
    """Wraps a real extractor and counts its ``extract`` calls (no mock: the real model runs underneath)."""

    def __init__(self, inner: Any, delay_s: float = 0.0) -> None:
        self.inner, self.calls, self.delay_s = inner, 0, delay_s
        self.name, self.dim = inner.name, inner.dim
        self._lock = threading.Lock()

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    @property
    def last_stats(self) -> Any:
        return getattr(self.inner, "last_stats", None)

    def extract(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, *, progress: bool = True
    ) -> np.ndarray:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay_s)
        return self.inner.extract(texts, text_pairs, progress=progress)


def test_second_extraction_runs_no_forward_pass(minilm: HFExtractor, tmp_path: Path) -> None:
    ds = TinyDataset(TEXTS)
    before = minilm.forward_passes
    first = extract_cached(ds, minilm, tmp_path, progress=False)
    assert minilm.forward_passes > before
    after_first = minilm.forward_passes
    second = extract_cached(ds, minilm, tmp_path, progress=False)
    assert minilm.forward_passes == after_first  # served from disk
    assert isinstance(second, np.memmap) and not second.flags.writeable
    assert second.shape == (4, 384) and second.dtype == np.float32
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second, minilm.extract(TEXTS, progress=False), atol=1e-6)  # dataset row order


def test_hit_returns_identical_array_and_counts_one_call(glove: GloveExtractor, tmp_path: Path) -> None:
    ds = TinyDataset(TEXTS, text_pairs=["a dog", "bonds rose", "x", ""])
    ext = CountingExtractor(glove)
    a = extract_cached(ds, ext, tmp_path, progress=False)
    b = extract_cached(ds, ext, tmp_path, progress=False)
    assert ext.calls == 1 and a.shape == (4, 100)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, glove.extract(ds.texts, ds.text_pairs, progress=False))
    cache = EmbeddingCache(tmp_path)
    key = cache.key(ds.fingerprint, glove.identity())
    meta = cache.metadata(key)
    assert meta is not None and meta["fingerprint"] == ds.fingerprint and meta["identity"] == glove.identity()
    assert meta["shape"] == [4, 100] and meta["extract_stats"]["empty_texts"] == 2 and "created" in meta


def test_changing_max_length_model_or_data_invalidates(
    glove: GloveExtractor, minilm: HFExtractor, tmp_path: Path
) -> None:
    ds = TinyDataset(TEXTS)
    runs = [
        CountingExtractor(e)
        for e in (glove, GloveExtractor(max_length=3), minilm, make_extractor("minilm", max_length=4))
    ]
    outs = [extract_cached(ds, r, tmp_path, progress=False) for r in runs]
    assert [r.calls for r in runs] == [1, 1, 1, 1]  # every identity change is a miss
    assert not np.array_equal(outs[0], outs[1]) and not np.allclose(outs[2], outs[3])
    assert len(list(tmp_path.glob("*.npy"))) == 4
    other = TinyDataset(TEXTS[:3] + ["A new phone was released yesterday."])
    extract_cached(other, runs[0], tmp_path, progress=False)
    assert runs[0].calls == 2  # dataset content change is a miss too


def test_key_depends_on_fingerprint_and_every_identity_field() -> None:
    ident = {"kind": "glove", "max_length": None, "vectors_sha256": "ab"}
    k = EmbeddingCache.key("fp", ident)
    assert len(k) == 64 and k == EmbeddingCache.key("fp", dict(reversed(ident.items())))
    assert k != EmbeddingCache.key("fp2", ident)
    assert k != EmbeddingCache.key("fp", {**ident, "max_length": 128})
    assert k != EmbeddingCache.key("fp", {**ident, "vectors_sha256": "ac"})
    with pytest.raises(ValueError, match="fingerprint"):
        EmbeddingCache.key("", ident)


def test_store_load_and_load_rows(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "nested")
    assert cache.load("missing") is None
    x = np.arange(30, dtype=np.float64).reshape(10, 3)
    mm = cache.store("k", x)
    assert (
        mm.dtype == np.float32 and not mm.flags.writeable and cache.path("k") == tmp_path / "nested" / "k.npy"
    )
    np.testing.assert_array_equal(mm, x.astype(np.float32))
    rows = cache.load_rows("k", [7, 2, 2])
    assert rows is not None and rows.flags.writeable
    np.testing.assert_array_equal(rows, x[[7, 2, 2]].astype(np.float32))
    assert cache.load_rows("missing", [0]) is None
    empty = cache.store("empty", np.zeros((0, 5), np.float32))
    assert empty.shape == (0, 5)
    with pytest.raises(ValueError, match="2-D"):
        cache.store("bad", np.zeros(3))


def test_stale_temp_and_corrupt_files_are_ignored(glove: GloveExtractor, tmp_path: Path) -> None:
    ds = TinyDataset(TEXTS)
    cache = EmbeddingCache(tmp_path)
    key = cache.key(ds.fingerprint, glove.identity())
    # An interrupted writer leaves a partial temp file next to where the entry would go: never loaded.
    stale = tmp_path / f".{key}.npy.deadbeef.tmp"
    stale.write_bytes(b"\x93NUMPY\x01\x00garbage")
    assert cache.load(key) is None
    ext = CountingExtractor(glove)
    x = np.array(extract_cached(ds, ext, tmp_path, progress=False))
    assert ext.calls == 1
    np.testing.assert_array_equal(x, glove.extract(TEXTS, progress=False))
    # A truncated final file (e.g. a bad copy) reads as a miss and is rewritten.
    head = cache.path(key).read_bytes()[:100]
    cache.path(key).unlink()
    cache.path(key).write_bytes(head)
    assert cache.load(key) is None
    y = extract_cached(ds, ext, tmp_path, progress=False)
    assert ext.calls == 2
    np.testing.assert_array_equal(x, y)
    # Temps older than a day are swept on the next store.
    old = time.time() - 2 * 86400
    os.utime(stale, (old, old))
    cache.store("other", np.zeros((1, 2), np.float32))
    assert not stale.exists()


def _store_in_process(root: str, key: str, value: float, n: int) -> None:
    EmbeddingCache(root).store(key, np.full((n, 64), value, np.float32), {"writer": value})


def test_concurrent_writers_leave_a_valid_file(tmp_path: Path) -> None:
    n = 20_000  # ~5 MB per array: writes overlap in time
    threads = [
        threading.Thread(target=_store_in_process, args=(str(tmp_path), "k", float(i), n)) for i in range(4)
    ]
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_store_in_process, args=(str(tmp_path), "k", float(10 + i), n)) for i in range(2)
    ]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    arr = EmbeddingCache(tmp_path).load("k")
    assert arr is not None and arr.shape == (n, 64)
    values = np.unique(arr)
    assert values.size == 1 and values[0] in {0, 1, 2, 3, 10, 11}  # one writer's complete array, never a mix
    assert json.loads((tmp_path / "k.json").read_text())["writer"] in {0, 1, 2, 3, 10, 11}
    assert not list(tmp_path.glob("*.tmp"))


def test_concurrent_extract_cached_computes_once(glove: GloveExtractor, tmp_path: Path) -> None:
    ds = TinyDataset(TEXTS)
    ext = CountingExtractor(glove, delay_s=0.2)
    results: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: results.append(extract_cached(ds, ext, tmp_path, progress=False)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ext.calls == 1 and len(results) == 4
    for r in results:
        np.testing.assert_array_equal(r, results[0])


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    assert EmbeddingCache().root == tmp_path / "env"
    monkeypatch.delenv("FL_PRIVTEXT_CACHE")
    assert resolve_cache_dir() == Path.home() / ".cache" / "fl_privtext"


def test_file_hash_follows_content_and_is_memoised(tmp_path: Path) -> None:
    f = tmp_path / "weights.bin"
    f.write_bytes(b"a" * 1000)
    h1 = file_sha256(f)
    assert h1 == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"  # sha256(b"a" * 1000)
    assert file_sha256(f) == h1
    sidecars = list((resolve_cache_dir() / "file_hashes").glob("*.json"))
    assert any(json.loads(s.read_text())["path"] == str(f.resolve()) for s in sidecars)
    f.write_bytes(b"b" * 1000)  # same size, new content, new mtime
    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert file_sha256(f) != h1


@pytest.mark.parametrize("damage", ["nan", "bitflip"])
def test_damaged_chunk_detected_reported_and_reextracted(glove: GloveExtractor, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture, damage: str) -> None:
    texts = [*TEXTS, "Rain is expected tomorrow.", "The match ended in a draw."]
    ds = TinyDataset(texts)
    counting = CountingExtractor(glove)
    clean = np.array(extract_cached(ds, counting, tmp_path, progress=False, chunk_rows=2))
    cache = EmbeddingCache(tmp_path)
    key = cache.key(ds.fingerprint, glove.identity())
    assert len(cache.metadata(key)["chunk_sha256"]) == 3  # one checksum per block of 2 rows
    disk = np.load(cache.path(key), mmap_mode="r+")
    disk[3, 7] = np.nan if damage == "nan" else np.nextafter(disk[3, 7], np.float32(np.inf))  # rows 2-3's block
    disk.flush()
    del disk
    cache_mod._VERIFIED.clear()  # a later process reads the damaged entry (this one trusts what it wrote itself)
    calls = counting.calls
    caplog.clear()  # the first extraction's own report (texts with no known token) is not the repair's
    with caplog.at_level("WARNING", logger="fl_privtext.extract.cache"):
        repaired = extract_cached(ds, counting, tmp_path, progress=False, chunk_rows=2)
    assert counting.calls == calls + 1  # only the damaged block was extracted again
    np.testing.assert_array_equal(repaired, clean)
    lines = [r.getMessage() for r in caplog.records if r.name == "fl_privtext.extract.cache"]
    assert len(lines) == 1 and "rows 2-3" in lines[0] and "re-extracting" in lines[0]
    extract_cached(ds, counting, tmp_path, progress=False, chunk_rows=2)
    assert counting.calls == calls + 1  # repaired for good: a plain hit again


class NaNExtractor(CountingExtractor):
    """A real extractor whose second row comes out NaN (a broken model): known-bad input for the cache's checks."""

    def extract(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, *, progress: bool = True
    ) -> np.ndarray:
        out = np.array(super().extract(texts, text_pairs, progress=progress))
        out[1:2] = np.nan
        return out


def test_entry_just_written_is_not_read_back_but_a_non_finite_one_is(glove: GloveExtractor, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The process that wrote an entry (checksums and finiteness computed on the bytes it wrote) uses it without
    hashing the file again (a million users: 0.7 GB read and hashed); a new file version, or an entry holding a
    non-finite value, is checked on its next use."""
    hashed: list[int] = []
    damaged = cache_mod._damaged
    monkeypatch.setattr(cache_mod, "_damaged", lambda *a: hashed.append(1) or damaged(*a))
    ds = TinyDataset(TEXTS)
    first = np.array(extract_cached(ds, glove, tmp_path, progress=False))
    np.testing.assert_array_equal(extract_cached(ds, glove, tmp_path, progress=False), first)
    assert hashed == []  # written here: not read back
    cache_mod._VERIFIED.clear()  # another process
    extract_cached(ds, glove, tmp_path, progress=False)
    assert hashed == [1]  # checked once ...
    extract_cached(ds, glove, tmp_path, progress=False)
    assert hashed == [1]  # ... per process and file version
    broken = NaNExtractor(glove)
    with pytest.raises(ValueError, match="non-finite"):  # known-bad: the write does not vouch for NaN rows
        extract_cached(TinyDataset([*TEXTS, "Rain tomorrow."]), broken, tmp_path / "nan", progress=False)
        extract_cached(TinyDataset([*TEXTS, "Rain tomorrow."]), broken, tmp_path / "nan", progress=False)


def test_entry_without_checksums_gets_them_and_nan_is_caught(glove: GloveExtractor, tmp_path: Path) -> None:
    ds = TinyDataset(TEXTS)
    clean = np.array(extract_cached(ds, glove, tmp_path, progress=False))
    cache = EmbeddingCache(tmp_path)
    key = cache.key(ds.fingerprint, glove.identity())
    meta = cache.metadata(key)
    for k in ("chunk_rows", "chunk_sha256"):
        meta.pop(k)
    cache.meta_path(key).write_text(json.dumps(meta))  # an entry of the older layout
    np.testing.assert_array_equal(extract_cached(ds, glove, tmp_path, progress=False), clean)
    assert "chunk_sha256" in cache.metadata(key)
    disk = np.load(cache.path(key), mmap_mode="r+")
    disk[0, 0] = np.inf
    disk.flush()
    del disk
    cache_mod._VERIFIED.clear()  # a later process
    assert np.isfinite(extract_cached(ds, glove, tmp_path, progress=False)).all()


def test_glove_chunks_extracted_by_two_processes_are_the_same_bits_in_row_order(tmp_path: Path) -> None:
    """GloVe's chunks in a pool of 2 worker processes (its tokenisation holds the GIL): the same features, cache
    file, per-chunk checksums and coverage counts as one process, the chunks in row order. Known-bad: the same
    chunks in another order (as they finish, not as they come) fail the comparison."""
    words = ["the", "cat", "sat", "on", "a", "mat", "stocks", "fell", "sharply", "monday", "new", "phone", "released", "rain", "match", "ended", "draw"]
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 9)) + f" {i}" for i in range(300)]
    ds = TinyDataset(texts, text_pairs=[t.upper() for t in reversed(texts)])
    one = np.array(extract_cached(ds, GloveExtractor(), tmp_path / "one", progress=False, chunk_rows=40))
    parent = GloveExtractor()
    two = extract_cached(ds, parent, tmp_path / "two", progress=False, chunk_rows=40, workers=2, pool_min_rows=0)
    assert parent.last_stats is None  # the chunks were extracted by the workers, not in this process
    key = EmbeddingCache(tmp_path).key(ds.fingerprint, parent.identity())
    metas = [EmbeddingCache(tmp_path / d).metadata(key) for d in ("one", "two")]
    assert metas[0] is not None and metas[1] is not None
    assert metas[1]["chunk_sha256"] == metas[0]["chunk_sha256"] and len(metas[0]["chunk_sha256"]) == 8
    assert metas[1]["extract_stats"] == metas[0]["extract_stats"] and metas[0]["extract_stats"]["texts"] == 600
    assert (tmp_path / "two" / f"{key}.npy").read_bytes() == (tmp_path / "one" / f"{key}.npy").read_bytes()
    np.testing.assert_array_equal(two, one)
    mixed = np.concatenate([one[40:80], one[:40], one[80:]])  # chunks 0 and 1 swapped
    assert not np.array_equal(mixed, two)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        extract_cached(TinyDataset(["x"]), GloveExtractor(), tmp_path / "bad", progress=False, workers=0)
