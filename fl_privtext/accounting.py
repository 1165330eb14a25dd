"""Per-user accounting of one experiment point: everything a user released, charged to that user.

Charged per released record and round (basic composition, `fl_privtext.privacy.Accountant`):
- the representation: the mechanism's worst-case (and nominal) epsilon for every upload that was sent;
- the label: k-ary randomized response's epsilon when ``privacy.label-epsilon > 0``; a label sent in the clear is
  an infinitely private-less release (epsilon = inf), so the total is "inf" whenever labels travel in the clear.
"Sent" is what the server received, plus, conservatively, what a client that timed out may have sent; a client that
failed before replying sent nothing and is not charged. Other values a user reveals without a formal guarantee
(record ids, counts, which client holds it) are listed under ``also_released``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import Accountant, PrivacyReport, label_rr_report
from fl_privtext.privacy.report import json_number

ALSO_RELEASED = (
    "Record ids (pseudonyms): the server links every upload of a user, so per-user epsilons compose (charged).",
    "How many records each user uploads and in which rounds (visible from the record ids): not protected.",
    ("Which client (node) sent each upload: not protected; under non-IID partitions (dirichlet by label, natural) "
     "the client identity correlates with labels and users."),
    "Per-client counts, the representation width and timings in each reply's stats: not protected.",
)
ON_DEVICE_RELEASE = ("On-device evaluation (server.on-device): each test client returns the confusion counts of the "
                     "server's model on its clean test records; computed from clean labels and features, not "
                     "protected by the mechanism (server.on-device = false sends none).")


def _label_report(cfg: ExperimentConfig, num_classes: int) -> PrivacyReport | None:
    """The label's release per upload: k-ary RR, or None when labels go in the clear (or there are none)."""
    if cfg.privacy.label_epsilon > 0 and num_classes > 1:
        return label_rr_report(num_classes, cfg.privacy.label_epsilon)
    return None


def charge(user_ids: np.ndarray, released_rows: np.ndarray, rep: PrivacyReport, cfg: ExperimentConfig,
           num_classes: int) -> tuple[Accountant, Accountant]:
    """Accountants for the representations and for everything (representations + labels) of ``released_rows``
    (one entry per release: a record uploaded in two rounds appears twice)."""
    users = np.asarray(user_ids)[np.asarray(released_rows, dtype=np.int64)]
    reps, total = Accountant(), Accountant()
    if users.size == 0:
        return reps, total
    reps.charge(users, rep)
    total.charge(users, rep)
    if num_classes > 0:
        label = _label_report(cfg, num_classes)
        if label is None:  # in the clear: every release of a label is unbounded
            label = PrivacyReport(mechanism="label-in-the-clear", epsilon_nominal=math.inf,
                                  epsilon_worst_case=math.inf)
        total.charge(users, label)
    return reps, total


def privacy_summary(rep: PrivacyReport, cfg: ExperimentConfig, user_ids: np.ndarray, num_classes: int,
                    released_rows: Sequence[np.ndarray], releases_per_record: int) -> dict[str, Any]:
    """The mechanism's report plus what each USER spent, from the rows actually released in each repetition (seed);
    the repetition with the largest total is shown."""
    best: tuple[Accountant, Accountant] | None = None
    for rows in released_rows:
        reps, total = charge(user_ids, rows, rep, cfg, num_classes)
        if best is None or total.max_epsilon() > best[1].max_epsilon() or (
                total.max_epsilon() == best[1].max_epsilon() and reps.max_epsilon() > best[0].max_epsilon()):
            best = (reps, total)
    reps, total = best if best is not None else (Accountant(), Accountant())
    out = rep.to_json()
    per_user = reps.to_json(per_user=False)  # a summary: a table of every user's epsilon would be megabytes
    _, eps = reps.epsilons("worst_case")
    per_user["median_epsilon_worst_case"] = float(np.median(eps)) if len(eps) else 0.0
    per_user["max_epsilon_total"] = json_number(total.max_epsilon())
    per_user["max_delta_total"] = total.max_delta()
    label = _label_report(cfg, num_classes)
    if num_classes == 0:
        labels: Any = "no labels uploaded"
    elif label is None:
        labels = {"mechanism": "none (sent in the clear)", "epsilon_per_upload": "inf",
                  "note": ("privacy.label-epsilon = 0: labels are NOT protected; the per-user total epsilon is "
                           "infinite. Set privacy.label-epsilon > 0 for k-ary randomized response.")}
    else:
        labels = {"mechanism": "k-ary randomized response", "epsilon_per_upload": label.epsilon_worst_case,
                  "num_classes": num_classes, "keep_probability": label.calibration["keep_probability"]}
    if cfg.federation.shuffle:  # issue #24: the central guarantee against the server a shuffler buys
        out["central"] = shuffle_central(total, len(np.unique(user_ids)), cfg)
        per_user["max_epsilon_total_local"] = per_user["max_epsilon_total"]
        per_user["max_epsilon_total"] = out["central"]["epsilon"]
        per_user["max_epsilon_total_guarantee"] = "central, against the server, via shuffle (privacy.central)"
    out["composition"] = {
        "releases_per_record": releases_per_record,
        "per_user": per_user,
        "labels": labels,
        "charged": "what was sent: rows the server received, plus rows a timed-out client may have sent",
        "also_released": list(ALSO_RELEASED) + ([ON_DEVICE_RELEASE] if cfg.server.on_device else []),
    }
    return out


def shuffle_central(total: Accountant, num_users: int, cfg: ExperimentConfig) -> dict[str, Any]:
    """``privacy.central`` under ``federation.shuffle``: the bound is applied to what ONE user releases in a round
    (its composed local epsilon: the largest per-user total divided by the rounds it uploads in), with n = the users
    shuffled together per round; rounds compose (`fl_privtext.privacy.amplification`)."""
    from fl_privtext.privacy.amplification import shuffle_guarantee

    repeat = cfg.federation.schedule == "repeat"
    rounds = cfg.federation.rounds if repeat else 1  # stream: each user uploads in one round
    n = num_users if repeat else max(1, num_users // cfg.federation.rounds)
    local = total.max_epsilon() / rounds
    if not math.isfinite(local):
        return {"epsilon": "inf", "delta": 0.0, "against": "server", "via": "shuffle",
                "note": "a user's local epsilon is infinite (labels in the clear): shuffling amplifies nothing"}
    return shuffle_guarantee(local, n, 1e-6, rounds).to_json()  # pure local DP; Gaussian: see the module
