"""The untrusted server: asks every client to upload, trains the task model, and hosts the eavesdropper.

`serve` is the whole server loop; `app` is the ServerApp for `flwr run .` (config from the run config);
`fl_privtext.federation.runner` builds an equivalent ServerApp around `serve` for `fl-privtext run`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fl_privtext import pipeline
from fl_privtext.client import merge_uploads
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.eavesdropper import EavesdroppingGrid, numpy_view
from fl_privtext.federation.faults import one_line
from fl_privtext.federation.inflight import send_windowed, window_size
from fl_privtext.federation.shuffler import SHUFFLER_NODE_ID, ShufflingGrid

app = ServerApp()
log = logging.getLogger(__name__)


def _wait_for_nodes(grid: Grid, n: int, timeout_s: float = 600.0) -> list[int]:
    t0 = time.monotonic()
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes[:n] if len(nodes) == n else nodes
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"Only {len(nodes)} of {n} SuperNodes connected within {timeout_s:.0f} s.")
        time.sleep(0.05)


def _query(cfg: ExperimentConfig, snapshot: str, **records: ConfigRecord | ArrayRecord) -> RecordDict:
    """A query's content: the experiment config, where the client data lies (simulation only), extra records."""
    # the request: never the clients' [client] policy (theirs alone; the server holds only defaults it never sends)
    content: dict[str, ConfigRecord | ArrayRecord] = {"config": ConfigRecord(
        {k: v for k, v in cfg.to_flat().items() if not k.startswith("client.")})}
    if snapshot:
        content["client-data"] = ConfigRecord({"snapshot": snapshot})
    return RecordDict({**content, **records})


def collect(grid: EavesdroppingGrid, nodes: Sequence[int], cfg: ExperimentConfig, seed: int,
            rnd: int, snapshot: str = "", shuffler: ShufflingGrid | None = None) -> pipeline.Round:
    """One round: query every node for its users' uploads; return what arrived within
    ``federation.round-timeout`` s. A client that fails (an exception, a crashed actor) or does not answer in time
    is listed in ``Round.failures`` and the round goes on without it; a round with no upload at all is an error.

    The query carries the point's configuration and (seed, round), never anything a client's noise derives from.
    At most ``federation.max-in-flight`` queries are pending at once (`fl_privtext.federation.inflight`).

    ``shuffler`` (federation.shuffle): the replies arrive shuffled, one sender-free message per cohort
    (`fl_privtext.federation.shuffler`); the round's ``revealed`` record ids and ``senders`` come from the
    shuffler's key, for the platform's scoring and accounting only."""
    msgs = (
        Message(_query(cfg, snapshot, task=ConfigRecord({"seed": seed, "round": rnd})), dst_node_id=node,
                message_type="query.upload")
        for node in nodes
    )
    timeout = cfg.federation.round_timeout or None
    shuffled = shuffler is not None and shuffler.on
    if shuffled:  # the shuffler releases a round only once it holds all of it (its own window below it)
        assert shuffler is not None
        shuffler.window = window_size(cfg.federation.max_in_flight)
        replies = list(grid.send_and_receive(msgs, timeout=timeout))
    else:
        replies = send_windowed(grid, msgs, window=window_size(cfg.federation.max_in_flight), timeout=timeout)
    failures: list[dict[str, Any]] = []
    good: list[Message] = []
    for r in replies:
        if r.has_error():
            node = int(r.metadata.src_node_id)
            log.debug("client node %d failed; full trace:\n%s", node, r.error.reason)
            failures.append({"node": node, "kind": failure_kind(r), "reason": one_line(str(r.error.reason))})
        else:
            good.append(r)
    answered = {int(r.metadata.src_node_id) for r in replies}
    for r in good:  # a shuffled round names its participants, not who sent which report
        if int(r.metadata.src_node_id) == SHUFFLER_NODE_ID and "shuffle" in r.content.array_records:
            answered.update(int(n) for n in r.content.array_records["shuffle"]["contributors"].numpy())
    failures.extend({"node": int(n), "kind": "timeout", "reason": f"no reply within {timeout} s"}
                    for n in nodes if int(n) not in answered)
    if not good and failures and all(f["kind"] == "refused" for f in failures):  # the clients' policy said no
        log.warning("round %d: every client refused (%s)", rnd, failures[0]["reason"][:300])
        return pipeline.Round(merge_uploads([]), 0, failures=failures)
    if not good:
        reasons = "; ".join(f["reason"] for f in failures[:3])
        raise RuntimeError(f"Round {rnd}: none of the {len(nodes)} clients delivered an upload ({reasons}).")
    if failures:
        log.warning("round %d: %d of %d client(s) failed; going on with the replies that arrived", rnd,
                    len(failures), len(nodes))
        for f in failures[:10]:  # one line per fault: node, kind, reason
            log.warning("round %d: client node %d %s: %s", rnd, f["node"], f["kind"], f["reason"])
    parts = [{k: numpy_view(a) for k, a in r.content.array_records["upload"].items()} for r in good]
    stats = [r.content.metric_records["stats"] for r in good]
    where: list[Any] = [r.content.config_records.get("placement") or {} for r in good]
    placement = [{"node": int(r.metadata.src_node_id), "host": str(w.get("host", "")),
                  "ray_node": str(w.get("ray-node", ""))} for r, w in zip(good, where, strict=True)]
    senders = {int(r.metadata.src_node_id): p["rows"] for r, p in zip(good, parts, strict=True) if len(p["rows"])}
    merged = merge_uploads(parts)
    revealed = None
    if shuffled:
        assert shuffler is not None
        senders = {n: rows for n, rows in shuffler.sent_by.items() if len(rows)}  # the referee's key
        revealed = shuffler.reveal(merged["rows"])
        placement = []  # per-reply placement is dropped by the shuffler
    return pipeline.Round(merged, max(int(s["input_dim"]) for s in stats),  # type: ignore[arg-type]
                          failures=failures, seeded=[bool(s.get("seeded", 0)) for s in stats], senders=senders,
                          placement=placement, ledger=[ledger_of(r) for r in good if "ledger" in
                                                       r.content.config_records or not shuffled],
                          revealed=revealed)


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


