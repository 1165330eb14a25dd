"""Bounded in-flight messages: send a round's queries through a window of at most W pending messages.

Flower's in-memory link state (simulation) scans every stored message for every node on each 0.1 s sweep of its
dispatcher (`InMemoryLinkState.get_message_ins`, once per node), and a query stays stored until the server pulls
its reply. Pushing a whole round at once (``Grid.send_and_receive``) therefore costs O(nodes x pending) per sweep,
under the GIL, for as long as the round lasts: ~40% of the driver's samples at 1,000 clients. With a window the
store holds at most W queries, so each sweep costs O(nodes x W); a new query goes out as soon as a reply comes back.

Works on any Grid (push / pull), so the Deployment Engine gets the same bounded load on its SuperLink.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

# Queries in flight by default: enough to keep a few actors busy across the dispatcher's 0.1 s sweeps (each
# dispatches at most one message per node), few enough that a sweep over 1,000 nodes stays in milliseconds.
AUTO_WINDOW = 64
POLL_S = 0.01  # pull interval while replies are outstanding (Flower's own send_and_receive sleeps 0.1 s)


def window_size(max_in_flight: int) -> int:
    """``federation.max-in-flight``, or AUTO_WINDOW when it is 0."""
    if max_in_flight < 0:
        raise ValueError(f"federation.max-in-flight must be >= 0 (0 = auto); got {max_in_flight}.")
    return max_in_flight or AUTO_WINDOW


def send_windowed(grid: Grid, messages: Iterable[Message], *, window: int, timeout: float | None = None,
                  poll_s: float = POLL_S, each: Callable[[Message], Any] | None = None) -> list[Any]:
    """Push ``messages`` keeping at most ``window`` of them unanswered; return every reply that arrived within
    ``timeout`` seconds of the start (None = wait for all). Messages not yet pushed at the deadline are never sent,
    so the caller sees their nodes as not answering, like late ones.

    ``each``: called on every reply as it is pulled; its results are returned instead of the replies, so a caller
    that keeps what it needs of a reply (an upload round spills its arrays) lets the reply's bytes go at once
    instead of holding the whole round's replies until the last one arrives."""
    if window < 1:
        raise ValueError(f"window must be >= 1 message in flight; got {window}.")
    pending = iter(messages)
    deadline = None if timeout is None else time.monotonic() + timeout
    in_flight = set(grid.push_messages(list(islice(pending, window))))
    replies: list[Any] = []
    while in_flight and (deadline is None or time.monotonic() < deadline):
        got = list(grid.pull_messages(in_flight))
        in_flight.difference_update(m.metadata.reply_to_message_id for m in got)
        arrived = len(got)
        replies.extend(got if each is None else (each(m) for m in got))
        del got  # with ``each``, what it kept is all that stays of these replies
        refill = list(islice(pending, window - len(in_flight)))
        if refill:
            in_flight.update(grid.push_messages(refill))
        elif not arrived:
            time.sleep(poll_s)
    return replies
