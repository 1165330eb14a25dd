"""The ClientApp: a virtual client holding a shard of users, privatizing their representations before upload.

The server's query carries the experiment config (so `run_simulation`, `flwr run` and deployment behave alike) and
the (seed, round); the client finds its users from its ``partition-id``, privatizes them in batches on this side
and replies with the privatized features, the (optionally randomized) labels and the row ids. Nothing else leaves.

The client's randomness never comes from the query: it is OS entropy, or (reproducible simulation only) the client
seed this process was given outside the ServerApp: ``--node-config client-seed=N`` on a SuperNode or the
``FL_PRIVTEXT_CLIENT_SEED`` environment variable that `fl-privtext run` sets on its Ray workers.

Nor does its privacy (issue #22): the query only *requests*; the client's own policy (`fl_privtext.client.policy`,
delivered like the seed) decides, its ledger charges every release, and a request the policy does not allow gets an
error reply ``refused: <reason>`` from a closed list. Every reply carries what the client charged (ConfigRecord
``ledger``). Every message passes one gate (`GatedClientApp`, issue #34): undeclared kinds are refused, replies
hold only their declared records, and no exception text or trace ever leaves (`fl_privtext.client.gate`).
`build_app(defend=False)` builds the OLD behaviour (obey the server) for the adversarial tests' power checks only.

Start-up is kept light (numpy, flwr and the privacy package; torch and HF datasets are not imported): under
`fl-privtext run` the driver has already loaded the dataset and passes the path of a client-data snapshot
(``client-data.snapshot``, see `fl_privtext.client.ClientData.save`) that each actor maps in. Without one
(`flwr run`, deployment, an actor on another machine of a Ray cluster) a client loads the dataset itself.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
import traceback
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from fl_privtext.client import (
    Refused,
    client_on_device,
    client_seed_from,
    client_upload,
    policy_from,
    release_on_device,
    release_upload,
    state_dir_from,
)
from fl_privtext.client.gate import MESSAGES, REPLY_PATTERN, kind_of
from fl_privtext.client.ledger import log_error, log_refusal
from fl_privtext.client.ondevice import MAX_CANDIDATES
from fl_privtext.federation.client_data import Prepare, data_mod, request_config
from fl_privtext.federation.replies import ledger_record, refusal, send_arrays_out_of_band
from fl_privtext.federation.secagg import secagg_mod
from fl_privtext.federation.train_handlers import phase_b_data, register
from fl_privtext.memory import drop_object_store_pages
from fl_privtext.threads import apply_torch_threads, share


def thread_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Every message: torch (where an earlier handler loaded it) runs with this actor's thread share
    (``federation.client-threads``, auto = floor(client-cpus)); BLAS got it from the worker's environment."""
    flat = msg.content.config_records.get("config")
    if flat is not None and "federation.client-threads" in flat:  # two keys read directly: parsing costs ~2 ms
        apply_torch_threads(share(int(flat["federation.client-threads"]),  # type: ignore[arg-type]
                                  float(flat.get("federation.client-cpus", 1.0))))  # type: ignore[arg-type]
    return call_next(msg, context)


def placement() -> ConfigRecord:
    """Where this reply was computed: the host name and, under Ray, the Ray node id ("" elsewhere, e.g. on a
    Deployment Engine SuperNode). Public metadata like the sender's node id; it shows which machine of a
    multi-node cluster served each virtual client."""
    ray = sys.modules.get("ray")  # never imported here: an actor has it, a SuperNode does not need it
    ray_node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
    return ConfigRecord({"host": socket.gethostname(), "ray-node": ray_node})


@functools.cache
def _out_of_band() -> bool:
    return send_arrays_out_of_band()  # once per process, where a message is first handled (a Ray actor: connected)


def upload(msg: Message, context: Context, defend: bool = True) -> Message:
    _out_of_band()
    drop_object_store_pages()  # the previous reply's pages of Ray's store: gone before this one is computed (#38)
    cfg = request_config(msg)
    task = msg.content.config_records["task"]
    client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    num_partitions = int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    if num_partitions != cfg.federation.num_clients:
        raise ValueError(
            f"This SuperNode says num-partitions={num_partitions} but federation.num-clients="
            f"{cfg.federation.num_clients}; start the federation with as many SuperNodes as clients."
        )
    t0 = time.perf_counter()
    data, data_key = phase_b_data(msg, cfg, context)
    t1 = time.perf_counter()
    nc = dict(context.node_config)
    client_seed = client_seed_from(nc)
    seed, rnd = int(task["seed"]), int(task["round"])  # type: ignore[arg-type]
    charged: dict[str, Any] = {}
    if defend:  # a refusal propagates to the gate (GatedClientApp), which logs it and answers its fixed line
        up, charged = release_upload(data, client, cfg, seed, rnd, policy=policy_from(nc, dict(context.run_config)),
                                     state_dir=state_dir_from(nc), client_seed=client_seed, data_key=data_key)
    else:  # the old behaviour: whatever the server asks
        up = client_upload(data, client, rnd, seed, cfg, client_seed=client_seed)
    data.drop_pages()  # the rows read stay in the page cache, not in this actor's RSS (issue #38)
    drop_object_store_pages()  # Ray wrote this actor's earlier replies to its object store: their pages go too
    t2 = time.perf_counter()
    content = RecordDict(
        {
            "upload": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in up.arrays().items()}),
            # "seeded": whether this client ran the reproducible mode (1) or secret OS entropy (0); public metadata
            "stats": MetricRecord({"num_uploads": len(up.rows), "input_dim": up.input_dim, "seeded": int(
                client_seed is not None), "prepare_s": t1 - t0, "privatize_s": t2 - t1,
                # the thread pools this actor's environment sized (fl_privtext.threads); 0 = not set
                "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}),
            "placement": placement(),
            "ledger": ledger_record(charged),
        }
    )
    return Message(content, reply_to=msg)


