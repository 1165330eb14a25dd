"""Public data for the privacy mechanisms: the PCA projection fitted on a dataset disjoint from every simulated user.

``privacy.projection = pca`` with ``privacy.public-data = NAME``: the representations of dataset NAME (all its rows,
same extractor as the experiment, from the embedding cache) give the top ``privacy.proj-dim`` principal directions.
NAME must differ from ``data.name``: no simulated user's text may shape the projection. The fitted map is public
(the server may know it) and is named in every report by its source and fingerprint.

In-domain public data: ``privacy.public-data = NAME:other-users`` (NAME = ``data.name``) is the simulated corpus's
rows written by users who are NOT simulated: the corpus loaded with the experiment's options but without its row
caps (``max_rows``, ``records_per_user``), every row of a user present in the experiment removed, then a uniform
subsample of at most `OTHER_USERS_MAX_ROWS` rows with a fixed public seed. The assumption (stated in every report by
the source string): the server holds unlabelled text of the task's domain from people outside the federation, e.g.
public posts of the same platform. No label of it is read (the secure path's lda takes its total covariance,
`fl_privtext.server.aggregate.public_within`).

``privacy.proj-dim = auto``: k from the public rows and the mechanism's noise law (`auto_proj_dim`: the k whose kept
public variance survives the noise of n uploads best), computed alike by every client and the server.

Heavy imports (datasets, the extractor) happen only here and only for pca. The stage reads a `PublicSpec` (built
once from the configuration, `PublicSpec.of`), not the whole config.

Computed once per run: the fitted map and the auto k are memoised per process and stored on disk, content-addressed
(`store_key`), under ``<cache dir>/public/`` (the extraction's cache directory). The driver computes them before the
clients start (`fl_privtext.pipeline.runner`); every Ray actor then reads the stored entry instead of refitting
(issue #38: ten actors refitting the same map missed the round timeout). The entry holds public data only, and a
process that finds none (a cold cache, a real client without the driver's disk) computes it itself, with a file lock
so that concurrent processes compute it once: the store is a cache, never an input anyone else chooses.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import io
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fl_privtext.config import AUTO_PROJ_DIM, ExperimentConfig, ExtractorConfig, PrivacyConfig, Scalar
from fl_privtext.datafiles import find_files, resolve_cache_dir
from fl_privtext.names import DATASET_FILES
from fl_privtext.privacy.mechanisms import mechanism_from_section
from fl_privtext.privacy.projection import PublicProjection, fit_pca
from fl_privtext.rng import generator
from fl_privtext.rundir import WriteError, write_atomic

if TYPE_CHECKING:
    from fl_privtext.data.schema import TextDataset


OTHER_USERS = "other-users"
OTHER_USERS_MAX_ROWS = 10_000  # NAME:other-users: at most this many rows (bounds the extraction; a public seed)
ROW_CAPS = ("max_rows", "records_per_user")  # the experiment's options that NAME:other-users does not apply
STORE_VERSION = 1  # bump when an entry's layout or meaning changes
STORE_FOLDER = "public"  # <cache dir>/public/<key>.npz: the stored maps and auto k (module docstring)
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublicSpec:
    """What the public-data stage reads of a configuration, and nothing else: the privacy section (the public
    dataset, the projection and, for ``proj-dim = auto`` and the mechanism built on the map, the mechanism
    and its parameters), the extractor section (the public rows are extracted as the users' are), the
    simulated corpus's name, root and options (``NAME:other-users`` leaves its users out; `expected_uploads`
    counts its rows), the role fractions (`expected_uploads`) and ``run.progress`` (the extraction's progress
    bar). All of it is public configuration: clients and server build the same map from it."""

    privacy: PrivacyConfig
    extractor: ExtractorConfig
    data_name: str
    data_root: str
    data_options: Mapping[str, Scalar]
    test_frac: float
    aux_frac: float
    progress: bool

    @classmethod
    def of(cls, cfg: ExperimentConfig) -> PublicSpec:
        """The public stage's view of ``cfg`` (the one place that reads it)."""
        d = cfg.data
        return cls(cfg.privacy, cfg.extractor, d.name, d.root, d.options, d.test_frac, d.aux_frac,
                   bool(cfg.run.progress))


