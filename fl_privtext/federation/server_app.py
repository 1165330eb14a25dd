"""The untrusted server's Flower side: its queries (upload rounds, on-device evaluation) and the eavesdropper.

`serve` is the server loop over every point; each point's transport (`PointTransport`) is driven by the
orchestrator's ``run_point`` (`fl_privtext.pipeline.federated.serve_point`), which decides what is asked in which
order. The ServerApp of `flwr run .` is `fl_privtext.pipeline.apps.server_app`; `fl-privtext run` builds its own in
`fl_privtext.federation.simulation`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp

from fl_privtext.client import UPLOAD_KEYS, merge_uploads
from fl_privtext.client.aggregate import StatsLayout
from fl_privtext.config import ExperimentConfig
from fl_privtext.datafiles import spill_dir
from fl_privtext.federation.eavesdropper import EavesdroppingGrid, array_record, numpy_view
from fl_privtext.federation.faults import one_line
from fl_privtext.federation.inflight import send_windowed, window_size
from fl_privtext.federation.requests import query, wait_for_nodes
from fl_privtext.federation.secagg import SecureSum
from fl_privtext.federation.secagg_stats import SumRequest, secagg_sum_round
from fl_privtext.federation.secagg_train import train_phase_secagg
from fl_privtext.federation.shuffler import SHUFFLER_NODE_ID, ShufflingGrid
from fl_privtext.federation.training import InjectingGrid, encoder_out_dim, train_phase, training_off
from fl_privtext.memory import (
    CHUNK_ROWS,
    Spill,
    drop_object_store_pages,
    is_mapped,
    is_sorted,
    narrowest,
    read_whole,
)
from fl_privtext.traffic import Observed, OnRound, Round

log = logging.getLogger(__name__)


def collect(grid: EavesdroppingGrid, nodes: Sequence[int], cfg: ExperimentConfig, seed: int,
            rnd: int, snapshot: str = "", shuffler: ShufflingGrid | None = None) -> Round:
    """One round: query every node for its users' uploads; return what arrived within
    ``federation.round-timeout`` s. A client that fails (an exception, a crashed actor) or does not answer in time
    is listed in ``Round.failures`` and the round goes on without it; a round with no upload at all is an error.

    The query carries the point's configuration and (seed, round), never anything a client's noise derives from.
    At most ``federation.max-in-flight`` queries are pending at once (`fl_privtext.federation.inflight`).

    ``shuffler`` (federation.shuffle): the replies arrive shuffled, one sender-free message per cohort
    (`fl_privtext.federation.shuffler`); the round's ``revealed`` record ids and ``senders`` come from the
    shuffler's key, for the platform's scoring and accounting only."""
    msgs = (
        Message(query(cfg, snapshot, task=ConfigRecord({"seed": seed, "round": rnd})), dst_node_id=node,
                message_type="query.upload")
        for node in nodes
    )
    timeout = cfg.federation.round_timeout or None
    shuffled = shuffler is not None and shuffler.on
    spill = Spill(spill_folder(cfg))  # the server's copy of the round's uploads, in arrival order

    def take(reply: Message) -> tuple[Message, int]:
        # each reply's uploads go to the spill as it arrives, and its bytes with it; the pages of Ray's object
        # store it was fetched through leave this process's RSS (`drop_object_store_pages`)
        out = spill_upload(reply, spill)
        drop_object_store_pages()
        return out

    if shuffled:  # the shuffler releases a round only once it holds all of it (its own window below it)
        assert shuffler is not None
        shuffler.window = window_size(cfg.federation.max_in_flight)
        spilled = [take(r) for r in grid.send_and_receive(msgs, timeout=timeout)]
    else:
        spilled = send_windowed(grid, msgs, window=window_size(cfg.federation.max_in_flight), timeout=timeout,
                                each=take)
    replies = [r for r, _ in spilled]
    failures: list[dict[str, Any]] = []
    good: list[Message] = []
    counts: list[int] = []  # per good reply: how many of its uploads the spill holds (in the order of ``good``)
    for r, n in spilled:
        if r.has_error():
            node = int(r.metadata.src_node_id)
            log.debug("client node %d failed; full trace:\n%s", node, r.error.reason)
            failures.append({"node": node, "kind": failure_kind(r), "reason": one_line(str(r.error.reason))})
        else:
            good.append(r)
            counts.append(n)
    del spilled
    answered = {int(r.metadata.src_node_id) for r in replies}
    for r in good:  # a shuffled round names its participants, not who sent which report
        if int(r.metadata.src_node_id) == SHUFFLER_NODE_ID and "shuffle" in r.content.array_records:
            answered.update(int(n) for n in r.content.array_records["shuffle"]["contributors"].numpy())
    failures.extend({"node": int(n), "kind": "timeout", "reason": f"no reply within {timeout} s"}
                    for n in nodes if int(n) not in answered)
    arrived = spill.mapped()  # every spilled upload (all its arrays), in the order of ``good``
    if not good and failures and all(f["kind"] == "refused" for f in failures):  # the clients' policy said no
        log.warning("round %d: every client refused (%s)", rnd, failures[0]["reason"][:300])
        return Round(merge_uploads([]), 0, failures=failures)
    if not good:
        reasons = "; ".join(f["reason"] for f in failures[:3])
        raise RuntimeError(f"Round {rnd}: none of the {len(nodes)} clients delivered an upload ({reasons}).")
    if failures:
        log.warning("round %d: %d of %d client(s) failed; going on with the replies that arrived", rnd,
                    len(failures), len(nodes))
        for f in failures[:10]:  # one line per fault: node, kind, reason
            log.warning("round %d: client node %d %s: %s", rnd, f["node"], f["kind"], f["reason"])
    bounds = np.cumsum([0, *counts])
    # each good reply's uploads: slices of the spill's maps, or (nothing spilled: an empty upload) its own record
    parts = [{k: v[a:b] for k, v in arrived.items()} if b > a else
             {k: numpy_view(x) for k, x in r.content.array_records["upload"].items()}
             for r, a, b in zip(good, bounds[:-1], bounds[1:], strict=True)]
    stats = [r.content.metric_records["stats"] for r in good]
    where: list[Any] = [r.content.config_records.get("placement") or {} for r in good]
    placement = [{"node": int(r.metadata.src_node_id), "host": str(w.get("host", "")),
                  "ray_node": str(w.get("ray-node", ""))} for r, w in zip(good, where, strict=True)]
    # the ids each reply carried, as slices of the spill's own map of them (int64 on the wire: `Upload.rows`)
    senders = spilled_senders([(int(r.metadata.src_node_id), p["rows"]) for r, p in zip(good, parts, strict=True)],
                              spill_folder(cfg))
    merged = merge_spilled(parts, arrived, spill_folder(cfg))
    del arrived, parts
    revealed = None
    if shuffled:
        assert shuffler is not None
        senders = {n: rows for n, rows in shuffler.sent_by.items() if len(rows)}  # the referee's key
        revealed = shuffler.reveal(merged["rows"])
        placement = []  # per-reply placement is dropped by the shuffler
    return Round(merged, max(int(s["input_dim"]) for s in stats),  # type: ignore[arg-type]
                          failures=failures, seeded=[bool(s.get("seeded", 0)) for s in stats], senders=senders,
                          placement=placement, ledger=[ledger_of(r) for r in good if "ledger" in
                                                       r.content.config_records or not shuffled],
                          revealed=revealed)


def spill_folder(cfg: ExperimentConfig) -> str:
    """Where a point's uploads live between stages: ``spill/`` in the run's cache (``extractor.cache-dir``)."""
    return str(spill_dir(cfg.extractor.cache_dir))


def spill_upload(reply: Message, spill: Spill) -> tuple[Message, int]:
    """Move every array of a reply's non-empty ``upload`` record (representations, labels, record ids) into
    ``spill`` and the record out of the reply; return the reply and how many uploads the spill took from it (0:
    an error, no upload record, an empty one, kept as it is). The round's replies are not resident until the last
    one is in, next to their merged copy (issue #38); the labels and record ids they kept (16 bytes an upload,
    ~0.6 GB of the driver at 10M users, held to the round's end) are not either."""
    record = array_record(reply, "upload")
    if record is None:
        return reply, 0
    arrays = {k: numpy_view(a) for k, a in record.items()}
    n = len(arrays["rows"])
    if not n:
        return reply, 0
    vectors = {k: a for k, a in arrays.items() if a.ndim >= 1}
    if any(len(a) != n for a in vectors.values()):
        raise ValueError(f"An upload's arrays must have one length; got {sorted({len(a) for a in vectors.values()})}.")
    spill.append(vectors)
    reply.content["upload"] = ArrayRecord({k: a for k, a in record.items() if k not in vectors})
    return reply, n


def spilled_senders(sent: list[tuple[int, np.ndarray]], folder: str) -> dict[int, np.ndarray]:
    """``Round.senders`` (node -> the record ids its reply carried) as slices of one read-only map of a file in
    ``folder``: the same int64 ids, but not views of the replies' bytes, which they kept resident through the run
    (8-16 bytes an upload in the driver, issue #38). Ids that already are int64 maps (the round's spill, `collect`)
    are those maps, not a second copy on disk. Nodes that sent nothing are left out."""
    sent = [(node, rows) for node, rows in sent if len(rows)]
    if not sent:
        return {}
    if all(is_mapped(rows) and rows.dtype == np.int64 for _, rows in sent):
        return dict(sent)
    spill = Spill(folder)
    for _, rows in sent:
        spill.append({"rows": np.asarray(rows, np.int64)})
    mapped = spill.mapped()["rows"]
    bounds = np.cumsum([0, *(len(rows) for _, rows in sent)])
    return {node: mapped[a:b] for (node, _), a, b in zip(sent, bounds[:-1], bounds[1:], strict=True)}


def merge_spilled(parts: list[dict[str, np.ndarray]], arrived: dict[str, np.ndarray], folder: str,
                  chunk: int | None = None) -> dict[str, np.ndarray]:
    """`fl_privtext.client.merge_uploads` of a round whose uploads were spilled as they arrived (``arrived``: the
    non-empty parts' spilled arrays, every part's rows in the parts' order; ``parts`` hold the rest, if any): the
    same arrays, each as a read-only map of a file in ``folder``, written ``chunk`` rows at a time in canonical row
    order (a stable sort by record id), so that the merge holds no copy of the round in memory (the driver held
    the labels and record ids through the run, issue #38). Its peak: the record ids (narrowed) and their order in
    memory (12-16 bytes an upload, and the sort's buffer), read from ``arrived`` where it holds them."""
    parts = [p for p in parts if len(p["rows"])]
    if not parts:
        return merge_uploads([])
    if set(parts[0]) == set(arrived) and all(is_sorted(p["rows"], chunk=chunk) for p in parts):
        return _merge_row_ordered(parts, folder, chunk)  # each reply in row order (a client's shard): no order array
    # the spilled ids read back a chunk at a time (their map's pages dropped): one copy, not the copy and the pages;
    # sorted in their narrowest type (the same stable order: the same values), 4 bytes an upload instead of 8
    rows = read_whole(arrived["rows"], chunk) if "rows" in arrived else np.concatenate([p["rows"] for p in parts])
    rows = narrowest(rows)
    order = np.argsort(rows, kind="stable")
    del rows
    out = Spill(folder)
    for k in parts[0]:  # the 1-D columns (labels, record ids: 16 bytes an upload) on disk too, until read
        if k not in arrived:
            out.gather(np.concatenate([p[k] for p in parts]), order, k, chunk)
    for k, rows in arrived.items():
        if len(rows) != len(order):
            raise ValueError(f"The spilled {k!r} holds {len(rows)} rows for {len(order)} uploads.")
        out.gather(rows, order, k, chunk)
    merged = out.mapped()
    return {k: merged[k] for k in UPLOAD_KEYS if k in merged} | {k: v for k, v in merged.items()
                                                                   if k not in UPLOAD_KEYS}


def _merge_row_ordered(parts: list[dict[str, np.ndarray]], folder: str, chunk: int | None = None
                       ) -> dict[str, np.ndarray]:
    """`merge_spilled` of parts whose record ids are each non-decreasing (every client sends its shard in row
    order): the same maps, built block by block with no array over the whole round. A block takes from every part
    its next entries whose ids are at most ``hi`` (the smallest of the parts' ids ``chunk / parts`` entries on), so
    the blocks cover increasing ranges of ids and hold about ``chunk`` entries; a stable sort of a block, whose
    entries come in the parts' order, puts them where the round's stable sort by id does. The round-wide path held
    the ids and their order, 12 bytes an upload (0.44 GB at 10M users, issue #38); this one holds a block."""
    per = max(1, (CHUNK_ROWS if chunk is None else chunk) // len(parts))
    rows = [p["rows"] for p in parts]
    at = [0] * len(parts)
    out = Spill(folder)
    while any(c < len(r) for c, r in zip(at, rows, strict=True)):
        bounds = [r[c + per - 1] for c, r in zip(at, rows, strict=True) if c + per <= len(r)]
        hi = min(bounds) if bounds else None
        ends = [len(r) if hi is None else c + int(np.searchsorted(r[c:], hi, "right"))
                for c, r in zip(at, rows, strict=True)]
        taken = [(p, c, e) for p, c, e in zip(parts, at, ends, strict=True) if e > c]
        # each reply's slice read with its pages dropped at once (`read_whole`): the kernel maps a large page-cache
        # folio around each slice touched; dropped only after the whole block, ~0.24 GB of the driver at 1M users
        block = {k: np.concatenate([read_whole(p[k][c:e], chunk) for p, c, e in taken]) for k in parts[0]}
        order = np.argsort(block["rows"], kind="stable")
        out.append({k: v[order] for k, v in block.items()})
        at = ends
    merged = out.mapped()
    return {k: merged[k] for k in UPLOAD_KEYS if k in merged} | {k: v for k, v in merged.items()
                                                                   if k not in UPLOAD_KEYS}


def failure_kind(reply: Message) -> str:
    """"refused" when the client's policy or ledger refused the request (reason ``refused: ...``), else "error"
    (``refused: internal error``, the gate's line for a client-side failure, or a transport error)."""
    reason = str(reply.error.reason)
    return "refused" if reason.startswith("refused:") and reason != "refused: internal error" else "error"


def ledger_of(reply: Message) -> dict[str, Any]:
    """What the client says it charged for this reply (its ConfigRecord ``ledger``; {} from an old client)."""
    rec = reply.content.config_records.get("ledger")
    out: dict[str, Any] = {"node": int(reply.metadata.src_node_id)}
    if rec is not None:
        out.update({k: (str(v) if k == "scope" else float(v)) for k, v in rec.items()})  # type: ignore[arg-type]
    return out


def evaluate_on_device(grid: Grid, cfg: ExperimentConfig, trained: Any,
                       requests: dict[int, Any], snapshot: str = "", seed: int | None = None,
                       stage: str = "all") -> list[Any]:
    """On-device inference (`fl_privtext.ondevice`): send the server's model to every node that holds test users
    (the client answers for ALL its test users, the listed rows are what the server believes; `fl_privtext.client.
    ondevice`). Each reply is a dict: ``{"node", "answer": arrays}`` or ``{"node", "refused": reason}``; a node
    that fails otherwise is an error (the accuracy would silently describe a different population)."""
    if trained.model is None:
        raise ValueError("On-device evaluation needs a trained task model.")
    def record(m: dict[str, np.ndarray]) -> ArrayRecord:
        return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in m.items()})

    # select stage (server.select-on = clients): every candidate, in trained.candidates' order, as model.i
    models = ({f"model.{i}": record(m) for i, m in enumerate((trained.candidates or {}).values())}
              if stage == "select" else {"model": record(trained.model)})
    task = ConfigRecord({"seed": cfg.run.seed if seed is None else int(seed),
                         **({"stage": stage} if stage != "all" else {})})
    msgs = [Message(query(cfg, snapshot, **models, task=task,
                           rows=ArrayRecord({"rows": Array(np.asarray(rows, np.int64))})),
                    dst_node_id=node, message_type="query.evaluate")
            for node, rows in requests.items()]
    replies = send_windowed(grid, msgs, window=window_size(cfg.federation.max_in_flight),
                            timeout=cfg.federation.round_timeout or None)
    drop_object_store_pages()  # the replies came through Ray's object store: its pages leave this process's RSS
    errors = [one_line(str(r.error.reason)) for r in replies if r.has_error() and failure_kind(r) != "refused"]
    if errors or len(replies) != len(msgs):
        raise RuntimeError(f"On-device evaluation: {len(msgs) - len(replies) + len(errors)} of {len(msgs)} test "
                           f"clients did not answer ({'; '.join(errors[:3]) or 'timeout'}).")
    out: list[Any] = []
    for r in replies:
        node = int(r.metadata.src_node_id)
        if r.has_error():
            out.append({"node": node, "refused": str(r.error.reason)})
        elif "answer" in r.content.array_records:
            out.append({"node": node, "answer": {k: a.numpy() for k, a in r.content.array_records["answer"].items()},
                        "ledger": ledger_of(r)})
        else:  # an old client: confusion counts
            out.append({"node": node, "counts": r.content.array_records["counts"]["confusion"].numpy()})
    return out


