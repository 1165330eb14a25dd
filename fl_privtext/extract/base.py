"""The Extractor role (a Protocol) and ``make_extractor`` (the registry of extractors: ``fl_privtext.names.EXTRACTORS``)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fl_privtext.names import EXTRACTORS


@runtime_checkable
class Extractor(Protocol):
    """A frozen, deterministic map from texts (or text pairs) to float32 vectors.

    ``identity()`` returns a JSON-safe dict of everything that changes the outputs (kind, model files' content
    hashes, pooling, max_length, tokenizer rules and code versions); the embedding cache key is built from it.
    ``extract`` returns (N, dim) float32 rows in input order (GloVe with pairs: (N, 2 * dim), see
    docs/extractors.md).
    """

    name: str
    dim: int

    def identity(self) -> dict[str, Any]: ...

    def extract(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, *, progress: bool = True
    ) -> np.ndarray: ...


# EXTRACTORS (fl_privtext.names): extractor.name -> the extractor class, a registry the config reads without torch


def make_extractor(name: str, **opts: Any) -> Extractor:
    """Build the extractor registered as ``name`` with keyword options.

    Options: model, pooling, max_length, batch_size, device, precision (see each class; GloVe takes no precision). Unknown names or options raise
    ValueError listing the valid ones.
    """
    if name not in EXTRACTORS:
        raise ValueError(f"Unknown extractor {name!r}; valid names are: {', '.join(sorted(EXTRACTORS))}.")
    cls: Any = EXTRACTORS[name]
    accepted = [p for p in inspect.signature(cls).parameters]
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown option(s) {', '.join(unknown)} for extractor {name!r}; accepted: {', '.join(accepted)}."
        )
    ext: Extractor = cls(**opts)
    return ext


def make_extractor_from(cfg: Any) -> Extractor:
    """The extractor an experiment config's ``[extractor]`` section names (``cfg.extractor``: name, model, device,
    pooling, max_length, batch_size (0 = auto: 64 on CPU, 256 on CUDA), precision)."""
    e = cfg.extractor
    opts: dict[str, Any] = {"max_length": e.max_length, "batch_size": e.batch_size or None, "pooling": e.pooling,
                            "precision": e.precision}
    if e.name == "glove":
        opts = {}
    if e.model:
        opts["model"] = e.model
    if e.device and e.name != "glove":
        opts["device"] = e.device
    return make_extractor(e.name, **opts)