def check_public_data(spec: PublicSpec) -> str:
    """The public dataset's name, after checking that it is set and disjoint from the simulated users' dataset."""
    name = spec.privacy.public_data.strip()
    if not name:
        raise ValueError("privacy.projection = pca needs privacy.public-data: the public dataset (disjoint from every "
                         "simulated user) the PCA is fitted on.")
    base, sep, qualifier = name.partition(":")
    if sep and (qualifier != OTHER_USERS or base != spec.data_name):
        raise ValueError(f"privacy.public-data = {name!r}: expected a dataset name, or "
                         f"'{spec.data_name}:{OTHER_USERS}' (the simulated corpus's rows by users who are "
                         "not simulated).")
    if name == spec.data_name:
        raise ValueError(f"privacy.public-data must name a dataset disjoint from every simulated user; it equals "
                         f"data.name ({name!r}). Pick another dataset (e.g. ag_news for blog), or "
                         f"'{name}:{OTHER_USERS}' for the same corpus's users who are not simulated.")
    return name


def public_dataset(spec: PublicSpec) -> TextDataset:
    """The public rows (module docstring): another dataset, or the corpus's rows by users who are not simulated."""
    from fl_privtext.data import load_dataset  # Hugging Face datasets and pyarrow (seconds)

    name = check_public_data(spec)
    base, sep, _ = name.partition(":")
    if not sep:
        return load_dataset(name, data_root=spec.data_root or None)
    simulated = set(np.unique(_simulated_users(spec)).tolist())
    options = {k: v for k, v in spec.data_options.items() if k not in ROW_CAPS}
    full = load_dataset(base, data_root=spec.data_root or None, **options)
    rows = np.flatnonzero([u not in simulated for u in full.user_ids])
    if len(rows) < 2:
        raise ValueError(f"privacy.public-data = {name!r}: {len(rows)} rows of {base!r} are by users who are not "
                         "simulated; a PCA needs at least 2 (lower data.options.max_rows).")
    if len(rows) > OTHER_USERS_MAX_ROWS:
        rows = np.sort(generator(0, "public-other-users").choice(rows, OTHER_USERS_MAX_ROWS, replace=False))
    return full.select(rows, name=f"{base}-{OTHER_USERS}")


def _extract() -> ModuleType:
    """`fl_privtext.extract`, imported where pca needs the public features or their store key (torch)."""
    from fl_privtext import extract  # torch (the extractors)

    return extract


def public_features(spec: PublicSpec) -> np.ndarray:
    """(n, dim) representations of the public dataset with the experiment's extractor (cached on disk)."""
    extract, ds = _extract(), public_dataset(spec)
    return np.asarray(extract.extract_cached(ds, extract.make_extractor_from(spec), spec.extractor.cache_dir or None,
                                             progress=bool(spec.progress)))


_FITTED: dict[tuple, PublicProjection] = {}
_AUTO: dict[tuple, AutoDim] = {}


@dataclass(frozen=True)
class AutoDim:
    """What ``privacy.proj-dim = auto`` chose (`auto_proj_dim`): k, the rule's score per candidate k, and n."""

    k: int
    scores: dict[int, float]
    uploads: int

    def describe(self) -> str:
        return f"k = {self.k} by privacy.proj-dim = auto for {self.uploads} training uploads"


def _key(spec: PublicSpec, dim: int) -> tuple:
    """What the pca map depends on; with ``proj-dim = auto`` also the mechanism and the expected uploads."""
    e, p = spec.extractor, spec.privacy
    key = (check_public_data(spec), spec.data_name, spec.data_root, tuple(sorted(spec.data_options.items())),
           e.name, e.model, e.pooling, e.max_length, e.cache_dir, p.proj_dim, dim)
    if p.proj_dim != AUTO_PROJ_DIM:
        return key
    return (*key, spec.test_frac, spec.aux_frac, p.mechanism, tuple(sorted(p.mechanism_params().items())))