Job = Callable[[], dict[str, Any]]


@dataclass
class PointTransport:
    """One experiment point's traffic through the federation, as the orchestrator drives it
    (`fl_privtext.pipeline.federated.serve_point`): the upload rounds (``collect_round``), the eavesdropper's record
    of them (``eavesdrop``), the on-device queries (``evaluate_round``), Phase A (``train_encoder``) and the secure
    sums (``sum_round``). It holds no experiment logic: what to ask, in which order, is the orchestrator's.

    ``federation.shuffle``: ``shuffler`` (below ``eaves``) shuffles this point's upload rounds per cohort; the
    on-device evaluation then names no rows and goes to every node (each client answers for its own test users,
    `fl_privtext.client.ondevice`, or refuses)."""

    eaves: EavesdroppingGrid
    cfg: ExperimentConfig
    nodes: list[int]
    snapshot: str = ""
    shuffler: ShufflingGrid | None = None
    keep_observations: bool = False
    on_round: OnRound | None = None
    grid: Grid | None = None  # where Phase B's queries go: ``eaves``, or Phase A's InjectingGrid once it ran
    encoder: ArrayRecord | None = None  # Phase A's encoder, carried by every Phase B query
    observations: list[Any] = field(default_factory=list)
    sent: list[Any] = field(default_factory=list)
    _received: list[dict[str, np.ndarray]] = field(default_factory=list)  # this seed's rounds as the server merged them

    @property
    def phase_b(self) -> Grid:
        return self.grid if self.grid is not None else self.eaves

    def shuffle(self, roles: Sequence[str] | np.ndarray) -> None:
        """Set the shuffler for this point: on under ``federation.shuffle`` (cohorts by role, pseudonyms after the
        record ids), else off."""
        if self.shuffler is not None:
            on = self.cfg.federation.shuffle
            self.shuffler.configure(on=on, cohorts=np.asarray(roles) if on else None,  # the names, as an array
                                    first_pseudonym=len(roles) if on else 0)

    def train_encoder(self, prep: Any, *, keep_updates: bool | None = None, grid: Grid | None = None
                      ) -> dict[str, Any]:
        """Phase A (train.rounds > 0): train the encoder federatedly (through SecAgg+ under ``train.secagg``);
        Phase B's queries then carry it. Returns results.json's ``training``."""
        if self.cfg.train.rounds == 0:
            return training_off(self.cfg)
        keep = self.keep_observations if keep_updates is None else keep_updates
        below = self.eaves if grid is None else grid
        if self.cfg.train.secagg:  # the updates reach the server only as a secure sum (issue #24)
            training = train_phase_secagg(below, self.cfg, prep, keep_updates=keep)
        else:
            training = train_phase(below, self.cfg, prep, keep_updates=keep)
        self.encoder = training.pop("encoder_arrays")
        self.grid = InjectingGrid(below, {"encoder": self.encoder})
        return training

    def encoder_width(self, prep: Any) -> int:
        """The width of Phase A's r(x) (`fl_privtext.federation.training.encoder_out_dim`)."""
        return encoder_out_dim(self.cfg, prep)

    def collect_round(self, seed: int, rnd: int) -> Round:
        got = collect(self.phase_b, self.nodes, self.cfg, seed, rnd, self.snapshot,  # type: ignore[arg-type]
                      self.shuffler)
        self._received.append(got.uploads)
        return got

    def start_seed(self) -> None:
        self.eaves.reset()
        self.eaves.spill_to(spill_folder(self.cfg))  # the eavesdropper's own copy of the uploads, on disk
        self._received.clear()

    def eavesdrop(self) -> Observed:
        if self.keep_observations:
            self.observations.extend(self.eaves.observations)
            self.sent.extend(self.eaves.sent)
            self.eaves.sent.clear()
        # one round (the server's merge is that round's own arrays): the record is checked against it in place and
        # shares its arrays (`EavesdroppingGrid.uploads_matching`), instead of a third copy beside the replies' bytes
        uploads = (self.eaves.uploads_matching(self._received[0]) if len(self._received) == 1 else
                   self.eaves.uploads())
        self._received.clear()
        observed = Observed(uploads=uploads, messages=len(self.eaves.observations), nbytes=self.eaves.bytes_observed)
        self.eaves.reset()  # `observed` holds the seed's uploads (compared with what the server received): drop the
        # per-message copies (with keep_observations, `observations` above still references them)
        return observed

    def evaluate_round(self, trained: Any, requests: dict[int, Any], seed: int, stage: str = "all") -> list[Any]:
        """The on-device queries of one seed; under federation.shuffle the server cannot name a client's rows:
        every node, no rows."""
        if self.cfg.federation.shuffle:
            requests = {int(n): np.zeros(0, np.int64) for n in self.nodes}
        return evaluate_on_device(self.phase_b, self.cfg, trained, requests, self.snapshot, seed, stage)

    def evaluate_everywhere(self, trained: Any, requests: dict[int, np.ndarray], seed: int, stage: str = "all"
                            ) -> list[Any]:
        """The on-device queries without row ids (``server.aggregate = secagg``: the server does not know which
        node holds which partition): the model goes to every node, each answers for all its test users or
        refuses (fewer than client.min-count of them)."""
        del requests
        return evaluate_on_device(self.phase_b, self.cfg, trained, {int(n): np.zeros(0, np.int64) for n in self.nodes},
                                  self.snapshot, seed, stage)

    def sum_round(self, request: SumRequest, clipping_range: Callable[[StatsLayout], float]
                  ) -> Callable[[int, StatsLayout, int], SecureSum]:
        """``server.aggregate = secagg``: one secure sum of the clients' noisy statistics per call
        (`fl_privtext.federation.secagg_stats.secagg_sum_round`), over this point's grid below Phase A's."""
        return secagg_sum_round(self.eaves, self.nodes, self.cfg, self.snapshot, self.encoder, request=request,
                                clipping_range=clipping_range)

    def keep(self, point: dict[str, Any]) -> None:
        """``keep_observations``: the eavesdropper's raw observations and the server's own queries of this point."""
        if self.keep_observations:
            point["observations"] = self.observations
            point["sent"] = self.sent


