"""`DelegatingGrid`: a Flower Grid that forwards every call to an inner Grid.

The server's Grid stack is made of such wrappers, each overriding only what it changes: the eavesdropper records
replies (`eavesdropper.EavesdroppingGrid`), the shuffler mixes upload replies (`shuffler.ShufflingGrid`), Phase A's
injector adds the trained encoder to queries (`training.InjectingGrid`), the secure sum counts rounds and bytes
(`secagg._CountingGrid`).
"""

from __future__ import annotations

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
