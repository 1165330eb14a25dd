"""Preparation: the data both sides of an experiment derive deterministically from the config.

`prepare` loads the dataset, assigns user roles (train / test / aux) and client shards, and gets the (cached)
extractor features; `Prepared` holds them. Nothing here is random beyond ``run.seed`` and nothing privatizes: the
clients (`fl_privtext.client`), the server (`fl_privtext.server`) and the orchestration (`fl_privtext.pipeline`)
all read the same `Prepared`.
"""

from __future__ import annotations

import functools
import gc
import gzip
import time
import zlib
from typing import Any

import numpy as np

from fl_privtext.client.prepared import Prepared
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import TextDataset, load_dataset, partition_users, source_roles
from fl_privtext.data.splits import Roles, assign_role_codes
from fl_privtext.datafiles import records_per_user
from fl_privtext.memory import (
    drop_dataset_pages,
    drop_mapped_pages,
    release_arrow_memory,
    return_freed_arrays,
)
from fl_privtext.threads import limited, usable_cores

__all__ = ["Prepared", "data_key", "load", "prepare"]


def data_key(cfg: ExperimentConfig) -> tuple:
    return (cfg.data.name, cfg.data.root, tuple(sorted(cfg.data.options.items())))


@functools.lru_cache(maxsize=4)
def _load(key: tuple) -> TextDataset:
    name, root, options = key
    options = dict(options)
    per_user = options.pop("records_per_user", None)  # any dataset: each user's first k records only
    try:
        ds = load_dataset(name, data_root=root or None, **options)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"dataset {name!r}: a data file is a corrupt or truncated archive ({exc}); restore it "
                         "(e.g. re-download or re-copy the file).") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset {name!r}: a data file is not valid UTF-8 text ({exc.reason} at byte "
                         f"{exc.start}).") from None
    if len(ds) == 0:
        raise ValueError(f"dataset {name!r} (data.root={root!r}, options {dict(options)}) has no rows: the file "
                         "holds a header only, or every row was filtered out.")
    if per_user is not None:
        ds = first_records(ds, per_user)
    release_arrow_memory()  # what the load's Arrow work (a generated file's batches, the columns read) freed
    return ds


def first_records(ds: TextDataset, per_user: Any) -> TextDataset:
    """``data.options.records_per_user = k``: each user's first k records (in the data's order), e.g. k = 1 so that
    a user's release is one report under every trust model (simulations/trust_models.py)."""
    k = records_per_user(per_user)
    users = np.asarray(ds.user_index)
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    rank = np.arange(len(users)) - np.searchsorted(sorted_users, sorted_users, side="left")
    keep = np.zeros(len(users), bool)
    keep[order[rank < k]] = True
    return ds if keep.all() else ds.select(np.flatnonzero(keep))


def load(cfg: ExperimentConfig) -> TextDataset:
    """The configured dataset (memoised per process: Ray actors and sweeps load it once)."""
    return _load(data_key(cfg))


@functools.lru_cache(maxsize=8)
def _split(key: tuple, split: str, test_frac: float, aux_frac: float, seed: int, num_clients: int, scheme: str,
           alpha: float) -> tuple[Roles, list[np.ndarray]]:
    """User roles (``data.split``: random by user, or the source's own splits) and client shards, memoised:
    validation, the driver, the server and every point of a sweep that shares data and federation settings reuse
    one split (read-only arrays)."""
    ds = _load(key)
    # one byte a record (`Roles`), not the "<U5" names (20): held by the driver through the run (issue #38)
    # (drawn as codes: the names were a 20-byte-a-record temporary of validation at 10M users)
    roles = (Roles.of(source_roles(ds)) if split == "source" else
             assign_role_codes(ds, test_frac=test_frac, aux_frac=aux_frac, seed=seed))
    # every row (None): no N-row id array, and the shards are views of one (issue #38)
    shards = partition_users(ds, None, num_clients=num_clients, scheme=scheme, alpha=alpha, seed=seed)
    # held as the dataset holds its columns (`TextDataset.hold`: on disk beside a file-backed dataset, read-only),
    # the shards as views of one array, as they came: 5 bytes a record the driver held from here to the report
    roles = Roles(ds.hold(roles.codes))
    whole = ds.hold(shards)
    shards = np.split(whole, np.cumsum([len(s) for s in shards])[:-1])
    # the users' ids as a '<U' array (28 bytes a record at 1M users) were read for the roles and shards only: the
    # run reads ``user_index`` from here on (the ids are rebuilt from the Arrow column if anything asks again)
    ds.__dict__.pop("user_ids", None)
    # a first import inside the split (flwr-datasets' partitioners, in `partition_users`) leaves a reference cycle
    # through an exception's traceback that one of its modules keeps; its frames link back (f_back) to every
    # caller's frame, so the partition's locals (the per-user order, client and id columns) and each caller's
    # (validation's Prepared) stayed until a full collection, which a driver holding torch's and Ray's objects
    # seldom runs: ~70 bytes a user through the run at 3M synthetic users (issue #38). One collection per split
    gc.collect()
    release_arrow_memory()  # the partitioners' per-user tables, freed to Arrow's pool
    return roles, shards


def prepare(cfg: ExperimentConfig, *, features: str = "extract", progress: bool = False) -> Prepared:
    """Load data, split users into roles and clients, and get the (cached) features.

    ``features``: "extract" computes and caches all features when the cache lacks them (driver side);
    "cached" only memory-maps an existing cache (a client that finds none extracts its own rows on demand);
    "none" skips them (the server never needs representations other than the uploads).
    """
    from fl_privtext.extract import (  # torch (the extractors)
        EmbeddingCache,
        extract_cached,
        make_extractor_from,
    )

    return_freed_arrays()  # large temporaries go back to the OS when freed (fl_privtext.memory)
    t0 = time.perf_counter()
    ds = load(cfg)
    t1 = time.perf_counter()
    roles, shards = _split(data_key(cfg), cfg.data.split, cfg.data.test_frac, cfg.data.aux_frac, cfg.run.seed,
                           cfg.federation.num_clients, cfg.federation.partition, cfg.federation.alpha)
    t2 = time.perf_counter()
    drop_dataset_pages(ds)  # the fingerprint's read of every text, before the feature cache is read beside it
    extractor = make_extractor_from(cfg)
    cache_dir = cfg.extractor.cache_dir or None
    feats: np.ndarray | None = None
    if features == "extract":
        # every core: the driver extracts while its clients start (a sweep's scripts hold torch at 1 thread: MiniLM
        # ran at ~23 rows/s); GloVe in processes (its tokenisation holds the GIL); the caller's counts come back after
        with limited(usable_cores()):
            feats = extract_cached(ds, extractor, cache_dir, progress=progress, chunk_rows=cfg.extractor.chunk_rows,
                                   workers=usable_cores())
    elif features == "cached":
        cache = EmbeddingCache(cache_dir)
        feats = cache.load(cache.key(ds.fingerprint, extractor.identity()))
    elif features != "none":
        raise ValueError(f"features must be 'extract', 'cached' or 'none'; got {features!r}.")
    if feats is not None:  # the pages the extraction wrote or read stay in this process's RSS while the map lives
        drop_mapped_pages(feats)  # (the driver's whole cache through the run: 0.69 GB at 1M users, issue #38)
    drop_dataset_pages(ds)
    t3 = time.perf_counter()
    timings = {"load_s": t1 - t0, "partition_s": t2 - t1, "extract_s": t3 - t2}
    return Prepared(ds=ds, roles=roles, shards=shards, extractor=extractor, features=feats, timings=timings)
