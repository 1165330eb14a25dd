"""A secure sum of client vectors over Flower's SecAgg+ (Bell et al., CCS 2020; Bonawitz et al., CCS 2017).

Server: `secure_sum` runs Flower's ``SecAggPlusWorkflow`` (four message rounds: setup, share keys, collect masked
vectors, unmask) over the given nodes and returns the de-quantized SUM of the vectors of the clients that completed.
Client: `secagg_mod` (in the ClientApp's mods) hands the protocol's TRAIN messages, and only those (they carry the
``secaggplus_configs`` ConfigRecord), to Flower's ``secaggplus_mod``; at the masked-vector stage the mod asks our handler for
the vector: ``SECAGG_TASKS[task](msg, context)``, the client's (already clipped, already noised) float vector.

Encoding (exact, modular): the clipping range ``c`` is rounded up to a power of two and the grid step is
``step = 2c / T`` (``T`` = ``quantization_range``, 2^22 by default). A client rounds its vector to the grid
(``z = rint(v / step)``, error <= step / 2 per coordinate), reduces it modulo ``T`` and hands Flower the value
``(z mod T) * step - c``, which Flower's quantizer maps back to the integer ``z mod T`` exactly (powers of two: no
stochastic rounding happens). The server recovers ``sum_i z_i mod T`` (Flower sums modulo 2^32, a multiple of T),
centres it in [-T/2, T/2) and multiplies by ``step``. So: the result is the sum of the grid-rounded vectors EXACTLY
whenever every coordinate of the sum lies in [-c, c); a larger sum wraps around (Kairouz, Liu & Steinke, ICML 2021,
work in the same modular setting). Individual vectors are never clipped to c (a per-client clip of noisy values
would not be a post-processing of the noisy sum); choosing c above the sum's range is the caller's job. Round trip
error: at most ``n * step / 2`` per coordinate for n contributors (the rounding; nothing else).

Trust model. SecAgg+ protects the individual vectors against an honest-but-curious server (it runs the protocol as
written and analyses everything it receives) and against any coalition of the server with fewer than
``reconstruction_threshold`` clients among a client's neighbours (with ``num_shares`` = all, every other client):
what they see of one client is its vector plus one-time pad masks, uniform modulo 2^32. It does NOT protect:
the SUM itself (exact; privacy of the sum needs noise added by the clients before masking: distributed DP);
against a malicious server (Flower's implementation has no consistency checks or signatures: a server that claims
an active client dropped can ask for its mask-key shares and unmask it; a server that simulates clients (Sybils)
can isolate one real client); the set of participants, their timing and message sizes; anything once threshold
many neighbours collude. Dropouts: a client that fails after sharing its keys is survived as long as every
remaining client keeps ``reconstruction_threshold`` live neighbours; it is listed in ``dropped``.

Sessions. A client's noisy vector is a stored release (its ledger replays it to a repeated request), and a vector
replayed into two sums over different clients leaks their difference: four honest sessions over the 3-of-4 subsets
of four clients isolate each client's vector. So a task binds its stored vector to the participant set this
session shows the client (`session_participants`: the sources of the key shares it received, and itself): a
session over another set is a new release (fresh noise, charged again); checks the real number of selected and
masking clients against the client's own minimum (`require_contributors`); and helps unmask a vector's sum over
one active set only (`unmask_once`). Both of our tasks (Phase A's update, Phase B's statistics) do all three.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
    Key,
    Stage,
)
from flwr.serverapp import Grid

from fl_privtext.client import Refused
from fl_privtext.client.ledger import bind_once, node_dir
from fl_privtext.federation.faults import one_line
from fl_privtext.federation.grid import DelegatingGrid
from fl_privtext.names import SECAGG_TASKS as TASKS
from fl_privtext.names import Registry

RECORD = "secagg"  # our ConfigRecord in the masked-vector request: task, clipping range, quantization range
SECAGG_CONFIGS = RECORD_KEY_CONFIGS  # Flower's protocol record ("secaggplus_configs")
MOD_RANGE = 2**32
GUARD = "fl-privtext-secagg-guard"  # client state: the fewest active clients this client unmasks for
META = "fl-privtext-secagg-meta"  # client state: public numbers a task declares with its vector (`declare`)

SECAGG_TASKS: Registry[Callable[[Message, Context], np.ndarray]] = TASKS
"""Client side: task name -> the client's vector for a secure-sum request (float, already clipped and noised): the
registry of `fl_privtext.names` (built-ins resolved on first request, so no module must be imported to register)."""


class SecAggAborted(RuntimeError):
    """The protocol halted (too few clients left for the reconstruction threshold); ``str`` says at which stage."""


@dataclass(frozen=True)
class SecureSum:
    total: np.ndarray  # float64, de-quantized sum of the vectors of the clients that completed
    contributors: list[int]  # node ids whose vectors are in the sum
    dropped: list[int]  # node ids that dropped mid-protocol (survived: below the reconstruction threshold)
    rounds: int  # protocol message rounds used (4 when it completes)
    bytes: int = 0  # serialized size of every message content both ways (protobuf), all rounds
    step: float = 0.0  # the grid step: the sum is exact up to len(contributors) * step / 2 per coordinate
    reasons: dict[int, str] = field(default_factory=dict)  # dropped node id -> its error, one line
    declared: dict[int, dict[str, float]] = field(default_factory=dict)  # contributor -> what its task `declare`d


def grid_step(clipping_range: float, quantization_range: int) -> tuple[float, float]:
    """(c rounded up to a power of two, the grid step 2c / T); T must be a power of two."""
    if not (clipping_range > 0 and math.isfinite(clipping_range)):
        raise ValueError(f"clipping_range must be a finite number > 0; got {clipping_range}.")
    if quantization_range < 2 or quantization_range & (quantization_range - 1) or quantization_range >= MOD_RANGE:
        raise ValueError(f"quantization_range must be a power of two in [2, 2^32); got {quantization_range}.")
    c = math.ldexp(1.0, math.frexp(clipping_range)[1] - (1 if math.frexp(clipping_range)[0] == 0.5 else 0))
    return c, 2.0 * c / quantization_range


def encode(vector: np.ndarray, clipping_range: float, quantization_range: int) -> np.ndarray:
    """The float vector Flower's quantizer maps exactly to ``rint(vector / step) mod T`` (see the module text)."""
    c, step = grid_step(clipping_range, quantization_range)
    v = np.asarray(vector, dtype=np.float64).ravel()
    if not np.all(np.isfinite(v)):
        raise ValueError("A secure-sum vector must be finite.")
    q = np.mod(np.rint(v / step).astype(np.int64), quantization_range)
    return q.astype(np.float64) * step - c


