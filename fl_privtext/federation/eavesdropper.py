"""A Grid that records every client->server reply: the eavesdropper's (and the curious server's) view.

Flower has no server-side mod; every message the ServerApp receives passes through its Grid, so delegating to the
real Grid and keeping a copy of each reply sees exactly the client->server traffic, in simulation and deployment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid


@dataclass
class Observation:
    """One observed reply: who sent it, its type, and a copy of every record in it."""

    src_node_id: int
    message_type: str
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    nbytes: int = 0


class EavesdroppingGrid(Grid):
    """Delegates to ``inner`` and records a copy of every reply it returns."""

    def __init__(self, inner: Grid, *, record_sent: bool = False) -> None:
        self._inner = inner
        self.observations: list[Observation] = []
        self.record_sent = record_sent
        self.sent: list[Observation] = []  # the server's own queries (record_sent=True): what the server knows

    # -- delegation -------------------------------------------------------------------------------------------
    def set_run(self, run: Any) -> None:  # pragma: no cover - the inner grid is already bound
        self._inner.set_run(run)

    @property
    def run(self) -> Any:
        return self._inner.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._inner.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._inner.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self._inner.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._inner.push_messages(self._record_sent(messages))

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._record(self._inner.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._record(self._inner.send_and_receive(self._record_sent(messages), timeout=timeout))

    def _record_sent(self, messages: Iterable[Message]) -> list[Message]:
        messages = list(messages)
        if self.record_sent:
            for msg in messages:
                obs = Observation(src_node_id=0, message_type=msg.metadata.message_type)
                for name, record in msg.content.items():
                    if isinstance(record, ConfigRecord):
                        obs.configs[name] = dict(record)
                self.sent.append(obs)
        return messages

    # -- recording --------------------------------------------------------------------------------------------
    def _record(self, replies: Iterable[Message]) -> list[Message]:
        replies = list(replies)
        for msg in replies:
            obs = Observation(src_node_id=int(msg.metadata.src_node_id), message_type=msg.metadata.message_type)
            if msg.has_content():
                for name, record in msg.content.items():
                    if isinstance(record, ArrayRecord):
                        arrs = {k: np.array(a.numpy(), copy=True) for k, a in record.items()}
                        obs.arrays[name] = arrs
                        obs.nbytes += sum(len(a.data) for a in record.values())
                    elif isinstance(record, ConfigRecord):
                        obs.configs[name] = dict(record)
                    elif isinstance(record, MetricRecord):
                        obs.metrics[name] = dict(record)
            self.observations.append(obs)
        return replies

    # -- what the attacker works with -------------------------------------------------------------------------
    def uploads(self, record: str = "upload") -> dict[str, np.ndarray]:
        """All observed uploads concatenated: features (M, D), labels (M,), rows (M,)."""
        parts = [o.arrays[record] for o in self.observations if record in o.arrays and len(o.arrays[record]["rows"])]
        if not parts:
            raise ValueError(f"The eavesdropper observed no {record!r} records.")
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}  # in observation order

    @property
    def bytes_observed(self) -> int:
        return sum(o.nbytes for o in self.observations)

    def reset(self) -> None:
        self.observations.clear()
