"""An in-process Grid for the SecAgg+ tests: each message goes to the REAL ClientApp (`build_app`) of its node, with
that node's persistent Context, as Flower's simulation does, without Ray (seconds instead of a Ray start). Every
message both ways is recorded (``sent``, ``replies``): the server's view."""

from __future__ import annotations

import itertools
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp

from tests.federation.grids import PushPullGrid


def _wire(content: RecordDict) -> RecordDict:
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    return recorddict_from_proto(recorddict_to_proto(content))


class InProcessGrid(PushPullGrid):
    def __init__(self, app: ClientApp, nodes: list[int], node_config: dict[str, Any] | None = None) -> None:
        self.app = app
        self.contexts = {n: Context(run_id=1, node_id=n, node_config={"partition-id": i, "num-partitions": len(nodes),
                                                                      **(node_config or {})},
                                    state=RecordDict(), run_config={}) for i, n in enumerate(nodes)}
        self.sent: list[Message] = []
        self.replies: list[Message] = []
        self._ids = itertools.count(1)

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get_node_ids(self):  # type: ignore[no-untyped-def]
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        out = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
            self.sent.append(m)
            # what crosses the wire is a serialized copy (the workflow sends one content object to every node)
            wire = Message(_wire(m.content), dst_node_id=m.metadata.dst_node_id, message_type=m.metadata.message_type,
                           group_id=m.metadata.group_id)
            wire.metadata.__dict__["_message_id"] = m.metadata.message_id
            try:
                reply = self.app(wire, self.contexts[m.metadata.dst_node_id])
                if not reply.has_error():
                    reply = Message(_wire(reply.content), reply_to=m)
            except Exception as exc:  # noqa: BLE001 - what Flower's node runtime does with a ClientApp exception
                reply = Message(Error(code=2, reason=f"{type(exc).__name__}: {exc}"), reply_to=m)
            out.append(reply)
        self.replies.extend(out)
        return out
