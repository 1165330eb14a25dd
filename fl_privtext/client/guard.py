"""Every release a client makes, checked against its policy and charged in its ledger before it leaves.

`release_upload` (representations and labels), `release_on_device` (the on-device answer) and `release_phase_a`
(a Phase A model update or validation metrics) each take the server's *request* (an `ExperimentConfig` rebuilt from
the query), the client's own `ClientPolicy` and its state directory, and return the answer with what was charged:
``{"charged": largest per-user charge of this release, "ledger-max": largest per-user total after it, "replayed":
0/1, "scope": the policy entry}``. A request the policy does not allow raises `Refused` (``refused: ...``).

What a release is keyed by (`release_key`): only what changes what the client computes (the data and its shard,
the extractor, the mechanism, Phase A, the rounds and repetitions); the server's and the eavesdropper's settings,
the batch size and where things run are not in it. A request that differs from an earlier one only in those gets
the stored answer back, charged nothing: it cannot buy fresh noise. An upload's stored answer holds the root of its
noise AND the configuration it was computed with, so a replay recomputes exactly the upload that was sent.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

import numpy as np

from fl_privtext.client.ledger import Ledger
from fl_privtext.client.ondevice import on_device_answer, stage_keys, stage_rows
from fl_privtext.client.policy import (
    ClientPolicy,
    PolicyEntry,
    Refused,
    checked_entry,
    release_digest,
    release_key,
    release_stats,
)
from fl_privtext.client.upload import (
    ClientData,
    Upload,
    client_generator,
    client_upload,
    mechanism_for,
    point_key,
)
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import label_rr_report
from fl_privtext.public import PublicSpec


def upload_epsilon(cfg: ExperimentConfig, num_classes: int, dim: int) -> float:
    """Worst-case epsilon of one uploaded record: its representation plus its label (k-ary randomized response;
    a label in the clear is inf)."""
    eps = float(mechanism_for(PublicSpec.of(cfg), dim).report().epsilon_worst_case)
    if num_classes > 1:
        le = cfg.privacy.label_epsilon
        eps += float(label_rr_report(num_classes, le).epsilon_worst_case) if le > 0 else math.inf
    return eps


def release_upload(data: ClientData, client: int, request: ExperimentConfig, seed: int, rnd: int, *,
                   policy: ClientPolicy, state_dir: str, client_seed: int | None, data_key: str = ""
                   ) -> tuple[Upload, dict[str, Any]]:
    """The upload of ``client`` for (seed, round) under its own policy. ``data_key`` names what the data is (e.g.
    the Phase A encoder's hash): a repeated request for the same (point, seed, round, data) replays the stored
    answer."""
    entry, cfg = checked_entry(policy, request, seed)
    if entry.pinned.get("server.aggregate") == "secagg":
        raise Refused("clear release under secure aggregation", "this client's policy entry runs server.aggregate = "
                      "secagg: its users' statistics leave only inside noisy secure sums, never as per-user uploads")
    if not 0 <= rnd < cfg.federation.rounds:
        raise Refused("out of range", f"round {rnd} is outside this client's 0..federation.rounds-1 = 0..{cfg.federation.rounds - 1}")
    if math.isfinite(entry.client.max_epsilon) and cfg.privacy.label_epsilon == 0 and data.num_classes > 1:
        raise Refused("labels in the clear", f"labels in the clear (privacy.label-epsilon = 0) cost inf per record, past this client's "
                      f"client.max-epsilon = {entry.client.max_epsilon:g}; set privacy.label-epsilon > 0")
    ledger = Ledger(state_dir, client, entry.scope)
    key = release_digest("upload", seed, rnd, release_key(cfg), data_key)
    made: list[Upload] = []
    made_with = json.dumps(cfg.to_flat(), sort_keys=True, default=str)

    def compute(spent: Any) -> tuple[dict[str, np.ndarray], np.ndarray, float]:
        # The stored answer is the root of this release's noise (and which records fit the users' budgets), not the
        # upload (an upload's size on disk per round, at a million users GBs): a 128-bit secret from the OS, kept
        # only in the client's own state (or the reproducible client seed); a replay recomputes the same upload.
        root = client_seed if client_seed is not None else secrets.randbits(128)
        up = client_upload(data, client, rnd, seed, cfg, client_seed=root)
        if not len(up.rows):
            made.append(up)
            return {"root": np.array(str(root)), "config": np.array(made_with)}, np.zeros(0, np.int64), 0.0
        eps = upload_epsilon(cfg, data.num_classes, up.input_dim)
        users = data.user_of(up.rows)
        keep = within_budget(users, spent, eps, entry.client.max_epsilon)
        if not keep.any():
            raise Refused("budget exhausted", f"every user in this release has spent its budget ({len(np.unique(users))} users; "
                          f"{eps:.6g} per record, client.max-epsilon = {entry.client.max_epsilon:g})")
        made.append(up if keep.all() else _subset(up, keep))  # no copy of an upload that keeps every record
        answer = {"root": np.array(str(root)), "config": np.array(made_with)} | ({} if keep.all() else {"keep": keep})
        return answer, users[keep], eps

    stored, charged, top, replayed = ledger.release(key, entry.client.max_epsilon, compute)
    if made:
        up = made[0]
    else:  # a replay: the same upload again, computed with the configuration it was first computed with
        first = _made_with(stored, cfg)
        up = client_upload(data, client, rnd, seed, first, client_seed=int(str(stored["root"])))
        if "keep" in stored:
            up = _subset(up, np.asarray(stored["keep"], bool))
    stats = release_stats(entry.scope, charged, top, replayed)
    stats["withheld"] = int(len(stored["keep"]) - np.count_nonzero(stored["keep"])) if "keep" in stored else 0
    return up, stats


def _made_with(stored: dict[str, np.ndarray], cfg: ExperimentConfig) -> ExperimentConfig:
    """The configuration a stored upload was computed with (``cfg`` for an answer stored before it was kept)."""
    return ExperimentConfig.from_flat(json.loads(str(stored["config"]))) if "config" in stored else cfg


def within_budget(users: np.ndarray, spent: Any, eps: float, cap: float) -> np.ndarray:
    """Which records of a release fit their users' remaining budgets: a user who has spent ``spent(user)`` releases
    at most floor((cap - spent) / eps) of its records here, the first ones in upload order; the rest are withheld
    (never sent). Under an infinite cap every record fits."""
    users = np.asarray(users, np.int64)
    if math.isinf(cap) or eps <= 0:
        return np.ones(len(users), bool)
    if math.isinf(eps):
        return np.zeros(len(users), bool)
    ids, inv = np.unique(users, return_inverse=True)
    room = np.floor((cap - spent(ids)) / eps * (1 + 1e-12) + 1e-9)
    order = np.argsort(inv, kind="stable")
    rank = np.empty(len(users), np.int64)  # 0 for a user's first record in this release, 1 for its second, ...
    starts = np.searchsorted(inv[order], np.arange(len(ids)))
    rank[order] = np.arange(len(users)) - starts[inv[order]]
    return rank < room[inv]


def _subset(up: Upload, keep: np.ndarray) -> Upload:
    return Upload(up.features[keep], up.labels[keep], up.rows[keep], up.input_dim)


def release_on_device(data: ClientData, client: int, request: ExperimentConfig, seed: int,
                      model: dict[str, np.ndarray] | list[dict[str, np.ndarray]], *, policy: ClientPolicy,
                      state_dir: str, client_seed: int | None, data_key: str = "", features: Any = None,
                      stage: str = "all") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The on-device answer (`fl_privtext.client.ondevice`) of ``client`` for repetition ``seed`` and ``stage``:
    refused unless the policy opts in; one answer per (point, seed, stage): a second request gets the first answer
    back. The users charged are those whose records answer in ``stage``."""
    entry, cfg = checked_entry(policy, request, seed)
    if not entry.client.on_device:
        raise Refused("on-device answers off", "this client does not answer on-device evaluation (client.on-device = false)")
    ledger = Ledger(state_dir, client, entry.scope)
    key = release_digest("on-device", *stage_keys(stage), seed, release_key(cfg), data_key)  # the model is not in the key

    def compute(_spent: Any) -> tuple[dict[str, np.ndarray], np.ndarray, float]:
        g = client_generator(client_seed, "on-device", *stage_keys(stage), point_key(cfg), seed, client)
        answer = on_device_answer(data, client, model, cfg, entry.client.count_epsilon, entry.client.min_count, g,
                                  features=features, stage=stage)
        return answer, data.user_of(stage_rows(data, client, stage)), entry.client.count_epsilon

    answer, charged, top, replayed = ledger.release(key, entry.client.max_epsilon, compute)
    return answer, release_stats(entry.scope, charged, top, replayed)


def release_phase_a(kind: str, users: np.ndarray, request: ExperimentConfig, node: int, server_round: int,
                    digest: str, compute: Any, *, policy: ClientPolicy, state_dir: str) -> tuple[Any, dict[str, Any]]:
    """A Phase A release (``kind`` "train": a model update; "evaluate": validation metrics) about ``users``:
    charged inf per user (the server sees updates and metrics in the clear, also under DP-FedAvg, whose noise the
    SERVER adds), so refused under any finite ``client.max-epsilon``. ``digest`` names the request (global model,
    round): a repeat replays the stored answer. ``compute()`` returns a dict of arrays."""
    entry = phase_a_allowed(policy, request, len(users))
    ledger = Ledger(state_dir, node, entry.scope)
    key = release_digest("phase-a", kind, server_round, digest)
    answer, charged, top, replayed = ledger.release(key, entry.client.max_epsilon,
                                                    lambda _spent: (compute(), users, math.inf))
    return answer, release_stats(entry.scope, charged, top, replayed)



def phase_a_allowed(policy: ClientPolicy, request: ExperimentConfig, num_users: int = 1) -> PolicyEntry:
    """The policy entry of a Phase A request; `Refused` at once (before any training) when the client's cap is
    finite: a Phase A update or metric about its users costs inf."""
    entry = policy.entry_for(request)
    if num_users and math.isfinite(entry.client.max_epsilon):
        raise Refused("phase a not allowed", f"a Phase A update costs inf per user (the server sees it in the clear) past this client's "
                      f"client.max-epsilon = {entry.client.max_epsilon:g}")
    return entry