PointRunner = Callable[[PointTransport], Job]  # one point's computation order (the orchestrator's)


def _now(job: Job) -> dict[str, Any]:
    return job()


def serve(grid: Grid, points: Sequence[ExperimentConfig], *, run_point: PointRunner,
          snapshots: Sequence[str] | None = None, keep_observations: bool = False,
          on_result: Callable[[int, dict[str, Any]], None] | None = None, submit: Callable[[Job], Any] = _now,
          on_round: Callable[[int, int, int, Round, float], None] | None = None, max_pending: int = 1,
          settle: Callable[[], None] | None = None) -> list[Any]:
    """Serve every experiment point (config x seeds) through the same federation; one result per point.

    A sweep passes many points, paying Flower/Ray start-up once. Every point is a full federated pass: clients
    privatize and upload anew, the server trains on what it receives, the eavesdropper attacks what it saw; the
    order of that is ``run_point``'s (the orchestrator, `fl_privtext.pipeline.federated.serve_point`), which gets
    the point's transport and returns the computation still to do.
    The server's computation of a point (training, attacks) is handed to ``submit``: by default it runs at once
    and the result dict is returned; ``fl-privtext run`` passes an executor's ``submit`` (Futures are returned), so
    it overlaps the next point's uploads and, after the last point, Flower's shutdown.
    ``snapshots[i]`` names the client-data snapshot of point i (see `fl_privtext.client.ClientData.save`).
    ``keep_observations`` adds the eavesdropper's raw observations to each result (for inspection in tests).
    ``on_round(point, seed, round, Round, seconds)`` hears about every round as soon as it is in.
    ``settle()`` runs in the last point's job before its computation (`fl_privtext.federation.simulation.simulate`:
    until the simulation is down, so that the attacks do not allocate beside Ray's exiting processes).

    Memory: a point's uploads (every seed's, as received and as observed) live until its computation is done. When
    ``submit`` returns Futures and the computation is slower than the traffic (OME's 3,840-bit uploads and 10 server
    epochs per seed), a sweep would otherwise collect point after point ahead of the server and keep all their
    uploads queued (GBs per point on SNIPS). So the traffic of point i waits until at most ``max_pending`` earlier
    points are still computing or queued: the next point's traffic still overlaps the server's work.
    """
    if max_pending < 0:
        raise ValueError(f"max_pending must be >= 0 points whose computation may be pending; got {max_pending}.")
    shuffler = ShufflingGrid(grid, on=False)  # the shuffler sits below the server's (and eavesdropper's) Grid
    eaves = EavesdroppingGrid(shuffler, record_sent=keep_observations)
    out: list[Any] = []
    for i, cfg in enumerate(points):
        if i > max_pending and isinstance(out[i - 1 - max_pending], Future):
            out[i - 1 - max_pending].result()  # jobs run in order: every earlier point is computed (and released)
        hook = None if on_round is None else (
            lambda seed, rnd, r, dt, i=i: on_round(i, seed, rnd, r, dt))  # type: ignore[misc]
        evaluate = run_point(transport(eaves, cfg, snapshot=snapshots[i] if snapshots else "",
                                       keep_observations=keep_observations, on_round=hook, shuffler=shuffler))

        def job(i: int = i, evaluate: Job = evaluate) -> dict[str, Any]:
            if settle is not None and i == len(points) - 1:
                settle()
            result = evaluate()
            if on_result is not None:
                on_result(i, result)
            return result

        out.append(submit(job))
    return out


def transport(eaves: EavesdroppingGrid, cfg: ExperimentConfig, *, snapshot: str = "", keep_observations: bool = False,
              on_round: OnRound | None = None, shuffler: ShufflingGrid | None = None) -> PointTransport:
    """One point's transport, once its ``federation.num-clients`` nodes are connected."""
    if cfg.federation.shuffle and shuffler is None:
        raise ValueError("federation.shuffle = true needs the shuffler below the server's Grid (serve() builds it).")
    nodes = wait_for_nodes(eaves, cfg.federation.num_clients)
    return PointTransport(eaves, cfg, nodes, snapshot=snapshot, shuffler=shuffler,
                          keep_observations=keep_observations, on_round=on_round)


def server_app(main: Callable[[Grid, Context], None]) -> ServerApp:
    """A ServerApp whose main is ``main`` (the orchestrator's: `fl_privtext.pipeline.federated`)."""
    app = ServerApp()
    app.main()(main)
    return app