def decode_sum(mean: np.ndarray, n: int, clipping_range: float, quantization_range: int) -> np.ndarray:
    """The sum from the workflow's output (Flower de-quantizes and divides by the n equal weights)."""
    c, step = grid_step(clipping_range, quantization_range)
    recon = np.rint((np.asarray(mean, np.float64) * n + n * c) / step).astype(np.int64)  # sum of (z_i mod T)
    z = np.mod(recon, quantization_range)
    z = np.where(z >= quantization_range // 2, z - quantization_range, z)
    return z.astype(np.float64) * step


def _content_bytes(content: RecordDict) -> int:
    from flwr.common.serde import recorddict_to_proto

    return int(recorddict_to_proto(content).ByteSize())


class _CountingGrid(DelegatingGrid):
    """Delegates to ``inner``; counts message rounds and content bytes, keeps each failed node's reason."""

    def __init__(self, inner: Grid) -> None:
        super().__init__(inner)
        self.rounds = 0
        self.bytes = 0
        self.reasons: dict[int, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self.rounds += 1
        self.bytes += sum(_content_bytes(m.content) for m in messages)
        replies = list(self._inner.send_and_receive(messages, timeout=timeout))
        for r in replies:
            if r.has_error():
                self.reasons[int(r.metadata.src_node_id)] = one_line(str(r.error.reason))
            else:
                self.bytes += _content_bytes(r.content)
        return replies


def _strategy(nodes: list[int], grid: Grid, run_id: int, out: dict[str, Any]) -> Any:
    """A legacy Strategy that selects exactly ``nodes`` and keeps what SecAgg+ hands ``aggregate_fit``."""
    from flwr.common import FitIns, Parameters
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.strategy import Strategy

    class _Sum(Strategy):
        def initialize_parameters(self, client_manager: Any) -> Any:
            return None

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
            ins = FitIns(Parameters(tensors=[], tensor_type="numpy.ndarray"), {})
            return [(GridClientProxy(n, grid, run_id), ins) for n in nodes]

        def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
            from flwr.common import parameters_to_ndarrays

            out["contributors"] = sorted(int(p.node_id) for p, _ in results)
            out["declared"] = {int(p.node_id): {k: float(v) for k, v in r.metrics.items()} for p, r in results}
            out["mean"] = parameters_to_ndarrays(results[0][1].parameters) if results else []
            return None, {}

        def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
            return []

        def aggregate_evaluate(self, server_round: int, results: Any, failures: Any) -> Any:
            return None, {}

        def evaluate(self, server_round: int, parameters: Any) -> Any:
            return None

    return _Sum()


def secure_sum(grid: Grid, nodes: Iterable[int], task: str, content: RecordDict, *, clipping_range: float,
               num_shares: int | float = 1.0, reconstruction_threshold: int | float = 0.67,  # noqa: PYI041 (Flower's)
               quantization_range: int = 2**22, timeout: float | None = None) -> SecureSum:
    """The sum over ``nodes`` of ``SECAGG_TASKS[task](msg, context)`` on each client, through SecAgg+.

    ``content`` travels to every client in the masked-vector request (e.g. the global model); ``clipping_range``
    bounds every coordinate of the SUM (see the module text: exact below it, wraps above); ``num_shares`` and
    ``reconstruction_threshold`` are Flower's (a float: a fraction of the selected clients / of the shares); the
    defaults make every selected client a neighbour of every other and need 67% of the shares (3 clients: 2, 5: 3,
    10: 7), so about a third may drop after sharing their keys. ``quantization_range`` T (a power of two < 2^32)
    sets the grid step 2c / T. Tasks may `declare` public numbers (``SecureSum.declared``) and
    `require_contributors`. Raises `SecAggAborted` when too many clients fail for the masks to be removed.
    """
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    nodes = sorted(int(n) for n in nodes)
    if len(nodes) < 2 or len(set(nodes)) != len(nodes):
        raise ValueError(f"secure_sum needs at least 2 distinct nodes; got {nodes}.")
    if not task:
        raise ValueError("secure_sum needs a task name (a key of SECAGG_TASKS on the clients).")
    c, step = grid_step(clipping_range, quantization_range)
    counting = _CountingGrid(grid)
    out: dict[str, Any] = {}
    run_id = _run_id(grid)
    request = RecordDict(dict(content.items()))
    request[RECORD] = ConfigRecord({"task": task, "clipping-range": c, "quantization-range": quantization_range})

    class _Workflow(SecAggPlusWorkflow):  # the masked-vector request carries ``content``, not a legacy FitIns
        def setup_stage(self, grid: Grid, context: Any, state: Any) -> bool:
            ok = super().setup_stage(grid, context, state)
            state.nid_to_fitins = {nid: RecordDict(dict(request.items())) for nid in state.nid_to_fitins}
            return ok

    workflow = _Workflow(num_shares, reconstruction_threshold, max_weight=1.0, clipping_range=c,
                         quantization_range=quantization_range, modulus_range=MOD_RANGE, timeout=timeout)
    ctx = LegacyContext(Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                        strategy=_strategy(nodes, counting, run_id, out))
    ctx.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: 1})
    from flwr.app import ArrayRecord

    ctx.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow(counting, ctx)
    if "mean" not in out or not out["mean"]:
        why = "; ".join(f"node {k}: {v}" for k, v in sorted(counting.reasons.items())) or "no reason given"
        raise SecAggAborted(f"SecAgg+ halted after {counting.rounds} of 4 rounds: too few clients left for the "
                            f"reconstruction threshold ({why}).")
    contributors = out["contributors"]
    total = decode_sum(out["mean"][0], len(contributors), c, quantization_range)
    dropped = [n for n in nodes if n not in set(contributors)]
    return SecureSum(total=total, contributors=contributors, dropped=dropped, rounds=counting.rounds,
                     bytes=counting.bytes, step=step, reasons={n: counting.reasons.get(n, "no reply")
                                                               for n in dropped},
                     declared=out.get("declared", {}))