def evaluate_on_device(grid: Grid, cfg: ExperimentConfig, trained: pipeline.Trained,
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
    msgs = [Message(_query(cfg, snapshot, **models, task=task,
                           rows=ArrayRecord({"rows": Array(np.asarray(rows, np.int64))})),
                    dst_node_id=node, message_type="query.evaluate")
            for node, rows in requests.items()]
    replies = send_windowed(grid, msgs, window=window_size(cfg.federation.max_in_flight),
                            timeout=cfg.federation.round_timeout or None)
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


def _now(job: Job) -> dict[str, Any]:
    return job()


def serve(grid: Grid, points: Sequence[ExperimentConfig], *, snapshots: Sequence[str] | None = None,
          keep_observations: bool = False, on_result: Callable[[int, dict[str, Any]], None] | None = None,
          submit: Callable[[Job], Any] = _now,
          on_round: Callable[[int, int, int, pipeline.Round, float], None] | None = None,
          max_pending: int = 1) -> list[Any]:
    """Run every experiment point (config x seeds) through the same federation; one result per point.

    A sweep passes many points, paying Flower/Ray start-up once. Every point is a full federated pass: clients
    privatize and upload anew, the server trains on what it receives, the eavesdropper attacks what it saw.
    The server's computation of a point (training, attacks) is handed to ``submit``: by default it runs at once
    and the result dict is returned; ``fl-privtext run`` passes an executor's ``submit`` (Futures are returned), so
    it overlaps the next point's uploads and, after the last point, Flower's shutdown.
    ``snapshots[i]`` names the client-data snapshot of point i (see `fl_privtext.client.ClientData.save`).
    ``keep_observations`` adds the eavesdropper's raw observations to each result (for inspection in tests).
    ``on_round(point, seed, round, Round, seconds)`` hears about every round as soon as it is in.

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
        evaluate = serve_point(eaves, cfg, snapshot=snapshots[i] if snapshots else "",
                               keep_observations=keep_observations, on_round=hook, shuffler=shuffler)

        def job(i: int = i, evaluate: Job = evaluate) -> dict[str, Any]:
            result = evaluate()
            if on_result is not None:
                on_result(i, result)
            return result

        out.append(submit(job))
    return out


def serve_point(eaves: EavesdroppingGrid, cfg: ExperimentConfig, *, snapshot: str = "",
                keep_observations: bool = False, on_round: pipeline.OnRound | None = None,
                shuffler: ShufflingGrid | None = None) -> Job:
    """One experiment point's traffic (every seed, every round); returns the computation still to do on it:
    train and evaluate on what the server received, attack what the eavesdropper observed.

    ``federation.shuffle``: ``shuffler`` (below ``eaves``) shuffles this point's upload rounds per cohort; the
    on-device evaluation then names no rows and goes to every node (each client answers for its own test users,
    `fl_privtext.client.ondevice`, or refuses). ``server.aggregate = secagg``: no uploads at all, one secure sum
    of noisy class statistics per seed (`fl_privtext.federation.secagg_stats`)."""
    if cfg.federation.shuffle and shuffler is None:
        raise ValueError("federation.shuffle = true needs the shuffler below the server's Grid (serve() builds it).")
    nodes = _wait_for_nodes(eaves, cfg.federation.num_clients)
    if cfg.server.aggregate == "secagg":  # Phase B as one secure sum of noisy class statistics per seed
        from fl_privtext.federation.secagg_stats import serve_secagg_point

        return serve_secagg_point(eaves, cfg, nodes, snapshot=snapshot)
    prep = pipeline.prepare(cfg, features="none")  # the server knows users and roles, never texts or features
    if shuffler is not None:
        shuffler.configure(on=cfg.federation.shuffle, cohorts=prep.roles if cfg.federation.shuffle else None,
                           first_pseudonym=len(prep.roles) if cfg.federation.shuffle else 0)
    observations: list[Any] = []
    sent: list[Any] = []
    training, phase_b = _phase_a(eaves, cfg, keep_observations)

    def collect_round(seed: int, rnd: int) -> pipeline.Round:
        return collect(phase_b, nodes, cfg, seed, rnd, snapshot, shuffler)  # type: ignore[arg-type]

    def eavesdrop() -> pipeline.Observed:
        if keep_observations:
            observations.extend(eaves.observations)
            sent.extend(eaves.sent)
            eaves.sent.clear()
        observed = pipeline.Observed(uploads=eaves.uploads(), messages=len(eaves.observations),
                                     nbytes=eaves.bytes_observed)
        eaves.reset()  # `observed` holds the seed's uploads (compared with what the server received): drop the
        # per-message copies (with keep_observations, `observations` above still references them)
        return observed

    collected = pipeline.collect_point(cfg, collect_round, eavesdrop, start_seed=eaves.reset,
                                       on_round=on_round)
    trained = on_device = None
    if pipeline.on_device_wanted(prep, cfg):  # the model must reach the clients while the federation runs
        trained = pipeline.train_point(prep, cfg, collected)
        def ask(t: pipeline.Trained, req: dict[int, Any], seed: int, stage: str = "all") -> list[Any]:
            if cfg.federation.shuffle:  # the server cannot name a client's rows: every node, no rows
                req = {int(n): np.zeros(0, np.int64) for n in nodes}
            return evaluate_on_device(phase_b, cfg, t, req, snapshot, seed, stage)  # type: ignore[arg-type]

        on_device = pipeline.on_device(prep, cfg, collected, trained, ask)

    def evaluate() -> dict[str, Any]:
        point = pipeline.evaluate_point(prep, cfg, collected, trained, on_device,
                                        phase_a_central=training.get("central"))
        point["training"] = training
        if keep_observations:
            point["observations"] = observations
            point["sent"] = sent  # the server's own queries of this point
        return point

    return evaluate


def _phase_a(eaves: EavesdroppingGrid, cfg: ExperimentConfig, keep: bool) -> tuple[dict[str, Any], Grid]:
    """Phase A (train.rounds > 0): train the encoder federatedly; Phase B's queries then carry it."""
    from fl_privtext.federation.training import InjectingGrid, train_phase, training_off

    if cfg.train.rounds == 0:
        return training_off(cfg), eaves
    training = train_phase(eaves, cfg, keep_updates=keep)
    return training, InjectingGrid(eaves, {"encoder": training.pop("encoder_arrays")})


@app.main()
def main(grid: Grid, context: Context) -> None:
    """`flwr run .`: the run config (pyproject [tool.flwr.app.config] + overrides) is the experiment config."""
    from fl_privtext.federation.runner import REFEREE_SOURCE
    from fl_privtext.report import finalize

    if any(str(k).startswith("client.") for k in context.run_config):
        raise ValueError("The [client] policy must not be in the run config: it is the clients' own. Give it to the "
                         "SuperNodes instead (--node-config 'client.max-epsilon=4 client.on-device=true').")
    cfg = ExperimentConfig.from_flat(dict(context.run_config))
    if cfg.run.client_seed is not None:
        raise ValueError("run.client-seed must not be in the run config: the ServerApp would hold the seed of the "
                         "clients' noise. Give it to the SuperNodes instead (--node-config 'client-seed=N', or the "
                         "FL_PRIVTEXT_CLIENT_SEED environment variable of the simulation).")
    t0 = time.perf_counter()
    (served,) = serve(grid, [cfg])
    baseline, skipped = _referee_baseline(cfg)
    out = finalize(served, cfg, total_s=time.perf_counter() - t0, output=cfg.run.output or None,
                   baseline=baseline, baseline_source=REFEREE_SOURCE, baseline_skipped=skipped)
    log.warning("fl-privtext: results written to %s", os.path.abspath(out["output_dir"]))


def _referee_baseline(cfg: ExperimentConfig) -> tuple[dict[str, Any] | None, str]:
    """`flwr run .`'s no-privacy reference: the SuperNodes serve only the private point (a client that held a
    no-privacy entry would hand its clean data to any server that asks), so the reference is the referee's own
    computation on the same data, without clients (`fl_privtext.pipeline.run_plain`, which the Flower path equals).
    Returns (the point, "") or (None, why not) where the plain loop cannot stand in for the federation."""
    from fl_privtext.federation.runner import baseline_point, plain_blocker

    reference = baseline_point(cfg)
    if reference is None:
        return None, ""
    why = plain_blocker(reference)
    if why:
        msg = f"{why}: the referee's plain loop does not run it, and the SuperNodes serve only the private point"
        log.warning("fl-privtext: no no-privacy reference (%s)", msg)
        return None, msg
    return pipeline.run_plain(reference), ""
