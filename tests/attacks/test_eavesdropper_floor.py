"""The eavesdropper is never reported below a plain attacker or below its prior (issue #37 item 4).

Both worlds go through the referee (`evaluate.observe`, `evaluate.score_attribute`) on numeric uploads with no
privacy, so what is measured is the attacker's choice and its answer, not a mechanism:
- a planted leak where the classes are told apart by one coordinate and a share of one class sits far out on its
  own side: the mean-based families (centroid, lda) put their boundary in the wrong place, logistic regression
  does not. There, out of fold on a modest number of aux users, a mean-based family can sit within one standard
  error of the best while it is 5-10 points worse on the targets: the old one-standard-error rule answers with it.
- no leak: uploads independent of the attribute; the answer must be the prior itself (majority for every target).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from fl_privtext.attacks import attribute, evaluate
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import AttributeSpec
from fl_privtext.privacy import make_mechanism

TOLERANCE = 0.01  # the reported leakage may sit this far below plain logistic regression's (targets: 1,420)


def _world(seed: int, *, leak: bool, users: int = 1500, aux_users: int = 80, per_user: int = 1,
           dim: int = 4, learner: str = "auto") -> tuple[Any, Any]:
    """``leak``: coordinate 0 is +-1 by class plus N(0, 1), and 40% of class 1 sits 8 further out on its own side;
    else the uploads are N(0, 1) whatever the attribute (class 1 has probability 0.45)."""
    g = np.random.default_rng(seed)
    user = np.repeat(np.arange(users), per_user)
    z_user = g.integers(0, 2, users) if leak else (g.random(users) < 0.45).astype(np.int64)
    z = z_user[user]
    x = g.normal(size=(len(user), dim))
    if leak:
        x[:, 0] += 2.0 * z - 1.0
        x[:, 0] += np.where((z == 1) & (g.random(len(user)) < 0.4), 8.0, 0.0)
    aux = np.isin(user, g.permutation(users)[:aux_users])
    cfg = ExperimentConfig.from_flat({"attack.families": "logistic", "attack.learner": learner, "attack.extra": False,
                                      "run.progress": False})
    return evaluate.observe(
        uploads=x.astype(np.float32), labels=np.zeros(len(user), np.int64), users=user, senders=user % 2,
        texts=[""] * len(user), attributes={AttributeSpec("secret", "categorical", ("a", "b")): z}, aux=aux,
        clean=None, mechanism=make_mechanism("none"), epsilon=math.inf, delta=0.0, num_labels=0,
        label_epsilon=0.0, seed=seed, attack=cfg.attack)


def _old_one_se_choice(candidates: Sequence[Any], hits_of: Callable[[Any], np.ndarray]) -> Any:
    """The rule this replaced (known-bad): of candidates ordered simplest first, the first whose out-of-fold
    correctness is within one paired standard error of the best one's."""
    if not candidates:
        return None
    best = max(candidates, key=lambda c: float(np.mean(hits_of(c))))
    for c in candidates:
        d = np.asarray(hits_of(best), np.float64) - np.asarray(hits_of(c), np.float64)
        se = float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else 0.0
        if float(d.mean()) <= se:
            return c
    return best


# seeds of the planted world where the old rule takes a mean-based family. Measured over seeds 0-9: the old rule
# falls more than TOLERANCE below the floor in 4 (by 6-8 points), the best-out-of-fold choice in 1 (seed 9, where
# centroid is also the best out of fold: an honest fold lottery on 80 aux users, not a rule)
@pytest.mark.parametrize("seed", [0, 2])
def test_on_a_planted_leak_the_reported_leakage_reaches_plain_logistic_and_the_one_se_rule_does_not(seed,
                                                                                                  monkeypatch):
    view, truth = _world(seed, leak=True)
    a = evaluate.score_attribute(view, truth, "secret")
    assert a["leak_test"]["leak_detected"] and a["attacker"] == a["learned_attacker"]
    assert a["accuracy"] >= a["floor_logistic"] - TOLERANCE, a
    assert a["floor_logistic"] > a["majority_baseline"] + 0.2  # the floor is a real leak
    pu = a["per_user"]
    assert pu["accuracy"] >= pu["floor_logistic"] - TOLERANCE, pu
    assert pu["ci_low"] <= pu["accuracy"] <= pu["ci_high"] and [pu["ci_low"], pu["ci_high"]] == pu["ci95"]
    # the chosen family is the best out of fold
    oof = {f: e["oof_upload_accuracy"] for f, e in a["families"].items()}
    assert oof[a["attacker"]] == max(oof.values())

    # the test's power: the same world under the one-standard-error rule answers with a worse family
    monkeypatch.setattr(attribute, "best_choice", _old_one_se_choice)
    old = evaluate.score_attribute(view, truth, "secret")
    assert old["attacker"] in ("centroid", "lda") and oof[old["attacker"]] < oof[a["attacker"]]
    assert old["accuracy"] < old["floor_logistic"] - 0.05, old
    assert old["floor_logistic"] == a["floor_logistic"]  # the floor does not depend on the attacker's rule


