"""Bounded in-flight messages (`fl_privtext.federation.inflight`) against an in-process Grid that answers a
pushed query after a few pulls, and records how many queries were ever pending at once."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from fl_privtext.federation.inflight import AUTO_WINDOW, send_windowed, window_size
from tests.federation.grids import PushPullGrid


class _SlowGrid(PushPullGrid):
    """Each pushed query is answered on the ``delay``-th pull after its push; queries to ``silent`` never are."""

    def __init__(self, delay: int = 2, silent: frozenset[int] = frozenset()) -> None:
        self.delay, self.silent = delay, silent
        self.pending: dict[str, tuple[Message, int]] = {}
        self.max_pending = 0
        self._ids = itertools.count()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for m in messages:
            mid = f"m{next(self._ids)}"
            m.metadata.__dict__["_message_id"] = mid
            self.pending[mid] = (m, 0)
            ids.append(mid)
        self.max_pending = max(self.max_pending, len(self.pending))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = []
        for mid in list(message_ids):
            msg, pulls = self.pending[mid]
            if pulls + 1 >= self.delay and msg.metadata.dst_node_id not in self.silent:
                del self.pending[mid]
                out.append(Message(RecordDict({"c": ConfigRecord({"node": msg.metadata.dst_node_id})}),
                                   reply_to=msg))
            else:
                self.pending[mid] = (msg, pulls + 1)
        return out

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        raise AssertionError("send_windowed must not push a whole round at once")



@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    # Messages are built by a running ServerApp, whose process knows its run; stand in for it here
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)


def _queries(nodes: Iterable[int]) -> Iterable[Message]:
    return (Message(RecordDict(), dst_node_id=n, message_type="query.upload") for n in nodes)


@pytest.mark.parametrize("window", [1, 3, 16, 200])
def test_every_node_answers_and_no_more_than_the_window_is_ever_pending(window):
    grid = _SlowGrid(delay=3)
    replies = send_windowed(grid, _queries(range(1, 51)), window=window, poll_s=0.0)
    assert sorted(int(r.content.config_records["c"]["node"]) for r in replies) == list(range(1, 51))
    assert grid.max_pending == min(window, 50)
    assert not grid.pending


def test_a_silent_node_times_out_and_the_rest_still_arrive():
    grid = _SlowGrid(delay=1, silent=frozenset({7}))
    replies = send_windowed(grid, _queries(range(1, 21)), window=4, timeout=0.3, poll_s=0.01)
    assert sorted(int(r.content.config_records["c"]["node"]) for r in replies) == [n for n in range(1, 21) if n != 7]


def test_the_window_is_validated():
    assert window_size(0) == AUTO_WINDOW and window_size(5) == 5
    with pytest.raises(ValueError, match="federation.max-in-flight must be >= 0"):
        window_size(-1)
    with pytest.raises(ValueError, match="window must be >= 1"):
        send_windowed(_SlowGrid(), _queries([1]), window=0)
