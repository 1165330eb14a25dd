"""What is derived from public data alone is computed once per run and read by every client (issue #38): the driver
stores the pca map and the auto k (`fl_privtext.public`, content-addressed under ``<cache dir>/public/``); a client
process with fresh module state reads them without fitting; a cold or damaged store only costs the computation;
a changed public file gives another key."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fl_privtext import public
from fl_privtext.client import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.names import DATASET_FILES
from fl_privtext.pipeline import runner
from fl_privtext.public import PublicSpec, public_projection, store_key, store_path

DIM = 50  # glove


@pytest.fixture
def public_root(data_root, tmp_path) -> Path:
    """A data root holding a copy of the public corpus (imdb, 1,000 sentences): the test may change it."""
    (rel,) = DATASET_FILES["imdb"]
    (tmp_path / "data" / rel).parent.mkdir(parents=True)
    shutil.copyfile(data_root / rel, tmp_path / "data" / rel)
    return tmp_path / "data"


def _cfg(root: Path, cache: Path) -> ExperimentConfig:
    return ExperimentConfig.from_flat({
        "data.root": str(root), "extractor.cache-dir": str(cache), "privacy.mechanism": "privunitg",
        "privacy.epsilon": 2, "privacy.projection": "pca", "privacy.proj-dim": "auto", "privacy.public-data": "imdb",
        "run.progress": False})


def _fresh_process(monkeypatch) -> None:
    """A client's module state: no in-process memo, and any fit or choice of k fails (the known-bad variant of a
    client that recomputes)."""
    monkeypatch.setattr(public, "_FITTED", {})
    monkeypatch.setattr(public, "_AUTO", {})

    def refit(*_a, **_k):
        raise AssertionError("a client fitted the public map instead of reading the driver's")

    monkeypatch.setattr(public, "fit_pca", refit)
    monkeypatch.setattr(public, "choose_proj_dim", refit)


def test_the_driver_fits_once_and_every_client_reads_the_same_map(public_root, tmp_path, monkeypatch):
    cfg = _cfg(public_root, tmp_path / "cache")
    monkeypatch.setattr(public, "_FITTED", {})
    monkeypatch.setattr(public, "_AUTO", {})
    chosen = []
    choose = public.choose_proj_dim
    monkeypatch.setattr(public, "choose_proj_dim", lambda *a: chosen.append(1) or choose(*a))
    runner._snapshot(cfg)  # the driver's preparation, before any client starts
    driver = public_projection(PublicSpec.of(cfg), DIM)
    assert len(chosen) == 1 and store_path(PublicSpec.of(cfg), DIM, "pca").is_file()
    assert "by privacy.proj-dim = auto" in driver.source and driver.out_dim < DIM

    for _client in range(3):  # each a process of its own: nothing in memory, the fit refused
        _fresh_process(monkeypatch)
        got = mechanism_for(PublicSpec.of(cfg), DIM).projector
        assert got.matrix.tobytes() == driver.matrix.tobytes() and got.mean.tobytes() == driver.mean.tobytes()
        assert got.source == driver.source
    assert len(chosen) == 1

    # a client without the driver's disk (a cold store elsewhere) computes the same map itself, bit for bit
    monkeypatch.undo()
    monkeypatch.setattr(public, "_FITTED", {})
    monkeypatch.setattr(public, "_AUTO", {})
    cold = public_projection(PublicSpec.of(_cfg(public_root, tmp_path / "elsewhere")), DIM)
    assert cold.matrix.tobytes() == driver.matrix.tobytes() and cold.mean.tobytes() == driver.mean.tobytes()

    # a damaged entry is computed again (the same map), never read as it is
    store_path(PublicSpec.of(cfg), DIM, "pca").write_bytes(b"not an npz")
    monkeypatch.setattr(public, "_FITTED", {})
    again = public_projection(PublicSpec.of(cfg), DIM)
    assert again.matrix.tobytes() == driver.matrix.tobytes()


def test_a_changed_public_file_gives_another_key_and_another_map(public_root, tmp_path, monkeypatch):
    monkeypatch.setattr(public, "_FITTED", {})
    monkeypatch.setattr(public, "_AUTO", {})
    spec = PublicSpec.of(_cfg(public_root, tmp_path / "cache"))
    before_key, before = store_key(spec, DIM, "pca"), public_projection(spec, DIM)
    assert store_key(spec, DIM, "pca") == before_key  # stable while nothing changes
    assert store_key(spec, DIM, "auto") != before_key  # each entry its own key
    with open(public_root / DATASET_FILES["imdb"][0], "a") as f:
        f.write("A new public sentence about a film that nobody has seen yet.\t1\n")
    monkeypatch.setattr(public, "_FITTED", {})
    monkeypatch.setattr(public, "_AUTO", {})
    assert store_key(spec, DIM, "pca") != before_key
    after = public_projection(spec, DIM)  # fitted on the changed rows, not the stale entry
    assert "(1001 rows)" in after.source and "(1000 rows)" in before.source
    assert not np.array_equal(after.mean, before.mean)
