"""`DelegatingGrid`: a Flower Grid that forwards every call to an inner Grid.

The server's Grid stack is made of such wrappers, each overriding only what it changes: the eavesdropper records
replies (`eavesdropper.EavesdroppingGrid`), the shuffler mixes upload replies (`shuffler.ShufflingGrid`), Phase A's
injector adds the trained encoder to queries (`training.InjectingGrid`), the secure sum counts rounds and bytes
(`secagg._CountingGrid`), Phase A's rounds see their replies in one canonical order (`CanonicalOrderGrid`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid


class DelegatingGrid(Grid):
    """Every Grid method forwarded to ``inner`` unchanged."""

    def __init__(self, inner: Grid) -> None:
        self._inner = inner

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
        return self._inner.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._inner.send_and_receive(messages, timeout=timeout)


def reply_digest(msg: Message) -> bytes:
    """A digest of a reply's content (its arrays' bytes, its metrics and configs, or its error): the same content
    gives the same digest whatever node sent it and whenever it arrived."""
    h = hashlib.sha256()
    if msg.has_error():
        h.update(f"error:{msg.error.code}:{msg.error.reason}".encode())
        return h.digest()
    content = msg.content
    for name in sorted(content.array_records):
        for key, arr in sorted(content.array_records[name].items()):
            h.update(f"a:{name}:{key}:{arr.dtype}:{arr.shape}".encode())
            h.update(arr.data)
    for name in sorted(content.metric_records):
        h.update(f"m:{name}:{sorted(content.metric_records[name].items())!r}".encode())
    for name in sorted(content.config_records):
        h.update(f"c:{name}:{sorted(content.config_records[name].items())!r}".encode())
    return h.digest()


class CanonicalOrderGrid(DelegatingGrid):
    """Replies in the order of their content's digest (`reply_digest`), not of their arrival. FedAvg sums the
    updates in the order it receives them, and float addition is not associative: two runs of the same seeded point
    gave round 2's val_loss 0.70618908 and 0.70618912. Sorted by content, the same updates sum in the same order, so
    a seeded Phase A is reproducible; the sum's value is the same to rounding either way."""

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return sorted(self._inner.send_and_receive(messages, timeout=timeout), key=reply_digest)
