"""One experiment point, independent of the transport: the orchestrator calls the stages in order.

Per seed: collect every round (`collect_point`, through the transport's ``collect_round``), the server trains on
what it received (`train_point`, `fl_privtext.server`), the on-device protocol (`on_device`:
`fl_privtext.server.ondevice` over the transport's ``evaluate_round``, beside the referee's exact figure
`fl_privtext.report.referee`), the eavesdropper attacks what it observed (`fl_privtext.attacks.eavesdropper`), and the
point's summaries (`fl_privtext.report.accounting`, `fl_privtext.report.summaries`). `fl_privtext.federation` is
the Flower transport (`fl_privtext.pipeline.federated` orders it); `run_plain` is the plain in-process loop
(`benchmarks/bench_federation.py`, the referee's reference). Both paths privatize, train and attack identically
for a given seed.

Randomness: roles and shards depend on ``run.seed`` only; the server's and attackers' training on
``(seed, "server")`` / ``(seed, "attack", attribute)``. The clients' privatization randomness is theirs alone
(`fl_privtext.client.client_generator`): secret OS entropy, or ``run.client-seed`` in the reproducible mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from fl_privtext.attacks.eavesdropper import attack
from fl_privtext.client import (
    Refused,
    client_generator,
    client_upload,
    mechanism_for,
    merge_uploads,
    point_key,
    same_uploads,
)
from fl_privtext.client.ondevice import on_device_answer, stage_keys
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import SYNTHETIC_DATASETS
from fl_privtext.datafiles import spill_dir
from fl_privtext.memory import drop_dataset_pages, drop_mapped_pages
from fl_privtext.pipeline.preparation import Prepared, prepare
from fl_privtext.progress import progress_bar
from fl_privtext.public import PublicSpec
from fl_privtext.report.accounting import privacy_summary
from fl_privtext.report.referee import exact_candidates, exact_on_device
from fl_privtext.report.summaries import (
    faults,
    ledger_summary,
    placement_of,
    randomness_of,
    referee_rows,
    sent_rows,
    shuffled,
    shuffled_cohort_users,
)
from fl_privtext.server import Trained, train_server
from fl_privtext.server.ondevice import OnDeviceRound, on_device_requests, on_device_seed, shipped_model
from fl_privtext.threads import driver_threads, limited, parallel_map
from fl_privtext.traffic import Collected, CollectRound, Observed, OnRound, Round

__all__ = ["Collected", "collect_point", "evaluate_point", "on_device", "on_device_wanted", "plain_on_device", "run_plain",
           "run_point", "train_point"]


T = TypeVar("T")
R = TypeVar("R")


def collect_point(cfg: ExperimentConfig, collect_round: CollectRound, eavesdrop: Callable[[], Observed],
                  *, start_seed: Callable[[], None] = lambda: None, on_round: OnRound | None = None
                  ) -> list[Collected]:
    """The communication phase of one point: every round of every seed through ``collect_round``;
    ``on_round`` hears about each round as soon as it is in (per-round metrics, experiment tracking)."""
    seeds = [cfg.run.seed + s for s in range(cfg.run.seeds)]
    # a bar on a terminal / widget notebook, plain periodic lines in a log file or CI (fl_privtext.progress)
    bar = progress_bar(total=len(seeds) * cfg.federation.rounds, desc="rounds", unit="round",
                       enabled=cfg.run.progress, leave=False)
    out: list[Collected] = []
    refused_rounds: list[dict[str, Any]] = []  # rounds every client refused (the run stopped there)
    stopped = False
    for seed in seeds:
        if stopped:
            break
        start_seed()
        t0 = time.perf_counter()
        rounds: list[Round] = []
        for rnd in range(cfg.federation.rounds):
            t_round = time.perf_counter()
            got = collect_round(seed, rnd)
            if got.all_refused:  # every client's policy or ledger refused: no later round or repetition is asked
                stopped = True
                refused_rounds.append({"seed": seed, "round": rnd, "failures": got.failures})
                break
            rounds.append(got)
            if on_round is not None:
                on_round(seed, rnd, rounds[-1], time.perf_counter() - t_round)
            bar.update()
        if not rounds:  # nothing arrived in this repetition: drop it (the refusal is kept with the last one)
            if out:
                out[-1] = replace(out[-1], refused=out[-1].refused + tuple(refused_rounds))
            break
        received = merge_uploads([r.uploads for r in rounds])  # one round: its own arrays, not a copy
        input_dim = max(r.input_dim for r in rounds)
        observed = eavesdrop()
        if not same_uploads(observed.uploads, received):
            raise RuntimeError("The eavesdropper's record differs from what the server received.")
        # the same content, checked: keep one copy (at a million users each copy of the uploads is ~0.8 GB)
        observed = replace(observed, uploads=received)
        out.append(Collected(seed, received, observed, input_dim, time.perf_counter() - t0, tuple(rounds),
                             refused=tuple(refused_rounds)))
        refused_rounds = []
    bar.close()
    if not out:
        reasons = "; ".join(dict.fromkeys(f["reason"] for r in refused_rounds for f in r["failures"]))
        raise ValueError(f"Every client refused the first round, nothing was released ({reasons}).")
    return out


def train_point(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected]) -> list[Trained]:
    """The server's task model of every seed, trained on what it received (per-upload evaluation included); the
    seeds side by side as `evaluate_point`'s (`_over_seeds`: the same numbers as the serial loop). Why: on the
    Flower path this runs while the federation waits for the on-device round (the actors are idle), and serially
    it kept one of two cores busy: the published OME's 3,840-bit uploads trained for 482 s of a 947 s frontier
    point on one core. ``train_s`` is each seed's own wall time (they overlap)."""

    def train(c: Collected) -> Trained:
        t0 = time.perf_counter()
        seen = c.received["rows"]
        trained = train_server(prep, c.received["features"], c.received["labels"], referee_rows(c, seen), c.seed,
                               cfg.server, PublicSpec.of(cfg), input_dim=c.input_dim,
                               seen=seen, spill=spill_dir(cfg.extractor.cache_dir))
        trained.utility["train_s"] = time.perf_counter() - t0
        for k in ("labels", "rows"):  # on the Flower path maps of the round's spill: their pages go back (#38)
            drop_mapped_pages(c.received[k])
        drop_dataset_pages(prep.ds)  # and those of the columns it read (users, roles, labels: `TextDataset.hold`)
        return trained

    return _over_seeds(cfg, train, list(collected), "fl-privtext-train")


