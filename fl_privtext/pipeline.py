"""The framework-free core of an experiment: the data both sides derive, and what the untrusted server does.

`fl_privtext.federation` wraps these functions in Flower apps; `benchmarks/bench_federation.py` calls them in a
plain in-process loop. Both paths therefore privatize, train and attack identically for a given seed.

Randomness: roles and shards depend on ``run.seed`` only; the server's and attackers' training on
``(seed, "server")`` / ``(seed, "attack", attribute)``. The clients' privatization randomness is theirs alone
(`fl_privtext.client.client_generator`): secret OS entropy, or ``run.client-seed`` in the reproducible mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fl_privtext import rng
from fl_privtext.accounting import privacy_summary
from fl_privtext.bootstrap import counts_bootstrap, user_counts
from fl_privtext.client import (  # noqa: F401  UPLOAD_KEYS: re-exported (tests read pipeline.UPLOAD_KEYS)
    UPLOAD_KEYS,
    client_on_device,
    client_upload,
    mechanism_for,
    merge_uploads,
    same_uploads,
    upload_rows,
)
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import SYNTHETIC_DATASETS
from fl_privtext.prepare import Prepared, data_key, load, prepare  # noqa: F401  re-exported (pipeline.prepare)
from fl_privtext.privacy import PrivacyReport
from fl_privtext.privacy.report import json_number
from fl_privtext.progress import progress_bar
from fl_privtext.server import Trained, server_mlp_config, train_and_evaluate, train_server  # noqa: F401
from fl_privtext.server.ondevice_selection import choose
from fl_privtext.threads import driver_threads, limited

# ---- the eavesdropper (attacks live in fl_privtext.attacks; this builds their view from the point's data) ----------


class _PerUpload(Sequence[str]):
    """A dataset column read per upload (lazily: only the texts an attack or its referee asks for)."""

    def __init__(self, column: Sequence[str], rows: np.ndarray):
        self._column, self._rows = column, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        return self._column[int(self._rows[i])]


def _clean_features(prep: Prepared, cfg: ExperimentConfig) -> Callable[[np.ndarray], np.ndarray] | None:
    """Clean representations of rows' texts as the attacker computes them from public texts with the public
    extractor: the extraction cache when present (identical, deterministic), else the extractor itself."""
    feats = prep.features
    if feats is None and prep.extractor is not None:
        try:
            from fl_privtext.extract import EmbeddingCache

            cache = EmbeddingCache(cfg.extractor.cache_dir or None)
            feats = cache.load(cache.key(prep.ds.fingerprint, prep.extractor.identity()))
        except Exception:  # noqa: BLE001 - no cache: extract the public rows below
            feats = None
    if feats is not None:
        src = feats
        return lambda rows: np.asarray(src[np.sort(rows)][np.argsort(np.argsort(rows))], np.float32)
    if prep.extractor is None:
        return None
    texts, pairs = prep.ds.text_column, prep.ds.text_pair_column
    return lambda rows: np.asarray(prep.extractor.extract([texts[i] for i in rows],
                                                          None if pairs is None else [pairs[i] for i in rows],
                                                          progress=False), np.float32)


def attacked_uploads(prep: Prepared, rows: np.ndarray, seed: int, max_aux_users: int) -> np.ndarray | None:
    """Positions of the observed uploads the attack uses: every non-aux upload, and those of at most
    ``max_aux_users`` aux users (a seeded sample of users, ``(seed, "attack", "aux-users")``); None = all of them.
    Bounds the attacker's fits and public-text work, whatever the population size."""
    aux = prep.roles[rows] == "aux"
    users = prep.ds.user_index[rows]
    aux_users = np.unique(users[aux])
    if max_aux_users == 0 or len(aux_users) <= max_aux_users:
        return None
    chosen = np.sort(rng.generator(seed, "attack", "aux-users").choice(aux_users, max_aux_users, replace=False))
    return np.flatnonzero(~aux | np.isin(users, chosen))


