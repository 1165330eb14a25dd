"""A small synthetic world for the attacks: users with several texts, a user-level attribute that leaks through
word choice, and a tiny bag-of-words extractor (so keyword inversion has words to find)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import AttributeSpec, assign_roles, make_text_dataset

WORDS = ["apple", "river", "mountain", "guitar", "coffee", "python", "garden", "ocean", "pizza", "soccer", "winter", "summer", "London", "Paris", "market", "school", "music", "movie", "travel", "dinner"]
FEMALE = ("garden", "coffee", "Paris", "music")  # drawn more often by one gender: the leak


def bag_of_words(texts: list[str]) -> np.ndarray:
    """The tiny public extractor: word counts over WORDS, plus a constant so no row is zero."""
    pos = {w.lower(): j for j, w in enumerate(WORDS)}
    x = np.zeros((len(texts), len(WORDS) + 1), np.float32)
    for i, t in enumerate(texts):
        for w in t.split():
            j = pos.get(w.lower())
            if j is not None:
                x[i, j] += 1.0
    x[:, -1] = 1.0
    return x


def make_world(*, users: int = 240, per_user: int = 6, leak: float = 0.35, seed: int = 0,
               aux_frac: float = 0.3) -> tuple[pipeline.Prepared, np.ndarray]:
    g = np.random.default_rng(seed)
    user = np.repeat(np.arange(users), per_user)
    gender_u = g.integers(0, 2, users)
    gender = gender_u[user]
    base = np.ones(len(WORDS))
    boost = np.array([w in FEMALE for w in WORDS], float)
    texts = []
    for i in range(len(user)):
        p = base + (leak * 10 * boost if gender[i] == 0 else 0)
        texts.append(" ".join(g.choice(WORDS, size=6, p=p / p.sum())))
    labels = g.integers(0, 2, len(user))
    ds = make_text_dataset(
        "synthetic", texts=texts, labels=labels, label_names=("a", "b"),
        attributes=[(AttributeSpec("gender", "categorical", ("f", "m")), gender)],
        user_ids=[f"user{u}" for u in user])
    roles = assign_roles(ds, test_frac=0.2, aux_frac=aux_frac, seed=seed)
    feats = bag_of_words(texts)
    prep = pipeline.Prepared(ds=ds, roles=roles, shards=[np.arange(len(user))[user % 2 == c] for c in range(2)],
                             extractor=None, features=feats)
    return prep, feats


def config(**sets: object) -> ExperimentConfig:
    flat = {"attack.epochs": 10, "attack.families": "logistic,likelihood", "run.progress": False,
            "attack.reid-pool": 60, "attack.inversion-vocab": 20, **sets}
    return ExperimentConfig.from_flat(flat)


@pytest.fixture(scope="module")
def world() -> tuple[pipeline.Prepared, np.ndarray]:
    return make_world()
