"""What a client holds and what it sends: its users' rows, privatized in batches on the client side.

Framework-free and light (numpy and the privacy package; no torch, no HF datasets), so a Flower virtual client
starts fast. `fl_privtext.pipeline` builds `ClientData` from the full dataset; a simulation driver that already did
so saves it as a *snapshot* (`ClientData.save`) that every virtual client maps in instead of re-parsing the dataset.

Randomness (docs/privacy.md, "Threat model"): the server must never be able to recompute a client's noise, so
nothing it sends or holds seeds it. By default (``client_seed=None``, "secret") every batch draws a fresh
generator from OS entropy. With ``run.client-seed`` set ("reproducible", simulation only) a batch's stream is
``(client_seed, "privatize", point key, seed, round, client, batch, data digest)``; the client seed reaches the
clients outside the ServerApp's messages (`CLIENT_SEED_ENV` or the SuperNode's ``--node-config client-seed=N``), the
point key (a hash of the point's configuration) keeps streams of different points of a sweep apart, and the data
digest (a hash of the batch's record ids and of the exact data privatized) keeps two different inputs from ever
sharing noise: a server choosing what is privatized (a Phase A encoder, a snapshot) with the same (seed, round)
cannot difference two releases to cancel the noise (issue #22).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext import rng
from fl_privtext.config import MACHINE_KEYS, ExperimentConfig, FederationConfig
from fl_privtext.memory import drop_mapped_pages, is_sorted, narrowest, take_rows
from fl_privtext.ondevice import on_device_counts
from fl_privtext.privacy import label_rr, mechanism_from_section, mechanism_params, word_dropout
from fl_privtext.public import PublicSpec, public_projection  # loads the public dataset when called: pca only

UPLOAD_KEYS = ("features", "labels", "rows")  # the only arrays a client ever sends
CLIENT_SEED_ENV = "FL_PRIVTEXT_CLIENT_SEED"  # how a simulation hands run.client-seed to its clients
# Keys that do not change what a client computes: excluded from the point key. Where the run executes
# (`MACHINE_KEYS`: the data root, the feature cache, devices, the cluster) once entered the key, so the same point
# with the same run.client-seed drew other noise from another cache directory (issue #38's 1M runs).
NOT_POINT = (*MACHINE_KEYS, "run.baseline", "run.client-seed", "server.learner", "attack.learner",
              "client.max-epsilon", "client.on-device", "client.count-epsilon",
              "client.min-count", "client.secagg-epsilon", "client.secagg-delta",
              "client.secagg-min-clients",  # the [client] policy never changes an upload's stream
              "federation.shuffle",  # the shuffler acts after the client (issue #24)
              "server.select-on",  # which model the clients evaluate; each stage has its own stream
              "server.auto-candidates")  # which learners the server cross-validates on what it received


def client_seed_from(node_config: dict[str, Any] | None = None) -> int | None:
    """The client seed of this process: the SuperNode's ``client-seed`` node config, else `CLIENT_SEED_ENV`, else
    None (secret OS entropy). Never read from anything the server sends."""
    raw: Any = (node_config or {}).get("client-seed", os.environ.get(CLIENT_SEED_ENV, ""))
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"client-seed must be an integer >= 0, got {raw!r}.") from None
    if value < 0:
        raise ValueError(f"client-seed must be an integer >= 0, got {raw!r}.")
    return value


SEED_KEY = "run.client-seed"
SEED_FINGERPRINT_KEY = "run.client-seed-fingerprint"


@functools.lru_cache(maxsize=64)
def seed_fingerprint(client_seed: int) -> str:
    """A fingerprint of a client seed for outputs (results.json, config.toml, published points), never the seed:
    PBKDF2-HMAC-SHA256, 200,000 iterations, 16 hex digits. Whoever holds the seed can check it; a seed from a small
    space (0, 1, 42, ...) can still be found by trying them all, so a seed meant to stay secret must be drawn from
    a large space (e.g. 64 random bits)."""
    return hashlib.pbkdf2_hmac("sha256", str(int(client_seed)).encode(), b"fl-privtext client seed",
                               200_000).hex()[:16]


def published(flat: dict[str, Any]) -> dict[str, Any]:
    """A flat config as outputs may hold it: ``run.client-seed`` replaced by its fingerprint (issue #22)."""
    out = {k: v for k, v in flat.items() if k != SEED_KEY}
    seed = flat.get(SEED_KEY)
    if seed is not None and str(seed).strip() not in ("", "none"):
        out[SEED_FINGERPRINT_KEY] = seed_fingerprint(int(seed))
    return out


def point_key(cfg: ExperimentConfig) -> str:
    """A short hash of everything in the point's configuration that changes what a client computes: the whole
    config but `NOT_POINT` and the eavesdropper's settings (``attack.*``). No compatibility shim: since issue #22
    the stream is also keyed by a digest of the data privatized, so a rerun never reproduced a saved point's draws
    bit for bit anyway (docs/results/README.md); saved points are found by the sweep's key (`fl_privtext.sweep`)."""
    flat = {k: v for k, v in cfg.to_flat().items() if k not in NOT_POINT and not k.startswith("attack.")}
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def client_generator(client_seed: int | None, *keys: object) -> np.random.Generator:
    """The client's private generator: fresh OS entropy (``client_seed=None``), or the reproducible stream
    ``(client_seed, *keys)``. The only source of privatization, dropout-mask and label-flip randomness."""
    if client_seed is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence()))  # 128 bits from the OS, per call
    return rng.generator(client_seed, *keys)


