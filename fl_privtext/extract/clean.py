"""The clean representation of a dataset row as anyone holding the public texts computes it with the public
extractor: the eavesdropper's candidates (`fl_privtext.attacks.eavesdropper`) and the referee's exact figures
(`fl_privtext.report.referee`) read it; no client or server code does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from fl_privtext.extract.cache import EmbeddingCache
from fl_privtext.memory import take_rows


class PreparedRows(Protocol):
    """What this reads of the prepared point (`fl_privtext.client.prepared.Prepared`): the dataset, its cached
    features (or None) and the extractor."""

    ds: Any
    features: np.ndarray | None
    extractor: Any


__all__ = ["PreparedRows", "clean_features"]


def clean_features(prep: PreparedRows, cache_dir: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """Clean representations of rows' texts as the attacker computes them from public texts with the public
    extractor: the extraction cache when present (identical, deterministic), else the extractor itself.
    ``cache_dir``: ``extractor.cache-dir`` ("" for the default cache)."""
    feats = prep.features
    if feats is None and prep.extractor is not None:
        try:
            cache = EmbeddingCache(cache_dir or None)
            feats = cache.load(cache.key(prep.ds.fingerprint, prep.extractor.identity()))
        except Exception:  # noqa: BLE001 - no cache: extract the public rows below
            feats = None
    if feats is not None:
        src = feats  # read in chunks whose pages of the mapped cache are dropped after each (`take_rows`): the
        # attack's public rows and candidates otherwise left ~1 in 5 of the cache's pages in the driver (issue #38)
        return lambda rows: np.asarray(take_rows(src, np.sort(rows))[np.argsort(np.argsort(rows))], np.float32)
    if prep.extractor is None:
        return None
    texts, pairs = prep.ds.text_column, prep.ds.text_pair_column
    return lambda rows: np.asarray(prep.extractor.extract([texts[i] for i in rows],
                                                          None if pairs is None else [pairs[i] for i in rows],
                                                          progress=False), np.float32)