def attack(prep: Prepared, features: np.ndarray, rows: np.ndarray, seed: int, cfg: ExperimentConfig, *,
           labels: np.ndarray | None = None, mechanism: Any = None,
           report: PrivacyReport | None = None, seen: np.ndarray | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The eavesdropper on one seed's observed uploads (``features``, ``labels``, ``rows``): every attack of
    `fl_privtext.attacks`, each with its baseline and LDP ceiling. Returns (attacks, attacks_extra).

    ``seen`` (federation.shuffle): the ids the eavesdropper saw on each upload (``rows`` are then the referee's
    record ids): its users are what those ids name (`server_users`: one fresh pseudonym per shuffled report) and
    every upload's sender is the shuffler; the referee scores per-user answers per named user
    (`fl_privtext.attacks.evaluate`).

    ``mechanism`` defaults to the configured one; its report's TRUE worst-case epsilon sets the ceilings."""
    from fl_privtext import attacks

    rows = np.asarray(rows)
    keep = attacked_uploads(prep, rows, seed, cfg.attack.max_aux_users)
    if keep is not None:
        features, rows = features[keep], rows[keep]
        labels = None if labels is None else labels[keep]
        seen = None if seen is None else np.asarray(seen)[keep]
    mech = mechanism if mechanism is not None else mechanism_for(cfg, features.shape[1])
    rep = report if report is not None else mech.report()
    user_index = prep.ds.user_index  # the server's account pseudonyms
    node_of_row = np.zeros(len(prep.ds), np.int64)  # the node that sends each row (a reply's src_node_id)
    for c, shard in enumerate(prep.shards):
        node_of_row[shard] = c
    # With Phase A on, uploads are the trained encoder's output, not the public extractor's: the clean candidates
    # the mechanism-aware attacks compare against would be in another space, so those attacks are not run.
    clean = _clean_features(prep, cfg) if getattr(cfg, "train", None) is None or cfg.train.rounds == 0 else None
    named = user_index.reshape(-1)[rows]
    view, truth = attacks.observe(
        uploads=features, labels=prep.ds.labels[rows] if labels is None else labels,
        users=named if seen is None else server_users(prep, seen),
        senders=node_of_row[rows] if seen is None else np.zeros(len(rows), np.int64),
        named_users=None if seen is None else named, texts=_PerUpload(prep.ds.text_column, rows),
        attributes={spec: prep.ds.attribute(spec.name)[rows] for spec in prep.ds.attributes},
        aux=prep.roles[rows] == "aux", clean=None if clean is None else (lambda idx: clean(rows[idx])),
        mechanism=mech, epsilon=float(rep.epsilon_worst_case), delta=float(rep.delta),
        num_labels=len(prep.ds.label_names), label_epsilon=cfg.privacy.label_epsilon, seed=seed,
        attack=cfg.attack,
        word_vectors=None if clean is None or prep.extractor is None else
        (lambda words: prep.extractor.extract(list(words), progress=False)))
    return attacks.run_attacks(view, truth)


# ---- one experiment point, independent of the transport -------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What the eavesdropper recorded during one seed: the uploads it saw, in how many messages and bytes."""

    uploads: dict[str, np.ndarray]
    messages: int
    nbytes: int


@dataclass(frozen=True)
class Round:
    """One round as the server saw it: the uploads that arrived, and the clients that did not deliver.

    ``failures``: one dict per client without a usable reply: ``{"node": id, "kind": "error" | "timeout",
    "reason": str}``. ``seeded``: per reply, whether the client ran the reproducible mode (its own statement).
    ``senders``: node id -> the record ids its reply carried (where the on-device evaluation is sent).

    ``placement``: per reply, where it was computed: ``{"node": id, "host": str, "ray_node": str}`` ("" = not Ray;
    empty in the plain loop)."""

    uploads: dict[str, np.ndarray]
    input_dim: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    seeded: list[bool] = field(default_factory=list)
    senders: dict[int, np.ndarray] = field(default_factory=dict)
    placement: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)  # per reply: what the client says it charged
    # federation.shuffle: the record id of each upload (the shuffler's key, aligned with uploads["rows"], which
    # then hold what the server saw: pseudonyms, or record ids of the linked aux cohort). The platform's scoring
    # and accounting read it (`referee_rows`); the server's learners and the attacks never do.
    revealed: np.ndarray | None = None

    @property
    def all_refused(self) -> bool:
        """No upload arrived and every client refused (its policy or ledger): the run stops here."""
        return not len(self.uploads["rows"]) and bool(self.failures) and all(
            f["kind"] == "refused" for f in self.failures)