def _checked_features(spec: PublicSpec, dim: int) -> np.ndarray:
    x = public_features(spec)
    if x.shape[1] != dim:
        raise ValueError(f"The public data {spec.privacy.public_data!r} has {x.shape[1]}-dimensional "
                         f"representations; the users' have {dim}. Use the same extractor.")
    return x


def public_projection(spec: PublicSpec, dim: int) -> PublicProjection:
    """The pca map from ``dim`` to ``privacy.proj-dim`` dimensions (`auto_proj_dim` for auto) fitted on
    ``privacy.public-data`` (memoised per process, stored on disk per run: module docstring)."""
    if spec.privacy.projection != "pca":
        raise ValueError(f"public_projection is for privacy.projection = pca, got "
                         f"{spec.privacy.projection!r}.")
    key = _key(spec, dim)
    if key not in _FITTED:
        _FITTED[key] = _stored(spec, dim, "pca", lambda: _fit(spec, dim), _save_map, _load_map)
    return _FITTED[key]


def _fit(spec: PublicSpec, dim: int) -> PublicProjection:
    x = _checked_features(spec, dim)
    source = f"{check_public_data(spec)!r} (extractor {spec.extractor.name})"
    if spec.privacy.proj_dim == AUTO_PROJ_DIM:
        auto = _auto(spec, dim, lambda: x)
        return fit_pca(x, auto.k, source=f"{source}, {auto.describe()}")
    return fit_pca(x, int(spec.privacy.proj_dim), source=source)


def _simulated_users(spec: PublicSpec) -> np.ndarray:
    """The user of every row of the simulated corpus as the loader gives it (``records_per_user`` keeps each user's
    first records and is applied after loading, so it is left out here: the same users)."""
    options = tuple(sorted((k, v) for k, v in spec.data_options.items() if k != "records_per_user"))
    return _loaded_users(spec.data_name, spec.data_root, options)


@functools.lru_cache(maxsize=4)
def _loaded_users(name: str, root: str, options: tuple) -> np.ndarray:
    from fl_privtext.data import load_dataset  # Hugging Face datasets and pyarrow (seconds)

    users = np.asarray(load_dataset(name, data_root=root or None, **dict(options)).user_ids)
    users.setflags(write=False)
    return users


def expected_uploads(spec: PublicSpec) -> int:
    """n for `auto_proj_dim`: the training uploads of one round as anyone can compute them from the public
    configuration: the simulated rows (at most ``records_per_user`` per user) x (1 - test-frac - aux-frac)."""
    counts = np.unique(_simulated_users(spec), return_counts=True)[1]
    per_user = int(spec.data_options.get("records_per_user", 0) or 0)
    rows = int(np.minimum(counts, per_user).sum()) if per_user > 0 else int(counts.sum())
    return max(1, round(rows * (1.0 - spec.test_frac - spec.aux_frac)))


def resolved_signal(variances: np.ndarray, noise_trace: float, uploads: int) -> float:
    """sum_i nu_i^2 / (nu_i + N / n): each kept direction's variance nu_i weighted by the share of it that survives
    the error of a mean of n uploads, whose squared norm is the noise trace N over n (the Wiener factor
    nu / (nu + N / n); the error lies in all k directions at once, so each competes with all of it)."""
    nu = np.clip(np.asarray(variances, np.float64), 0.0, None)
    return float((nu * nu / (nu + noise_trace / max(uploads, 1) + 1e-300)).sum())


