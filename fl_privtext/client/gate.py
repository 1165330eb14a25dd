"""The client's closed boundary: every message kind it answers, what each releases and what it is charged.

Deny by default (issue #34). A message whose kind is not declared here is refused (``refused: unknown message``).
A declared kind is answered only through its release function in `fl_privtext.client.guard` (or, for secure sums,
`fl_privtext.client.aggregate` and Phase A's SecAgg+ task), each of which checks the request against the client's
own policy, charges the users concerned in the client's ledger and only then computes. The Flower adapter
(`fl_privtext.federation.client_app.GatedClientApp`) enforces the rest in one place for every handler:

- a reply holds only the records its kind declares, and a data release carries its ``ledger`` record (the proof
  that it went through the ledger): anything else is replaced by ``refused: internal error``;
- a refusal is ``refused: <reason>`` from the closed list `fl_privtext.client.policy.REASONS`, nothing more;
- any other exception becomes ``refused: internal error``; its trace goes to the node's own ``client.log``
  (`fl_privtext.client.ledger.log_error`), never to the server.

Non-finite values from anything the server sent are never an error that depends on the data: a server-sent
encoder's output is replaced by 0 where it is not finite (`sanitize`) before the mechanism, whose guarantee holds
for every input; a server-sent model with non-finite weights is refused before it touches any data (a function of
the message alone); a Phase A update that is not finite is replaced as a whole by the zero update, inside the clip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

REPLY_PATTERN = re.compile(r"^refused: [a-z -]+$")


@dataclass(frozen=True)
class Declared:
    """One message kind: what it releases, what the ledger charges for it, and the records its reply may hold."""

    releases: str
    charge: str
    records: frozenset[str]
    charged: bool = True  # a reply that releases data carries its ``ledger`` record


MESSAGES: dict[str, Declared] = {
    "query.upload": Declared(
        "the users' privatized representations and (randomized) labels of one round, with their row ids",
        "the mechanism's worst-case epsilon plus the label's, per record, to its user",
        frozenset({"upload", "stats", "placement", "ledger"})),
    "query.evaluate": Declared(
        "one randomized-response answer per test user on the server's model(s) (`fl_privtext.client.ondevice`)",
        "client.count-epsilon per test user, once per (point, seed, stage)",
        frozenset({"answer", "ledger"})),
    "train.default": Declared(
        "a Phase A model update in the clear (FedAvg / DP-FedAvg); or, inside SecAgg+, the protocol's messages "
        "and one masked noisy vector (a secure-sum task: Phase A's update or Phase B's statistics)",
        "inf per training user in the clear; a secure sum's central epsilon per user and participant set",
        frozenset({"arrays", "metrics", "ledger", "secaggplus_configs", "fitres.parameters", "fitres.metrics",
                   "fitres.num_examples", "fitres.status"})),
    "evaluate.default": Declared(
        "Phase A validation metrics in the clear",
        "inf per validation user (refused under any finite client.max-epsilon)",
        frozenset({"metrics", "ledger"})),
}


def kind_of(message_type: str) -> str:
    """The declared kind of a Flower message type ("train" is "train.default")."""
    return message_type if "." in message_type else f"{message_type}.default"


def sanitize(x: np.ndarray) -> np.ndarray:
    """A server-sent computation's output with every non-finite value replaced by 0 (never an error: whether any
    value was non-finite depends on the data, and the mechanism's guarantee holds for any finite input)."""
    x = np.asarray(x)
    return x if np.isfinite(x).all() else np.where(np.isfinite(x), x, 0).astype(x.dtype, copy=False)
