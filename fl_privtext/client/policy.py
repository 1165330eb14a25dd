"""The client's own policy: what it is willing to release, checked against every request of the server.

A server query only *requests*: its ``[privacy]`` section, Phase A's DP settings, its (seed, round). The client
compares the request with its policy (delivered outside the ServerApp's messages: `POLICY_ENV` in a simulation, the
SuperNode's ``--node-config``) and refuses what does not match with a one-line reason starting ``refused:``.

A policy is a list of *entries*, one per experiment point the client takes part in (a sweep serves many points
through one federation): each entry is the privacy section the client runs, Phase A's DP settings, the rounds and
repetitions it answers, and its ``[client]`` section (cap, on-device answers). The entry a request names must match
EXACTLY; its ``scope`` (a hash of the entry) names the ledger the releases are charged to.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from fl_privtext.config import ClientConfig, ExperimentConfig

POLICY_ENV = "FL_PRIVTEXT_CLIENT_POLICY"  # how a simulation hands its clients their policy (JSON list of entries)
STATE_ENV = "FL_PRIVTEXT_CLIENT_STATE"  # the clients' state directory in a simulation (their ledgers)
# The request's keys an entry pins: the mechanism and its parameters, label handling, Phase A's DP, what is asked.
_PINNED_PREFIXES = ("privacy.", "data.options.")
_PINNED_KEYS = ("train.rounds", "train.dp-clip", "train.dp-noise-multiplier", "train.dp-delta", "federation.rounds",
                "federation.schedule", "run.seed", "run.seeds", "data.name", "server.aggregate")


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
    out = {k: v for k, v in flat.items() if k.startswith(_PINNED_PREFIXES) or k in _PINNED_KEYS}
    out.update({k: v for k, v in flat.items() if k.startswith("client.")})
    return out


@dataclass(frozen=True)
class PolicyEntry:
    """One point the client takes part in (see the module docstring)."""

    pinned: dict[str, Any]  # privacy.*, train.dp-*, federation.rounds/schedule, run.seed/seeds, the data asked for
    client: ClientConfig

    @property
    def scope(self) -> str:
        """The ledger this entry's releases are charged to: a hash of the entry."""
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
    entries: tuple[PolicyEntry, ...]

    def entry_for(self, request: ExperimentConfig) -> PolicyEntry:
        """The entry the request asks for; `Refused` naming the closest mismatch otherwise."""
        reasons = []
        for e in self.entries:
            why = e.matches(request)
            if not why:
                return e
            reasons.append(why)
        raise Refused("policy mismatch", f"the request matches none of this client's {len(self.entries)} policy entries "
                      f"({reasons[0] if reasons else 'no entries'})")

    @classmethod
    def from_points(cls, points: list[ExperimentConfig]) -> ClientPolicy:
        """One entry per point; two points whose requests a client cannot tell apart (same pinned keys) must not
        carry different [client] sections (the client would answer both under the first)."""
        entries = tuple(_entry(entry_of(p)) for p in points)
        seen: dict[str, PolicyEntry] = {}
        for e in entries:
            key = json.dumps(e.pinned, sort_keys=True, default=str)
            other = seen.setdefault(key, e)
            if other.client != e.client:
                raise ValueError("Two points of one simulation differ only in their [client] policy, which the "
                                 "clients could not tell apart from the requests; run them in separate simulations "
                                 "(a sweep does: fl_privtext.sweep.simulation_group).")
        return cls(entries)

    def to_json(self) -> str:
        return json.dumps([{**e.pinned, **_client_flat(e.client)} for e in self.entries], default=_json_default)


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
    full = cfg.to_flat()
    pinned = {k: full[k] for k in full if k.startswith(_PINNED_PREFIXES) or k in _PINNED_KEYS}
    return PolicyEntry(pinned=pinned, client=cfg.client)


def policy_from(node_config: dict[str, Any] | None = None) -> ClientPolicy:
    """This process's policy: the SuperNode's ``--node-config`` keys (``client.*``, ``privacy.*``, ``train.dp-*``,
    ``federation.rounds``, ...; a SuperNode does NOT answer on-device evaluation unless ``client.on-device =
    true``), else the simulation's `POLICY_ENV`, else the defaults with on-device answers off. Never read from
    anything the server sends."""
    nc = {k: v for k, v in (node_config or {}).items()
          if str(k).startswith(("client.", *_PINNED_PREFIXES)) or k in _PINNED_KEYS}
    if nc:
        return ClientPolicy((_entry({"client.on-device": False, **nc}),))
    raw = os.environ.get(POLICY_ENV, "").strip()
    if raw:
        try:
            entries = json.loads(raw)  # "Infinity" is inf
        except json.JSONDecodeError as exc:
            raise ValueError(f"{POLICY_ENV} must hold a JSON list of policy entries ({exc}).") from None
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{POLICY_ENV} must hold a non-empty JSON list of policy entries.")
        return ClientPolicy(tuple(_entry(e) for e in entries))
    return ClientPolicy((_entry({"client.on-device": False}),))


def state_dir_from(node_config: dict[str, Any] | None = None) -> str:
    """Where this node keeps its ledger: ``--node-config state-dir=...``, else `STATE_ENV`, else
    ``~/.local/state/fl_privtext``."""
    raw = str((node_config or {}).get("state-dir", "") or os.environ.get(STATE_ENV, "")).strip()
    return raw or os.path.join(os.path.expanduser("~"), ".local", "state", "fl_privtext")