@dataclass(frozen=True)
class ClientData:
    """The virtual clients' private side: which rows each client holds, their labels and representations.

    ``features`` is the (N, dim) cached extractor output (usually a memmap); ``texts``/``text_pairs`` and
    ``extractor`` are only needed when a client extracts on its side (no cache, or word dropout ``mu > 0``).
    """

    shards: Sequence[np.ndarray]  # row indices per virtual client
    labels: np.ndarray  # (N,) task labels
    num_classes: int
    features: np.ndarray | None
    texts: Sequence[str] | None = None
    text_pairs: Sequence[str] | None = None
    extractor: Any = None
    users: np.ndarray | None = None  # (N,) int64 user of each record (the ledger charges users); None: one per record
    test: np.ndarray | None = None  # (N,) bool: the record's user is a test user (on-device answers cover those)

    def user_of(self, rows: np.ndarray) -> np.ndarray:
        """The users of ``rows`` (record ids when no user column is known)."""
        rows = np.asarray(rows, np.int64)
        return rows.copy() if self.users is None else take_rows(self.users, rows).astype(np.int64)

    def labels_of(self, rows: np.ndarray) -> np.ndarray:
        """The int64 task labels of ``rows`` (held in their narrowest type: `load`, `Prepared.client`). Both read a
        mapped column (a snapshot's, `load`) with `take_rows`: a client's rows are scattered over the whole file
        (users are dealt to clients at random), and indexing it at once made every page of the column resident in
        the actor until the reply was sent (4-5 bytes a record of the population, issue #38)."""
        return take_rows(self.labels, np.asarray(rows, np.int64)).astype(np.int64)

    def shard_digest(self) -> str:
        """sha256 (32 hex digits) of which records each client holds, their users, labels and roles: names the
        shard a client's policy agrees to (`fl_privtext.client.ClientPolicy.shard_digest`), so a client-data
        snapshot the server points at is used only when it holds exactly that shard. Not the features (a snapshot
        points at the cache file of the extractor the policy pins)."""
        h = hashlib.sha256()
        h.update(np.asarray([len(r) for r in self.shards], np.int64).tobytes())
        for r in self.shards:
            _hash_column(h, r, np.int64)
        n = len(self.labels)
        _hash_column(h, self.labels, np.int64)
        h.update(np.int64(self.num_classes).tobytes())
        _hash_column(h, np.arange(n, dtype=np.int64) if self.users is None else self.users, np.int64)
        _hash_column(h, np.zeros(n, bool) if self.test is None else self.test, np.bool_)
        return h.hexdigest()[:32]

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write a snapshot (shards, labels, users, test flags, the path of the cached features) named by its
        content; return it: a folder of ``.npy`` files, each column in its narrowest integer type, that `load`
        maps. Needs memory-mapped cached features: the snapshot points at the cache file instead of copying it."""
        if not isinstance(self.features, np.memmap) or self.features.filename is None:
            raise ValueError("A client-data snapshot needs memory-mapped cached features (extract into the cache "
                             "first).")
        offsets = np.cumsum([0, *(len(s) for s in self.shards)]).astype(np.int64)
        n = len(self.labels)
        feature_path = str(Path(self.features.filename).resolve())
        users = np.arange(n, dtype=np.int64) if self.users is None else self.users
        test = np.zeros(n, bool) if self.test is None else self.test
        # the digest of (rows, offsets, labels, num_classes, users, test) as int64 / bool, a chunk at a time: the
        # driver built int64 copies of every column to hash and narrow them (24 bytes a record, issue #38)
        h = hashlib.sha256()
        for r in self.shards:
            _hash_column(h, r, np.int64)
        h.update(offsets.tobytes())
        _hash_column(h, self.labels, np.int64)
        h.update(np.int64(self.num_classes).tobytes())
        _hash_column(h, users, np.int64)
        _hash_column(h, test, np.bool_)
        h.update(f"{feature_path}:{self.features.shape}:{self.features.dtype}".encode())
        path = Path(directory) / "clients" / h.hexdigest()[:32]
        if not (path / _SNAPSHOT_META).is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
            try:
                for name, parts, dtype in (("rows", list(self.shards), None), ("offsets", [offsets], np.int64),
                                           ("labels", [self.labels], None), ("users", [users], None),
                                           ("test", [test], np.bool_)):
                    _save_column(tmp / f"{name}.npy", parts, dtype)
                (tmp / _SNAPSHOT_META).write_text(json.dumps({"num_classes": int(self.num_classes),
                                                              "features": feature_path}))
                os.replace(tmp, path)  # atomic: concurrent drivers write identical content
            except OSError:
                if not (path / _SNAPSHOT_META).is_file():
                    raise
            finally:
                if tmp.exists():  # gone after a successful replace
                    shutil.rmtree(tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ClientData:
        """Map a snapshot written by `save`: its columns and the features stay on disk, memory-mapped, and a
        client's reads of them are given back after each reply (`drop_pages`). Each Ray actor held the whole
        snapshot in memory before (24 bytes a record as int64, 9 narrowed: 0.8 GB per actor at 10M synthetic
        users, issue #38)."""
        path = Path(path)
        try:
            meta = json.loads((path / _SNAPSHOT_META).read_text())
            cols = {k: np.load(path / f"{k}.npy", mmap_mode="r", allow_pickle=False)
                    for k in ("rows", "offsets", "labels", "users", "test")}
            num_classes, feature_path = int(meta["num_classes"]), str(meta["features"])
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"{path}: not a client-data snapshot ({exc}).") from exc
        try:
            features = np.load(feature_path, mmap_mode="r")
        except OSError as exc:
            raise ValueError(f"{path}: the cached features it points at are unreadable ({exc}); rerun the "
                             "driver to re-extract them.") from exc
        offsets = np.asarray(cols["offsets"], np.int64)
        shards = [cols["rows"][a:b] for a, b in itertools.pairwise(offsets)]
        return cls(shards=shards, labels=cols["labels"], num_classes=num_classes, features=features,
                   users=cols["users"], test=cols["test"])

    def drop_pages(self) -> None:
        """Give back this process's pages of every mapped array (features, and a snapshot's columns: `load`);
        they stay in the page cache and read back the same. Called after each reply."""
        for a in (self.features, self.labels, self.users, self.test, *self.shards[:1]):
            drop_mapped_pages(a)


