"""What one round of traffic delivered, as the federation's adapters report it to the orchestrator (a ground module:
the records are read by the orchestrator, the server's on-device protocol and the report).

The plain loop (`fl_privtext.pipeline.run_plain`) and the Flower ServerApp (`fl_privtext.federation.server_app`) both
describe a round with these records; `fl_privtext.pipeline.collect_point` drives either through ``CollectRound``.
Framework-free (numpy only), so that the orchestrator reads them without importing Flower.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Observed:
    """What the eavesdropper recorded during one seed: the uploads it saw, in how many messages and bytes."""

    uploads: dict[str, np.ndarray]
    messages: int
    nbytes: int


@dataclass(frozen=True)
class Round:
    """One round as the server saw it: the uploads that arrived, and the clients that did not deliver.

    ``failures``: one dict per client without a usable reply: ``{"node": id, "kind": "error" | "timeout",
    "reason": str}``. ``seeded``: per reply, whether the client ran the reproducible mode (its own statement).
    ``senders``: node id -> the record ids its reply carried (where the on-device evaluation is sent).

    ``placement``: per reply, where it was computed: ``{"node": id, "host": str, "ray_node": str}`` ("" = not Ray;
    empty in the plain loop)."""

    uploads: dict[str, np.ndarray]
    input_dim: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    seeded: list[bool] = field(default_factory=list)
    senders: dict[int, np.ndarray] = field(default_factory=dict)
    placement: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)  # per reply: what the client says it charged
    # federation.shuffle: the record id of each upload (the shuffler's key, aligned with uploads["rows"], which
    # then hold what the server saw: pseudonyms, or record ids of the linked aux cohort). The platform's scoring
    # and accounting read it (`referee_rows`); the server's learners and the attacks never do.
    revealed: np.ndarray | None = None

    @property
    def all_refused(self) -> bool:
        """No upload arrived and every client refused (its policy or ledger): the run stops here."""
        return not len(self.uploads["rows"]) and bool(self.failures) and all(
            f["kind"] == "refused" for f in self.failures)


CollectRound = Callable[[int, int], Round]  # (seed, round) -> what arrived
OnRound = Callable[[int, int, Round, float], None]  # (seed, round, what arrived, seconds the round took)


@dataclass(frozen=True)
class Collected:
    """One seed's traffic: what the server received, what the eavesdropper observed, what went missing."""

    seed: int
    received: dict[str, np.ndarray]
    observed: Observed
    input_dim: int
    federation_s: float
    rounds: tuple[Round, ...] = ()
    refused: tuple[dict[str, Any], ...] = ()  # {"seed", "round", "failures"}: a round every client refused


def traffic_key(flat: dict[str, Any]) -> str:
    """What a point's traffic and the server's side of it depend on (``flat``: its flat config): everything but the
    eavesdropper's settings (``attack.*``). Points with the same key get the same uploads (the clients' stream and
    their ledger's release key leave ``attack.*`` out: `fl_privtext.client.point_key`,
    `fl_privtext.client.policy.release_key`), the same server models and the same on-device answers; only their
    attacks differ (`fl_privtext.pipeline.federated.SharedTraffic` collects them once)."""
    kept = {k: v for k, v in flat.items() if not k.startswith("attack.")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]
