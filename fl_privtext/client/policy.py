"""The client's own policy: what it is willing to release, checked against every request of the server.

A server query only *requests*: its ``[privacy]`` section, Phase A's DP settings, its (seed, round). The client
compares the request with its policy (delivered outside the ServerApp's messages: `POLICY_ENV` under `fl-privtext
run`, the SuperNode's ``--node-config`` or policy file, the operator's run config in a ``flwr run`` simulation:
`policy_from`) and refuses what does not match with a one-line reason starting ``refused:``.

A policy is a list of *entries*, one per experiment point the client takes part in (a sweep serves many points
through one federation): each entry is the privacy section the client runs, Phase A's DP settings, the rounds and
repetitions it answers, and its ``[client]`` section (cap, on-device answers). The entry a request names must match
EXACTLY; its ``scope`` (a hash of the entry) names the ledger the releases are charged to.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fl_privtext.config import ClientConfig, ExperimentConfig, flatten

T = TypeVar("T")
_MEMO_SIZE = 64  # requests remembered per policy (`ClientPolicy.remembered`): a sweep's points, each seed's config
POLICY_ENV = "FL_PRIVTEXT_CLIENT_POLICY"  # how a simulation hands its clients their policy (JSON list of entries)
STATE_ENV = "FL_PRIVTEXT_CLIENT_STATE"  # the clients' state directory in a simulation (their ledgers)
# The keys that decide which users a client holds (dataset, roles, the partition into clients: the shard) and, with
# the extractor's, what it computes on: everything `fl_privtext.federation.replies.prep_key` prepares the data from.
# Every entry pins them; the USER keys (all but the extractor's) are one value per policy: a client holds one shard.
SHARD_PREFIXES = ("data.", "extractor.")
SHARD_KEYS = ("federation.num-clients", "federation.partition", "federation.alpha", "run.seed")
# The request's keys an entry pins: the mechanism and its parameters, label handling, Phase A's DP, what is asked,
# and the shard.
# Phase A's whole section is pinned: the encoder a Phase B request may carry is bound per entry (one per point).
_PINNED_PREFIXES = ("privacy.", "train.", *SHARD_PREFIXES)
_PINNED_KEYS = ("federation.rounds", "federation.schedule", "run.seeds", "server.aggregate", *SHARD_KEYS)


def shard_keys(flat: dict[str, Any]) -> dict[str, Any]:
    """The keys of a flat config that decide the shard and its data (see `SHARD_KEYS`)."""
    return {k: v for k, v in flat.items() if k.startswith(SHARD_PREFIXES) or k in SHARD_KEYS}


def pinned_keys(flat: dict[str, Any]) -> dict[str, Any]:
    """The keys of a flat config an entry pins (`_PINNED_PREFIXES`, `_PINNED_KEYS`): everything that changes what
    a client computes, and its shard."""
    return {k: v for k, v in flat.items() if k.startswith(_PINNED_PREFIXES) or k in _PINNED_KEYS}


def user_keys(flat: dict[str, Any]) -> dict[str, Any]:
    """The keys of a flat config that decide WHICH users a client holds (the shard keys but the extractor's)."""
    return {k: v for k, v in shard_keys(flat).items() if not k.startswith("extractor.")}


REASONS = (
    "policy mismatch",  # the request names no entry of the client's policy (mechanism, epsilon, keys it pins)
    "out of range",  # a seed or round outside the entry's repetitions / rounds
    "budget exhausted",  # the release would take a user past client.max-epsilon
    "labels in the clear",  # label epsilon 0 (inf per record) under a finite cap
    "on-device answers off",  # client.on-device = false
    "phase a not allowed",  # a Phase A release the policy does not allow (in the clear under a finite cap, ...)
    "clear release under secure aggregation",  # a per-user or in-the-clear release where the policy sums securely
    "too few contributors",  # a secure sum over fewer clients than client.secagg-min-clients
    "session already answered",  # a secure-sum vector asked for again in another SecAgg+ session
    "encoder not allowed",  # a Phase B request carrying an encoder this client did not help train
    "shard mismatch",  # a request that would change which users this client holds
    "too few users",  # fewer test users than client.min-count
    "malformed request",  # a message that is not of the protocol's form (missing records, bad model, unknown stage)
    "unknown message",  # a message kind this client does not answer
    "internal error",  # anything else: the client's own log holds the trace, the server learns nothing more
)
"""The closed list of refusal reasons: a refusal's reply text is ``refused: <reason>`` and nothing else (no ids,
counts, values or exception text). What the client knows beyond it (``Refused.detail``) goes to its own log and
ledger only."""


class Refused(ValueError):
    """A request the client's policy or ledger does not allow. ``str`` is the reply text, ``refused: <reason>`` with
    ``reason`` from `REASONS`; ``detail`` is the client's own explanation (its log and ledger, never the reply)."""

    def __init__(self, reason: str, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"Refused needs a reason from the closed list {REASONS}; got {reason!r}.")
        self.reason = reason
        self.detail = detail.replace("\n", " ")
        super().__init__(f"refused: {reason}")


def entry_of(cfg: ExperimentConfig) -> dict[str, Any]:
    """The policy entry that lets a client take part in experiment point ``cfg`` as configured (the driver's own
    view: its ``[client]`` section, privacy and Phase A settings)."""
    flat = cfg.to_flat()
    return {**pinned_keys(flat), **{k: v for k, v in flat.items() if k.startswith("client.")}}


@dataclass(frozen=True)
class PolicyEntry:
    """One point the client takes part in (see the module docstring)."""

    pinned: dict[str, Any]  # privacy.*, train.* (Phase A), federation.rounds/schedule, run.seed/seeds, the data asked for
    client: ClientConfig

    @functools.cached_property
    def scope(self) -> str:
        """The ledger this entry's releases are charged to: a hash of the entry (computed once per entry: an actor's
        policy is parsed once per process, and every release read it twice, a JSON dump and a hash each time)."""
        text = json.dumps({**self.pinned, **_client_flat(self.client)}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def matches(self, request: ExperimentConfig) -> str:
        """"" when ``request`` asks for exactly this entry; else why not (the first differing key)."""
        flat = request.to_flat()
        for key, mine in self.pinned.items():
            theirs = flat.get(key)
            if not _same(theirs, mine):
                return f"{key} = {theirs!r} requested, this client's policy runs {mine!r}"
        return ""

    def config(self, request: ExperimentConfig) -> ExperimentConfig:
        """The request with the client's own values in place of everything the entry pins: what the client runs."""
        return ExperimentConfig.from_flat({**self.pinned, **_client_flat(self.client)}, request)


@dataclass(frozen=True)
class ClientPolicy:
    """The client's entries, and the shard they all name: its users are fixed on the client (issue #34 item 5).

    ``shard_digest`` (`fl_privtext.client.ClientData.shard_digest`, "" = not named) is what a client-data snapshot
    must hold for the client to use it; without it the client prepares its shard itself from the pinned keys."""

    entries: tuple[PolicyEntry, ...]
    shard_digest: str = ""

    def __post_init__(self) -> None:
        users = {json.dumps(user_keys(e.pinned), sort_keys=True, default=str) for e in self.entries}
        if len(users) > 1:
            raise ValueError("A client's policy names one shard (its users): its entries must share the data, "
                             "federation.num-clients / partition / alpha and run.seed keys; run points that differ "
                             "in them in separate simulations (a sweep does: fl_privtext.sweep.simulation_group).")

    @functools.cached_property
    def _memo(self) -> dict[tuple[str, int], tuple[ExperimentConfig, Any]]:
        return {}

    def remembered(self, kind: str, request: ExperimentConfig, compute: Callable[[], T]) -> T:
        """``compute()``, computed once per ``kind`` and request OBJECT (an actor parses each distinct request once:
        `fl_privtext.federation.client_data.request_config`) and kept while this policy lives: reading the policy
        for a request rebuilt a config from its keys two to four times per message (~1.5 ms each). A refusal
        (an exception) is not kept: the same request is checked again, and refused again."""
        key = (kind, id(request))
        hit = self._memo.get(key)
        if hit is not None and hit[0] is request:  # the same object (a kept reference: its id is not reused)
            return hit[1]  # type: ignore[no-any-return]
        value = compute()
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = (request, value)
        return value

    def shard_of(self, request: ExperimentConfig) -> ExperimentConfig:
        """What the client prepares its data from for ``request``: its own shard keys (those of the entries naming
        the request's extractor); `Refused` ("shard mismatch") when the request names any other shard or data, so a
        server can neither move users between clients nor have a client prepare data it did not agree to."""
        return self.remembered("shard", request, lambda: self._shard_of(request))

    def _shard_of(self, request: ExperimentConfig) -> ExperimentConfig:
        flat = request.to_flat()
        theirs = shard_keys(flat)
        for e in self.entries:
            mine = shard_keys(e.pinned)
            if all(_same(theirs.get(k), mine.get(k)) for k in {*mine, *theirs}):
                return ExperimentConfig.from_flat(mine, request)
        mine = shard_keys(self.entries[0].pinned) if self.entries else {}
        key = next((k for k in sorted({*mine, *theirs}) if not _same(theirs.get(k), mine.get(k))), "")
        raise Refused("shard mismatch", f"{key} = {theirs.get(key)!r} requested, this client's shard is prepared with "
                      f"{mine.get(key)!r}")

    def entry_for(self, request: ExperimentConfig) -> PolicyEntry:
        """The entry the request asks for; `Refused` naming the closest mismatch otherwise ("shard mismatch" when
        the request names another shard than the client's)."""
        return self.remembered("entry", request, lambda: self._entry_for(request))

    def _entry_for(self, request: ExperimentConfig) -> PolicyEntry:
        self.shard_of(request)
        reasons = []
        for e in self.entries:
            why = e.matches(request)
            if not why:
                return e
            reasons.append(why)
        raise Refused("policy mismatch", f"the request matches none of this client's {len(self.entries)} policy entries "
                      f"({reasons[0] if reasons else 'no entries'})")

    @classmethod
    def from_points(cls, points: list[ExperimentConfig], shard_digest: str = "") -> ClientPolicy:
        """One entry per point; two points whose requests a client cannot tell apart (same pinned keys) must not
        carry different [client] sections (the client would answer both under the first), and all must name one
        shard (`__post_init__`). ``shard_digest``: the shard's `ClientData.shard_digest` (the driver's)."""
        entries = tuple(_entry(entry_of(p)) for p in points)
        seen: dict[str, PolicyEntry] = {}
        for e in entries:
            key = json.dumps(e.pinned, sort_keys=True, default=str)
            other = seen.setdefault(key, e)
            if other.client != e.client:
                raise ValueError("Two points of one simulation differ only in their [client] policy, which the "
                                 "clients could not tell apart from the requests; run them in separate simulations "
                                 "(a sweep does: fl_privtext.sweep.simulation_group).")
        return cls(entries, shard_digest)

    def to_json(self) -> str:
        entries = [{**e.pinned, **_client_flat(e.client)} for e in self.entries]
        if not self.shard_digest:
            return json.dumps(entries, default=_json_default)
        return json.dumps({"shard-digest": self.shard_digest, "entries": entries}, default=_json_default)


def _json_default(v: Any) -> Any:
    raise TypeError(f"not JSON: {v!r}")


def _client_flat(c: ClientConfig) -> dict[str, Any]:
    return {k: v for k, v in ExperimentConfig(client=c).to_flat().items() if k.startswith("client.")}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def _entry(flat: dict[str, Any]) -> PolicyEntry:
    cfg = ExperimentConfig.from_flat(flat)  # validates every key and type
    return PolicyEntry(pinned=pinned_keys(cfg.to_flat()), client=cfg.client)


def release_key(cfg: ExperimentConfig) -> str:
    """A hash of what in ``cfg`` changes what a client computes: the keys a policy entry pins (`pinned_keys`: the data and its shard, the extractor, the mechanism, Phase A, the rounds and repetitions); never
    the server's or the eavesdropper's settings, nor the batch size."""
    return hashlib.sha256(json.dumps(pinned_keys(cfg.to_flat()), sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def release_digest(*parts: object) -> str:
    """The ledger key of one release: a hash of what names it (its kind, seed, round, `release_key`, data key)."""
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:32]


def release_stats(scope: str, charged: float, ledger_max: float, replayed: bool) -> dict[str, Any]:
    """What a client reports beside a release: the epsilon charged, its ledger's largest total, replayed or not."""
    return {"charged": charged, "ledger-max": ledger_max, "replayed": int(replayed), "scope": scope}


def checked_entry(policy: ClientPolicy, request: ExperimentConfig, seed: int) -> tuple[PolicyEntry, ExperimentConfig]:
    """The policy entry that governs ``request`` and the configuration the client runs for it; `Refused` when the
    request matches no entry or its repetition seed is outside the entry's seeds."""
    entry = policy.entry_for(request)
    cfg = policy.remembered("config", request, lambda: entry.config(request))
    if not cfg.run.seed <= seed < cfg.run.seed + cfg.run.seeds:
        raise Refused("out of range", f"repetition seed {seed} is outside this client's run.seed..run.seed+run.seeds-1 = "
                      f"{cfg.run.seed}..{cfg.run.seed + cfg.run.seeds - 1}")
    return entry, cfg


POLICY_FILE_KEY = "policy-file"  # a SuperNode's ``--node-config "policy-file=/path/policy.toml"``
POLICY_FILE_ENV = "FL_PRIVTEXT_CLIENT_POLICY_FILE"  # the same file for simulated clients (their process environment)


def policy_from(node_config: dict[str, Any] | None = None, run_config: dict[str, Any] | None = None) -> ClientPolicy:
    """This process's policy, never read from anything the server sends. The first that is given:

    1. the SuperNode's policy file (``--node-config "policy-file=PATH"``; a TOML file of the keys of an experiment
       config, as ``fl-privtext run --set`` takes them: ``[privacy]``, ``[client]``, ``[data]``, ...) with the
       node config's own policy keys on top (``client.*``, ``privacy.*``, ``data.*``, ``train.*``, ...): one entry;
       a SuperNode does NOT answer on-device evaluation unless ``client.on-device = true``;
    2. the node config's policy keys alone;
    3. the simulation's `POLICY_ENV` (`fl-privtext run` sets it on its Ray workers: one entry per point);
    4. the file named by `POLICY_FILE_ENV` (simulated clients' environment), as in 1;
    5. in a Flower simulation started by ``flwr run`` (a Ray actor given a run config: `is_simulated`), the run
       config of the operator who started it, i.e. pyproject.toml's ``[tool.flwr.app.config]`` with the ``-c``
       overrides: the points of that run (`run_points`) under the simulation's ``[client]`` defaults. The run
       config is the operator's, delivered by the SuperLink, not by the ServerApp's messages; a real SuperNode
       never takes it (there it comes from whoever submits the run: the server's side);
    6. the defaults, with on-device answers off.

    In 1, 2, 4 and 6 ``federation.num-clients`` defaults to the node config's ``num-partitions`` (the federation
    size this node was started in)."""
    nc = dict(node_config or {})
    own = {k: v for k, v in nc.items() if _is_policy_key(str(k))}
    base: dict[str, Any] = {"client.on-device": False}
    if "num-partitions" in nc:
        base["federation.num-clients"] = int(nc["num-partitions"])
    path = str(nc.get(POLICY_FILE_KEY, "") or "").strip()
    if path or own:
        return ClientPolicy((_entry({**base, **_policy_file(path), **own}),))
    raw = os.environ.get(POLICY_ENV, "").strip()
    if raw:
        return _policy_json(raw)
    path = os.environ.get(POLICY_FILE_ENV, "").strip()
    if path:
        return ClientPolicy((_entry({**base, **_policy_file(path)}),))
    if run_config and is_simulated():
        flat = {k: v for k, v in run_config.items() if not str(k).startswith("client.")}
        return ClientPolicy.from_points(run_points(ExperimentConfig.from_flat(flat)))
    return ClientPolicy((_entry(base),))


def run_points(cfg: ExperimentConfig) -> list[ExperimentConfig]:
    """The points one ``flwr run`` asks its clients for (`fl_privtext.pipeline.apps.main`): the run
    config's point alone. Its no-privacy reference is the referee's computation, never a release of these clients
    (issue #34: no entry without privacy beside a private one). Simulated clients agree to exactly these by default
    (`policy_from`, 5)."""
    return [cfg]


def is_simulated() -> bool:
    """Whether this ClientApp runs in Flower's simulation engine (a Ray actor: Flower's only simulation backend);
    a Deployment Engine SuperNode runs it in its own process, without Ray."""
    import sys

    ray = sys.modules.get("ray")  # never imported here: an actor has it, a SuperNode does not
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _is_policy_key(key: str) -> bool:
    return key.startswith(("client.", *_PINNED_PREFIXES)) or key in _PINNED_KEYS


def _policy_file(path: str) -> dict[str, Any]:
    """The flat policy keys of a policy file ("" = none): TOML, nested tables or dotted keys, every key one of an
    experiment config's policy keys (`_PINNED_PREFIXES`, `_PINNED_KEYS`, ``client.*``)."""
    if not path:
        return {}
    try:
        with open(os.path.expanduser(path), "rb") as fh:
            flat = flatten(tomllib.load(fh))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"The client's policy file {path}: {exc}") from None
    other = sorted(k for k in flat if not _is_policy_key(k))
    if other:
        raise ValueError(f"The client's policy file {path} holds keys that are not the client's to set: {other} "
                         "(a policy holds [client], [privacy], [data], [extractor], run.seed/seeds, [train], "
                         "federation.rounds/schedule/num-clients/partition/alpha, server.aggregate).")
    return flat


@functools.lru_cache(maxsize=4)
def _policy_json(raw: str) -> ClientPolicy:
    # parsed once per process and policy text: every message reads the policy, several times (~8 ms for 14 entries)
    try:
        parsed = json.loads(raw)  # "Infinity" is inf
    except json.JSONDecodeError as exc:
        raise ValueError(f"{POLICY_ENV} must hold a JSON list of policy entries ({exc}).") from None
    digest = ""
    if isinstance(parsed, dict):
        digest, parsed = str(parsed.get("shard-digest", "")), parsed.get("entries")
    if not isinstance(parsed, list) or not parsed:
        raise ValueError(f"{POLICY_ENV} must hold a non-empty JSON list of policy entries.")
    return ClientPolicy(tuple(_entry(e) for e in parsed), digest)


def state_dir_from(node_config: dict[str, Any] | None = None) -> str:
    """Where this node keeps its ledger: ``--node-config state-dir=...``, else `STATE_ENV`, else
    ``~/.local/state/fl_privtext``."""
    raw = str((node_config or {}).get("state-dir", "") or os.environ.get(STATE_ENV, "")).strip()
    return raw or os.path.join(os.path.expanduser("~"), ".local", "state", "fl_privtext")