_SNAPSHOT_META = "snapshot.json"


def _save_column(path: Path, parts: Sequence[np.ndarray], dtype: Any = None, chunk: int = 1 << 20) -> None:
    """``np.save(path, np.concatenate(parts).astype(dtype))``, or with ``dtype`` None ``np.save(path,
    narrowest(np.concatenate(parts).astype(np.int64)))`` (the type from the values' range: int64 for none),
    written ``chunk`` entries at a time into the file's map: the same file, without the concatenated copy and its
    int64 widening."""
    total = sum(len(p) for p in parts)
    if dtype is None:
        bounds = [(int(np.min(p)), int(np.max(p))) for p in parts if len(p)]
        dtype = (narrowest(np.array([min(lo for lo, _ in bounds), max(hi for _, hi in bounds)], np.int64)).dtype
                 if bounds else np.int64)
    if not total:
        np.save(path, np.zeros(0, dtype), allow_pickle=False)
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(total,))
    start = 0
    for p in parts:
        for a in range(0, len(p), chunk):
            block = np.asarray(p[a : a + chunk])
            out[start : start + len(block)] = block
            start += len(block)
            drop_mapped_pages(p)
            drop_mapped_pages(out)  # a shared map of the file: its written pages stay in the page cache
    out.flush()
    del out


