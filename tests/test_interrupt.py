"""Ctrl-C during extraction: the run stops within seconds, leaves no partial cache entry or results, and the next
run rebuilds the cache correctly."""

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


def test_sigint_during_extraction_stops_cleanly_and_the_next_run_is_correct(tmp_path, data_root):
    cache, out = tmp_path / "cache", tmp_path / "out"
    sets = {"data.name": "blog", "data.root": str(data_root), "data.options.max_rows": 300,
            "extractor.name": "minilm", "extractor.cache-dir": str(cache), "server.epochs": 1, "attack.epochs": 1}
    cmd = [sys.executable, "-m", "fl_privtext.cli", "run", "--output", str(out)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not list(cache.glob("*.lock")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the extraction has taken the cache key's lock: it is under way
    assert proc.poll() is None, "".join(err)[-2000:]
    time.sleep(3.0)
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
    # the next run rebuilds the cache, and what it stores is the extractor's output
    cfg = ExperimentConfig.from_flat(sets)
    prep = pipeline.prepare(cfg, features="extract")
    assert len(list(cache.glob("*.npy"))) == 1
    fresh = prep.extractor.extract(prep.ds.texts[:6], progress=False)
    np.testing.assert_allclose(np.asarray(prep.features[:6]), fresh, rtol=1e-4, atol=1e-5)
