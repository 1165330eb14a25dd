"""The eavesdropper's MLP family stops early on held-out users where its step budget binds (issue #38): cheaper,
and never weaker out of fold than the fixed budget it replaces, while a known-bad tiny budget is caught by the same
check. Small problems (seconds): a 64-wide probe and a budget of 600 steps that binds on the folds."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from fl_privtext import rng
from fl_privtext.attacks import attribute
from fl_privtext.attacks.view import AttackView, KnownAttribute
from fl_privtext.config import AttackConfig, MLPConfig
from fl_privtext.data import AttributeSpec
from fl_privtext.learn import EarlyStop, train_mlp
from fl_privtext.threads import limited


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch / BLAS thread, as the driver runs the attacks (`limited`): with torch's default pool these
    32-row steps took 750 s instead of ~4 s of CPU on a loaded 2-core machine (oversubscribed threads)."""
    with limited(1):
        yield


def _view(users: int = 1000, per_user: int = 2, seed: int = 0, **attack: object) -> AttackView:
    """A planted leak only an MLP reads: the secret spreads the first coordinate (x0 * 2.5 for class 1), the same
    mean for both classes (a linear model sees nothing)."""
    g = np.random.default_rng(seed)
    user = np.repeat(np.arange(users), per_user)
    secret = g.integers(0, 2, users)[user]
    x = g.normal(size=(len(user), 8)).astype(np.float32)
    x[:, 0] *= np.where(secret == 1, 2.5, 1.0).astype(np.float32)
    cfg = AttackConfig(**{"hidden": 64, "epochs": 30, "max_steps": 600, "families": "mlp", **attack})
    n = len(user)
    return AttackView(
        uploads=x, labels=np.zeros(n, np.int64), labels_in_clear=True, num_labels=0, label_epsilon=0.0,
        sender=np.zeros(n, np.int64), user=user.astype(np.int64), mechanism=None,
        known={"secret": KnownAttribute(AttributeSpec("secret", "categorical", ("a", "b")), np.arange(n), secret)},
        public_texts=(), public_features=None, public_user=np.zeros(0, np.int64), candidates=None,
        queries=np.zeros(0, np.int64), config=cfg, seed=seed)


def _out_of_fold(view: AttackView, fit: str) -> np.ndarray:
    """Correct (1) or not (0) per aux upload, out of fold (3 folds by user, infer_attribute's folds): ``fit`` =
    ``family`` (the mlp family as shipped), ``fixed`` (the whole budget, the family before early stopping) or
    ``tiny`` (the known-bad: 20 steps)."""
    prob = attribute._Problem(view, view.known["secret"])
    order = rng.generator(view.seed, "attack-folds", "secret").permutation(np.unique(prob.users))
    fold_of = {u: i % 3 for i, u in enumerate(order)}
    fold = np.array([fold_of[u] for u in prob.users])
    pos = np.arange(len(prob.idx))
    pred = np.zeros(len(pos), np.int64)
    for f in range(3):
        held, train = fold == f, pos[fold != f]
        if fit == "family":
            pred[held] = attribute.mlp_family(prob, train, prob.idx[held], ("fold", f)).argmax(axis=1)
            continue
        cfg = view.config.mlp() if fit == "fixed" else dataclasses.replace(view.config.mlp(), max_steps=20)
        model = train_mlp(prob.inputs(prob.idx[train]), prob.z[train], num_classes=2, config=cfg,
                          generator=rng.torch_generator(view.seed, "attack", "secret", ("fold", f)))
        pred[held] = model.predict(prob.inputs(prob.idx[held]))
    return (pred == prob.z).astype(np.float64)


def test_the_early_stopped_family_is_not_weaker_than_the_fixed_budget_and_a_tiny_budget_fails_the_check() -> None:
    view = _view()
    prob = attribute._Problem(view, view.known["secret"])
    train = np.arange(1400)  # 30 epochs of 44 batches > 600 steps: the budget binds
    fit, stop = attribute.mlp_early_stop(prob, train, ("fold", 0))
    assert stop is not None and len(fit) + len(stop.x) == len(train), "the budget binds: early stopping must be on"
    held_out = np.setdiff1d(train, fit)
    assert not np.intersect1d(prob.users[fit], prob.users[held_out]).size, "a user must not straddle the split"
    family, fixed, tiny = (_out_of_fold(view, f) for f in ("family", "fixed", "tiny"))

    def not_weaker(candidate: np.ndarray) -> bool:  # within two standard errors of the paired difference
        d = candidate - fixed
        return bool(d.mean() >= -2 * d.std(ddof=1) / math.sqrt(len(d)))

    assert fixed.mean() > 0.6, f"the planted leak should be read by the fixed budget; got {fixed.mean():.3f}"
    assert not_weaker(family), f"early stopped {family.mean():.3f} vs the fixed budget {fixed.mean():.3f}"
    assert not not_weaker(tiny), f"the known-bad tiny budget {tiny.mean():.3f} passed vs {fixed.mean():.3f}"
    again = [attribute.mlp_family(prob, train, prob.idx[1400:], ("fold", 0)) for _ in range(2)]
    assert np.array_equal(*again), "fixed seeds must give the same answers"


def test_below_the_budget_the_family_is_unchanged() -> None:
    prob = attribute._Problem(_view(users=300), _view(users=300).known["secret"])
    train = np.arange(400)  # 30 epochs of 13 batches = 390 steps < 600: the budget does not bind
    fit, stop = attribute.mlp_early_stop(prob, train, "all")
    assert stop is None and np.array_equal(fit, train)


def test_early_stop_keeps_the_best_held_out_checkpoint_and_stops_after_its_patience() -> None:
    g = np.random.default_rng(1)
    x, y = g.normal(size=(3000, 8)).astype(np.float32), g.integers(0, 2, 3000)  # nothing to learn: it over-fits
    cfg = MLPConfig(hidden=64, epochs=50, dropout=0.0, max_steps=5000)
    stop = EarlyStop(x[2500:], y[2500:], every=25, patience=3)
    model = train_mlp(x[:2500], y[:2500], num_classes=2, config=cfg, generator=torch.Generator().manual_seed(0),
                      early_stop=stop)
    steps, losses = zip(*model.holdout_losses, strict=True)
    assert model.steps < 5000, "it should stop long before the budget on pure noise"
    assert model.best_step == steps[int(np.argmin(losses))]
    assert model.steps == model.best_step + 3 * 25, "it stops exactly `patience` checks after the best"
    logits = torch.from_numpy(model.logits(x[2500:]))
    kept = float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[2500:])))
    assert math.isclose(kept, min(losses), rel_tol=1e-5), "the kept parameters are the best check's"