def _over_seeds(cfg: ExperimentConfig, fn: Callable[[T], R], items: Sequence[T], name: str) -> list[R]:
    """``[fn(x) for x in items]`` (one item per seed) inside the driver's share of the cores (`limited`, in both
    paths), the seeds side by side where that share is one thread (`parallel_map`: the same numbers as the
    serial loop)."""
    threads = driver_threads(cfg.run, cfg.federation)
    with limited(threads):
        return parallel_map(fn, items, threads, name=name)


def on_device_wanted(prep: Prepared, cfg: ExperimentConfig) -> bool:
    return bool(cfg.server.on_device) and len(prep.ds.label_names) > 0


def on_device(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected], trained: Sequence[Trained],
              evaluate_round: OnDeviceRound) -> list[dict[str, Any]]:
    """The on-device protocol of every seed (`fl_privtext.ondevice`): ``evaluate_round`` ships the model to the
    test clients and returns their replies (randomized-response answers, `fl_privtext.client.ondevice`; refusals;
    confusion counts of an old client); the server debiases and sums them (`on_device_seed`). Beside the server's
    estimate, the referee's exact figure of the model it shipped (``exact``, `exact_on_device`: simulation only)."""
    out = []
    for c, t in zip(collected, trained, strict=True):
        requests = on_device_requests(prep, c)
        if t.candidates:  # the clients choose the model shipped for the figure: the referee waits for their answers
            result = on_device_seed(t, requests, c.seed, evaluate_round, prep.ds.user_index.reshape(-1))
            result["exact"] = exact_on_device(prep, cfg, shipped_model(t, result), t.majority_class, c.seed)
        else:  # the server's own model: the referee's exact figure of it while the clients answer (the same numbers)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fl-privtext-referee") as pool:
                exact = pool.submit(exact_on_device, prep, cfg, t.model, t.majority_class, c.seed)
                result = on_device_seed(t, requests, c.seed, evaluate_round, prep.ds.user_index.reshape(-1))
                result["exact"] = exact.result()
        exact_candidates(prep, cfg, t, result, c.seed)
        drop_dataset_pages(prep.ds)  # the columns the requests and the referee read (`TextDataset.hold`)
        out.append(result)
    return out



