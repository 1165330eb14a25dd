"""The shuffler of the shuffle model (issue #24): between the clients and the server, it strips the sender and
permutes each round's reports before the server (and the eavesdropper, which watches the server's Grid) sees them.

Trust model. The shuffler is trusted (it sees who sent what, like an anonymising relay or a TEE); the server is
not. Its permutations come from OS entropy by default (a permutation the server could recompute would void the
shuffle; style rule 13).

What leaves the shuffler per round: per COHORT, one message sent by ``SHUFFLER_NODE_ID`` holding every report of
the cohort's users in a uniformly random order, with ``ConfigRecord("cohort", {"name": ...})``.
- Cohorts are the users' roles (train / test / aux, `fl_privtext.data.assign_roles`): a public protocol fact the
  server needs (what to train on, what to evaluate on), derived from the run seed, not an identity. Each cohort
  is shuffled separately, so the central guarantee of a user is that of the users shuffled with it
  (n = its cohort's users; `fl_privtext.report.accounting.shuffle_central`).
- Target users (train and test cohorts) lose every linkage: no sender, no stable record id (each report gets a
  fresh pseudonym >= ``first_pseudonym``, never reused in the run, so no report is linked to another report of
  the same round or of any other round, nor to a record id, which all lie below ``first_pseudonym``).
- The aux cohort (the attacker's colluders, who handed it their data and attributes) keeps its record ids: those
  users told the attacker which reports are theirs, so hiding them would simulate a weaker attacker than ours.
- Per-reply metadata that would identify a client (placement, per-reply stats) is dropped; what the server's
  report needs is aggregated: ``stats`` (input width, number of reports, whether EVERY client ran the seeded
  mode), the largest ``ledger-max`` any contributing client reported and the records withheld (sums), and
  ``contributors``: the node ids that delivered in this round (the participants, not who sent which report).
- Error replies (a failure carries no report) pass through with their sender, as do all other message types.

The referee's key. A simulation must score the attacks and charge every user for what it released, so the
shuffler keeps its answer key: `ShufflingGrid.reveal` maps pseudonyms back to record ids and
`ShufflingGrid.sent_by` says which record ids each node sent in the last round. Only the platform's scoring and
accounting read them (`fl_privtext.pipeline.referee_rows`); never the server's learners or the attacks.

Windowing. The shuffler collects a whole round before it releases anything, so a round's queries go through
`ShufflingGrid.send_and_receive` (its own bounded window of in-flight queries below the shuffler,
`fl_privtext.federation.inflight`), never piecemeal push/pull above it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fl_privtext.federation.eavesdropper import numpy_view
from fl_privtext.federation.grid import DelegatingGrid
from fl_privtext.federation.inflight import AUTO_WINDOW, send_windowed

SHUFFLER_NODE_ID = 0  # the sender every shuffled message carries: no client has this id
UPLOAD = "upload"
UPLOAD_KEYS = ("features", "labels", "rows")
LINKED_COHORTS = ("aux",)  # the attacker's colluders keep their record ids (module docstring)


def shuffle_reports(parts: list[dict[str, np.ndarray]], rng: np.random.Generator,
                    first_pseudonym: int = 0) -> dict[str, np.ndarray]:
    """One cohort's reports from all senders as one sender-free batch: features (M, D) and labels (M,) in a
    uniformly random order, rows (M,) fresh pseudonyms ``first_pseudonym + a uniform permutation of 0..M-1``
    (unlinkable to the record ids), and ``source`` (M,): the record id of each report (the referee's key; never
    sent on)."""
    parts = [p for p in parts if len(p["rows"])]
    if not parts:
        return {"features": np.zeros((0, 0), np.float32), "labels": np.zeros(0, np.int64),
                "rows": np.zeros(0, np.int64), "source": np.zeros(0, np.int64)}
    for p in parts:
        missing = [k for k in UPLOAD_KEYS if k not in p]
        if missing:
            raise ValueError(f"Each upload must hold {UPLOAD_KEYS}; one lacks {missing}.")
    features = np.concatenate([p["features"] for p in parts])
    labels = np.concatenate([p["labels"] for p in parts])
    rows = np.concatenate([p["rows"] for p in parts]).astype(np.int64)
    order = rng.permutation(len(labels))
    return {"features": features[order], "labels": labels[order],
            "rows": first_pseudonym + rng.permutation(len(labels)).astype(np.int64), "source": rows[order]}


class ShufflingGrid(DelegatingGrid):
    """Delegates to ``inner``; while `configure`-d on (or built with no cohorts, as in the unit tests), every
    round's ``query.upload`` replies come back as one shuffled message per cohort from ``SHUFFLER_NODE_ID``
    (module docstring). Switched off, it passes every reply through unchanged."""

    def __init__(self, inner: Grid, rng: np.random.Generator | None = None, *, on: bool = True,
                 cohorts: np.ndarray | None = None, first_pseudonym: int = 0, window: int = AUTO_WINDOW) -> None:
        super().__init__(inner)
        self._rng = rng if rng is not None else np.random.Generator(np.random.PCG64(np.random.SeedSequence()))  # OS entropy
        self.rounds_shuffled = 0
        self.window = window
        self.configure(on=on, cohorts=cohorts, first_pseudonym=first_pseudonym)

    def configure(self, *, on: bool, cohorts: np.ndarray | None = None, first_pseudonym: int = 0) -> None:
        """Switch shuffling on/off for the next point; ``cohorts``: (records,) each record's cohort (its user's
        role, public), None = one cohort; pseudonyms start at ``first_pseudonym`` (>= every record id)."""
        if cohorts is not None and first_pseudonym < len(cohorts):
            raise ValueError(f"first_pseudonym must be >= the number of records ({len(cohorts)}) so that no "
                             f"pseudonym is a record id; got {first_pseudonym}.")
        self.on = on
        self._cohorts = None if cohorts is None else np.asarray(cohorts)
        self._first = int(first_pseudonym)
        self._key: list[np.ndarray] = []  # record id of pseudonym first + i, in blocks
        self._next = self._first
        self.sent_by: dict[int, np.ndarray] = {}  # the last round: node -> record ids it sent (referee only)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.shuffle(self._inner.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        if not self.on:
            return self._inner.send_and_receive(messages, timeout=timeout)
        return self.shuffle(send_windowed(self._inner, messages, window=self.window, timeout=timeout))

    # -- the referee's key ------------------------------------------------------------------------------------
    def reveal(self, ids: np.ndarray) -> np.ndarray:
        """Record ids of reports as the server saw them (pseudonyms, or record ids of a linked cohort)."""
        ids = np.asarray(ids, np.int64)
        key = np.concatenate(self._key) if self._key else np.zeros(0, np.int64)
        pseudo = ids >= self._first
        if self._cohorts is None:
            pseudo = np.ones(len(ids), bool)
        out = ids.copy()
        idx = ids[pseudo] - self._first
        if len(idx) and (idx.min() < 0 or idx.max() >= len(key)):
            raise ValueError("reveal: a pseudonym this shuffler never issued.")
        out[pseudo] = key[idx]
        return out

    # -- the shuffle ------------------------------------------------------------------------------------------
    def shuffle(self, replies: Iterable[Message]) -> list[Message]:
        """The replies as the server may see them: every upload reply merged into one sender-free message per
        cohort."""
        replies = list(replies)
        if not self.on:
            return replies
        uploads = [r for r in replies if not r.has_error() and r.metadata.message_type == "query.upload"
                   and UPLOAD in r.content.array_records]
        if not uploads:
            return replies
        keep = [r for r in replies if not any(r is u for u in uploads)]
        parts = [{k: numpy_view(a) for k, a in r.content.array_records[UPLOAD].items()} for r in uploads]
        self.sent_by = {int(r.metadata.src_node_id): np.asarray(p["rows"], np.int64)
                        for r, p in zip(uploads, parts, strict=True)}
        stats = [r.content.metric_records["stats"] for r in uploads if "stats" in r.content.metric_records]
        ledgers = [r.content.config_records["ledger"] for r in uploads if "ledger" in r.content.config_records]
        names = ["all"] if self._cohorts is None else sorted(
            {str(c) for p in parts for c in np.unique(self._cohorts[np.asarray(p["rows"], np.int64)])})
        out: list[Message] = []
        for i, name in enumerate(names):
            sub = parts if self._cohorts is None else [
                {k: v[self._cohorts[np.asarray(p["rows"], np.int64)] == name] for k, v in p.items()} for p in parts]
            mixed = shuffle_reports(sub, self._rng, self._next)
            if name in LINKED_COHORTS:  # the colluders' reports keep their record ids (module docstring)
                mixed["rows"] = mixed["source"]
            else:
                block = np.empty(len(mixed["source"]), np.int64)  # record id of pseudonym self._next + i
                block[mixed["rows"] - self._next] = mixed["source"]
                self._key.append(block)
                self._next += len(block)
            content = RecordDict({
                UPLOAD: ArrayRecord({k: Array(np.ascontiguousarray(mixed[k])) for k in UPLOAD_KEYS}),
                "stats": MetricRecord({
                    "input_dim": max((int(s["input_dim"]) for s in stats), default=0),  # type: ignore[arg-type]
                    "reports": len(mixed["rows"]),
                    "seeded": int(bool(stats) and all(bool(s.get("seeded", 0)) for s in stats))}),
                "cohort": ConfigRecord({"name": name}),
                # the participants (Flower node ids are 64-bit unsigned), not who sent which report
                "shuffle": ArrayRecord({"contributors": Array(np.array(sorted(self.sent_by), np.uint64))}),
            })
            tops = [float(lg["ledger-max"]) for lg in ledgers if "ledger-max" in lg]  # type: ignore[arg-type]
            if i == 0 and tops:  # aggregated once per round: the most any client charged, what was withheld
                withheld = [float(lg.get("withheld", 0.0)) for lg in ledgers]  # type: ignore[arg-type]
                content["ledger"] = ConfigRecord({"ledger-max": max(tops), "withheld": float(sum(withheld))})
            msg = Message(content, dst_node_id=int(uploads[0].metadata.dst_node_id), message_type="query.upload")
            msg.metadata.__dict__["_src_node_id"] = SHUFFLER_NODE_ID  # Metadata has no setter: the sender is stripped
            out.append(msg)
        self.rounds_shuffled += 1
        return [*keep, *out]
