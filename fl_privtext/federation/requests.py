"""The server's requests: what a query carries, and the wait for the federation's nodes."""

from __future__ import annotations

import time

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.serverapp import Grid

from fl_privtext.config import ExperimentConfig


def wait_for_nodes(grid: Grid, n: int, timeout_s: float = 600.0) -> list[int]:
    """The first ``n`` node ids once that many are connected (RuntimeError after ``timeout_s``)."""
    t0 = time.monotonic()
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes[:n] if len(nodes) == n else nodes
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"Only {len(nodes)} of {n} SuperNodes connected within {timeout_s:.0f} s.")
        time.sleep(0.05)


def query(cfg: ExperimentConfig, snapshot: str, **records: ConfigRecord | ArrayRecord) -> RecordDict:
    """A query's content: the experiment config, where the client data lies (simulation only), extra records."""
    # the request: never the clients' [client] policy (theirs alone; the server holds only defaults it never sends)
    content: dict[str, ConfigRecord | ArrayRecord] = {"config": ConfigRecord(
        {k: v for k, v in cfg.to_flat().items() if not k.startswith("client.")})}
    if snapshot:
        content["client-data"] = ConfigRecord({"snapshot": snapshot})
    return RecordDict({**content, **records})
