"""Per-user sums a block of users at a time (issue #38): the attribute attack, its floor and the referee's ceilings
give the same results whatever `USER_BLOCK` is, whether the blocks' scores are replayed from a spill file (the
learned families, plain logistic) or recomputed (the prior tables, the ceilings' posteriors)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fl_privtext.attacks import chunks, evaluate
from fl_privtext.attacks.attribute import user_decisions
from fl_privtext.attacks.chunks import row_chunks, user_blocks
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import AttributeSpec
from fl_privtext.privacy import make_mechanism


def _scored(label_epsilon: float, families: str) -> str:
    n, per_user = 40_000, 3
    g = np.random.default_rng(11)
    user = g.permutation(np.arange(n) // per_user)  # uploads in no order of their users
    z = g.integers(0, 3, n // per_user + 1)[user]
    x = g.normal(size=(n, 6)).astype(np.float32)
    x[:, 0] += 0.5 * z
    labels = np.where(g.random(n) < 0.4, z % 2, g.integers(0, 2, n)).astype(np.int64)
    cfg = ExperimentConfig.from_flat({"attack.families": families, "attack.extra": False, "run.progress": False})
    view, truth = evaluate.observe(
        uploads=x, labels=labels, users=user, senders=user % 2, texts=[""] * n,
        attributes={AttributeSpec("s", "categorical", ("a", "b", "c")): z}, aux=user < 800, clean=None,
        mechanism=make_mechanism("none"), epsilon=2.0, delta=1e-6, num_labels=2, label_epsilon=label_epsilon,
        seed=0, attack=cfg.attack)
    out = evaluate.score_attribute(view, truth, "s")
    sums = out.pop("_sums")
    out.pop("_figures")
    return json.dumps(out, sort_keys=True, default=repr) + repr(sums.users.tolist()) + repr(sums.sums.tolist())


@pytest.mark.parametrize("label_epsilon", [0.0, 1.0])  # labels in the clear (the posteriors' ceiling), randomized
def test_the_attribute_attack_and_its_referee_are_the_same_by_blocks_of_users(monkeypatch, label_epsilon) -> None:
    whole = _scored(label_epsilon, "logistic")  # ~13,000 target users: one block
    monkeypatch.setattr(chunks, "USER_BLOCK", 1_000)
    assert len(user_blocks(13_000)) == 13
    assert _scored(label_epsilon, "logistic") == whole


def test_user_decisions_replay_the_chunks_they_spilled_for_every_block(monkeypatch) -> None:
    """Known-bad: a source read once (a generator) gives the blocks after the first nothing without the spill."""
    g = np.random.default_rng(2)
    users, k = 5_000, 4
    inv = g.permutation(np.arange(4 * users, dtype=np.int32) // 4)
    lp = np.log(g.dirichlet(np.ones(k), len(inv)))
    log_prior = np.log(np.full(k, 1 / k))

    def source():  # read once, as an attacker's scoring is
        for c in row_chunks(len(inv), 3_000):
            yield c, lp[c]

    whole = user_decisions(inv, users, k, log_prior, ("sum_log", "mean_prob"), False, None, source())
    monkeypatch.setattr(chunks, "USER_BLOCK", 700)
    blocks = user_decisions(inv, users, k, log_prior, ("sum_log", "mean_prob"), False, None, source())
    for how in ("sum_log", "mean_prob"):
        assert blocks[how].dtype == np.int8 and np.array_equal(blocks[how], whole[how])