CollectRound = Callable[[int, int], Round]  # (seed, round) -> what arrived
OnRound = Callable[[int, int, Round, float], None]  # (seed, round, what arrived, seconds the round took)


@dataclass(frozen=True)
class Collected:
    """One seed's traffic: what the server received, what the eavesdropper observed, what went missing."""

    seed: int
    received: dict[str, np.ndarray]
    observed: Observed
    input_dim: int
    federation_s: float
    rounds: tuple[Round, ...] = ()
    refused: tuple[dict[str, Any], ...] = ()  # {"seed", "round", "failures"}: a round every client refused


def shuffled(c: Collected) -> bool:
    """Whether this seed's uploads went through the shuffler (federation.shuffle)."""
    return any(r.revealed is not None for r in c.rounds)


def referee_rows(c: Collected, ids: np.ndarray) -> np.ndarray:
    """Record ids of uploads as the server saw them (``ids``): themselves without a shuffler; under
    federation.shuffle, the shuffler's key (`Round.revealed`). For scoring and accounting only."""
    ids = np.asarray(ids, np.int64)
    if not shuffled(c):
        return ids
    seen = np.concatenate([r.uploads["rows"] for r in c.rounds])
    true = np.concatenate([r.revealed if r.revealed is not None else r.uploads["rows"] for r in c.rounds])
    uniq, first = np.unique(seen, return_index=True)
    pos = np.searchsorted(uniq, ids)
    if len(ids) and (pos.max() >= len(uniq) or not np.array_equal(uniq[pos], ids)):
        raise ValueError("referee_rows: an upload id this seed's rounds never carried.")
    return true[first[pos]]


def server_users(prep: Prepared, seen: np.ndarray) -> np.ndarray:
    """The user pseudonym the server can attach to each upload it saw: the account of a record id, or, for a
    shuffled report (an id >= the number of records, `fl_privtext.federation.shuffler`), the report's own fresh
    pseudonym (disjoint from every account: one report, one 'user')."""
    seen = np.asarray(seen, np.int64)
    n = len(prep.ds)
    users = prep.ds.user_index.reshape(-1)
    return np.where(seen >= n, seen, users[np.minimum(seen, n - 1)])


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
    """The server's task model of every seed, trained on what it received (per-upload evaluation included)."""
    out = []
    with limited(driver_threads(cfg.run, cfg.federation)):  # the driver's share of the cores, in both paths
        for c in collected:
            t0 = time.perf_counter()
            seen = c.received["rows"]
            trained = train_server(prep, c.received["features"], c.received["labels"], referee_rows(c, seen), c.seed,
                                   cfg, input_dim=c.input_dim, groups=server_users(prep, seen))
            trained.utility["train_s"] = time.perf_counter() - t0
            out.append(trained)
    return out


def on_device_wanted(prep: Prepared, cfg: ExperimentConfig) -> bool:
    return bool(cfg.server.on_device) and len(prep.ds.label_names) > 0


def on_device_requests(prep: Prepared, c: Collected) -> dict[int, np.ndarray]:
    """Per node, the test users' records it uploaded in this seed (the server knows roles, never features)."""
    test = prep.roles == "test"
    parts: dict[int, list[np.ndarray]] = {}
    for r in c.rounds:
        for node, rows in r.senders.items():
            parts.setdefault(int(node), []).append(rows[test[rows]])
    merged = {node: np.unique(np.concatenate(p)) for node, p in parts.items()}
    return {node: rows for node, rows in merged.items() if len(rows)}


OnDeviceRound = Callable[..., list[Any]]  # (model, rows per node, seed, stage="all") -> replies


def on_device_seed(trained: Trained, requests: dict[int, np.ndarray], seed: int, evaluate_round: OnDeviceRound,
                   users: np.ndarray) -> dict[str, Any]:
    """One seed of the on-device protocol; with ``trained.candidates`` (server.select-on = clients) in two stages:
    the select half of the test users chooses (`fl_privtext.server.ondevice_selection`), the report half
    measures the chosen model. ``users``: the user of each record id (the server's accounting of who was charged,
    by the public half rule). Keys starting with "_" are internal (charged rows, raw replies)."""
    from fl_privtext.client.ondevice import answer_half
    from fl_privtext.ondevice import summarize, summarize_private

    def eps_of(r: dict[str, Any]) -> float:
        return float(np.asarray(r["answer"]["count-epsilon"]).reshape(-1)[0])

    def charged_rows(replies: list[Any], half: int | None) -> list[tuple[np.ndarray, float]]:
        out = []
        for r in replies:
            if "answer" in r and r["node"] in requests:
                rows = requests[r["node"]]
                out.append((rows if half is None else rows[answer_half(users[rows]) == half], eps_of(r)))
        return out

    t0 = time.perf_counter()
    if trained.candidates:
        const = trained.constant_estimate  # the server's own estimate: the constant is not sent
        sent = {n: m for n, m in trained.candidates.items() if const is None or n != "constant"}
        picked = evaluate_round(replace(trained, candidates=sent), requests, seed, "select") if sent else []
        chosen, selection = choose(picked, list(sent), constant=const)
        selection["dropped"] = trained.utility.get("on_device_candidates_dropped", [])  # export not finite
        replies = evaluate_round(replace(trained, model=trained.candidates[chosen]), requests, seed, "report")
        result = {**summarize_private(replies), "learner": chosen, "selection": selection}
        charged = charged_rows(picked, 0) + charged_rows(replies, 1)
        replies = picked + replies
    else:
        replies = evaluate_round(trained, requests, seed)
        if any("counts" in r for r in replies):  # old clients (no policy): confusion counts over the listed rows
            result = summarize([r["counts"] for r in replies if "counts" in r], trained.majority_class,
                               len(requests))
        else:
            result = summarize_private(replies)
        charged = charged_rows(replies, None)
    return {**result, "seconds": time.perf_counter() - t0, "_charged": charged, "_replies": replies}


def on_device(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected], trained: Sequence[Trained],
              evaluate_round: OnDeviceRound) -> list[dict[str, Any]]:
    """The on-device protocol of every seed (`fl_privtext.ondevice`): ``evaluate_round`` ships the model to the
    test clients and returns their replies (randomized-response answers, `fl_privtext.client.ondevice`; refusals;
    confusion counts of an old client); the server debiases and sums them (`on_device_seed`). Beside the server's
    estimate, the referee's exact figure of the model it shipped (``exact``, `exact_on_device`: simulation only)."""
    out = []
    for c, t in zip(collected, trained, strict=True):
        result = on_device_seed(t, on_device_requests(prep, c), c.seed, evaluate_round, prep.ds.user_index.reshape(-1))
        result["exact"] = exact_on_device(prep, cfg, shipped_model(t, result), t.majority_class, c.seed)
        exact_candidates(prep, cfg, t, result, c.seed)
        out.append(result)
    return out


def exact_candidates(prep: Prepared, cfg: ExperimentConfig, trained: Trained, result: dict[str, Any], seed: int
                     ) -> None:
    """server.select-on = clients: beside each candidate's private estimate in ``result["selection"]``, the
    referee's ``exact_accuracy`` of its model (simulation only, `exact_on_device`): whether the clients chose the
    best one, which their answers cannot tell (issue #37 item 1)."""
    sel = result.get("selection")
    if not trained.candidates or not isinstance(sel, dict):
        return
    for name, model in trained.candidates.items():
        ex = exact_on_device(prep, cfg, model, trained.majority_class, seed, interval=False)
        if name in sel["candidates"] and ex.get("available"):
            sel["candidates"][name]["exact_accuracy"] = ex["accuracy"]
    sel["exact_by"] = EXACT_BY


EXACT_BY = ("simulation only: the referee applies the server's model to every test record's clean features (E[upload "
            "| x], as the clients do) and counts exactly; no deployed server can compute this (its figure is "
            "utility.on_device.private)")