def evaluate(msg: Message, context: Context, defend: bool = True) -> Message:
    """On-device inference (`fl_privtext.client.ondevice`): the server's model applied to ALL this client's test
    records; the reply is the randomized-response sum of their correctness (the old behaviour, ``defend=False``:
    confusion counts over the rows the server lists)."""
    _out_of_band()
    drop_object_store_pages()
    cfg = request_config(msg)
    client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    data, data_key = phase_b_data(msg, cfg, context)
    task = msg.content.config_records.get("task")
    stage = str(task.get("stage", "all")) if task is not None else "all"
    model = _models(msg, stage)
    if not defend:
        rows = msg.content.array_records["rows"]["rows"].numpy()
        counts = client_on_device(data, client, rows, model, cfg)
        return Message(RecordDict({"counts": ArrayRecord({"confusion": Array(np.ascontiguousarray(counts))})}),
                       reply_to=msg)
    seed = int(task["seed"]) if task is not None else cfg.run.seed  # type: ignore[arg-type]
    nc = dict(context.node_config)
    answer, charged = release_on_device(data, client, cfg, seed, model, policy=policy_from(nc, dict(context.run_config)),
                                        state_dir=state_dir_from(nc), client_seed=client_seed_from(nc),
                                        data_key=data_key, stage=stage)
    data.drop_pages()
    drop_object_store_pages()
    return Message(RecordDict({"answer": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in answer.items()}),
                               "ledger": ledger_record(charged)}), reply_to=msg)


def _models(msg: Message, stage: str) -> Any:
    """The model of an ``all`` / ``report`` request (ArrayRecord ``model``), or the list of a ``select`` request
    (``model.0`` .. ``model.{m-1}``, m <= `MAX_CANDIDATES`); `Refused` when the request does not hold them."""
    records = msg.content.array_records
    if stage != "select":
        if "model" not in records:
            raise Refused("malformed request", f"an on-device {stage!r} request needs its ArrayRecord 'model'")
        return {k: a.numpy() for k, a in records["model"].items()}
    names = [f"model.{i}" for i in range(sum(k.startswith("model.") for k in records))]
    if not 1 <= len(names) <= MAX_CANDIDATES or not set(names) <= set(records):
        raise Refused("malformed request", f"a select request carries model.0 .. model.{{m-1}} with 1 <= m <= {MAX_CANDIDATES}; got "
                      f"{sorted(records)[:12]}")
    return [{k: a.numpy() for k, a in records[n].items()} for n in names]


class GatedClientApp(ClientApp):
    """The ClientApp behind the client's one gate (`fl_privtext.client.gate`): every message, whatever its kind and
    whatever a handler or Flower's own routing does with it, leaves as a declared release or a closed refusal."""

    def __call__(self, message: Message, context: Context) -> Message:
        kind = kind_of(str(message.metadata.message_type))
        declared = MESSAGES.get(kind)
        if declared is None:
            return self._refuse(message, context, kind, Refused("unknown message", f"message type {kind!r}"))
        try:
            reply = super().__call__(message, context)
        except Refused as exc:
            return self._refuse(message, context, kind, exc)
        except Exception:  # noqa: BLE001 - the gate: nothing of an exception may reach the server
            _log(context, lambda d, n: log_error(d, n, kind, traceback.format_exc()))
            return self._refuse(message, context, kind, Refused("internal error", "see client.log"))
        if reply.has_error():
            if REPLY_PATTERN.match(str(reply.error.reason)):
                return reply
            return self._refuse(message, context, kind, Refused("internal error",
                                                                 f"a handler's error reply: {reply.error.reason}"))
        names = set(reply.content.keys())
        extra = names - declared.records
        unproven = (declared.charged and "ledger" not in names and "secaggplus_configs" not in names)
        if extra or unproven:
            return self._refuse(message, context, kind, Refused(
                "internal error", f"undeclared reply records {sorted(extra)}" if extra else "a release without "
                "its ledger record (it did not go through the ledger)"))
        return reply

    @staticmethod
    def _refuse(message: Message, context: Context, kind: str, exc: Refused) -> Message:
        _log(context, lambda d, n: log_refusal(d, n, kind, exc))
        return refusal(message, exc)


def _log(context: Context, write: Any) -> None:
    """Write to this node's own state (its ledger directory); never fails the reply."""
    try:
        write(state_dir_from(dict(context.node_config)), int(context.node_config.get("partition-id", -1)))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001,S110 - a full disk must not turn a refusal into a trace
        pass


def build_app(prepare: Prepare, defend: bool = True) -> ClientApp:
    """The ClientApp; ``prepare`` is how a client prepares its own data from a config when no snapshot is handed
    to it (`fl_privtext.federation.client_data`: the orchestrator's, `fl_privtext.pipeline.federated.build_app`).
    ``defend=False`` gives the OLD, obedient behaviour (adversarial tests' power checks only)."""
    app_class = GatedClientApp if defend else ClientApp
    # secagg_mod acts on SecAgg+ protocol messages only; data_mod hands every handler the client's data
    new = app_class(mods=[data_mod(prepare), thread_mod, secagg_mod])
    new.query("upload")(functools.partial(upload, defend=defend))
    new.query("evaluate")(functools.partial(evaluate, defend=defend))
    register(new, defend)
    return new
