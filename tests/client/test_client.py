"""The client side: the client-data snapshot virtual clients map in, and a light ClientApp start-up."""

import subprocess
import sys

import numpy as np
import pytest

from fl_privtext.client import ClientData, client_seed_from, client_upload, merge_uploads, same_uploads
from fl_privtext.config import ExperimentConfig

# sampler=float: these tests are about the seeded (reproducible) noise streams; the secure sampler draws from the OS
CFG = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0, "privacy.sampler": "float",
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
            x = client_upload(data, client, rnd, 5, CFG, client_seed=11)
            y = client_upload(loaded, client, rnd, 5, CFG, client_seed=11)
            for k, v in x.arrays().items():
                np.testing.assert_array_equal(v, y.arrays()[k])
    merged = merge_uploads([client_upload(loaded, c, 0, 5, CFG, client_seed=11).arrays() for c in range(3)])
    np.testing.assert_array_equal(merged["rows"], np.arange(40))


def test_merge_sorts_by_record_and_keeps_an_ordered_single_part_without_copying_it():
    g = np.random.default_rng(3)
    parts = [{"features": g.normal(size=(n, 4)).astype(np.float32), "labels": g.integers(0, 3, n),
              "rows": np.sort(g.choice(100, n, replace=False))} for n in (5, 7)]
    merged = merge_uploads(parts)
    order = np.argsort(np.concatenate([p["rows"] for p in parts]), kind="stable")
    for k in ("features", "labels", "rows"):
        np.testing.assert_array_equal(merged[k], np.concatenate([p[k] for p in parts])[order])
    one = merge_uploads(parts[:1])  # a one-round seed from one reply: already canonical, held once (not twice)
    assert all(one[k] is parts[0][k] for k in ("features", "labels", "rows"))
    shuffled = {k: v[::-1] for k, v in parts[0].items()}
    again = merge_uploads([shuffled])
    np.testing.assert_array_equal(again["rows"], parts[0]["rows"])
    np.testing.assert_array_equal(again["features"], parts[0]["features"])


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


