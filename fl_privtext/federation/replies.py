"""What both ClientApp handler modules (Phase B queries in `client_app`, Phase A in `phase_a`) put in their
replies: the refusal error, the ledger record, digests of received arrays, and the key of a client's prepared data."""

from __future__ import annotations

import hashlib
import sys
import threading
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message

from fl_privtext.client import Refused
from fl_privtext.config import ExperimentConfig
from fl_privtext.memory import drop_object_store_pages

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


def array_state(array: Array) -> tuple[str, tuple[int, ...], str, np.ndarray]:
    """A Flower ``Array`` as Ray pickles it (`send_arrays_out_of_band`): its fields, the bytes as a read-only uint8
    view of them (no copy), which pickle protocol 5 hands Ray out of band."""
    return array.dtype, tuple(array.shape), array.stype, np.frombuffer(array.data, np.uint8)


STORE_DROP_BYTES = 1 << 20  # an Array at least this large, copied out of Ray's store: the store's pages go at once


def array_from_state(state: tuple[str, tuple[int, ...], str, Any]) -> Array:
    """The ``Array`` of `array_state` where it is unpickled: the same fields and bytes, copied out of Ray's store.
    A large one's pages of the store leave this process's RSS as soon as they are copied (`drop_object_store_pages`:
    the store keeps them), not once the reply is spilled: the driver held each reply twice until then, and two at
    a time when both actors answered together (issue #38)."""
    dtype, shape, stype, data = state
    if len(memoryview(data).cast("B")) < STORE_DROP_BYTES:
        return Array(dtype=dtype, shape=tuple(shape), stype=stype, data=bytes(memoryview(data)))
    with _COPYING:  # one large copy at a time: two replies fetched together held both copies and both stores' pages
        array = Array(dtype=dtype, shape=tuple(shape), stype=stype, data=bytes(memoryview(data)))
        del data
        drop_object_store_pages()
    return array


_COPYING = threading.Lock()


def send_arrays_out_of_band() -> bool:
    """In a Ray worker (a simulation's client actor), pickle Flower ``Array``s as `array_state`: their bytes go to
    Ray's object store out of band, written once, instead of being copied into the pickle first and then into the
    store (a reply's uploads were briefly held three times in the actor: the message, the pickle, the store; 79 MB
    each a reply at 10M users and 100 clients, issue #38). The other side gets an ``Array`` with the same bytes
    (`array_from_state`). Ray's own pickler only: the message, Flower's types and any other transport are
    unchanged. True when registered (Ray is running in this process)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    from ray.util import register_serializer

    register_serializer(Array, serializer=array_state, deserializer=array_from_state)
    return True
