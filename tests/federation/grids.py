"""A base for the in-process test Grids: only push_messages / pull_messages (and what a test overrides) are real."""

from __future__ import annotations

from flwr.serverapp import Grid


class PushPullGrid(Grid):
    """Every Grid method a push/pull driver (serve, send_windowed) must not call raises."""

    def set_run(self, run):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    @property
    def run(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def create_message(self, *a, **k):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get_node_ids(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get_nodes(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError
