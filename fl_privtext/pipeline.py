"""The framework-free core of an experiment: the data both sides derive, and what the untrusted server does.

`fl_privtext.federation` wraps these functions in Flower apps; `benchmarks/bench_federation.py` calls them in a
plain in-process loop. Both paths therefore privatize, train and attack identically for a given seed.

Randomness: roles and shards depend on ``run.seed`` only; the server's and attackers' training on
``(seed, "server")`` / ``(seed, "attack", attribute)``. The clients' privatization randomness is theirs alone
(`fl_privtext.client.client_generator`): secret OS entropy, or ``run.client-seed`` in the reproducible mode.
"""

from __future__ import annotations

import functools
import gzip
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fl_privtext import metrics, rng
from fl_privtext.accounting import privacy_summary
from fl_privtext.client import UPLOAD_KEYS, ClientData, client_upload, mechanism_for, merge_uploads, upload_rows
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import TextDataset, assign_roles, load_dataset, partition_users
from fl_privtext.learn import MLPConfig, train_mlp


@dataclass
class Prepared:
    """Everything both sides derive deterministically from the config (no randomness from the privatization)."""

    ds: TextDataset
    roles: np.ndarray  # (N,) "train" | "test" | "aux", split by user
    shards: list[np.ndarray]  # row indices per virtual client
    extractor: Any
    features: np.ndarray | None  # (N, dim) cached extractor output (memmap), None when not cached
    timings: dict[str, float] = field(default_factory=dict)

    @cached_property
    def client(self) -> ClientData:
        """The clients' side of the data (what `fl_privtext.client.client_upload` reads)."""
        return ClientData(shards=self.shards, labels=self.ds.labels, num_classes=len(self.ds.label_names),
                          features=self.features, texts=self.ds.texts, text_pairs=self.ds.text_pairs,
                          extractor=self.extractor)


def data_key(cfg: ExperimentConfig) -> tuple:
    return (cfg.data.name, cfg.data.root, tuple(sorted(cfg.data.options.items())))


@functools.lru_cache(maxsize=4)
def _load(key: tuple) -> TextDataset:
    name, root, options = key
    try:
        ds = load_dataset(name, data_root=root or None, **dict(options))
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"dataset {name!r}: a data file is a corrupt or truncated archive ({exc}); restore it "
                         "(e.g. re-download or re-copy the file).") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset {name!r}: a data file is not valid UTF-8 text ({exc.reason} at byte "
                         f"{exc.start}).") from None
    if len(ds) == 0:
        raise ValueError(f"dataset {name!r} (data.root={root!r}, options {dict(options)}) has no rows: the file "
                         "holds a header only, or every row was filtered out.")
    return ds


def load(cfg: ExperimentConfig) -> TextDataset:
    """The configured dataset (memoised per process: Ray actors and sweeps load it once)."""
    return _load(data_key(cfg))


