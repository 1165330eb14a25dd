"""Phase A's handlers on the ClientApp (Flower's ``@app.train`` / ``@app.evaluate``), and each Phase B message's data
(``phase_b_data``: the cached features, or a trained encoder's output).

The handlers' bodies are in `fl_privtext.federation.phase_a`, which loads torch (the encoders). Every client
registers the handlers when its app is built, but imports that module only when a Phase A message (or a Phase B
message carrying a trained encoder) arrives: a worker that serves only Phase B uploads keeps its light start-up
(numpy, flwr, privacy) and never loads torch.
"""

from __future__ import annotations

from typing import Any

from flwr.app import Context, Message

from fl_privtext.client import ClientData, Ledger, Refused, policy_from, state_dir_from
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.client_data import data_for
from fl_privtext.federation.replies import array_digest


def register(app: Any, defend: bool = True) -> None:
    """Phase A's handlers on ``app`` (Flower's ``@app.train`` / ``@app.evaluate``), importing their module on the
    first Phase A message."""

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        from fl_privtext.federation import phase_a  # torch (the encoders): loaded by Phase A only

        return phase_a.train(msg, context, defend=defend)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        from fl_privtext.federation import phase_a  # torch (the encoders): loaded by Phase A only

        return phase_a.evaluate(msg, context, defend=defend)


def phase_b_data(msg: Message, cfg: ExperimentConfig, context: Context) -> tuple[ClientData, str]:
    """This client's data for a Phase B message and the key of what it computes on: after Phase A (the message
    carries its encoder) the trained encoder's r(x) in place of the frozen features, keyed by the encoder's digest
    (uploads, on-device answers and secure sums alike); else the cached features and "".

    A server-sent encoder runs on the client's clean data, so it is accepted only where the client's policy entry
    runs Phase A (``train.rounds > 0``), and only ONE encoder per entry: the first one a Phase B request carries is
    bound (its digest, in the entry's state); any other is refused (``encoder not allowed``). The client cannot check
    the server's aggregation, but a malicious server cannot probe its data with many encoders; its output is
    sanitized (`fl_privtext.client.gate.sanitize`) and every release of it is charged as any other."""
    data = data_for(msg, cfg, context)
    if "encoder" not in msg.content.array_records:
        return data, ""
    nc = dict(context.node_config)
    entry = policy_from(nc, dict(context.run_config)).entry_for(cfg)
    if int(entry.pinned.get("train.rounds", 0) or 0) <= 0:
        raise Refused("encoder not allowed", "a Phase B request carries an encoder; this client's policy entry runs "
                      "no Phase A (train.rounds = 0)")
    digest = array_digest(msg.content.array_records["encoder"])
    bound = Ledger(state_dir_from(nc), int(nc["partition-id"]), entry.scope).bind("encoder", digest)  # type: ignore[arg-type]
    if bound != digest:
        raise Refused("encoder not allowed", f"encoder {digest} requested; this entry is bound to encoder {bound}")
    from fl_privtext.federation import phase_a  # torch (the encoders): only where a Phase A encoder comes

    return phase_a.encoded_client_data(data, msg, cfg), digest
