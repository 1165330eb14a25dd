"""Ctrl-C during extraction: the run stops within seconds (exit 130, no traceback), keeps its finished chunks and no
partial cache entry or results; the next run resumes from those chunks and equals a clean run bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.extract import extract_cached


class CountingExtractor:
    """The real extractor, counting the rows it is asked to extract (instrumentation, not a mock)."""

    def __init__(self, inner):
        self.inner, self.rows = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def extract(self, texts, text_pairs=None, *, progress=True):
        self.rows += len(texts)
        return self.inner.extract(texts, text_pairs, progress=progress)


def test_sigint_during_extraction_stops_cleanly_and_the_next_run_resumes_bit_for_bit(tmp_path, data_root):
    cache, out = tmp_path / "cache", tmp_path / "out"
    sets = {"data.name": "blog", "data.root": str(data_root), "data.options.max_rows": 120,
            "extractor.name": "minilm", "extractor.cache-dir": str(cache), "extractor.chunk-rows": 20,
            "server.epochs": 1, "attack.epochs": 1}
    cmd = [sys.executable, "-m", "fl_privtext.cli", "run", "--output", str(out)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 400
    while not list(cache.glob("*.parts/*.npy")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the first chunk is done: the extraction is under way
    assert proc.poll() is None, "".join(err)[-2000:]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_s = time.monotonic() - t0
    reader.join(timeout=5)
    text = "".join(err)
    assert rc == 130, text[-2000:]
    assert stopped_s < 10, stopped_s
    assert "Traceback" not in text and "interrupted" in text
    assert not (out / "results.json").exists()
    assert not list(cache.glob("*.npy")), "a partial cache entry was left"
    kept = sorted(cache.glob("*.parts/*.npy"))
    assert 1 <= len(kept) < 6  # finished chunks survive; the extraction was not complete

    # the next run resumes: it extracts only the rows of the missing chunks
    cfg = ExperimentConfig.from_flat(sets)
    prep = pipeline.prepare(cfg, features="none")
    counting = CountingExtractor(prep.extractor)
    resumed = extract_cached(prep.ds, counting, cache, progress=False, chunk_rows=20)
    assert counting.rows == len(prep.ds) - 20 * len(kept)
    assert not list(cache.glob("*.parts"))  # chunks are removed once the entry is stored
    # ... and equals a clean, uninterrupted extraction bit for bit
    clean = extract_cached(prep.ds, prep.extractor, tmp_path / "clean", progress=False, chunk_rows=20)
    np.testing.assert_array_equal(np.asarray(resumed), np.asarray(clean))
