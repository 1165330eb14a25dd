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


def test_attacker_on_uploads_that_carry_nothing_finds_no_leak():
    """The attacker's model does not beat the prior out of fold, so it answers the prior and the verdict says no
    leak: its accuracy stays within the majority's interval (F1 of a multi-label guess is not compared: any
    positive guess beats the all-absent majority's F1 of 0 without information)."""
    prep, x, g = _prepared()
    noise = g.normal(size=x.shape).astype(np.float32)
    res, _ = pipeline.attack(prep, noise, np.arange(len(x)), seed=0, cfg=CFG, mechanism=make_mechanism("none"))
    lo, hi = res["gender"]["majority_ci95"]
    assert lo <= res["gender"]["accuracy"] <= hi
    assert not res["gender"]["leak_test"]["leak_detected"] and not res["entities"]["leak_test"]["leak_detected"]
    assert res["entities"]["accuracy"] <= res["entities"]["majority_baseline"] + 0.05


def test_centring_server_removes_a_shift_shared_by_all_coordinates():
    """server.center: an upload plus one scalar per row (DPNR's released noise code) gives the centring server
    exactly the inputs of the unshifted upload, so it learns as if there were no noise; a plain server does not."""
    from fl_privtext.privacy import make_mechanism
    from fl_privtext.server import server_inputs

    g = np.random.default_rng(3)
    x = g.random((4000, 8)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int64)  # a task carried by the vector's shape
    noisy = make_mechanism("laplace-dpnr-code", epsilon=0.05, dim=8).privatize(x, g)  # one Lap(20) draw per row
    centring = ExperimentConfig.from_flat({"server.center": True})
    clean_c, noisy_c = server_inputs(x, centring.server), server_inputs(noisy, centring.server)
    # per-vector min-max then a shared shift: centring returns the centred normalised input, whatever the draw
    lo, hi = x.min(1, keepdims=True), x.max(1, keepdims=True)
    np.testing.assert_allclose(noisy_c, server_inputs((x - lo) / (hi - lo), centring.server), atol=1e-4)
    assert server_inputs(noisy, CFG.server) is noisy  # off by default
    assert np.abs(noisy - noisy.mean()).max() > 10  # the shift is large (scale 20)
    import torch

    from fl_privtext.learn import MLPConfig, train_mlp

    tr, te = slice(0, 3000), slice(3000, None)
    conf = MLPConfig(hidden=32, epochs=6, batch_size=64, standardize=False)

    def acc(feats: np.ndarray) -> float:
        m = train_mlp(feats[tr], y[tr], num_classes=2, config=conf, generator=torch.Generator().manual_seed(0))
        return float((m.predict(feats[te]) == y[te]).mean())

    assert acc(noisy_c) > 0.9 and abs(acc(noisy_c) - acc(clean_c)) < 0.03
    assert acc(noisy) < 0.75  # without centring the shared draw swamps the signal


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
