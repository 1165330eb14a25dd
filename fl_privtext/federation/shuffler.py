"""The shuffler of the shuffle model (issue #24): between the clients and the server, it strips the sender and
permutes each round's reports before the server (and anything that watches the server's Grid) sees them.

Trust model: the shuffler is trusted (it sees who sent what); the server is not. What leaves the shuffler per round
is ONE message, sent by ``SHUFFLER_NODE_ID``, holding every report of the round in a uniformly random order, with the
record ids replaced by fresh per-round pseudonyms (a random permutation of 0..M-1): record ids would otherwise link a
user's reports to the user and across rounds. Features and labels pass unchanged (labels are privatised by the
client when label privacy is on). The central guarantee this buys: `fl_privtext.privacy.amplification`.

Wiring: the server's Grid stack is ``EavesdroppingGrid(ShufflingGrid(grid))`` so the eavesdropper's per-user attacks
run against what the server now sees. NOT yet wired into ``server_app`` (the server's on-device evaluation asks each
node for the test records it uploaded, which a shuffled server cannot know; see the issue #24 report).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fl_privtext.federation.eavesdropper import numpy_view

SHUFFLER_NODE_ID = 0  # the sender every shuffled message carries: no client has this id
UPLOAD = "upload"
UPLOAD_KEYS = ("features", "labels", "rows")


def shuffle_reports(parts: list[dict[str, np.ndarray]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One round's reports from all senders as one sender-free batch: features (M, D) and labels (M,) in a uniformly
    random order, rows (M,) fresh pseudonyms (a uniform permutation of 0..M-1, unlinkable to the record ids)."""
    parts = [p for p in parts if len(p["rows"])]
    if not parts:
        return {"features": np.zeros((0, 0), np.float32), "labels": np.zeros(0, np.int64),
                "rows": np.zeros(0, np.int64)}
    for p in parts:
        missing = [k for k in UPLOAD_KEYS if k not in p]
        if missing:
            raise ValueError(f"Each upload must hold {UPLOAD_KEYS}; one lacks {missing}.")
    features = np.concatenate([p["features"] for p in parts])
    labels = np.concatenate([p["labels"] for p in parts])
    order = rng.permutation(len(labels))
    return {"features": features[order], "labels": labels[order],
            "rows": rng.permutation(len(labels)).astype(np.int64)}


class ShufflingGrid(Grid):
    """Delegates to ``inner``; every round's ``query.upload`` replies come back as one shuffled message from
    ``SHUFFLER_NODE_ID`` (`shuffle_reports`). Replies that carry an error pass through (a failure is not a report)
    as do all other message types."""

    def __init__(self, inner: Grid, rng: np.random.Generator) -> None:
        self._inner = inner
        self._rng = rng
        self.rounds_shuffled = 0

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
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.shuffle(self._inner.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.shuffle(self._inner.send_and_receive(messages, timeout=timeout))

    def shuffle(self, replies: Iterable[Message]) -> list[Message]:
        """The replies as the server may see them: every upload reply merged into one sender-free message."""
        replies = list(replies)
        uploads = [r for r in replies if not r.has_error() and r.metadata.message_type == "query.upload"
                   and UPLOAD in r.content.array_records]
        if not uploads:
            return replies
        keep = [r for r in replies if not any(r is u for u in uploads)]
        parts = [{k: numpy_view(a) for k, a in r.content.array_records[UPLOAD].items()} for r in uploads]
        mixed = shuffle_reports(parts, self._rng)
        dims = [int(r.content.metric_records["stats"]["input_dim"]) for r in uploads  # type: ignore[arg-type]
                if "stats" in r.content.metric_records]
        content = RecordDict({
            UPLOAD: ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in mixed.items()}),
            "stats": MetricRecord({"input_dim": max(dims, default=0), "reports": len(mixed["rows"])}),
        })
        out = Message(content, dst_node_id=int(uploads[0].metadata.dst_node_id), message_type="query.upload")
        out.metadata.__dict__["_src_node_id"] = SHUFFLER_NODE_ID  # Metadata has no setter: the sender is stripped
        self.rounds_shuffled += 1
        return [*keep, out]