def _run_id(grid: Grid) -> int:
    try:
        return int(grid.run.run_id)
    except (AttributeError, NotImplementedError, RuntimeError):  # a grid not bound to a run (tests)
        return 0


# ---------------------------------------------------------------------------------------------------------- client


def _vector_reply(msg: Message, context: Context) -> Message:
    """The masked-vector stage's inner handler: the task's vector, encoded, as the legacy FitRes the mod reads."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat

    rec = msg.content.config_records[RECORD]
    task = str(rec["task"])
    if task not in SECAGG_TASKS:
        raise ValueError(f"Unknown secure-sum task {task!r}; this client knows: {', '.join(sorted(SECAGG_TASKS))}.")
    context.state.config_records.pop(META, None)
    vector = SECAGG_TASKS[task](msg, context)
    enc = encode(vector, float(rec["clipping-range"]), int(rec["quantization-range"]))  # type: ignore[arg-type]
    meta = context.state.config_records.pop(META, None)
    res = FitRes(status=Status(code=Code.OK, message=""), parameters=ndarrays_to_parameters([enc]), num_examples=1,
                 metrics={k: float(v) for k, v in (meta or {}).items()})  # type: ignore[arg-type]
    return Message(compat.fitres_to_recorddict(res, keep_input=False), reply_to=msg)


def declare(context: Context, **values: float) -> None:
    """For a task: public numbers sent in clear beside the masked vector (e.g. the noise it added, what it
    charged); the server reads them in `SecureSum.declared`."""
    context.state.config_records[META] = ConfigRecord({k.replace("_", "-"): float(v) for k, v in values.items()})


def session_participants(msg: Message) -> tuple[int, ...]:
    """For a task, at the masked-vector stage: the participant set this SecAgg+ session shows the client, sorted
    node ids: the sources of the key shares the server forwarded to it (``Key.SOURCE_LIST``: the neighbours that
    completed the share-keys stage, exactly those whose pairwise masks this client adds) and itself. With
    ``num_shares`` = all (both of our tasks) these are every client whose vector can be in the sum with this one;
    a task binds a stored vector to it (`fl_privtext.client.aggregate.release_statistics`, `secagg_train`)."""
    configs = msg.content.config_records.get(SECAGG_CONFIGS)
    if configs is None or Key.SOURCE_LIST not in configs:
        raise Refused("malformed request", "a secure-sum vector is asked for outside SecAgg+'s masked-vector stage")
    own = int(msg.metadata.dst_node_id)
    return tuple(sorted({int(s) for s in configs[Key.SOURCE_LIST]} | {own}))  # type: ignore[union-attr]


def require_contributors(context: Context, minimum: int, participants: Sequence[int] | None = None) -> None:
    """For a task: refuse (`fl_privtext.client.Refused`) a secure sum over fewer than ``minimum`` selected clients
    or, given the session's ``participants`` (`session_participants`), fewer than ``minimum`` masking together,
    and make this client refuse to help unmask when fewer than ``minimum`` are still active (`secagg_mod`). Exact
    when every selected client is this client's neighbour (``num_shares`` = all); otherwise conservative."""
    state = context.state.config_records.get(RECORD_KEY_STATE)
    selected = int(state["sample_num"]) if state is not None and "sample_num" in state else 0  # type: ignore[arg-type]
    if selected < minimum:
        raise Refused("too few contributors", f"a secure sum over {selected} clients; this client's policy needs at least {minimum} "
                      f"(client.secagg-min-clients)")
    if participants is not None and len(participants) < minimum:
        raise Refused("too few contributors", f"{len(participants)} clients mask together in this session; this client's policy "
                      f"needs at least {minimum} (client.secagg-min-clients)")
    context.state.config_records[GUARD] = ConfigRecord({"min-active": int(minimum)})


