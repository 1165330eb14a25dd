"""A seed's attacks run side by side (`fl_privtext.attacks.evaluate._run_attacks` on two threads, issue #38) and
answer exactly what the one-after-the-other loop answers: each attack draws only from its own seeded streams. The
known-bad (every attack drawing from one shared stream) makes the numbers depend on the order, and the same check
catches it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fl_privtext import rng
from fl_privtext.attacks import evaluate
from fl_privtext.names import ATTACKS
from fl_privtext.threads import limited

from .test_view import _view_truth


def _reference(view: Any, truth: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The serial loop as it was before the schedule: attributes in the view's order, then `ATTACKS`' order."""
    attacks = {name: evaluate.score_attribute(view, truth, name) for name in view.known}
    extra: dict[str, Any] = {}
    for name in ATTACKS:
        extra.update(ATTACKS[name](view, truth))
    extra["violation"] = bool(any(v.get("violation", False) for v in extra.values() if isinstance(v, dict)))
    return attacks, extra


def _dump(result: tuple[dict[str, Any], dict[str, Any]]) -> str:
    return json.dumps(result, sort_keys=True, default=lambda o: o.tolist() if hasattr(o, "tolist") else repr(o))


def test_attacks_side_by_side_equal_the_serial_loop(world):
    view, truth = _view_truth(world)
    assert next(t for t in evaluate.attack_tasks(view) if t[0] == "extra") == ("extra", "inversion")
    with limited(1):
        side_by_side = evaluate._run_attacks(view, truth, cores=2)
        serial = _reference(view, truth)
    assert list(side_by_side[0]) == list(serial[0]) and list(side_by_side[1]) == list(serial[1])
    assert _dump(side_by_side) == _dump(serial), "the attacks run side by side must answer the serial loop's numbers"


def test_a_shared_stream_is_caught(world, monkeypatch):
    """Known-bad: every attack draws from ONE generator; the schedule's order (inversion first) then changes the
    numbers the serial loop gets, and the comparison above fails."""
    view, truth = _view_truth(world)
    shared: list[np.random.Generator] = []

    def one_stream(root: int, *keys: object) -> np.random.Generator:
        return shared[0]

    monkeypatch.setattr(rng, "generator", one_stream)
    with limited(1):
        shared[:] = [np.random.default_rng(0)]
        scheduled = evaluate._run_attacks(view, truth, cores=1)  # the schedule's order, deterministically
        shared[:] = [np.random.default_rng(0)]
        serial = _reference(view, truth)
    assert _dump(scheduled) != _dump(serial)
