"""The referee's exact on-device figures (simulation only, `EXACT_BY`): the server's model applied to every test
record's clean features and counted exactly, beside the clients' private estimate (`fl_privtext.server.ondevice`).
No deployed server can compute them; results.json shows both (``utility.on_device.exact`` / ``.private``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext import rng
from fl_privtext.bootstrap import counts_bootstrap, user_counts
from fl_privtext.client.ondevice import expected_input
from fl_privtext.config import ExperimentConfig
from fl_privtext.extract.clean import clean_features
from fl_privtext.memory import positions
from fl_privtext.metrics import macro_f1_from_confusion
from fl_privtext.ondevice import confusion, mlp_logits
from fl_privtext.public import PublicSpec

if TYPE_CHECKING:  # the types only: the orchestrator prepares the point, the server trains
    from fl_privtext.client.prepared import Prepared
    from fl_privtext.server.training import Trained

__all__ = ["EXACT_BY", "EXACT_INTERVAL", "exact_candidates", "exact_on_device"]


def exact_candidates(prep: Prepared, cfg: ExperimentConfig, trained: Trained, result: dict[str, Any], seed: int
                     ) -> None:
    """server.select-on = clients: beside each candidate's private estimate in ``result["selection"]``, the
    referee's ``exact_accuracy`` of its model (simulation only, `exact_on_device`): whether the clients chose the
    best one, which their answers cannot tell (issue #37 item 1)."""
    sel = result.get("selection")
    if not trained.candidates or not isinstance(sel, dict):
        return
    for name, model in trained.candidates.items():
        ex = exact_on_device(prep, cfg, model, trained.majority_class, seed, interval=False)
        if name in sel["candidates"] and ex.get("available"):
            sel["candidates"][name]["exact_accuracy"] = ex["accuracy"]
    sel["exact_by"] = EXACT_BY


EXACT_BY = ("simulation only: the referee applies the server's model to every test record's clean features (E[upload "
            "| x], as the clients do) and counts exactly; no deployed server can compute this (its figure is "
            "utility.on_device.private)")
EXACT_INTERVAL = ("95% percentile bootstrap over test users (each with all its records; fl_privtext.bootstrap), "
                  "over seeds too where there are several")
_EXACT_BATCH = 65536  # test records per block: bounds the referee's memory whatever the test set's size

def exact_on_device(prep: Prepared, cfg: ExperimentConfig, model: dict[str, np.ndarray] | None,
                    majority_class: int, seed: int, *, interval: bool = True) -> dict[str, Any]:
    """The referee's exact on-device figure of ``model`` (simulation only, `EXACT_BY`): accuracy and macro-F1 over
    every test user's records, whether or not its client answered, with the user-level interval of `fl_privtext.
    bootstrap` (stream ``(seed, "referee", "on-device")``). ``_per_user`` (internal): the per-user counts the
    report pools over seeds. Why: the server's estimate carries the randomized response's noise (+-3.5 points at
    count-epsilon 1 on AG news), so "how good is the model the mechanism allows" needs this one. ``interval=False``:
    no bootstrap (``ci_low`` / ``ci_high`` None), for figures read without one (`exact_candidates`)."""
    if model is None:
        return {"available": False, "reason": "no model was sent"}
    if cfg.train.rounds > 0:
        return {"available": False, "reason": "train.rounds > 0 (Phase A): the model applies to the trained "
                                              "encoder's output, which the referee does not recompute"}
    clean = clean_features(prep, cfg.extractor.cache_dir)
    rows = positions(prep.roles == "test")  # int32 where the positions fit
    if clean is None or not len(rows):
        return {"available": False, "reason": "no test records" if clean is not None else
                "the referee has no clean features (no extraction cache, no extractor)"}
    public = PublicSpec.of(cfg)
    # a block of test records at a time: its predictions go into the confusion counts (a sum of the blocks' counts:
    # the same int64 matrix) and a byte each of whether they were right; no (test records,) int64 predictions,
    # labels and positions held together (~40 bytes a test record: the driver's on-device round at 10M users, 7.3M
    # test records, rose 0.43 GB, issue #38)
    k = len(prep.ds.label_names)
    cm = np.zeros((k, k), np.int64)
    correct = np.empty(len(rows), bool)
    for s in range(0, len(rows), _EXACT_BATCH):
        block = rows[s : s + _EXACT_BATCH]
        pred = mlp_logits(model, expected_input(clean(block), public, cfg.server.aggregate)).argmax(axis=1)
        truth = prep.ds.label_codes[block]  # the test records' only, as held (narrow)
        cm += confusion(truth, pred, k)
        correct[s : s + len(block)] = pred == truth
    counts = user_counts(correct, prep.ds.user_index.reshape(-1)[rows])
    lo, hi = counts_bootstrap([counts], rng.generator(seed, "referee", "on-device")) if interval else (None, None)
    n = int(cm.sum())
    return {"available": True, "accuracy": float(np.trace(cm)) / n, "macro_f1": macro_f1_from_confusion(cm),
            "ci_low": lo, "ci_high": hi, "majority_baseline": float(cm[majority_class].sum()) / n,
            "num_test_records": n, "num_test_users": len(counts.users), "by": EXACT_BY, "interval": EXACT_INTERVAL,
            "_per_user": counts}

