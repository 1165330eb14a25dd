"""The framework-free experiment core on hand-made data: attacks at both ends, multi-label entities, composition."""

import numpy as np
import pytest

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import AttributeSpec, assign_roles, make_text_dataset
from fl_privtext.privacy import make_mechanism

CFG = ExperimentConfig.from_flat({"attack.epochs": 20, "run.progress": False, "attack.extra": False})


def _prepared(n=1500, seed=0):
    g = np.random.default_rng(seed)
    ent = (g.random((n, 3)) < np.array([0.5, 0.3, 0.2])).astype(np.int8)
    gender = g.integers(0, 2, n)
    ds = make_text_dataset(
        "synthetic", texts=[f"t{i}" for i in range(n)], labels=g.integers(0, 2, n), label_names=("a", "b"),
        attributes=[(AttributeSpec("entities", "multilabel", ("x", "y", "z")), ent),
                    (AttributeSpec("gender", "categorical", ("f", "m")), gender)],
    )
    roles = assign_roles(ds, test_frac=0.2, aux_frac=0.3, seed=0)
    # features that carry the attributes (what an unprotected representation does)
    x = np.concatenate([ent * 2.0, gender[:, None] * 2.0], axis=1) + g.normal(size=(n, 4))
    prep = pipeline.Prepared(ds=ds, roles=roles, shards=[np.arange(n)], extractor=None, features=None)
    return prep, x.astype(np.float32), g


def test_entity_attack_reports_f1_and_presence_absence_accuracy():
    prep, x, _ = _prepared()
    rows = np.arange(len(x))
    res, _ = pipeline.attack(prep, x, rows, seed=0, cfg=CFG, mechanism=make_mechanism("none"))
    ent = res["entities"]
    assert ent["f1"] > ent["f1_majority_baseline"] + 0.3
    assert set(ent["per_class_presence_accuracy"]) == {"x", "y", "z"}
    for c in "xyz":
        pa = ent["per_class_presence_accuracy"][c]
        assert 0.4 < pa["present"] <= 1 and 0.7 < pa["absent"] <= 1
    assert res["gender"]["accuracy"] > res["gender"]["majority_ci95"][1]
    assert ent["empirical_privacy"] == pytest.approx(1 - ent["f1"])


def test_attacker_falls_back_to_the_prior_when_uploads_carry_nothing():
    prep, x, g = _prepared()
    noise = g.normal(size=x.shape).astype(np.float32)
    res, _ = pipeline.attack(prep, noise, np.arange(len(x)), seed=0, cfg=CFG, mechanism=make_mechanism("none"))
    lo, hi = res["gender"]["majority_ci95"]
    assert lo <= res["gender"]["accuracy"] <= hi
    assert res["entities"]["f1"] <= res["entities"]["f1_majority_baseline"] + 0.05


def test_the_attacker_fits_on_a_seeded_sample_of_at_most_max_aux_users():
    prep, x, _ = _prepared()
    rows = np.arange(len(x))
    aux = prep.roles == "aux"
    n_aux = len(np.unique(prep.ds.user_ids[aux]))
    assert pipeline.attacked_uploads(prep, rows, 0, 0) is None and pipeline.attacked_uploads(prep, rows, 0, n_aux) is None
    keep = pipeline.attacked_uploads(prep, rows, 0, 50)
    assert keep is not None
    kept_aux = keep[aux[keep]]
    assert len(np.unique(prep.ds.user_ids[kept_aux])) == 50
    np.testing.assert_array_equal(keep[~aux[keep]], np.flatnonzero(~aux))  # every target upload stays
    np.testing.assert_array_equal(keep, pipeline.attacked_uploads(prep, rows, 0, 50))  # seeded
    assert not np.array_equal(keep, pipeline.attacked_uploads(prep, rows, 1, 50))
    # the attack runs on that sample: it still beats the prior on features that carry gender
    cfg = ExperimentConfig.from_flat({**CFG.to_flat(), "attack.max-aux-users": 50})
    res, _ = pipeline.attack(prep, x, rows, seed=0, cfg=cfg, mechanism=make_mechanism("none"))
    assert res["gender"]["accuracy"] > res["gender"]["majority_ci95"][1]
