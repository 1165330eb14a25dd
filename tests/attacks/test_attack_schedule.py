"""A seed's attacks run side by side (`fl_privtext.attacks.evaluate._run_attacks` on two threads, issue #38) and
answer exactly what the one-after-the-other loop answers: each attack draws only from its own seeded streams. The
known-bad (every attack drawing from one shared stream) makes the numbers depend on the order, and the same check
catches it. The keyword inversion is itself split into pieces (its public texts, six decoder fits, the targets'
scoring per decoder and chunk share) scheduled with the other attacks: any order of its pieces gives the figures of
the unsplit inversion (`inversion.invert` scored chunk by chunk), and pieces that share one stream are caught."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import numpy as np
import pytest

from fl_privtext import rng
from fl_privtext.attacks import evaluate, inversion
from fl_privtext.names import ATTACKS
from fl_privtext.threads import Task, limited, parallel_tasks

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
    assert evaluate.attack_tasks(view, truth)[0].key == ("inversion", "public")  # the longest chain first
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


def _other_order(tasks: list[Task[Any]]) -> list[Task[Any]]:
    """Another order the schedule could take: the last-listed task first among those whose needs are done."""
    todo, done, out = list(reversed(tasks)), set(), []
    while todo:
        t = next(t for t in todo if all(n in done for n in t.after))
        todo.remove(t)
        done.add(t.key)
        out.append(t)
    return out


def _inversion_in(order: Any, view: Any, truth: Any) -> str:
    with limited(1):
        done = parallel_tasks(order(evaluate.inversion_tasks(view, truth)), 1, cores=1)
    assert list(done) == [("extra", "inversion")]  # the pieces' results are dropped once used
    return _dump(({}, done["extra", "inversion"]))


def _unsplit(view: Any, truth: Any) -> dict[str, Any]:
    """The figures of the inversion in one piece: `inversion.invert`, each decoder scored on all targets at once;
    with one thread, as the pieces (`_inversion_in`): the learned decoder's L-BFGS fit on MKL's sgemm gives other
    last bits with two threads on some CPUs (an AVX512-FP16 Xeon: precision 0.26832 vs 0.26840), which is the
    thread count's difference, not the split's."""
    with limited(1):
        guess = inversion.invert(view)
    y = inversion.presence([truth.texts[i] for i in guess.target_index], guess.vocab)
    out = {d: inversion.set_prf(y, guess.predict(slice(None), d)) for d in guess.decoders}
    return {"decoder": guess.decoder, "threshold": guess.threshold, "heldout_f1": guess.heldout_f1,
            "baseline": inversion.set_prf(y, guess.baseline_pred), **out}


def test_the_inversions_pieces_in_any_order_give_the_unsplit_figures(world):
    view, truth = _view_truth(world)
    split = _inversion_in(list, view, truth)
    assert _inversion_in(_other_order, view, truth) == split
    entry = json.loads(split)[1]["inversion"]
    whole = _unsplit(view, truth)
    assert entry["decoder"] == whole["decoder"] and entry["threshold"] == whole["threshold"]
    for d, figures in entry["decoders"].items():
        assert (figures["precision"], figures["recall"], figures["f1"]) == whole[d]
        assert figures["heldout_f1"] == whole["heldout_f1"][d]
    assert (entry["precision_baseline"], entry["recall_baseline"], entry["f1_baseline"]) == whole["baseline"]


def test_inversion_pieces_sharing_one_stream_are_caught(world, monkeypatch):
    """Known-bad: each held-out fit privatizes the public texts again, all from ONE generator: a piece's noise then
    depends on which pieces ran before it, and the two orders above disagree."""
    view, truth = _view_truth(world)
    shared = np.random.default_rng(0)
    real = inversion.heldout

    def one_stream(pub: inversion.Public, name: str) -> tuple[float, float]:
        x = view.mechanism.privatize(pub.clean.astype(np.float32), shared)
        return real(dataclasses.replace(pub, x=np.asarray(x, np.float64)), name)

    monkeypatch.setattr(inversion, "heldout", one_stream)
    assert _inversion_in(_other_order, view, truth) != _inversion_in(list, view, truth)


def test_the_inversions_fits_run_side_by_side(world, monkeypatch):
    """The inversion is no longer one task: two of its decoder fits run at the same time on two cores (the barrier
    passes only then)."""
    view, truth = _view_truth(world)
    barrier = threading.Barrier(2, timeout=60)
    real_fit, real_heldout = inversion.fit, inversion.heldout

    def fit(pub: inversion.Public, name: str) -> Any:
        if name == "learned":
            barrier.wait()
        return real_fit(pub, name)

    def heldout(pub: inversion.Public, name: str) -> tuple[float, float]:
        if name == "learned":
            barrier.wait()
        return real_heldout(pub, name)

    monkeypatch.setattr(inversion, "fit", fit)
    monkeypatch.setattr(inversion, "heldout", heldout)
    with limited(1):
        side_by_side = evaluate._run_attacks(view, truth, cores=2)
    monkeypatch.undo()
    with limited(1):
        assert _dump(side_by_side) == _dump(_reference(view, truth))


@pytest.mark.parametrize("cores", [1, 2])
def test_an_unavailable_inversion_says_why_in_either_schedule(world, cores):
    view, truth = _view_truth(world)
    bare = dataclasses.replace(view, public_features=None, candidates=None)
    with limited(1):
        extra = evaluate._run_attacks(bare, truth, cores=cores)[1]
    assert extra["inversion"] == {"available": False, "reason": "Keyword inversion needs at least 10 public texts "
                                                                "with their representations."}