def choose_proj_dim(public_x: np.ndarray, mechanism_at: Callable[[int], Any], uploads: int) -> AutoDim:
    """The k in {2, 4, 8, ..., d} whose mechanism ``mechanism_at(k)`` (the pca map to k dimensions fitted on
    ``public_x``, then the randomiser) has the most `resolved_signal` for ``uploads`` uploads (`auto_proj_dim`)."""
    x = np.asarray(public_x, np.float32)
    dim = x.shape[1]
    ks = sorted({k for k in (2 ** np.arange(1, 12)).tolist() if k < dim} | {dim})
    scores: dict[int, float] = {}
    for k in ks:
        mech = mechanism_at(k)
        m = np.asarray(mech.expected(x), np.float64)
        nu = np.linalg.eigvalsh(np.atleast_2d(np.cov(m.T)))
        law = mech.noise_law(dim, m.mean(axis=0), generator(0, "public", "auto-proj-dim", k))  # its declared law
        scores[k] = resolved_signal(nu, float(law.variance.sum()), uploads)
    return AutoDim(max(ks, key=lambda k: (scores[k], -k)), scores, uploads)


def auto_proj_dim(spec: PublicSpec, dim: int) -> AutoDim:
    """``privacy.proj-dim = auto``: the k in {2, 4, 8, ..., dim} with the most `resolved_signal`.

    For each candidate k the configured mechanism is built with the pca map to k dimensions fitted on the public
    rows; nu_1..nu_k are the variances (eigenvalues of the covariance) of the public rows' inputs to the randomiser,
    E[u | x] (projected, then mapped to the sphere or ball), N the trace of the mechanism's noise law at that width
    (``Mechanism.noise_law``, the law the server's `fl_privtext.server.noise.noise_law` asks for), n
    `expected_uploads`. The noise trace grows with k (for the sphere mechanisms about linearly: the per-coordinate
    variance barely depends on k), the kept variance saturates: the smaller epsilon or n, the smaller k. Public data, the mechanism and the public configuration only: the clients
    and the server compute the same k, and no user's data shapes it. Measured against fixed k on blog
    (docs/results/frontier/discussion.md, 4d).
    """
    return _auto(spec, dim, lambda: _checked_features(spec, dim))


def _auto(spec: PublicSpec, dim: int, features: Callable[[], np.ndarray]) -> AutoDim:
    key = _key(spec, dim)
    if key not in _AUTO:
        def choose() -> AutoDim:
            x = features()  # read once for every candidate k
            return choose_proj_dim(x, lambda k: _mechanism_at(spec, dim, k, x), expected_uploads(spec))

        _AUTO[key] = _stored(spec, dim, "auto", choose, _save_auto, _load_auto)
    return _AUTO[key]


def _mechanism_at(spec: PublicSpec, dim: int, k: int, x: np.ndarray) -> Any:
    """The configured mechanism behind the pca map to k dimensions fitted on the public rows ``x`` (the client's
    construction path)."""
    fixed = replace(spec.privacy, proj_dim=k)
    return mechanism_from_section(fixed, dim, projector=fit_pca(x, k, source=f"candidate k = {k}"))


# ------------------------------------------------------------------------------------------------------------
# The per-run store: what is derived from public data alone, content-addressed on disk (module docstring)


