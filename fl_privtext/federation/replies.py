"""What both ClientApp handler modules (Phase B queries in `client_app`, Phase A in `phase_a`) put in their
replies: the refusal error, the ledger record, digests of received arrays, and the key of a client's prepared data."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Error, Message

from fl_privtext.client import Refused
from fl_privtext.config import ExperimentConfig

REFUSED = 403  # the error code of a refusal (its reason starts with "refused:")


def refusal(msg: Message, exc: Refused) -> Message:
    """The error reply of a refused request: one line, starting with ``refused:``."""
    return Message(error=Error(code=REFUSED, reason=str(exc).splitlines()[0]), reply_to=msg)


def ledger_record(charged: dict[str, Any]) -> ConfigRecord:
    """What the client charged for this reply (its own ledger), for the server's report."""
    return ConfigRecord({k: v for k, v in charged.items()})


def array_digest(rec: ArrayRecord) -> str:
    """A hash of every array of a record (names a Phase A model / encoder in the ledger's request keys)."""
    h = hashlib.sha256()
    for k, a in rec.items():
        h.update(k.encode())
        h.update(np.ascontiguousarray(a.numpy()).tobytes())
    return h.hexdigest()[:32]


def prep_key(cfg: ExperimentConfig) -> tuple:
    # Only what determines data, roles, shards and features (not epsilon), so a sweep reuses one Prepared.
    flat = cfg.to_flat()
    keep = ("data.", "extractor.", "federation.num-clients", "federation.partition", "federation.alpha", "run.seed")
    return tuple(sorted((k, v) for k, v in flat.items() if k.startswith(keep)))
