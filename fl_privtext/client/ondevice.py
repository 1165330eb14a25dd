"""The client's on-device answer (`fl_privtext.ondevice`), made safe against a malicious server (issue #22).

The server sends its exported model; the client, only when its policy opts in (``client.on-device``):
- validates the model's shape against the server learner in use (`fl_privtext.ondevice.check_model`: standardise +
  at most two linear layers, input width = the width the mechanism uploads, output width = the number of classes);
- applies it to E[upload | x] of ALL its own test users' records at once (the server selects no rows), refusing when
  it holds fewer than ``client.min-count`` test users;
- releases, per record, whether the prediction was right through binary randomized response with epsilon
  ``client.count-epsilon`` and only the SUM of those bits (post-processing).

Guarantee: neighbouring relation = one record's (x, y) replaced by any other; each record's released bit is
epsilon-LDP (keep probability p = e^eps / (1 + e^eps); Warner 1965, Kairouz et al. 2016), whatever model the server
chose, so the model cannot act as an oracle on clean data (a constant model, a one-hot threshold, a bisection each
see one RR bit per record). A user with m records is charged m * count-epsilon in the client's ledger.

The server debiases: accuracy = (S / n - (1 - p)) / (2p - 1), whose standard deviation from the noise alone is
sqrt(p (1 - p) / n) / (2p - 1) (`fl_privtext.ondevice.debiased_accuracy`, the server's side).

Stages (``server.select-on = clients``, `fl_privtext.server.ondevice_selection`): the request names a stage.
``all`` (the default) answers for every test record as above. ``select`` and ``report`` answer for one HALF of the
client's test users each, the half fixed by a public hash of the user id (`answer_half`: neither the server nor the
data chooses it): in ``select`` the server sends up to `MAX_CANDIDATES` models, the client assigns each record to ONE
of them with its own randomness and releases that record's RR bit for that model, summed per model; in ``report`` the
one chosen model, as in ``all``. Each record still releases exactly one RR bit per stage it belongs to, and a user
belongs to one half, so a user with m records is charged m * count-epsilon once over both stages, as in ``all``.
Each (point, seed, stage) is answered once: a repeated request gets the first answer back (`guard.release_on_device`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_privtext.client.aggregate import stats_input, stats_projection
from fl_privtext.client.policy import Refused
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.memory import take_rows
from fl_privtext.ondevice import check_model, is_finite, keep_probability, mlp_logits, model_digest
from fl_privtext.public import PublicSpec

MAX_LAYERS = 2  # the server's learner: logistic regression (1 layer) or a one-hidden-layer MLP (2)
MAX_CANDIDATES = 8  # select stage: the most models one request may name
STAGES = ("all", "select", "report")


def answer_half(users: np.ndarray) -> np.ndarray:
    """0 (the select half) or 1 (the report half) per user id: a fixed public hash (the golden-ratio multiplier of
    Fibonacci hashing, bit 40 of the 64-bit product), so neither the server's messages nor the data choose it."""
    u = np.asarray(users, np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return ((u * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)).astype(np.int64) & 1


def validate_model(model: dict[str, np.ndarray], in_width: int, num_classes: int) -> None:
    """`Refused` unless ``model`` is an exported server MLP of input ``in_width`` and ``num_classes`` outputs."""
    try:
        layers = check_model(model)
    except ValueError as exc:
        raise Refused("malformed request", f"the model is not an exported server model ({exc})") from None
    extra = sorted(set(model) - {"mean", "std", "center", *(f"{p}_{i}" for p in ("weight", "bias")
                                                             for i in range(layers))})
    width = int(model["mean"].shape[0])
    out = int(model[f"bias_{layers - 1}"].shape[0])
    if extra or layers > MAX_LAYERS or width != in_width or out != num_classes or model["std"].shape != (width,):
        raise Refused("malformed request", f"the model's shape ({layers} layers, input {width}, output {out}, extra keys {extra}) is not "
                      f"the server learner's (<= {MAX_LAYERS} layers, input {in_width}, output {num_classes})")
    if not is_finite(model):
        raise Refused("malformed request", "the model holds non-finite values")


def test_rows(data: Any, client: int) -> np.ndarray:
    """All of this client's records whose user is a test user."""
    rows = np.asarray(data.shards[client], np.int64)
    if data.test is None:
        raise Refused("too few users", "this client does not know which of its users are test users; no on-device answer")
    return rows[np.asarray(take_rows(data.test, rows), bool)]  # a mapped column read a chunk of pages at a time


def stage_keys(stage: str) -> tuple[str, ...]:
    """The stage's part of the answer's ledger key and noise stream: none for ``all`` (the key and stream it always
    had), the stage's name otherwise. The Flower client (`guard.release_on_device`) and the plain loop share it."""
    return () if stage == "all" else (stage,)


def stage_rows(data: Any, client: int, stage: str = "all") -> np.ndarray:
    """This client's test records that answer in ``stage`` (all of them, or those of one half of its test users)."""
    if stage not in STAGES:
        raise Refused("malformed request", f"unknown on-device stage {stage!r}; expected one of {', '.join(STAGES)}")
    rows = test_rows(data, client)
    if stage == "all":
        return rows
    return rows[answer_half(data.user_of(rows)) == (0 if stage == "select" else 1)]


def expected_input(x: np.ndarray, public: PublicSpec, aggregate: str) -> np.ndarray:
    """(N, width) float32: what the server's model is applied to for clean records ``x`` (N, dim): E[upload | x]
    of the configured mechanism, or, under ``server.aggregate = secagg``, the projected unit-normalised record the
    sums were fitted on (``aggregate``: ``server.aggregate``). Shared by the client's answer and the referee's
    exact figure (`fl_privtext.report.referee.exact_on_device`), so both apply the model to the same input."""
    x = np.asarray(x, np.float64)
    if aggregate == "secagg":  # fitted on projected, unit-normalised records (client/aggregate.py)
        return stats_input(x, stats_projection(public, x.shape[1])).astype(np.float32)
    mech = mechanism_for(public, x.shape[1])
    return np.asarray(mech.expected(x.astype(np.float32)), np.float32)


def on_device_answer(data: Any, client: int, model: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
                     cfg: ExperimentConfig, count_epsilon: float, min_count: int, g: np.random.Generator,
                     features: Any = None, stage: str = "all") -> dict[str, np.ndarray]:
    """The client's answer: ``{"noisy-correct": S, "n": n, "count-epsilon": eps}`` over its test records of
    ``stage``; for ``select`` (``model`` a list of models) S and n hold one entry per model."""
    models = model if isinstance(model, list) else [model]
    if stage == "select" and not 1 <= len(models) <= MAX_CANDIDATES:
        raise Refused("malformed request", f"a select request must name 1 to {MAX_CANDIDATES} models; got {len(models)}")
    if stage != "select" and len(models) != 1:
        raise Refused("malformed request", f"an on-device {stage!r} request carries one model; got {len(models)}")
    rows = stage_rows(data, client, stage)
    users = data.user_of(rows)
    if len(np.unique(users)) < min_count:
        raise Refused("too few users", f"this client holds {len(np.unique(users))} test users, fewer than its client.min-count = "
                      f"{min_count}; no on-device answer")
    feats = data.features if features is None else features
    rows = np.sort(rows)
    if feats is not None:
        x = np.asarray(take_rows(feats, rows), np.float64)  # a map's pages dropped as read (issue #38)
    elif getattr(data, "texts", None) is not None and getattr(data, "extractor", None) is not None:
        pairs = None if data.text_pairs is None else [data.text_pairs[i] for i in rows]  # no cache: extract here
        x = np.asarray(data.extractor.extract([data.texts[i] for i in rows], pairs, progress=False), np.float64)
    else:
        raise ValueError(f"client {client}: no cached features and no texts to evaluate on.")
    if not np.isfinite(x).all():
        raise ValueError(f"client {client}: non-finite representations among its test records.")
    expected = expected_input(x, PublicSpec.of(cfg), cfg.server.aggregate)
    for m in models:
        validate_model(m, expected.shape[1], data.num_classes)
    truth = data.labels_of(rows)
    # select: each record answers for ONE model, drawn with the client's own randomness
    pick = g.integers(len(models), size=len(rows)) if stage == "select" else np.zeros(len(rows), np.int64)
    correct = np.zeros(len(rows), bool)
    for j, m in enumerate(models):
        mine = pick == j
        if mine.any():
            correct[mine] = mlp_logits(m, expected[mine]).argmax(axis=1) == truth[mine]
    p = keep_probability(count_epsilon)
    flip = g.random(len(correct)) >= p
    noisy = np.where(flip, ~correct, correct)
    return {"noisy-correct": np.bincount(pick, weights=noisy, minlength=len(models)).astype(np.int64),
            "n": np.bincount(pick, minlength=len(models)).astype(np.int64),
            "count-epsilon": np.array([float(count_epsilon)], np.float64),
            "model": model_digest(model)}  # which model(s) this answer is about (the server sent them)