def session_record(state_dir: str | os.PathLike[str], node: int, scope: str, key: str) -> Path:
    """Where a client notes the active set its stored vector ``key`` (under policy entry ``scope``) was unmasked
    with (`unmask_once`): beside its ledger, so that it survives a restart as the stored answer does."""
    name = hashlib.sha256(f"{scope}|{key}".encode()).hexdigest()[:32]
    return node_dir(state_dir, node) / "secagg-unmasked" / f"{name}.json"


def unmask_once(context: Context, record: str | os.PathLike[str]) -> None:
    """For a task, after its (stored or fresh) vector: `secagg_mod` helps unmask a sum holding that vector over ONE
    active set only: the first unmasking notes its active set in ``record`` (`session_record`), a later session
    that would unmask the same vector over another set (a client that dropped after masking, once and not the
    other time: the two sums' difference would be that client's vector) is refused (``session already
    answered``). Call `require_contributors` first (it sets the guard this extends)."""
    guard = context.state.config_records.get(GUARD)
    if guard is None:
        raise RuntimeError("unmask_once needs require_contributors first (the client's minimum).")
    guard["record"] = str(record)


def _unmask_check(record: Path, active: list[int]) -> None:
    """`unmask_once`'s rule at the unmask stage: the first active set is noted; another one is refused."""
    # noted before the shares leave: a crash in between refuses more, never less
    first = sorted(int(n) for n in json.loads(bind_once(record, json.dumps({"active": active})))["active"])
    if first != active:
        raise Refused("session already answered", f"this vector was unmasked over {first}; this session would "
                      f"unmask it over {active}")