def _evaluate_seed(prep: Prepared, cfg: ExperimentConfig, c: Collected, trained: Trained,
                   on_device_result: dict[str, Any] | None) -> dict[str, Any]:
    """One seed: the server's evaluation (already trained), the on-device result if any, and the eavesdropper's
    attack on what it observed."""
    up = c.received
    utility = dict(trained.utility)
    train_s = utility.pop("train_s", 0.0)
    on_device_s = 0.0
    if utility.get("available", True):
        utility["on_device"] = ({k: v for k, v in on_device_result.items() if not k.startswith("_")}
                                if on_device_result is not None else
                                {"available": False, "reason": "server.on-device = false" if not
                                 cfg.server.on_device else "not run on this path"})
        on_device_s = utility["on_device"].pop("seconds", 0.0)
    t2 = time.perf_counter()
    observed = c.observed.uploads  # checked against what the server received when it was collected
    attacks: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if cfg.attack.enabled:
        mech = mechanism_for(PublicSpec.of(cfg), c.input_dim)
        attacks, extra = attack(prep, observed["features"], referee_rows(c, observed["rows"]), c.seed, cfg,
                                labels=observed["labels"], mechanism=mech, report=mech.report(),
                                seen=observed["rows"] if shuffled(c) else None)
        drop_mapped_pages(observed["features"])  # a mapped upload file read whole: its pages go until read again
        drop_dataset_pages(prep.ds)  # and the dataset's columns the attack read (`TextDataset.hold`)
    t3 = time.perf_counter()
    return {
        "seed": c.seed, "utility": utility, "attacks": attacks, "attacks_extra": extra,
        "uploads_received": len(up["rows"]), "uploads_observed": len(observed["rows"]),
        "messages_observed": c.observed.messages, "bytes_observed": c.observed.nbytes,
        "output_dim": int(up["features"].shape[1]),
        "timing": {"federation_s": c.federation_s, "train_s": train_s, "on_device_s": on_device_s,
                   "attack_s": t3 - t2},
    }


def evaluate_point(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected],
                   trained: Sequence[Trained] | None = None,
                   on_device_results: Sequence[dict[str, Any]] | None = None, *,
                   phase_a_central: dict[str, Any] | None = None) -> dict[str, Any]:
    """The computation phase of one point: per seed, the server trains and evaluates on what it received (unless
    ``trained`` already holds it, with ``on_device_results`` of the on-device protocol) and the eavesdropper
    attacks what it observed (checked to be the same uploads). ``phase_a_central``: Phase A's ``central``
    guarantee (SecAgg+ with client noise), charged to its users instead of inf (`fl_privtext.report.accounting`)."""
    t_start = time.perf_counter()
    trained = list(trained) if trained is not None else train_point(prep, cfg, collected)
    if len(trained) != len(collected):
        raise ValueError(f"evaluate_point needs one trained model per seed; got {len(trained)} for {len(collected)}.")
    per_seed = _over_seeds(cfg, lambda i: _evaluate_seed(prep, cfg, collected[i], trained[i],
                                                        None if on_device_results is None else on_device_results[i]),
                          range(len(collected)), "fl-privtext-seed")
    report = mechanism_for(PublicSpec.of(cfg), collected[-1].input_dim).report()
    releases = cfg.federation.rounds if cfg.federation.schedule == "repeat" else 1
    released = [sent_rows(prep, cfg.federation, c) for c in collected]
    od_rows = [(rows, eps) for r in (on_device_results or []) for rows, eps in r.get("_charged", [])]
    # Phase A's updates and validation metrics concern the train and aux users (never test users)
    phase_a = np.flatnonzero(prep.roles != "test") if cfg.train.rounds > 0 else None
    cohort = shuffled_cohort_users(prep, cfg.federation) if cfg.federation.shuffle else None
    privacy = privacy_summary(report, cfg.privacy, cfg.federation, cfg.train, prep.ds.user_index,
                              len(prep.ds.label_names), released, releases,
                              on_device_rows=od_rows, phase_a_rows=phase_a, phase_a_central=phase_a_central,
                              shuffled_users=cohort)
    privacy["randomness"] = randomness_of(cfg.run.randomness, collected)
    privacy["ledger"] = ledger_summary(collected, on_device_results or [])
    faulted = faults(prep, cfg.federation, collected)
    drop_dataset_pages(prep.ds)  # the columns the accounting and the fault summary read (`TextDataset.hold`)
    return {
        "placement": placement_of(collected),
        "extractor_identity": prep.extractor.identity(),
        "config": cfg, "per_seed": per_seed, "num_users": prep.ds.num_users,
        "num_records": len(prep.ds), "privacy": privacy, "faults": faulted,
        "dataset": {"name": prep.ds.name, "fingerprint": prep.ds.fingerprint, "label_names": list(prep.ds.label_names),
                    "synthetic": prep.ds.name in SYNTHETIC_DATASETS,
                    "attributes": {a.name: {"kind": a.kind, "classes": list(a.classes)} for a in prep.ds.attributes}},
        # time this point kept the server busy: communication plus computation (not time spent queued)
        "server_s": sum(c.federation_s for c in collected) + time.perf_counter() - t_start,
    }