EXACT_INTERVAL = ("95% percentile bootstrap over test users (each with all its records; fl_privtext.bootstrap), "
                  "over seeds too where there are several")
_EXACT_BATCH = 65536  # test records per block: bounds the referee's memory whatever the test set's size


def shipped_model(trained: Trained, result: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The model the server sent for the reported on-device figure: the clients' choice among the candidates
    (server.select-on = clients, ``result["learner"]``), else the server's model."""
    if trained.candidates and "learner" in result:
        return trained.candidates[str(result["learner"])]
    return trained.model


def exact_on_device(prep: Prepared, cfg: ExperimentConfig, model: dict[str, np.ndarray] | None,
                    majority_class: int, seed: int, *, interval: bool = True) -> dict[str, Any]:
    """The referee's exact on-device figure of ``model`` (simulation only, `EXACT_BY`): accuracy and macro-F1 over
    every test user's records, whether or not its client answered, with the user-level interval of `fl_privtext.
    bootstrap` (stream ``(seed, "referee", "on-device")``). ``_per_user`` (internal): the per-user counts the
    report pools over seeds. Why: the server's estimate carries the randomized response's noise (+-3.5 points at
    count-epsilon 1 on AG news), so "how good is the model the mechanism allows" needs this one. ``interval=False``:
    no bootstrap (``ci_low`` / ``ci_high`` None), for figures read without one (`exact_candidates`)."""
    from fl_privtext.client.ondevice import expected_input
    from fl_privtext.metrics import macro_f1_from_confusion
    from fl_privtext.ondevice import confusion, mlp_logits

    if model is None:
        return {"available": False, "reason": "no model was sent"}
    if cfg.train.rounds > 0:
        return {"available": False, "reason": "train.rounds > 0 (Phase A): the model applies to the trained "
                                              "encoder's output, which the referee does not recompute"}
    clean = _clean_features(prep, cfg)
    rows = np.flatnonzero(prep.roles == "test")
    if clean is None or not len(rows):
        return {"available": False, "reason": "no test records" if clean is not None else
                "the referee has no clean features (no extraction cache, no extractor)"}
    pred = np.concatenate([mlp_logits(model, expected_input(clean(rows[s:s + _EXACT_BATCH]), cfg)).argmax(axis=1)
                           for s in range(0, len(rows), _EXACT_BATCH)])
    truth = np.asarray(prep.ds.labels, np.int64)[rows]
    cm = confusion(truth, pred, len(prep.ds.label_names))
    counts = user_counts(pred == truth, prep.ds.user_index.reshape(-1)[rows])
    lo, hi = counts_bootstrap([counts], rng.generator(seed, "referee", "on-device")) if interval else (None, None)
    n = int(cm.sum())
    return {"available": True, "accuracy": float(np.trace(cm)) / n, "macro_f1": macro_f1_from_confusion(cm),
            "ci_low": lo, "ci_high": hi, "majority_baseline": float(cm[majority_class].sum()) / n,
            "num_test_records": n, "num_test_users": len(counts.users), "by": EXACT_BY, "interval": EXACT_INTERVAL,
            "_per_user": counts}


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
        mech = mechanism_for(cfg, c.input_dim)
        attacks, extra = attack(prep, observed["features"], referee_rows(c, observed["rows"]), c.seed, cfg,
                                labels=observed["labels"], mechanism=mech, report=mech.report(),
                                seen=observed["rows"] if shuffled(c) else None)
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
    guarantee (SecAgg+ with client noise), charged to its users instead of inf (`fl_privtext.accounting`)."""
    t_start = time.perf_counter()
    trained = list(trained) if trained is not None else train_point(prep, cfg, collected)
    with limited(driver_threads(cfg.run, cfg.federation)):  # the driver's share of the cores, in both paths
        per_seed = [_evaluate_seed(prep, cfg, c, t, None if on_device_results is None else on_device_results[i])
                    for i, (c, t) in enumerate(zip(collected, trained, strict=True))]
    report = mechanism_for(cfg, collected[-1].input_dim).report()
    releases = cfg.federation.rounds if cfg.federation.schedule == "repeat" else 1
    released = [sent_rows(prep, cfg, c) for c in collected]
    od_rows = [(rows, eps) for r in (on_device_results or []) for rows, eps in r.get("_charged", [])]
    # Phase A's updates and validation metrics concern the train and aux users (never test users)
    phase_a = np.flatnonzero(prep.roles != "test") if cfg.train.rounds > 0 else None
    privacy = privacy_summary(report, cfg.privacy, cfg.federation, cfg.train, prep.ds.user_index,
                              len(prep.ds.label_names), released, releases,
                              on_device_rows=od_rows, phase_a_rows=phase_a, phase_a_central=phase_a_central,
                              shuffled_users=shuffled_cohort_users(prep, cfg) if cfg.federation.shuffle else None)
    privacy["randomness"] = randomness_of(cfg, collected)
    privacy["ledger"] = ledger_summary(collected, on_device_results or [])
    return {
        "placement": placement_of(collected),
        "extractor_identity": prep.extractor.identity(),
        "config": cfg, "per_seed": per_seed, "num_users": prep.ds.num_users,
        "num_records": len(prep.ds), "privacy": privacy, "faults": faults(prep, cfg, collected),
        "dataset": {"name": prep.ds.name, "fingerprint": prep.ds.fingerprint, "label_names": list(prep.ds.label_names),
                    "synthetic": prep.ds.name in SYNTHETIC_DATASETS,
                    "attributes": {a.name: {"kind": a.kind, "classes": list(a.classes)} for a in prep.ds.attributes}},
        # time this point kept the server busy: communication plus computation (not time spent queued)
        "server_s": sum(c.federation_s for c in collected) + time.perf_counter() - t_start,
    }


def shuffled_cohort_users(prep: Prepared, cfg: ExperimentConfig) -> int:
    """n of the shuffle bound: the users of the smallest unlinked cohort (train, test) shuffled together in a
    round (`fl_privtext.federation.shuffler`): all of them under schedule = repeat, a 1/rounds share under stream."""
    users = prep.ds.user_index.reshape(-1)
    sizes = [len(np.unique(users[prep.roles == role])) for role in ("train", "test") if (prep.roles == role).any()]
    n = min(sizes) if sizes else 1
    return max(1, n // cfg.federation.rounds) if cfg.federation.schedule == "stream" else n


def ledger_summary(collected: Sequence[Collected], on_device_results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the clients themselves say they charged (their ledgers, issue #22) and what they refused: the largest
    per-user total any client reported after any reply, and every refusal as {node, kind, reason} (with its seed
    and round). In an honest run ``per_user.max_epsilon_charged`` equals the server's
    ``composition.per_user.max_epsilon_total``."""
    entries = [e for c in collected for r in c.rounds for e in r.ledger]
    entries += [r["ledger"] for od in on_device_results for r in od.get("_replies", []) if "ledger" in r]
    tops = [float(e["ledger-max"]) for e in entries if "ledger-max" in e]
    refusals: list[dict[str, Any]] = []
    for c in collected:
        for rnd, r in enumerate(c.rounds):
            refusals.extend({"node": f["node"], "kind": "upload", "reason": f["reason"], "seed": c.seed,
                             "round": rnd} for f in r.failures if f["kind"] == "refused")
        for stop in c.refused:
            refusals.extend({"node": f["node"], "kind": "upload", "reason": f["reason"], "seed": stop["seed"],
                             "round": stop["round"]} for f in stop["failures"])
    for od, c in zip(on_device_results, collected, strict=False):
        refusals.extend({"node": r["node"], "kind": "on-device", "reason": r["reason"], "seed": c.seed}
                        for r in od.get("refusals", []))
    stopped = [{"seed": s["seed"], "round": s["round"]} for c in collected for s in c.refused]
    return {"per_user": {"max_epsilon_charged": json_number(max(tops)) if tops else "not reported"},
            "replies_reporting": len(tops), "refusals": refusals,
            # records a client kept back because their users had spent their budgets (partial releases)
            "records_withheld": sum(int(e.get("withheld", 0)) for e in entries),
            "stopped_at": stopped[0] if stopped else None,
            "note": ("each client's own ledger (basic composition, enforced before every release against "
                     "client.max-epsilon); replies carry what was charged")}


def _expected_rows(prep: Prepared, cfg: ExperimentConfig, rnd: int) -> np.ndarray:
    return np.concatenate([upload_rows(prep.client, c, rnd, cfg) for c in range(len(prep.shards))])


def sent_rows(prep: Prepared, cfg: ExperimentConfig, c: Collected) -> np.ndarray:
    """Rows released in one repetition, one entry per release: those received, plus the missing rows of a round in
    which some client timed out (it may have sent them). Clients that failed with an error sent nothing."""
    parts = []
    for rnd, r in enumerate(c.rounds):
        rows = r.revealed if r.revealed is not None else r.uploads["rows"]
        parts.append(rows)
        if any(f["kind"] == "timeout" for f in r.failures):
            parts.append(np.setdiff1d(_expected_rows(prep, cfg, rnd), rows))
    return np.concatenate(parts) if parts else referee_rows(c, c.received["rows"])


def faults(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected]) -> dict[str, Any]:
    """Clients that did not deliver, per seed and round, and the users the server never heard from."""
    failed: list[dict[str, Any]] = []
    user = prep.ds.user_index  # users by their position among the sorted ids: integer work, no string sets
    missing_users = np.zeros(prep.ds.num_users, bool)
    missing_records = 0
    for c in collected:
        heard = np.zeros(prep.ds.num_users, bool)
        heard[user[referee_rows(c, c.received["rows"])]] = True
        for rnd, r in enumerate(c.rounds):
            failed.extend({"seed": c.seed, "round": rnd, **f} for f in r.failures)
            missing = np.setdiff1d(_expected_rows(prep, cfg, rnd),
                                   r.revealed if r.revealed is not None else r.uploads["rows"])
            missing_records += int(missing.size)
            missing_users[user[missing][~heard[user[missing]]]] = True
    first = np.unique(prep.ds.user_ids[np.isin(user, np.flatnonzero(missing_users)[:1000])])  # sorted as str
    return {"failed_clients": failed, "records_not_received": missing_records,
            "users_not_heard_from": first.tolist(), "num_users_not_heard_from": int(missing_users.sum())}


