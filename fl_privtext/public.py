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

Heavy imports (datasets, the extractor) happen only here and only for pca; the result is memoised per process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy.projection import PublicProjection, fit_pca
from fl_privtext.rng import generator

if TYPE_CHECKING:
    from fl_privtext.data.schema import TextDataset


OTHER_USERS = "other-users"
OTHER_USERS_MAX_ROWS = 10_000  # NAME:other-users: at most this many rows (bounds the extraction; a public seed)
ROW_CAPS = ("max_rows", "records_per_user")  # the experiment's options that NAME:other-users does not apply


def check_public_data(cfg: ExperimentConfig) -> str:
    """The public dataset's name, after checking that it is set and disjoint from the simulated users' dataset."""
    name = cfg.privacy.public_data.strip()
    if not name:
        raise ValueError("privacy.projection = pca needs privacy.public-data: the public dataset (disjoint from every "
                         "simulated user) the PCA is fitted on.")
    base, sep, qualifier = name.partition(":")
    if sep and (qualifier != OTHER_USERS or base != cfg.data.name):
        raise ValueError(f"privacy.public-data = {name!r}: expected a dataset name, or "
                         f"'{cfg.data.name}:{OTHER_USERS}' (the simulated corpus's rows by users who are not "
                         "simulated).")
    if name == cfg.data.name:
        raise ValueError(f"privacy.public-data must name a dataset disjoint from every simulated user; it equals "
                         f"data.name ({name!r}). Pick another dataset (e.g. ag_news for blog), or "
                         f"'{name}:{OTHER_USERS}' for the same corpus's users who are not simulated.")
    return name


def public_dataset(cfg: ExperimentConfig) -> TextDataset:
    """The public rows (module docstring): another dataset, or the corpus's rows by users who are not simulated."""
    from fl_privtext.data import load_dataset

    name = check_public_data(cfg)
    base, sep, _ = name.partition(":")
    if not sep:
        return load_dataset(name, data_root=cfg.data.root or None)
    # the simulated users: the corpus as the experiment loads it (records_per_user keeps each user's first records,
    # the same users: left out here, where the loader does not know it)
    sim_options = {k: v for k, v in cfg.data.options.items() if k != "records_per_user"}
    simulated = set(np.unique(load_dataset(base, data_root=cfg.data.root or None, **sim_options).user_ids).tolist())
    options = {k: v for k, v in cfg.data.options.items() if k not in ROW_CAPS}
    full = load_dataset(base, data_root=cfg.data.root or None, **options)
    rows = np.flatnonzero([u not in simulated for u in full.user_ids])
    if len(rows) < 2:
        raise ValueError(f"privacy.public-data = {name!r}: {len(rows)} rows of {base!r} are by users who are not "
                         "simulated; a PCA needs at least 2 (lower data.options.max_rows).")
    if len(rows) > OTHER_USERS_MAX_ROWS:
        rows = np.sort(generator(0, "public-other-users").choice(rows, OTHER_USERS_MAX_ROWS, replace=False))
    return full.select(rows, name=f"{base}-{OTHER_USERS}")


def public_features(cfg: ExperimentConfig) -> np.ndarray:
    """(n, dim) representations of the public dataset with the experiment's extractor (cached on disk)."""
    from fl_privtext.extract import extract_cached, make_extractor_from

    ds = public_dataset(cfg)
    return np.asarray(extract_cached(ds, make_extractor_from(cfg), cfg.extractor.cache_dir or None,
                                     progress=bool(cfg.run.progress)))


_FITTED: dict[tuple, PublicProjection] = {}


def public_projection(cfg: ExperimentConfig, dim: int) -> PublicProjection:
    """The pca map from ``dim`` to ``privacy.proj-dim`` dimensions fitted on ``privacy.public-data`` (memoised)."""
    if cfg.privacy.projection != "pca":
        raise ValueError(f"public_projection is for privacy.projection = pca, got {cfg.privacy.projection!r}.")
    name = check_public_data(cfg)
    e = cfg.extractor
    key = (name, cfg.data.root, tuple(sorted(cfg.data.options.items())), e.name, e.model, e.pooling, e.max_length, e.cache_dir, cfg.privacy.proj_dim, dim)
    if key not in _FITTED:
        x = public_features(cfg)
        if x.shape[1] != dim:
            raise ValueError(f"The public data {name!r} has {x.shape[1]}-dimensional representations; the users' "
                             f"have {dim}. Use the same extractor.")
        _FITTED[key] = fit_pca(x, cfg.privacy.proj_dim, source=f"{name!r} (extractor {e.name})")
    return _FITTED[key]
