"""What an eavesdropper is allowed to read: observed traffic plus public knowledge, nothing else.

Every attack entry point takes one :class:`AttackView` (and nothing derived from the experiment's ground truth).
The view is built by :func:`fl_privtext.attacks.evaluate.observe` from the recorded uploads; the truth the attacks
are scored against (target users' attributes, which candidate produced which upload, target texts) stays in
:class:`fl_privtext.attacks.evaluate.Truth` and never reaches an attack (tests/attacks/test_view.py enforces it).

Knowledge, after the threat model of docs/architecture.md:
- traffic: every upload's payload, its (clear or randomized) task label, its sender node and its user pseudonym;
- Kerckhoffs: the mechanism object with its parameters (never a client's randomness), the extractor;
- auxiliary users: the private attributes of users who made them public, and their texts (``public_*``), which the
  attacker can run through the public extractor and mechanism itself;
- the linkage game (re-identification / membership): a pool of M candidates whose texts are public
  (``candidates``: their clean representations, in the attacker's own order) and the uploads to link (``queries``);
  closed world: each query was produced by one of the candidates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_privtext.attacks.chunks import group_rows, group_sizes, row_chunks
from fl_privtext.config import AttackConfig
from fl_privtext.data import AttributeSpec
from fl_privtext.memory import positions


@dataclass(frozen=True)
class KnownAttribute:
    """One private attribute as the attacker knows it: its values for the uploads of auxiliary users only."""

    spec: AttributeSpec
    index: np.ndarray  # (A,) indices into the view's uploads (uploads of aux users)
    values: np.ndarray  # (A,) class indices, or (A, K) 0/1 for multilabel
    public_values: np.ndarray | None = None  # (P,) or (P, K): the values of the view's public texts


@dataclass(frozen=True)
class AttackView:
    """Observed traffic and public knowledge of one seed (arrays read-only)."""

    uploads: np.ndarray  # (N, D) float32 payloads as observed on the wire
    labels: np.ndarray  # (N,) integer task labels as uploaded (randomized when labels_in_clear is False)
    labels_in_clear: bool
    num_labels: int  # number of task classes (0: no task label uploaded)
    label_epsilon: float  # epsilon of the label randomizer (0 when labels are in the clear): public parameter
    sender: np.ndarray  # (N,) integer sending node of each upload
    user: np.ndarray  # (N,) integer user pseudonym of each upload (`observe` holds these in their narrowest type)
    mechanism: Any  # fl_privtext.privacy.Mechanism: name and parameters are public (Kerckhoffs)
    known: dict[str, KnownAttribute]  # attribute name -> what the aux users disclosed
    public_texts: tuple[str, ...]  # texts the attacker holds (aux users' posts)
    public_features: np.ndarray | None  # (P, k) the public extractor on public_texts (None: not available)
    public_user: np.ndarray  # (P,) pseudonym of the author of each public text
    candidates: np.ndarray | None  # (M, k) clean representations of the linkage pool, attacker's order
    queries: np.ndarray  # (Q,) upload indices to link to one candidate each
    config: AttackConfig
    seed: int  # root of the attacker's own random streams (logged run seed)
    meta: dict[str, Any] = field(default_factory=dict)  # public facts (e.g. extractor identity)

    def __post_init__(self) -> None:
        n = len(self.uploads)
        for name in ("labels", "sender", "user"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"AttackView.{name} must have one entry per upload ({n}); "
                                 f"got {len(getattr(self, name))}.")
        if self.public_features is not None and len(self.public_features) != len(self.public_texts):
            raise ValueError("AttackView.public_features must have one row per public text.")
        for arr in (self.uploads, self.labels, self.sender, self.user, self.queries, self.public_user,
                    self.public_features, self.candidates):
            if isinstance(arr, np.ndarray) and arr.flags.writeable:
                arr.setflags(write=False)

    def known_users(self) -> np.ndarray:
        """Pseudonyms of users with at least one disclosed attribute (the attacker's training users)."""
        idx = np.concatenate([k.index for k in self.known.values()]) if self.known else np.zeros(0, np.int64)
        return np.unique(self.user[idx])

    def target_mask(self) -> np.ndarray:
        """(N,) True for uploads of users the attacker does not know: everyone it attacks. Built `row_chunks` at a
        time: one byte an upload (`np.isin` over every upload at once peaks at ~19)."""
        known, out = self.known_users(), np.empty(len(self.user), bool)
        for c in row_chunks(len(out)):
            out[c] = ~np.isin(self.user[c], known)
        return out

    def target_rows(self) -> np.ndarray:
        """``np.flatnonzero(self.target_mask())`` in int32 (int64 from 2**31 uploads): the upload indices attacked
        (`positions`: no int64 copy of them, 8 bytes a target, ~0.23 GB at 10M synthetic users; issue #38)."""
        return self.targets[0]

    @functools.cached_property
    def targets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, users, inv): the uploads attacked (`target_rows`), their users sorted (U,) and each row's position
        among them (`group_rows`), computed once and shared (read-only) by every attack and its referee: one copy
        (4 bytes a target twice, 4 a target user) where each attribute's attack, its floor and its referee each
        built their own (issue #38: the attributes run side by side over millions of targets)."""
        rows = positions(self.target_mask())
        users, inv = group_rows(self.user, rows)
        for arr in (rows, users, inv):
            arr.setflags(write=False)
        return rows, users, inv

    @functools.cached_property
    def target_counts(self) -> np.ndarray:
        """(U,) each target user's uploads among the targets (`targets`' users, in order), in the narrowest type
        (`group_sizes`: 1 byte a user below 128 uploads), computed once and shared (read-only) by the attacks'
        per-user soft votes and the referee (where each took an int64 ``np.bincount`` of the targets' inverse)."""
        counts = group_sizes(self.targets[2], len(self.targets[1]))
        counts.setflags(write=False)
        return counts