def placement_of(collected: Sequence[Collected]) -> dict[str, Any]:
    """Where the replies were computed, over every seed and round: replies per Ray node and per host, and the
    client nodes each Ray node served (empty maps in the plain loop, which has no replies)."""
    by_ray: dict[str, int] = {}
    by_host: dict[str, int] = {}
    clients: dict[str, set[int]] = {}
    replies = 0
    for c in collected:
        for r in c.rounds:
            for p in r.placement:
                replies += 1
                by_host[p["host"]] = by_host.get(p["host"], 0) + 1
                if p["ray_node"]:
                    by_ray[p["ray_node"]] = by_ray.get(p["ray_node"], 0) + 1
                    clients.setdefault(p["ray_node"], set()).add(int(p["node"]))
    return {"replies": replies, "replies_by_ray_node": by_ray, "replies_by_host": by_host,
            "clients_by_ray_node": {k: sorted(v) for k, v in clients.items()}}


def randomness_of(cfg: ExperimentConfig, collected: Sequence[Collected]) -> str:
    """"secret" or "reproducible", as the clients themselves stated it (the server's config never holds the client
    seed); clients that disagree are an error (the seed did not reach every worker)."""
    seeded = [s for c in collected for r in c.rounds for s in r.seeded]
    if not seeded:
        return cfg.run.randomness
    if any(seeded) and not all(seeded):
        raise RuntimeError("Some clients ran with a client seed and some without: the client seed did not reach "
                           "every worker (set FL_PRIVTEXT_CLIENT_SEED on every node, or --node-config client-seed).")
    return "reproducible" if seeded[0] else "secret"


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
    from fl_privtext.client import Refused, client_generator, point_key
    from fl_privtext.client.ondevice import on_device_answer, stage_keys

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
    (`fl_privtext.federation.runner.no_privacy_reference`: computed without any client)."""
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
