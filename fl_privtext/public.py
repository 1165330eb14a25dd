"""Public data for the privacy mechanisms: the PCA projection fitted on a dataset disjoint from every simulated user.

``privacy.projection = pca`` with ``privacy.public-data = NAME``: the representations of dataset NAME (all its rows,
same extractor as the experiment, from the embedding cache) give the top ``privacy.proj-dim`` principal directions.
NAME must differ from ``data.name``: no simulated user's text may shape the projection. The fitted map is public
(the server may know it) and is named in every report by its source and fingerprint.

Heavy imports (datasets, the extractor) happen only here and only for pca; the result is memoised per process.
"""

from __future__ import annotations

import numpy as np

from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy.projection import PublicProjection, fit_pca


def check_public_data(cfg: ExperimentConfig) -> str:
    """The public dataset's name, after checking that it is set and disjoint from the simulated users' dataset."""
    name = cfg.privacy.public_data.strip()
    if not name:
        raise ValueError("privacy.projection = pca needs privacy.public-data: the public dataset (disjoint from every "
                         "simulated user) the PCA is fitted on.")
    if name == cfg.data.name:
        raise ValueError(f"privacy.public-data must name a dataset disjoint from every simulated user; it equals "
                         f"data.name ({name!r}). Pick another dataset (e.g. ag_news for blog).")
    return name


def public_features(cfg: ExperimentConfig) -> np.ndarray:
    """(n, dim) representations of the public dataset with the experiment's extractor (cached on disk)."""
    from fl_privtext.data import load_dataset
    from fl_privtext.extract import extract_cached, make_extractor_from
    ds = load_dataset(check_public_data(cfg), data_root=cfg.data.root or None)
    return np.asarray(extract_cached(ds, make_extractor_from(cfg), cfg.extractor.cache_dir or None, progress=False))


_FITTED: dict[tuple, PublicProjection] = {}


def public_projection(cfg: ExperimentConfig, dim: int) -> PublicProjection:
    """The pca map from ``dim`` to ``privacy.proj-dim`` dimensions fitted on ``privacy.public-data`` (memoised)."""
    if cfg.privacy.projection != "pca":
        raise ValueError(f"public_projection is for privacy.projection = pca, got {cfg.privacy.projection!r}.")
    name = check_public_data(cfg)
    e = cfg.extractor
    key = (name, cfg.data.root, e.name, e.model, e.pooling, e.max_length, e.cache_dir, cfg.privacy.proj_dim, dim)
    if key not in _FITTED:
        x = public_features(cfg)
        if x.shape[1] != dim:
            raise ValueError(f"The public data {name!r} has {x.shape[1]}-dimensional representations; the users' "
                             f"have {dim}. Use the same extractor.")
        _FITTED[key] = fit_pca(x, cfg.privacy.proj_dim, source=f"{name!r} (extractor {e.name})")
    return _FITTED[key]