HASH_ROWS = 1 << 20  # entries of a column widened and hashed at once (`_hash_column`): 8 MiB as int64


def _hash_column(h: Any, column: np.ndarray, dtype: Any, chunk: int = HASH_ROWS) -> None:
    """``h.update(np.asarray(column, dtype).tobytes())`` (the same digest: sha256 of a concatenation is that of
    its parts fed in order), widened ``chunk`` entries at a time, and this process's pages of a mapped ``column``
    dropped after each: a snapshot's digest read every column whole as int64 copies, 25 bytes a record on top of
    the mapped pages, in each Ray actor at its first message (issue #38)."""
    for a in range(0, len(column), chunk):
        h.update(np.ascontiguousarray(np.asarray(column[a : a + chunk], dtype)).tobytes())
        drop_mapped_pages(column)


@dataclass(frozen=True)
class Upload:
    """What one client sends in one round. ``input_dim`` (the width before privatization) is public metadata."""

    features: np.ndarray  # (M, output_dim) float32, privatized
    labels: np.ndarray  # (M,) int64, randomized when privacy.label-epsilon > 0
    rows: np.ndarray  # (M,) int64 record ids (pseudonymous upload ids)
    input_dim: int

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in UPLOAD_KEYS}


def merge_uploads(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One round's uploads from all clients, in canonical row order (replies arrive in any order; sorting makes
    the server's training independent of network timing): as ``np.concatenate`` then a stable sort by row, but
    each part is written straight to its sorted positions (one output array per key, no concatenated copy), and
    a single part already in row order is returned as it is (its arrays, not copies)."""
    parts = [p for p in parts if len(p["rows"])]
    if not parts:
        return {"features": np.zeros((0, 0), np.float32), "labels": np.zeros(0, np.int64),
                "rows": np.zeros(0, np.int64)}
    if len(parts) == 1 and is_sorted(parts[0]["rows"]):  # chunk by chunk: a round's mapped ids, not a diff of them
        return {k: parts[0][k] for k in UPLOAD_KEYS}
    dest = merge_positions(parts)
    merged: dict[str, np.ndarray] = {}
    for k in UPLOAD_KEYS:
        dtype = np.result_type(*(p[k].dtype for p in parts))
        out = np.empty((len(dest), *parts[0][k].shape[1:]), dtype)
        start = 0
        for p in parts:
            out[dest[start : start + len(p[k])]] = p[k]
            start += len(p[k])
        merged[k] = out
    return merged


def merge_positions(parts: list[dict[str, np.ndarray]]) -> np.ndarray:
    """Where `merge_uploads` writes each entry of the parts taken in order (as if concatenated): the canonical row
    order, a stable sort by row (duplicates keep the parts' order)."""
    order = np.argsort(np.concatenate([p["rows"] for p in parts]), kind="stable")
    dest = np.empty_like(order)
    dest[order] = np.arange(len(order))
    return dest


def same_uploads(a: dict[str, np.ndarray], b: dict[str, np.ndarray], chunk: int = 1 << 16) -> bool:
    """Whether two merged uploads (`merge_uploads`) hold the same arrays, compared ``chunk`` rows at a time (no
    full-size temporaries)."""
    for k in UPLOAD_KEYS:
        x, y = a[k], b[k]
        if x is y:
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not all(np.array_equal(x[i : i + chunk], y[i : i + chunk]) for i in range(0, len(x), chunk)):
            return False
    return True


def mechanism_for(public: PublicSpec, dim: int) -> Any:
    """The configured mechanism (``public.privacy``) for inputs of width ``dim``:
    `fl_privtext.privacy.mechanism_from_section` (the one construction path), with the public pca map fitted
    here where ``privacy.projection = pca``, on the public data `PublicSpec` names (``PublicSpec.of(cfg)``)."""
    privacy = public.privacy
    projector = None
    if privacy.projection == "pca" and "projection" in mechanism_params(privacy.mechanism):
        projector = public_projection(public, dim)
    return mechanism_from_section(privacy, dim, projector=projector)


def upload_rows(data: ClientData, client: int, rnd: int, federation: FederationConfig) -> np.ndarray:
    """Rows a client uploads in round ``rnd`` (0-based): all of them (repeat) or its ``rnd``-th slice (stream)."""
    rows = np.asarray(data.shards[client], np.int64)
    if federation.schedule == "stream":
        return np.array_split(rows, federation.rounds)[rnd]
    return rows


def client_upload(data: ClientData, client: int, rnd: int, seed: int, cfg: ExperimentConfig, *,
                  client_seed: int | None = None) -> Upload:
    """What virtual client ``client`` sends in round ``rnd`` of repetition ``seed``: privatized features,
    (randomized) labels, row ids. Randomness from `client_generator` (secret unless ``client_seed`` is given).

    Raw text and raw representations stay here; only the mechanism's output leaves the function. A record whose
    representation is not finite is refused (ValueError naming the client and the record ids): nothing is sent.
    """
    rows = upload_rows(data, client, rnd, cfg.federation)
    out_x: np.ndarray | None = None  # (len(rows), output width) float32, filled batch by batch
    in_dim = 0
    out_y = np.empty(len(rows), np.int64)
    mech = None
    bs = cfg.federation.batch_size
    key = point_key(cfg) if client_seed is not None else ""
    for b, start in enumerate(range(0, len(rows), bs)):
        batch = rows[start : start + bs]
        x, g = _client_features(data, batch, cfg, lambda digest, b=b: client_generator(  # type: ignore[misc]
            client_seed, "privatize", key, seed, rnd, client, b, digest) if client_seed is not None else
            client_generator(None))
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise ValueError(f"client {client}: record(s) {batch[bad][:10].tolist()} have non-finite "
                             "representations (NaN or inf); this client refuses to upload (nothing was sent).")
        if mech is None:
            in_dim = x.shape[1]
            mech = mechanism_for(PublicSpec.of(cfg), in_dim)
        z = mech.privatize(x, g)
        if out_x is None:  # the batches' outputs written in place: no list of them, no concatenated copy
            out_x = np.empty((len(rows), *z.shape[1:]), np.float32)
        out_x[start : start + len(batch)] = z  # float32, as the concatenation's astype
        y = data.labels_of(batch)
        if cfg.privacy.label_epsilon > 0 and data.num_classes > 1:
            y = label_rr(y, data.num_classes, cfg.privacy.label_epsilon, g)
        out_y[start : start + len(batch)] = y
    if out_x is None:  # an empty shard or stream slice
        return Upload(np.zeros((0, 0), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    return Upload(out_x, out_y, rows.astype(np.int64), in_dim)


def data_digest(rows: np.ndarray, data: np.ndarray | Sequence[str]) -> str:
    """sha256 (32 hex digits) of record ids and the exact data privatized: part of the reproducible stream's key."""
    h = hashlib.sha256(np.ascontiguousarray(np.asarray(rows, np.int64)).tobytes())
    if isinstance(data, np.ndarray):
        h.update(f"{data.dtype}{data.shape}".encode())
        h.update(np.ascontiguousarray(data).tobytes())
    else:
        for t in data:
            h.update(str(t).encode())
            h.update(b"\0")
    return h.hexdigest()[:32]


def _client_features(data: ClientData, rows: np.ndarray, cfg: ExperimentConfig,
                     stream: Any) -> tuple[np.ndarray, np.random.Generator]:
    """Representations of ``rows`` on the client (cached, or extracted here: always when word dropout is on) and
    the batch's generator, ``stream(data digest)``, keyed by the records and the data that is privatized."""
    if cfg.privacy.mu == 0 and data.features is not None:
        # a map's pages dropped as read, in file order: one chunk's pages at a time in this process's RSS (issue #38)
        x = np.asarray(take_rows(data.features, rows), np.float32)
        return x, stream(data_digest(rows, x))
    if data.texts is None or data.extractor is None:
        raise ValueError("This client has no texts to extract from (a snapshot holds cached features only); "
                         "word dropout (privacy.mu > 0) needs the dataset and the extractor on the client.")
    texts = [data.texts[i] for i in rows]
    pairs = None if data.text_pairs is None else [data.text_pairs[i] for i in rows]
    g = stream(data_digest(rows, texts + (pairs or [])))
    if cfg.privacy.mu > 0:
        texts = word_dropout(texts, cfg.privacy.mu, g)
        if pairs is not None:
            pairs = word_dropout(pairs, cfg.privacy.mu, g)
    return np.asarray(data.extractor.extract(texts, pairs, progress=False), np.float32), g


def client_on_device(data: ClientData, client: int, rows: np.ndarray, model: dict[str, np.ndarray],
                     cfg: ExperimentConfig) -> np.ndarray:
    """On-device inference (`fl_privtext.ondevice`): virtual client ``client`` applies the server's exported model
    to E[upload | x] of its clean records ``rows`` and returns only the (k, k) confusion counts."""
    rows = np.asarray(rows, np.int64)
    foreign = np.setdiff1d(rows, data.shards[client])
    if foreign.size:
        raise ValueError(f"client {client}: asked to evaluate record(s) {foreign[:10].tolist()} that it does not "
                         "hold; nothing was evaluated.")
    if data.features is not None:
        x = np.asarray(take_rows(data.features, rows), np.float32)  # read in file order, back in ``rows``' order
    elif data.texts is not None and data.extractor is not None:
        pairs = None if data.text_pairs is None else [data.text_pairs[i] for i in rows]
        x = np.asarray(data.extractor.extract([data.texts[i] for i in rows], pairs, progress=False), np.float32)
    else:
        raise ValueError(f"client {client}: no features or texts to evaluate on.")
    if len(x) and not np.isfinite(x).all():
        raise ValueError(f"client {client}: non-finite representations among the records to evaluate.")
    mech = mechanism_for(PublicSpec.of(cfg), x.shape[1]) if len(x) else None
    return on_device_counts(x, data.labels_of(rows), mech, model, data.num_classes)
