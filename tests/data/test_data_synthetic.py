"""`synthetic`: any number of users from make_default's model, deterministic per seed, attributes that leak."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.data import dataset_options, load_dataset
from fl_privtext.data.synthetic import USERS_PER_BATCH, generate_batches

GENERATOR = Path(__file__).resolve().parents[2] / "fl_privtext" / "data" / "default" / "make_default.py"
MARKERS = ("husband", "wife", "boyfriend", "girlfriend", "grandkids", "roommate", "kids", "lol", "garage", "purse",
           "arthritis", "retired", "toddler", "dorm", "buddy", "cute")
TOKEN = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """make_default's own (pure Python) sampler, grown to 4,000 users: the model the synthetic sampler must match."""
    g = runpy.run_path(str(GENERATOR), run_name="make_default")
    g["generate"].__globals__["N_USERS"] = 4000
    recs = g["generate"]()
    return _stats([r["text"] for r in recs], [g["GENDERS"].index(r["gender"]) for r in recs],
                  [g["AGE_GROUPS"].index(r["age_group"]) for r in recs], [r["label"] == "positive" for r in recs])


def _stats(texts, gender, age, positive) -> dict[str, np.ndarray]:
    words = [set(TOKEN.findall(t.lower())) for t in texts]
    has = np.array([[m in w for m in MARKERS] for w in words], float)  # (R, M)
    gender, age = np.asarray(gender), np.asarray(age)
    rates = np.stack([has[gender == k].mean(0) for k in (0, 1)] + [has[age == k].mean(0) for k in (0, 1, 2)])
    counts = np.array([(gender == k).sum() for k in (0, 1)] + [(age == k).sum() for k in (0, 1, 2)], float)
    return {"rates": rates, "counts": counts, "tokens": np.array([len(TOKEN.findall(t)) for t in texts], float),
            "positive": np.asarray(positive, float)}


def _synthetic_stats(ds) -> dict[str, np.ndarray]:
    return _stats(ds.texts, ds.attribute("gender"), ds.attribute("age_group"), ds.labels == 1)


def _max_z(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest two-sample z statistic over marker rates per group (gender and age classes)."""
    pooled = (a["rates"] * a["counts"][:, None] + b["rates"] * b["counts"][:, None]) / (a["counts"] + b["counts"])[:, None]
    se = np.sqrt(pooled * (1 - pooled) * (1 / a["counts"] + 1 / b["counts"])[:, None]) + 1e-12
    return float(np.max(np.abs(a["rates"] - b["rates"]) / se))


def test_registered_with_users_and_seed_options():
    assert dataset_options("synthetic") == ("users", "seed")
    cfg = ExperimentConfig.from_flat({"data.name": "synthetic", "data.options.users": "1200"})
    ds = load_dataset(cfg.data.name, **cfg.data.options)
    assert ds.name == "synthetic" and ds.num_users == 1200


def test_deterministic_per_seed_and_regenerates_identically(tmp_path, monkeypatch):
    a = load_dataset("synthetic", users=1500, seed=3)
    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(tmp_path / "other"))  # no file to map: generated again
    b = load_dataset("synthetic", users=1500, seed=3)
    assert a.fingerprint == b.fingerprint and a.texts == b.texts
    assert load_dataset("synthetic", users=1500, seed=4).fingerprint != a.fingerprint


def test_sizes_shapes_and_per_user_constants():
    users = USERS_PER_BATCH + 3000  # two batches, the second partial
    batches = list(generate_batches(users, 0))
    assert len(batches) == 2
    ds = load_dataset("synthetic", users=users)
    assert ds.num_users == users and len(ds) == sum(b.num_rows for b in batches)
    ids, first, per_user = np.unique(ds.user_ids, return_index=True, return_counts=True)
    assert ids[0] == "u00000" and ids[-1] == f"u{users - 1}"
    assert per_user.min() == 1 and per_user.max() == 8
    probs = np.array(runpy.run_path(str(GENERATOR), run_name="make_default")["REVIEWS_PER_USER_PROBS"])
    mean, var = (np.arange(1, 9) * probs).sum(), (np.arange(1, 9) ** 2 * probs).sum() - (np.arange(1, 9) * probs).sum() ** 2
    assert abs(per_user.mean() - mean) < 5 * np.sqrt(var / users)
    assert np.bincount(per_user, minlength=9)[1:] / users == pytest.approx(probs, abs=0.01)
    for name in ("gender", "age_group"):  # a user's attributes are the same on every review
        v = ds.attribute(name)
        _, inv = np.unique(ds.user_ids, return_inverse=True)
        assert (v == v[first][inv]).all()
    user_gender = ds.attribute("gender")[first]
    assert abs(user_gender.mean() - 0.5) < 5 * np.sqrt(0.25 / users)
    assert set(ds.source_split.tolist()) == {"all"} and set(np.unique(ds.labels).tolist()) == {0, 1}


def test_same_model_as_make_default(reference):
    ds = load_dataset("synthetic", users=4000, seed=1)
    s = _synthetic_stats(ds)
    # realistic lengths: the token count per review has the reference's distribution (mean and quartiles)
    assert abs(s["tokens"].mean() - reference["tokens"].mean()) < 5 * reference["tokens"].std() * np.sqrt(
        1 / len(s["tokens"]) + 1 / len(reference["tokens"]))
    assert np.percentile(s["tokens"], [25, 50, 75]) == pytest.approx(np.percentile(reference["tokens"], [25, 50, 75]),
                                                                    abs=2)
    assert abs(s["positive"].mean() - reference["positive"].mean()) < 0.03
    # every marker word's rate per gender and per age group agrees with the reference sampler
    assert _max_z(s, reference) < 5.0


def test_attributes_leak_through_the_text(reference):
    ds = load_dataset("synthetic", users=4000, seed=2)
    s = _synthetic_stats(ds)
    rate = dict(zip(MARKERS, s["rates"].T))
    assert rate["husband"][0] > 5 * rate["husband"][1] and rate["wife"][1] > 5 * rate["wife"][0]  # gender
    assert rate["grandkids"][4] > 5 * rate["grandkids"][2] and rate["dorm"][2] > 5 * rate["dorm"][4]  # age
    # known-bad variant: attributes shuffled across users no longer match the reference's leak (must fail)
    rng = np.random.default_rng(0)
    shuffled = _stats(ds.texts, rng.permutation(ds.attribute("gender")), rng.permutation(ds.attribute("age_group")),
                      ds.labels == 1)
    assert _max_z(shuffled, reference) > 10.0


@pytest.mark.parametrize("users", [0, -5, 2.5, "many", True, None])
def test_bad_users_raise_a_clear_error(users):
    with pytest.raises(ValueError, match=r"users .*must be an integer >= 1, got"):
        load_dataset("synthetic", users=users)


def test_bad_seed_raises():
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        load_dataset("synthetic", users=10, seed=-1)