def store_key(spec: PublicSpec, dim: int, kind: str) -> str:
    """sha256 (hex) of everything an entry ``kind`` ("pca": the map, "auto": the chosen k) depends on: the public
    configuration (`_key`), the public rows' content and the code that derives them from it (`_rows_stamp`), the
    extractor's identity (its model files' hashes) and the store's version. A changed public file, model, option or
    code gives another key, so a stale entry is never read."""
    extract = _extract()
    parts = {"version": STORE_VERSION, "kind": kind, "config": repr(_key(spec, dim)),
             "rows": _rows_stamp(spec, extract.file_sha256), "extractor": extract.make_extractor_from(spec).identity()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _rows_stamp(spec: PublicSpec, file_sha256: Callable[[Path], str]) -> dict[str, Any]:
    """The public rows' content without loading them where they come from a staged dataset's files (``file_sha256``
    of each file: `fl_privtext.extract.file_sha256`, memoised by path, size and mtime as the extractor's model files
    are; and the sha256 of this package's source, which turns files into rows); otherwise (embedded, generated, csv
    or hf corpora) the loaded rows' fingerprint."""
    base = check_public_data(spec).partition(":")[0]
    if base not in DATASET_FILES:
        return {"rows": public_dataset(spec).fingerprint}
    files = find_files(base, spec.data_root or None, DATASET_FILES[base])
    return {"files": {rel: file_sha256(path) for rel, path in zip(DATASET_FILES[base], files, strict=True)},
            "code": _code_stamp()}


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """sha256 of every source file of this package (about 1.4 MB: milliseconds)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def store_path(spec: PublicSpec, dim: int, kind: str) -> Path:
    """Where the entry ``kind`` of ``spec`` lives: ``<extractor.cache-dir or the default cache>/public/<key>.npz``."""
    return resolve_cache_dir(spec.extractor.cache_dir or None) / STORE_FOLDER / f"{store_key(spec, dim, kind)}.npz"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """An inter-process lock for computing the entry at ``path`` (flock on ``<path>.lock``): concurrent processes
    compute it once, the others wait and read it. Yields False (no lock, no store) where the folder is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path.with_suffix(".lock"), "a+b")  # noqa: SIM115 (closed below, after the unlock)
    except OSError as exc:
        log.debug("public store unavailable (%s): computing in this process", exc)
        yield False
        return
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _stored(spec: PublicSpec, dim: int, kind: str, compute: Callable[[], T],
            save: Callable[[T], dict[str, np.ndarray]], load: Callable[[dict[str, np.ndarray], PublicSpec, int], T]
            ) -> T:
    """The entry ``kind`` read from the store, else computed and written there (atomically). A store that cannot be
    used (an unwritable cache directory, an unreadable or damaged entry) only costs the computation, never a wrong
    result: what is read is checked as a fresh result would be (`_load_map`, `_load_auto`)."""
    try:
        path = store_path(spec, dim, kind)
    except OSError:  # e.g. the public files are missing: the computation says so in the loader's words
        return compute()
    with _locked(path) as usable:
        if not usable:
            return compute()
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as z:
                    return load(dict(z), spec, dim)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("public store entry %s is unreadable (%s); computing it again", path, exc)
        value = compute()
        buf, arrays = io.BytesIO(), dict[str, Any](save(value))
        np.savez(buf, **arrays)
        try:
            write_atomic(path, buf.getvalue())
        except WriteError as exc:
            log.debug("public store entry not written: %s", exc)
        return value


def _save_map(p: PublicProjection) -> dict[str, np.ndarray]:
    return {"matrix": p.matrix, "mean": p.mean, "method": np.array(p.method), "source": np.array(p.source)}


def _load_map(z: dict[str, np.ndarray], spec: PublicSpec, dim: int) -> PublicProjection:
    p = PublicProjection(str(z["method"]), z["matrix"], z["mean"], str(z["source"]))  # checks shapes, finiteness
    k = _auto(spec, dim, lambda: _checked_features(spec, dim)).k if spec.privacy.proj_dim == AUTO_PROJ_DIM else \
        int(spec.privacy.proj_dim)
    if p.method != "pca" or p.in_dim != dim or p.out_dim != k:
        raise ValueError(f"expected a pca map {dim} -> {k}, found {p.method} {p.in_dim} -> {p.out_dim}")
    return p


def _save_auto(a: AutoDim) -> dict[str, np.ndarray]:
    ks = sorted(a.scores)
    return {"k": np.array(a.k), "ks": np.array(ks, np.int64), "scores": np.array([a.scores[k] for k in ks], np.float64),
            "uploads": np.array(a.uploads)}


def _load_auto(z: dict[str, np.ndarray], spec: PublicSpec, dim: int) -> AutoDim:
    scores = {int(k): float(v) for k, v in zip(z["ks"].tolist(), z["scores"].tolist(), strict=True)}
    a = AutoDim(int(z["k"]), scores, int(z["uploads"]))
    if a.k not in scores or not 1 <= a.k <= dim:
        raise ValueError(f"expected k among the scored candidates in [1, {dim}], found {a.k}")
    return a
