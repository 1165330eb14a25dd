"""Attacks read nothing but observed traffic and public knowledge (the AttackView)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing

import numpy as np
import pytest

from fl_privtext import attacks, pipeline
from fl_privtext.attacks import ENTRY_POINTS, AttackView, eavesdropper
from fl_privtext.attacks.attribute import infer_attribute, plain_logistic
from fl_privtext.attacks.inversion import invert
from fl_privtext.attacks.reidentification import reidentify
from fl_privtext.privacy import make_mechanism

from .conftest import config

ALLOWED = {  # traffic
    "uploads", "labels", "labels_in_clear", "num_labels", "label_epsilon", "sender", "user",
    # public knowledge
    "mechanism", "known", "public_texts", "public_features", "public_user", "candidates", "queries", "config",
    "seed", "meta"}


def _entry(path: str):
    mod, name = path.split(":")
    return getattr(importlib.import_module(mod), name)


def test_every_attack_entry_point_takes_only_the_view():
    for path in ENTRY_POINTS:
        fn = _entry(path)
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())
        assert hints[params[0].name] is AttackView, path
        for p in params[1:]:  # anything else is a plain name (which attribute to attack), never data
            assert hints[p.name] is str, (path, p.name)


def test_the_view_holds_traffic_and_public_knowledge_only():
    assert {f.name for f in dataclasses.fields(AttackView)} == ALLOWED
    assert {f.name for f in dataclasses.fields(attacks.KnownAttribute)} == {"spec", "index", "values",
                                                                             "public_values"}


def _view_truth(world, flip_targets=False):
    prep, x = world
    mech = make_mechanism("laplace-l1", epsilon=8.0, sampler="float")
    up = mech.privatize(x, np.random.default_rng(5))
    _, user_index = np.unique(prep.ds.user_ids, return_inverse=True)
    target = prep.roles != "aux"
    z = prep.ds.attribute("gender").copy()
    texts = list(prep.ds.texts)
    if flip_targets:  # the referee's secrets of every target change; the traffic does not
        z[target] = 1 - z[target]
        texts = [t if not target[i] else "replaced" for i, t in enumerate(texts)]
    attrs = {prep.ds.attribute_spec("gender"): z}
    return attacks.observe(uploads=up, labels=prep.ds.labels, users=user_index, senders=np.zeros(len(x)),
                           texts=texts, attributes=attrs, aux=~target, clean=lambda idx: x[idx], mechanism=mech,
                           epsilon=8.0, delta=0.0, num_labels=2, label_epsilon=0.0, seed=0,
                           attack=config().attack)


def test_known_attributes_cover_aux_users_only(world):
    prep, _ = world
    view, _ = _view_truth(world)
    aux = np.flatnonzero(prep.roles == "aux")
    k = view.known["gender"]
    np.testing.assert_array_equal(k.index, aux)
    assert len(view.public_texts) == len(aux)
    assert not np.isin(view.user[view.target_mask()], view.user[aux]).any()
    assert view.uploads.flags.writeable is False


def test_attack_answers_do_not_depend_on_the_targets_secrets(world):
    """Change every target's attribute and text in the referee's data: the attacks answer exactly the same,
    while the scores move (so the attacks could not have read them)."""
    view, truth = _view_truth(world)
    view2, truth2 = _view_truth(world, flip_targets=True)
    g1, g2 = infer_attribute(view, "gender"), infer_attribute(view2, "gender")
    np.testing.assert_array_equal(g1.upload_pred, g2.upload_pred)
    np.testing.assert_array_equal(g1.user_pred, g2.user_pred)
    np.testing.assert_array_equal(reidentify(view), reidentify(view2))
    np.testing.assert_array_equal(invert(view).pred, invert(view2).pred)
    f1, f2 = plain_logistic(view, "gender"), plain_logistic(view2, "gender")  # the floor reads only the view too
    np.testing.assert_array_equal(f1.upload_pred, f2.upload_pred)
    a1, _ = attacks.run_attacks(view, truth)
    a2, _ = attacks.run_attacks(view2, truth2)
    assert a1["gender"]["accuracy"] + a2["gender"]["accuracy"] == pytest.approx(1.0)
    assert a1["gender"]["floor_logistic"] + a2["gender"]["floor_logistic"] == pytest.approx(1.0)


def test_pipeline_builds_views_without_target_secrets(world, monkeypatch):
    """The view the pipeline hands to the attacks carries no attribute value of a target user."""
    prep, x = world
    seen = {}

    def spy(view, truth):
        seen["view"] = view
        return {}, {}

    monkeypatch.setattr(eavesdropper, "run_attacks", spy)  # where the eavesdropper calls it
    pipeline.attack(prep, x, np.arange(len(x)), 0, config(), mechanism=make_mechanism("none"))
    view = seen["view"]
    target_users = view.user[view.target_mask()]
    for k in view.known.values():
        assert not np.isin(view.user[k.index], target_users).any()
    assert not np.isin(view.public_user, target_users).any()
    assert len(view.public_texts) == int((prep.roles == "aux").sum())
