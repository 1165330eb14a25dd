"""A client's side of a request: the config it may read from it, and its OWN data (shard, features).

The client's data is prepared from the config by the orchestrator's `fl_privtext.pipeline.prepare` (the dataset,
its roles and shards, the cached features): a stage above this Flower adapter, so it is handed in, not imported.
The ClientApp carries it as a mod (`data_mod`, built by `fl_privtext.pipeline.federated.build_app`): a mod is part of
the app object that Flower ships to every Ray actor and SuperNode, and it runs before every handler, the secure-sum
tasks' included (`fl_privtext.federation.secagg.SECAGG_TASKS`); the handlers read it through `prepared`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from fl_privtext.client import ClientData, Refused, policy_from
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.replies import prep_key

# (config, features) -> the prepared point (`fl_privtext.pipeline.prepare`: features "none" / "cached" / "extract")
Prepare = Callable[[ExperimentConfig, str], Any]

_PREPARE: ContextVar[Prepare | None] = ContextVar("fl_privtext_client_prepare", default=None)


@contextlib.contextmanager
def preparing(prepare: Prepare) -> Iterator[None]:
    """Inside the block, `prepared` prepares with ``prepare`` (what `data_mod` does around every message)."""
    token = _PREPARE.set(prepare)
    try:
        yield
    finally:
        _PREPARE.reset(token)


def data_mod(prepare: Prepare) -> Callable[[Message, Context, ClientAppCallable], Message]:
    """The ClientApp mod that hands every handler of this message the client's way to prepare its data."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        with preparing(prepare):
            return call_next(msg, context)

    return mod


def prepared(cfg: ExperimentConfig, features: str) -> Any:
    """The prepared point of ``cfg`` on this client (`Prepare`), through the app's `data_mod`."""
    prepare = _PREPARE.get()
    if prepare is None:
        raise RuntimeError("This ClientApp has no way to prepare its data: build it with "
                           "fl_privtext.pipeline.federated.build_app (it adds the data mod).")
    return prepare(cfg, features)


@functools.lru_cache(maxsize=2)
def snapshot_data(flat_items: tuple, snapshot: str, shard_digest: str = "") -> ClientData:
    # Long-lived Ray actors reuse this: shards, labels and memory-mapped features load once per actor. A snapshot
    # (the server's hint) is used only when it holds the shard the client's policy names (``shard_digest``).
    if snapshot and shard_digest and os.path.exists(snapshot):  # absent on another machine of a Ray cluster
        data = ClientData.load(snapshot)
        digest = data.shard_digest()
        data.drop_pages()  # the digest read every column of the map
        if digest != shard_digest:
            raise Refused("shard mismatch", f"the client-data snapshot {snapshot} holds shard {digest}, "
                          f"this client's policy names {shard_digest}")
        return data
    # the full dataset path (torch and HF datasets are imported there)
    return prepared(ExperimentConfig.from_flat(dict(flat_items)), "cached").client


def data_for(msg: Message, cfg: ExperimentConfig, context: Context) -> ClientData:
    """This client's OWN shard (issue #34 item 5): prepared from the keys its policy pins, never the request's; a
    request naming another shard is `Refused` ("shard mismatch"), and so is a snapshot that does not hold it."""
    policy = policy_from(dict(context.node_config), dict(context.run_config))
    own = policy.shard_of(cfg)
    hints = msg.content.config_records.get("client-data")
    snapshot = str(hints["snapshot"]) if hints is not None else ""
    return snapshot_data(prep_key(own), snapshot, policy.shard_digest)


def request_config(msg: Message) -> ExperimentConfig:
    """The server's REQUEST: its config without what only the client decides (seed, policy: never read here)."""
    if "config" not in msg.content.config_records:
        raise Refused("malformed request", "the request carries no ConfigRecord 'config'")
    flat = {k: v for k, v in dict(msg.content.config_records["config"]).items()
            if k != "run.client-seed" and not k.startswith("client.")}
    # the same request object for the same keys and values: an actor parses a point's config once, not once per
    # message (~1.5 ms each), and its policy checks are kept per request object (`ClientPolicy.remembered`)
    key = tuple(sorted((k, type(v).__name__, tuple(v) if isinstance(v, list) else v) for k, v in flat.items()))
    cfg = _REQUESTS.get(key)
    if cfg is None:
        try:
            cfg = ExperimentConfig.from_flat(flat)
        except (ValueError, TypeError) as exc:
            raise Refused("malformed request", f"the request's config: {exc}") from None
        if len(_REQUESTS) >= _REQUESTS_KEPT:
            _REQUESTS.clear()
        _REQUESTS[key] = cfg
    return cfg


_REQUESTS: dict[tuple, ExperimentConfig] = {}  # `request_config`'s parsed requests (configs are frozen)
_REQUESTS_KEPT = 64