def test_client_app_starts_without_torch_hf_datasets_or_scipy():
    # every actor imports it before its first reply (the first round waits): scipy.special alone took 0.2-0.45 s
    code = ("import sys, fl_privtext.federation.client_app; "
            "print(sorted(m for m in ('torch', 'datasets', 'transformers', 'pandas', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_client_without_the_snapshot_file_loads_the_dataset_itself(tmp_path):
    # e.g. an actor on another machine of a Ray cluster: the driver's snapshot path does not exist there
    from fl_privtext.federation.client_data import preparing, snapshot_data
    from fl_privtext.federation.replies import prep_key
    from fl_privtext.pipeline.clients import client_prepare

    cfg = ExperimentConfig.from_flat({"federation.num-clients": 4, "extractor.cache-dir": str(tmp_path)})
    with preparing(client_prepare):  # what the ClientApp's data mod does around every message
        data = snapshot_data(prep_key(cfg), str(tmp_path / "elsewhere.npz"))
    assert len(data.shards) == 4 and data.texts is not None
    assert sum(len(s) for s in data.shards) == len(data.labels) == len(data.texts)


def _features(up):
    return up.arrays()["features"]


def test_secret_mode_never_repeats_noise_and_reproducible_mode_repeats_only_the_same_point(tmp_path):
    data = _data(tmp_path)
    secret = [_features(client_upload(data, 0, 0, 5, CFG)) for _ in range(2)]
    assert not np.isclose(secret[0], secret[1]).any()  # fresh OS entropy on every call
    a, b = (_features(client_upload(data, 0, 0, 5, CFG, client_seed=3)) for _ in range(2))
    np.testing.assert_array_equal(a, b)  # reproducible: same client seed, same point, same noise
    other_point = ExperimentConfig.from_flat({**CFG.to_flat(), "privacy.epsilon": 2.0})
    other_seed = _features(client_upload(data, 0, 0, 5, CFG, client_seed=4))
    other_round = _features(client_upload(data, 0, 1, 5, CFG, client_seed=3))
    other_eps = _features(client_upload(data, 0, 0, 5, other_point, client_seed=3))
    # another client seed, round or point draws other noise: two epsilons never share a stream (a shared stream
    # at two scales would give the input exactly: y1 - y2 = (b1 - b2) * noise)
    for other in (other_seed, other_round, other_eps):
        assert not np.isclose(a, other).any()
    # records of one batch get independent noise: no two rows share a draw
    noise = a - np.asarray(client_upload(data, 0, 0, 5, ExperimentConfig.from_flat(
        {**CFG.to_flat(), "privacy.mechanism": "none"})).arrays()["features"] /
        np.abs(data.features[np.sort(data.shards[0])]).sum(axis=1, keepdims=True)[np.argsort(np.argsort(
            data.shards[0]))])
    assert len(np.unique(np.round(noise, 5))) == noise.size


def test_the_client_seed_comes_from_the_node_or_its_environment_never_from_a_message(monkeypatch):
    monkeypatch.delenv("FL_PRIVTEXT_CLIENT_SEED", raising=False)
    assert client_seed_from({}) is None
    assert client_seed_from({"partition-id": 0, "client-seed": 9}) == 9
    monkeypatch.setenv("FL_PRIVTEXT_CLIENT_SEED", "12")
    assert client_seed_from({}) == 12
    monkeypatch.setenv("FL_PRIVTEXT_CLIENT_SEED", "")
    assert client_seed_from({}) is None
    with pytest.raises(ValueError, match="client-seed must be an integer"):
        client_seed_from({"client-seed": "x"})


def test_a_non_finite_representation_is_refused_naming_the_client_and_the_record(tmp_path):
    data = _data(tmp_path)
    feats = np.array(data.features)
    bad_row = int(data.shards[1][2])
    feats[bad_row, 1] = np.nan
    np.save(tmp_path / "features.npy", feats)
    broken = ClientData(shards=data.shards, labels=data.labels, num_classes=3,
                        features=np.load(tmp_path / "features.npy", mmap_mode="r"))
    with pytest.raises(ValueError, match=rf"client 1: record\(s\) \[{bad_row}\] have non-finite"):
        client_upload(broken, 1, 0, 0, CFG)
    assert len(client_upload(broken, 0, 0, 0, CFG).rows) == len(data.shards[0])  # other clients unaffected


def test_the_reproducible_stream_key_hashes_what_a_client_computes_and_nothing_else():
    # issue #23 dropped the compatibility shims: every key that changes what a client computes is in the stream key
    # at its value; what never does (the eavesdropper's settings, outputs, the server's learner, the clients' policy)
    # is not, so the same uploads serve points that differ only there
    from fl_privtext.client import point_key

    sets = {"data.name": "blog", "privacy.mechanism": "laplace-l1", "privacy.epsilon": 2.0, "data.root": "../shared/data"}
    base = point_key(ExperimentConfig.load(None, sets))
    for same in ({"attack.inversion-vocab": 100}, {"attack.learner": "lda"}, {"attack.epochs": 3},
                 {"run.output": "elsewhere"}, {"server.learner": "mlp"}, {"client.count-epsilon": 4.0},
                 # where the run executes: the same point from another cache, data root, device or cluster draws
                 # the same noise (the cache directory once changed every draw: issue #38's 1M runs)
                 {"extractor.cache-dir": "/elsewhere/cache"}, {"data.root": "/elsewhere/data"},
                 {"extractor.device": "cuda"}, {"federation.ray-address": "10.0.0.1:6379"},
                 {"federation.max-in-flight": 3}):
        assert point_key(ExperimentConfig.load(None, {**sets, **same})) == base, same
    for other in ({"privacy.epsilon": 1.0}, {"extractor.precision": "bf16", "extractor.name": "minilm"},
                  {"extractor.batch-size": 64}, {"privacy.sampler": "float"}, {"data.options.max_rows": 100}):
        assert point_key(ExperimentConfig.load(None, {**sets, **other})) != base, other


def _parts(g: np.random.Generator, sizes: list[int], rows: int) -> list[dict[str, np.ndarray]]:
    return [{"features": g.normal(size=(n, 4)).astype(np.float32), "labels": g.integers(0, 3, n),
             "rows": g.integers(0, rows, n)} for n in sizes]  # rows repeat within and across parts


def test_merge_uploads_is_a_stable_sort_of_the_concatenation():
    g = np.random.default_rng(3)
    for sizes in ([5], [7, 0, 3, 9], [1, 1, 1], [40, 2]):
        parts = _parts(g, sizes, rows=12)
        cat = {k: np.concatenate([p[k] for p in parts]) for k in ("features", "labels", "rows")}
        order = np.argsort(cat["rows"], kind="stable")
        merged = merge_uploads(parts)
        for k, v in cat.items():
            np.testing.assert_array_equal(merged[k], v[order])
            assert merged[k].dtype == v.dtype
        assert same_uploads(merged, {k: v[order] for k, v in cat.items()})
    # a single part already in row order is passed through (no copy); any other input gives new arrays
    (part,) = _parts(g, [6], rows=100)
    part = {k: v[np.argsort(part["rows"], kind="stable")] for k, v in part.items()}
    assert all(merge_uploads([part])[k] is part[k] for k in part)
    assert merge_uploads([part, _parts(g, [0], 1)[0]])["features"] is part["features"]
    assert merge_uploads(_parts(g, [0, 0], 1))["rows"].shape == (0,)


def test_same_uploads_sees_any_difference():
    g = np.random.default_rng(4)
    a = merge_uploads(_parts(g, [300, 200], rows=50))
    assert same_uploads(a, {k: v.copy() for k, v in a.items()}, chunk=64)
    for k in ("features", "labels", "rows"):
        b = {key: v.copy() for key, v in a.items()}
        b[k][-1] += 1  # the last chunk too
        assert not same_uploads(a, b, chunk=64)
    assert not same_uploads(a, {**a, "labels": a["labels"].astype(np.int32)})
    assert not same_uploads(a, {k: v[:-1] for k, v in a.items()})