def secagg_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Client mod: a SecAgg+ protocol message (TRAIN with the ``secaggplus_configs`` record) goes to Flower's
    ``secaggplus_mod`` with `_vector_reply` as its inner handler; every other message to ``call_next`` unchanged.
    At the unmask stage it enforces `require_contributors`' minimum and `unmask_once`'s active set first."""
    if msg.metadata.message_type != MessageType.TRAIN or SECAGG_CONFIGS not in msg.content.config_records:
        return call_next(msg, context)
    from flwr.client.mod import secaggplus_mod

    configs = msg.content.config_records[SECAGG_CONFIGS]
    stage = configs.get(Key.STAGE)
    if stage in (Stage.SETUP, Stage.UNMASK) and GUARD in context.state.config_records:
        guard = context.state.config_records.pop(GUARD)
        minimum = int(guard["min-active"])  # type: ignore[arg-type]
        active = sorted(int(n) for n in configs.get(Key.ACTIVE_NODE_ID_LIST, []))  # type: ignore[union-attr]
        if stage == Stage.UNMASK and len(active) < minimum:
            raise Refused("too few contributors", f"unmasking a sum of {len(active)} clients; this client's policy needs at least "
                          f"{minimum} (client.secagg-min-clients)")
        if stage == Stage.UNMASK and "record" in guard:
            _unmask_check(Path(str(guard["record"])), active)

    return secaggplus_mod(msg, context, _vector_reply)
