"""The client side: the client-data snapshot virtual clients map in, and a light ClientApp start-up."""

import subprocess
import sys

import numpy as np
import pytest

from fl_privtext.client import ClientData, client_upload, merge_uploads
from fl_privtext.config import ExperimentConfig

CFG = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0,
                                  "federation.num-clients": 3, "federation.batch-size": 7})


def _data(tmp_path, n=40, dim=5, seed=0) -> ClientData:
    g = np.random.default_rng(seed)
    np.save(tmp_path / "features.npy", g.normal(size=(n, dim)).astype(np.float32))
    shards = np.array_split(g.permutation(n), 3)
    return ClientData(shards=shards, labels=g.integers(0, 3, n), num_classes=3,
                      features=np.load(tmp_path / "features.npy", mmap_mode="r"))


def test_snapshot_round_trip_gives_identical_uploads(tmp_path):
    data = _data(tmp_path)
    loaded = ClientData.load(data.save(tmp_path / "cache"))
    assert loaded.num_classes == 3
    np.testing.assert_array_equal(loaded.labels, data.labels)
    for a, b in zip(loaded.shards, data.shards, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not a.flags.writeable
    assert isinstance(loaded.features, np.memmap)  # mapped from the cache file, not copied
    for client in range(3):
        for rnd in range(2):
            x, y = client_upload(data, client, rnd, 5, CFG), client_upload(loaded, client, rnd, 5, CFG)
            for k, v in x.arrays().items():
                np.testing.assert_array_equal(v, y.arrays()[k])
    merged = merge_uploads([client_upload(loaded, c, 0, 5, CFG).arrays() for c in range(3)])
    np.testing.assert_array_equal(merged["rows"], np.arange(40))


def test_snapshot_is_named_by_its_content(tmp_path):
    data = _data(tmp_path)
    same = ClientData(shards=[s.copy() for s in data.shards], labels=data.labels.copy(), num_classes=3,
                      features=data.features)
    moved = ClientData(shards=[data.shards[1], data.shards[0], data.shards[2]], labels=data.labels, num_classes=3,
                       features=data.features)
    assert data.save(tmp_path) == same.save(tmp_path)
    assert moved.save(tmp_path) != data.save(tmp_path)


def test_snapshot_needs_cached_features_and_a_snapshot_file(tmp_path):
    data = _data(tmp_path)
    in_memory = ClientData(shards=data.shards, labels=data.labels, num_classes=3, features=np.ones((40, 5)))
    with pytest.raises(ValueError, match="memory-mapped cached features"):
        in_memory.save(tmp_path)
    bogus = tmp_path / "bogus.npz"
    np.savez(bogus, rows=np.arange(3))
    with pytest.raises(ValueError, match="not a client-data snapshot"):
        ClientData.load(bogus)
    with pytest.raises(ValueError, match="not a client-data snapshot"):
        ClientData.load(tmp_path / "missing.npz")


def test_word_dropout_on_a_snapshot_client_says_what_is_missing(tmp_path):
    loaded = ClientData.load(_data(tmp_path).save(tmp_path))
    cfg = ExperimentConfig.from_flat({**CFG.to_flat(), "privacy.mu": 0.3})
    with pytest.raises(ValueError, match="word dropout"):
        client_upload(loaded, 0, 0, 0, cfg)


def test_client_app_starts_without_torch_or_hf_datasets():
    code = ("import sys, fl_privtext.federation.client_app; "
            "print(sorted(m for m in ('torch', 'datasets', 'transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_client_without_the_snapshot_file_loads_the_dataset_itself(tmp_path):
    # e.g. an actor on another machine of a Ray cluster: the driver's snapshot path does not exist there
    from fl_privtext.federation.client_app import _client_data, _prep_key

    cfg = ExperimentConfig.from_flat({"federation.num-clients": 4, "extractor.cache-dir": str(tmp_path)})
    data = _client_data(_prep_key(cfg), str(tmp_path / "elsewhere.npz"))
    assert len(data.shards) == 4 and data.texts is not None
    assert sum(len(s) for s in data.shards) == len(data.labels) == len(data.texts)