@pytest.mark.parametrize("learner,per_user,seed", [("auto", 3, 1), ("linear", 1, 2), ("linear", 3, 0)])
def test_without_a_leak_the_answer_is_exactly_the_prior_and_the_verdict_says_so(learner, per_user, seed):
    view, truth = _world(seed, leak=False, users=900 // per_user, aux_users=300 // per_user, per_user=per_user,
                         dim=20, learner=learner)
    a = evaluate.score_attribute(view, truth, "secret")
    assert not a["leak_test"]["leak_detected"] and a["leak_test"]["verdict"].startswith(
        "no leak detected at this power")
    assert a["attacker"] == "majority" and a["learned_attacker"] in attribute.FAMILIES
    assert a["accuracy"] == a["majority_baseline"]  # exactly: the majority class for every target
    pu = a["per_user"]
    assert not pu["test"]["leak_detected"] and pu["attacker"] == "majority"
    assert pu["accuracy"] == pu["majority_baseline"]
    assert pu["ci_low"] <= pu["accuracy"] <= pu["ci_high"]
    assert 0.0 <= a["floor_logistic"] <= 1.0 and 0.0 <= pu["floor_logistic"] <= 1.0
    if learner == "linear":  # here the learned head is not constant on noise (the server's others are)
        # known-bad: answering with the learned model, as before, reports a figure below the prior it could give
        assert a["learned_accuracy"] < a["majority_baseline"] - 0.01, a


def test_the_choice_takes_the_best_out_of_fold_and_gives_exact_ties_to_the_simpler():
    hits = {"centroid": np.array([1, 1, 0, 0, 1.0]), "lda": np.array([1, 1, 1, 0, 1.0]),
            "logistic": np.array([1, 1, 1, 1, 0.0])}
    assert attribute.best_choice(["centroid", "lda", "logistic"], hits.__getitem__) == "lda"
    assert attribute.best_choice(["logistic", "lda"], hits.__getitem__) == "logistic"
    assert attribute.best_choice([], hits.__getitem__) is None
    # the old rule takes centroid here (within one SE of the best): the downward bias this replaced
    assert _old_one_se_choice(["centroid", "lda", "logistic"], hits.__getitem__) == "centroid"


def _label_world(seed: int) -> tuple[Any, Any]:
    """Labels in the clear, no leak in the uploads (N(0, 1) whatever the attribute). Among the 300 aux users the
    label-conditional majority differs from the majority by a margin the held-out test cannot confirm (label 1:
    135 of class 1 vs 125 of class 0; label 0: 40 of class 0); on the 600 targets the label is a coin, independent
    of the attribute (class 1: 45%). So the attacker's prior is the plain majority, and the label-conditional
    majority, scored on the targets, sits ~5 points below it: the console's old "best base" (issue #36)."""
    g = np.random.default_rng(seed)
    aux_z = np.r_[np.ones(135, np.int64), np.zeros(165, np.int64)]
    aux_label = np.r_[np.ones(135 + 125, np.int64), np.zeros(40, np.int64)]
    tz = (g.random(600) < 0.45).astype(np.int64)
    z, labels = np.r_[aux_z, tz], np.r_[aux_label, g.integers(0, 2, 600)]
    user = np.arange(len(z))
    cfg = ExperimentConfig.from_flat({"attack.families": "logistic", "attack.learner": "linear",
                                      "attack.extra": False, "run.progress": False})
    return evaluate.observe(
        uploads=g.normal(size=(len(z), 8)).astype(np.float32), labels=labels, users=user, senders=user % 2,
        texts=[""] * len(z), attributes={AttributeSpec("secret", "categorical", ("a", "b")): z},
        aux=user < 300, clean=None, mechanism=make_mechanism("none"), epsilon=math.inf, delta=0.0, num_labels=2,
        label_epsilon=0.0, seed=seed, attack=cfg.attack)


def test_the_prior_that_answered_is_the_one_baseline_and_the_console_line_agrees_with_its_verdict():
    from fl_privtext import report

    view, truth = _label_world(0)
    a = evaluate.score_attribute(view, truth, "secret")
    assert not a["leak_test"]["leak_detected"] and a["attacker"] == a["prior"] == "majority"
    assert a["accuracy"] == a["prior_baseline"] == a["majority_baseline"]  # the answer IS the prior
    # the case the console got wrong: a label-conditional majority it did not use, well below the answer
    assert a["majority_given_label_baseline"] < a["prior_baseline"] - 0.02, a
    pu = a["per_user"]
    assert pu["prior"] == pu["attacker"] and pu["accuracy"] == pu["prior_baseline"]
    line = next(ln for ln in report.attack_lines({"attacks": {"secret": a}}) if ln.startswith("secret "))
    shown = f"{a['accuracy']:.3f}"
    assert line.count(shown) >= 2 and f"{a['majority_given_label_baseline']:.3f}" not in line, line
    assert "no leak detected = prior" in line and "leak detected " not in line.replace("no leak detected", "")