@functools.lru_cache(maxsize=8)
def _split(key: tuple, test_frac: float, aux_frac: float, seed: int, num_clients: int, scheme: str,
           alpha: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """User roles and client shards, memoised: validation, the driver, the server and every point of a sweep that
    shares data and federation settings reuse one split (read-only arrays)."""
    ds = _load(key)
    roles = assign_roles(ds, test_frac=test_frac, aux_frac=aux_frac, seed=seed)
    shards = partition_users(ds, np.arange(len(ds)), num_clients=num_clients, scheme=scheme, alpha=alpha, seed=seed)
    for arr in (roles, *shards):
        arr.setflags(write=False)
    return roles, shards


def make_extractor_from(cfg: ExperimentConfig) -> Any:
    from fl_privtext.extract import make_extractor

    e = cfg.extractor
    opts: dict[str, Any] = {"max_length": e.max_length, "batch_size": e.batch_size, "pooling": e.pooling}
    if e.name == "glove":
        opts = {}
    if e.model:
        opts["model"] = e.model
    if e.device and e.name != "glove":
        opts["device"] = e.device
    return make_extractor(e.name, **opts)


def prepare(cfg: ExperimentConfig, *, features: str = "extract", progress: bool = False) -> Prepared:
    """Load data, split users into roles and clients, and get the (cached) features.

    ``features``: "extract" computes and caches all features when the cache lacks them (driver side);
    "cached" only memory-maps an existing cache (a client that finds none extracts its own rows on demand);
    "none" skips them (the server never needs representations other than the uploads).
    """
    from fl_privtext.extract import EmbeddingCache, extract_cached

    t0 = time.perf_counter()
    ds = load(cfg)
    t1 = time.perf_counter()
    roles, shards = _split(data_key(cfg), cfg.data.test_frac, cfg.data.aux_frac, cfg.run.seed,
                           cfg.federation.num_clients, cfg.federation.partition, cfg.federation.alpha)
    t2 = time.perf_counter()
    extractor = make_extractor_from(cfg)
    cache_dir = cfg.extractor.cache_dir or None
    feats: np.ndarray | None = None
    if features == "extract":
        feats = extract_cached(ds, extractor, cache_dir, progress=progress, chunk_rows=cfg.extractor.chunk_rows)
    elif features == "cached":
        cache = EmbeddingCache(cache_dir)
        feats = cache.load(cache.key(ds.fingerprint, extractor.identity()))
    elif features != "none":
        raise ValueError(f"features must be 'extract', 'cached' or 'none'; got {features!r}.")
    t3 = time.perf_counter()
    timings = {"load_s": t1 - t0, "partition_s": t2 - t1, "extract_s": t3 - t2}
    return Prepared(ds=ds, roles=roles, shards=shards, extractor=extractor, features=feats, timings=timings)


# ---- the untrusted server ------------------------------------------------------------------------------------------


def server_mlp_config(cfg: ExperimentConfig, dim: int) -> MLPConfig:
    """The task MLP; server.hidden = 0 picks the OME paper's width: 128 for GloVe-sized inputs, 768 for BERT-sized."""
    return cfg.server.mlp(hidden=cfg.server.hidden or (128 if dim <= 300 else 768))  # standardize from config


def train_and_evaluate(prep: Prepared, features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                       seed: int, cfg: ExperimentConfig) -> dict[str, Any]:
    """The server trains the task MLP on the uploads of train/aux users and evaluates on test users' uploads."""
    if len(prep.ds.label_names) == 0:
        return {"available": False, "reason": f"dataset {prep.ds.name!r} has no task label (attacker-only)"}
    roles = prep.roles[rows]
    tr, te = roles != "test", roles == "test"
    if not tr.any() or not te.any():
        raise ValueError("Need uploads from both training and test users; check data.test-frac and the dataset size.")
    k = len(prep.ds.label_names)
    model = train_mlp(features[tr], labels[tr], num_classes=k, config=server_mlp_config(cfg, features.shape[1]),
                      generator=rng.torch_generator(seed, "server"),
                      progress="server: task MLP" if cfg.run.progress else None)
    pred = model.predict(features[te])
    truth = prep.ds.labels[rows[te]]  # evaluated against the true labels of test users
    out: dict[str, Any] = {
        "available": True,
        "accuracy": metrics.accuracy(truth, pred),
        "macro_f1": metrics.macro_f1(truth, pred, k),
        "majority_baseline": metrics.majority_baseline(labels[tr], truth),
        "num_train_uploads": int(tr.sum()),
        "num_test_uploads": int(te.sum()),
    }
    fairness: dict[str, Any] = {}
    for spec in prep.ds.attributes:
        z = prep.ds.attribute(spec.name)[rows[te]]
        if spec.kind == "multilabel":
            per = {}
            for j, cls in enumerate(spec.classes):
                g = z[:, j].astype(bool)
                if g.any() and (~g).any():
                    per[cls] = {"present": metrics.accuracy(truth[g], pred[g]),
                                "absent": metrics.accuracy(truth[~g], pred[~g])}
                    per[cls]["gap"] = abs(per[cls]["present"] - per[cls]["absent"])
            fairness[spec.name] = {"per_class": per, "gap": max((v["gap"] for v in per.values()), default=0.0)}
        else:
            names = np.asarray(spec.classes, dtype=object)[z]
            per_group = metrics.group_accuracy(truth, pred, names)
            fairness[spec.name] = {"per_group": per_group, "gap": metrics.fairness_gap(per_group)}
    out["fairness"] = fairness
    return out


ATTACK_FOLDS = 3


def _fit_attacker(x: np.ndarray, z: np.ndarray, num_classes: int | None, seed: int, name: str,
                  cfg: ExperimentConfig) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """A rational attacker: estimate by 3-fold cross-validation on the known users' uploads whether the MLP beats
    the majority guess; keep the MLP (refit on all known uploads) only when it does at one-sided 95% confidence,
    otherwise predict the majority (the prior is then all the uploads give away)."""
    if z.ndim == 2:
        presence = (z.mean(axis=0) > 0.5).astype(np.int8)
        majority = lambda xs: np.tile(presence, (len(xs), 1))
    else:
        values, counts = np.unique(z, return_counts=True)
        top = values[counts.argmax()]
        majority = lambda xs: np.full(len(xs), top, dtype=z.dtype)

    def fit(rows: np.ndarray, key: object) -> Any:
        return train_mlp(x[rows], z[rows], num_classes=num_classes, config=cfg.attack.mlp(),
                         generator=rng.torch_generator(seed, "attack", name, key),
                         progress=f"eavesdropper: {name}" if cfg.run.progress else None)

    folds = np.array_split(rng.generator(seed, "attack-folds", name).permutation(len(x)), ATTACK_FOLDS)
    oof = np.empty_like(z)
    for k, held in enumerate(folds):
        oof[held] = fit(np.setdiff1d(np.arange(len(x)), held), ("fold", k)).predict(x[held])
    # Per-label (Hamming) accuracy for entities: F1 would favour "always present" over the prior.
    learned, baseline = metrics.accuracy(z, oof), metrics.accuracy(z, majority(x))
    margin = 1.645 * math.sqrt(max(baseline * (1 - baseline), 1e-4) / len(x))
    if learned > baseline + margin:
        return fit(np.arange(len(x)), "all").predict, "mlp"
    return majority, "majority"


def attack(prep: Prepared, features: np.ndarray, rows: np.ndarray, seed: int,
           cfg: ExperimentConfig) -> dict[str, Any]:
    """The eavesdropper: per private attribute, train on the aux users' observed uploads (whose attributes it
    knows), then infer the attribute of every other user from their observed uploads."""
    roles = prep.roles[rows]
    known, target = roles == "aux", roles != "aux"
    results: dict[str, Any] = {}
    for spec in prep.ds.attributes:
        z_all = prep.ds.attribute(spec.name)
        z_known, z_true = z_all[rows[known]], z_all[rows[target]]
        multilabel = spec.kind == "multilabel"
        predict, chosen = _fit_attacker(features[known], z_known, None if multilabel else len(spec.classes),
                                        seed, spec.name, cfg)
        pred = predict(features[target])
        common = {"attacker": chosen, "num_known": int(known.sum()), "num_targets": int(target.sum())}
        if multilabel:
            per_acc = {c: metrics.accuracy(z_true[:, j], pred[:, j]) for j, c in enumerate(spec.classes)}
            # DPNR Table 5: accuracy among targets that mention the entity (present) and that do not (absent)
            split_acc = {
                c: {side: metrics.accuracy(z_true[m, j], pred[m, j]) if m.any() else None
                    for side, m in (("present", z_true[:, j] == 1), ("absent", z_true[:, j] == 0))}
                for j, c in enumerate(spec.classes)
            }
            per_maj = {c: metrics.majority_baseline(z_known[:, j], z_true[:, j]) for j, c in enumerate(spec.classes)}
            f1 = metrics.multilabel_f1(z_true, pred)
            maj_pred = np.tile((z_known.mean(axis=0) > 0.5).astype(np.int8), (len(z_true), 1))
            results[spec.name] = {
                "kind": "multilabel", "f1": f1, "f1_majority_baseline": metrics.multilabel_f1(z_true, maj_pred),
                "accuracy": float(np.mean(list(per_acc.values()))),
                "majority_baseline": float(np.mean(list(per_maj.values()))),
                "per_class_accuracy": per_acc, "per_class_majority_baseline": per_maj,
                "per_class_presence_accuracy": split_acc,
                "empirical_privacy": 1.0 - f1, **common,
            }
        else:
            acc = metrics.accuracy(z_true, pred)
            maj = metrics.majority_baseline(z_known, z_true)
            lo, hi = metrics.binomial_interval(maj, len(z_true))
            results[spec.name] = {
                "kind": "categorical", "accuracy": acc, "macro_f1": metrics.macro_f1(z_true, pred, len(spec.classes)),
                "majority_baseline": maj, "majority_ci95": [lo, hi], "empirical_privacy": 1.0 - acc, **common,
            }
    return results


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
    "reason": str}``. ``seeded``: per reply, whether the client ran the reproducible mode (its own statement)."""

    uploads: dict[str, np.ndarray]
    input_dim: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    seeded: list[bool] = field(default_factory=list)


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


def collect_point(cfg: ExperimentConfig, collect_round: CollectRound, eavesdrop: Callable[[], Observed],
                  *, start_seed: Callable[[], None] = lambda: None, on_round: OnRound | None = None
                  ) -> list[Collected]:
    """The communication phase of one point: every round of every seed through ``collect_round``;
    ``on_round`` hears about each round as soon as it is in (per-round metrics, experiment tracking)."""
    seeds = [cfg.run.seed + s for s in range(cfg.run.seeds)]
    bar = tqdm(total=len(seeds) * cfg.federation.rounds, desc="rounds", disable=not cfg.run.progress, leave=False)
    out: list[Collected] = []
    for seed in seeds:
        start_seed()
        t0 = time.perf_counter()
        rounds: list[Round] = []
        for rnd in range(cfg.federation.rounds):
            t_round = time.perf_counter()
            rounds.append(collect_round(seed, rnd))
            if on_round is not None:
                on_round(seed, rnd, rounds[-1], time.perf_counter() - t_round)
            bar.update()
        received = merge_uploads([r.uploads for r in rounds])
        input_dim = max(r.input_dim for r in rounds)
        out.append(Collected(seed, received, eavesdrop(), input_dim, time.perf_counter() - t0, tuple(rounds)))
    bar.close()
    return out


def evaluate_point(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected]) -> dict[str, Any]:
    """The computation phase of one point: per seed, the server trains and evaluates on what it received and the
    eavesdropper attacks what it observed (checked to be the same uploads)."""
    t_start = time.perf_counter()
    per_seed: list[dict[str, Any]] = []
    for c in collected:
        up = c.received
        t1 = time.perf_counter()
        utility = train_and_evaluate(prep, up["features"], up["labels"], up["rows"], c.seed, cfg)
        t2 = time.perf_counter()
        observed = merge_uploads([c.observed.uploads])
        if not all(np.array_equal(observed[k], up[k]) for k in UPLOAD_KEYS):
            raise RuntimeError("The eavesdropper's record differs from what the server received.")
        attacks = attack(prep, observed["features"], observed["rows"], c.seed, cfg) if cfg.attack.enabled else {}
        t3 = time.perf_counter()
        per_seed.append({
            "seed": c.seed, "utility": utility, "attacks": attacks,
            "uploads_received": len(up["rows"]), "uploads_observed": len(observed["rows"]),
            "messages_observed": c.observed.messages, "bytes_observed": c.observed.nbytes,
            "output_dim": int(up["features"].shape[1]),
            "timing": {"federation_s": c.federation_s, "train_s": t2 - t1, "attack_s": t3 - t2},
        })
    report = mechanism_for(cfg, collected[-1].input_dim).report()
    releases = cfg.federation.rounds if cfg.federation.schedule == "repeat" else 1
    released = [sent_rows(prep, cfg, c) for c in collected]
    privacy = privacy_summary(report, cfg, prep.ds.user_ids, len(prep.ds.label_names), released, releases)
    privacy["randomness"] = randomness_of(cfg, collected)
    return {
        "extractor_identity": prep.extractor.identity(),
        "config": cfg, "per_seed": per_seed, "num_users": len(np.unique(prep.ds.user_ids)),
        "num_records": len(prep.ds), "privacy": privacy, "faults": faults(prep, cfg, collected),
        "dataset": {"name": prep.ds.name, "fingerprint": prep.ds.fingerprint, "label_names": list(prep.ds.label_names),
                    "attributes": {a.name: {"kind": a.kind, "classes": list(a.classes)} for a in prep.ds.attributes}},
        # time this point kept the server busy: communication plus computation (not time spent queued)
        "server_s": sum(c.federation_s for c in collected) + time.perf_counter() - t_start,
    }


def _expected_rows(prep: Prepared, cfg: ExperimentConfig, rnd: int) -> np.ndarray:
    return np.concatenate([upload_rows(prep.client, c, rnd, cfg) for c in range(len(prep.shards))])


def sent_rows(prep: Prepared, cfg: ExperimentConfig, c: Collected) -> np.ndarray:
    """Rows released in one repetition, one entry per release: those received, plus the missing rows of a round in
    which some client timed out (it may have sent them). Clients that failed with an error sent nothing."""
    parts = []
    for rnd, r in enumerate(c.rounds):
        parts.append(r.uploads["rows"])
        if any(f["kind"] == "timeout" for f in r.failures):
            parts.append(np.setdiff1d(_expected_rows(prep, cfg, rnd), r.uploads["rows"]))
    return np.concatenate(parts) if parts else c.received["rows"]


def faults(prep: Prepared, cfg: ExperimentConfig, collected: Sequence[Collected]) -> dict[str, Any]:
    """Clients that did not deliver, per seed and round, and the users the server never heard from."""
    failed: list[dict[str, Any]] = []
    missing_users: set[Any] = set()
    missing_records = 0
    for c in collected:
        heard = set(prep.ds.user_ids[c.received["rows"]].tolist())
        for rnd, r in enumerate(c.rounds):
            failed.extend({"seed": c.seed, "round": rnd, **f} for f in r.failures)
            missing = np.setdiff1d(_expected_rows(prep, cfg, rnd), r.uploads["rows"])
            missing_records += int(missing.size)
            missing_users.update(set(prep.ds.user_ids[missing].tolist()) - heard)
    return {"failed_clients": failed, "records_not_received": missing_records,
            "users_not_heard_from": sorted(missing_users, key=str)[:1000],
            "num_users_not_heard_from": len(missing_users)}


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
              *, start_seed: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """All seeds of one experiment point: collect every round, train/evaluate on what the server received,
    attack what the eavesdropper observed. The transport (Flower or a plain loop) is in ``collect_round``."""
    return evaluate_point(prep, cfg, collect_point(cfg, collect_round, eavesdrop, start_seed=start_seed))


def run_plain(cfg: ExperimentConfig, prep: Prepared | None = None) -> dict[str, Any]:
    """The same point as a plain in-process loop over clients (no Flower, no Ray): the benchmark's baseline and
    the reference the federated path must reproduce exactly."""
    prep = prep or prepare(cfg, features="extract", progress=cfg.run.progress)
    last: dict[str, Any] = {}

    def collect_round(seed: int, rnd: int) -> Round:
        ups = [client_upload(prep.client, c, rnd, seed, cfg, client_seed=cfg.run.client_seed)
               for c in range(cfg.federation.num_clients)]
        ups = [u for u in ups if len(u.rows)]
        arrays = merge_uploads([u.arrays() for u in ups])
        last.setdefault("rounds", []).append((arrays, len(ups)))
        return Round(arrays, max(u.input_dim for u in ups), seeded=[cfg.run.client_seed is not None] * len(ups))

    def eavesdrop() -> Observed:
        rounds = last.pop("rounds")
        uploads = {k: np.concatenate([a[k] for a, _ in rounds]) for k in UPLOAD_KEYS}
        return Observed(uploads=uploads, messages=sum(n for _, n in rounds),
                        nbytes=sum(v.nbytes for a, _ in rounds for v in a.values()))

    return run_point(prep, cfg, collect_round, eavesdrop)