def run_point(prep: Prepared, cfg: ExperimentConfig, collect_round: CollectRound, eavesdrop: Callable[[], Observed],
              *, start_seed: Callable[[], None] = lambda: None,
              evaluate_round: OnDeviceRound | None = None, on_round: OnRound | None = None) -> dict[str, Any]:
    """All seeds of one experiment point: collect every round, train/evaluate on what the server received (and on
    the test clients through ``evaluate_round``), attack what the eavesdropper observed. The transport (Flower or
    a plain loop) is in ``collect_round`` and ``evaluate_round``; ``on_round`` as in `collect_point`."""
    collected = collect_point(cfg, collect_round, eavesdrop, start_seed=start_seed, on_round=on_round)
    trained = train_point(prep, cfg, collected)
    results = None
    if evaluate_round is not None and on_device_wanted(prep, cfg):
        results = on_device(prep, cfg, collected, trained, evaluate_round)
    return evaluate_point(prep, cfg, collected, trained, results)


def plain_on_device(prep: Prepared, cfg: ExperimentConfig, trained: Trained, requests: dict[int, np.ndarray],
                    seed: int, stage: str = "all") -> list[dict[str, Any]]:
    """The plain loops' on-device round: each requested client's own answer (`fl_privtext.client.ondevice`) under
    the driver's [client] section, the same stream as the Flower clients' (no ledger on these paths: their clients
    are the driver itself); a refusal is listed as the Flower path lists it."""
    assert trained.model is not None
    out: list[dict[str, Any]] = []
    for c in requests:
        if not cfg.client.on_device:
            out.append({"node": c, "refused": "refused: client.on-device = false"})
            continue
        g = client_generator(cfg.run.client_seed, "on-device", *stage_keys(stage), point_key(cfg), seed, c)
        model = list((trained.candidates or {}).values()) if stage == "select" else trained.model
        try:
            out.append({"node": c, "answer": on_device_answer(prep.client, c, model, cfg, cfg.client.count_epsilon,
                                                              cfg.client.min_count, g, stage=stage)})
        except Refused as exc:
            out.append({"node": c, "refused": str(exc)})
    return out


def run_plain(cfg: ExperimentConfig, prep: Prepared | None = None, *, on_round: OnRound | None = None
              ) -> dict[str, Any]:
    """The same point as a plain in-process loop over clients (no Flower, no Ray): the benchmark's baseline, the
    reference the federated path must reproduce exactly, and the referee's no-privacy reference of a run
    (`fl_privtext.pipeline.runner.no_privacy_reference`: computed without any client)."""
    if cfg.federation.shuffle:  # results would describe unshuffled traffic under a shuffled account
        raise ValueError("federation.shuffle = true runs only through Flower (fl-privtext run): the plain loop has "
                         "no shuffler; set it to false here.")
    prep = prep or prepare(cfg, features="extract", progress=cfg.run.progress)
    last: dict[str, Any] = {}

    def collect_round(seed: int, rnd: int) -> Round:
        ups = [client_upload(prep.client, c, rnd, seed, cfg, client_seed=cfg.run.client_seed)
               for c in range(cfg.federation.num_clients)]
        senders = {c: u.rows for c, u in enumerate(ups) if len(u.rows)}
        ups = [u for u in ups if len(u.rows)]
        arrays = merge_uploads([u.arrays() for u in ups])
        last.setdefault("rounds", []).append((arrays, len(ups)))
        return Round(arrays, max(u.input_dim for u in ups), seeded=[cfg.run.client_seed is not None] * len(ups),
                     senders=senders)

    def evaluate_round(trained: Trained, requests: dict[int, np.ndarray], seed: int, stage: str = "all"
                       ) -> list[Any]:
        return plain_on_device(prep, cfg, trained, requests, seed, stage)

    def eavesdrop() -> Observed:
        rounds = last.pop("rounds")
        uploads = merge_uploads([a for a, _ in rounds])
        return Observed(uploads=uploads, messages=sum(n for _, n in rounds),
                        nbytes=sum(v.nbytes for a, _ in rounds for v in a.values()))

    return run_point(prep, cfg, collect_round, eavesdrop, evaluate_round=evaluate_round, on_round=on_round)
