"""The prepared point: everything both sides derive deterministically from the config (the dataset, the users'
roles, the clients' shards, the cached features), and the clients' view of it (``Prepared.client``).

The orchestrator builds it (`fl_privtext.pipeline.preparation.prepare`: data, then extract); the clients, the server,
the attacks and the report read it. It lives in the client stage, the lowest that all its readers may import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from fl_privtext.client.upload import ClientData
from fl_privtext.data import TextDataset
from fl_privtext.data.splits import Roles

__all__ = ["Prepared"]


@dataclass
class Prepared:
    """Everything both sides derive deterministically from the config (no randomness from the privatization)."""

    ds: TextDataset
    roles: Roles | np.ndarray  # (N,) "train" | "test" | "aux", split by user (data.split: random, or the source's
    # splits): `fl_privtext.data.splits.Roles` (one byte a record) from `prepare`
    shards: list[np.ndarray]  # row indices per virtual client
    extractor: Any
    features: np.ndarray | None  # (N, dim) cached extractor output (memmap), None when not cached
    timings: dict[str, float] = field(default_factory=dict)

    @cached_property
    def client(self) -> ClientData:
        """The clients' side of the data (what `fl_privtext.client.client_upload` reads); its labels in their
        narrowest integer type (held by the driver through the run; the readers widen what they take)."""
        return ClientData(shards=self.shards, labels=self.ds.label_codes, num_classes=len(self.ds.label_names),
                          features=self.features, texts=self.ds.text_column, text_pairs=self.ds.text_pair_column,
                          extractor=self.extractor, users=self.ds.user_index, test=self.roles == "test")
