"""The eavesdropper on one point: builds its view (`fl_privtext.attacks.observe`) from the point's data and what it
observed, and runs every attack with its baseline and ceiling (`fl_privtext.attacks.run_attacks`).

The orchestrator calls `attack` once per seed (`fl_privtext.pipeline.point`); the clean candidates the
mechanism-aware attacks compare against are `fl_privtext.extract.clean.clean_features`. Seeded by
``(seed, "attack", ...)`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext import rng
from fl_privtext.attacks.chunks import row_chunks
from fl_privtext.attacks.evaluate import observe, run_attacks
from fl_privtext.client import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.datafiles import spill_dir
from fl_privtext.extract.clean import clean_features
from fl_privtext.memory import (
    drop_dataset_pages,
    drop_mapped_pages,
    is_mapped,
    narrowest,
    on_disk,
    positions,
    rows_on_disk,
    take_rows,
)
from fl_privtext.privacy import PrivacyReport
from fl_privtext.public import PublicSpec
from fl_privtext.server.pseudonyms import server_users

if TYPE_CHECKING:  # the type only: the orchestrator prepares the point
    from fl_privtext.client.prepared import Prepared

__all__ = ["PerUpload", "attack", "attacked_rows", "attacked_uploads"]


class PerUpload(Sequence[str]):
    """A dataset column read per upload (lazily: only the texts an attack or its referee asks for). ``drop``
    (optional) is called after every `DROP_EVERY` reads: the attack reads its public and target texts scattered
    over the dataset's mapped file, and without it their pages stayed in the driver's RSS (issue #38)."""

    DROP_EVERY = 1 << 13

    def __init__(self, column: Sequence[str], rows: np.ndarray, drop: Callable[[], Any] | None = None):
        self._column, self._rows, self._drop, self._reads = column, rows, drop, 0

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        self._reads += 1
        if self._drop is not None and self._reads % self.DROP_EVERY == 0:
            self._drop()
        return self._column[int(self._rows[i])]


def take_narrow(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]`` for a (N,) integer column, in the narrowest integer type that holds the column's values
    (`narrowest`), gathered `row_chunks` at a time: the same values without the (rows,) int64 copy that indexing a
    widened column makes (8 bytes an attacked upload per column: the users, labels and two attributes were
    ~0.9 GB at 10M synthetic users, issue #38). Other columns (multilabel (N, K) int8) are indexed as they are."""
    column = np.asarray(column)
    if column.ndim != 1 or column.dtype.kind not in "iu" or not len(column):
        return column[rows]
    out = np.empty(len(rows), narrowest(np.array([column.min(), column.max()])).dtype)
    for c in row_chunks(len(rows)):
        out[c] = column[rows[c]]
    return out


def attacked_uploads(prep: Prepared, rows: np.ndarray, seed: int, max_aux_users: int) -> np.ndarray | None:
    """Positions of the observed uploads the attack uses: every non-aux upload, and those of at most
    ``max_aux_users`` aux users (a seeded sample of users, ``(seed, "attack", "aux-users")``); None = all of them.
    Bounds the attacker's fits and public-text work, whatever the population size."""
    aux = prep.roles[rows] == "aux"
    users = take_narrow(prep.ds.user_index.reshape(-1), rows)
    aux_users = np.unique(users[aux])
    if max_aux_users == 0 or len(aux_users) <= max_aux_users:
        return None
    chosen = np.sort(rng.generator(seed, "attack", "aux-users").choice(aux_users, max_aux_users, replace=False))
    for c in row_chunks(len(users)):  # in place, a chunk at a time: no (uploads,) temporaries
        aux[c] &= ~np.isin(users[c], chosen)
    return positions(~aux)  # int32: no int64 copy of the kept positions (`positions`)


def attacked_rows(features: np.ndarray, keep: np.ndarray, cfg: ExperimentConfig) -> np.ndarray:
    """``features[keep]``: from a mapped upload file (`fl_privtext.memory.Spill`) into another mapped file in
    ``spill/`` of the run's cache, copied `take_rows`' chunk at a time, so that the attack's copy of its target
    uploads (every non-aux upload: ~0.59 GB at 1M users, issue #38) is read from disk in chunks by the attacks
    (each reads ``view.uploads`` through `take_rows`) instead of being resident; an in-memory ``features`` (the
    plain loop, small runs) is indexed in memory. The same bytes either way."""
    if not is_mapped(features):
        return take_rows(features, keep)
    return rows_on_disk(features, keep, spill_dir(cfg.extractor.cache_dir))


def attack(prep: Prepared, features: np.ndarray, rows: np.ndarray, seed: int, cfg: ExperimentConfig, *,
           labels: np.ndarray | None = None, mechanism: Any = None,
           report: PrivacyReport | None = None, seen: np.ndarray | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The eavesdropper on one seed's observed uploads (``features``, ``labels``, ``rows``): every attack of
    `fl_privtext.attacks`, each with its baseline and LDP ceiling. Returns (attacks, attacks_extra).

    ``seen`` (federation.shuffle): the ids the eavesdropper saw on each upload (``rows`` are then the referee's
    record ids): its users are what those ids name (`server_users`: one fresh pseudonym per shuffled report) and
    every upload's sender is the shuffler; the referee scores per-user answers per named user
    (`fl_privtext.attacks.evaluate`).

    ``mechanism`` defaults to the configured one; its report's TRUE worst-case epsilon sets the ceilings."""
    rows = np.asarray(rows)
    # the record's columns as maps of the round's spill (rows, labels, seen ids): every read faults their pages in,
    # and they stayed in the driver's RSS through the attacks (16 bytes an upload: ~0.6 GB at 10M users, issue #38)
    maps = [a for a in (rows, labels, seen) if a is not None and is_mapped(a)]
    keep = attacked_uploads(prep, rows, seed, cfg.attack.max_aux_users)
    if keep is not None:
        # held through the attacks; the kept record ids and labels gathered in their narrowest type (`take_narrow`:
        # the same values without ``rows[keep]``'s and ``labels[keep]``'s int64 copies, 16 bytes a target held
        # through `observe`, issue #38)
        features, rows = attacked_rows(features, keep, cfg), take_narrow(rows, keep)
        labels = None if labels is None else take_narrow(labels, keep)
        seen = None if seen is None else np.asarray(seen)[keep]
    del keep  # (kept uploads,) int32 positions: not held through `observe` (issue #38)
    for m in maps:  # read whole by the gathering (the record ids and labels: 16 bytes an upload, ~0.59 GB of pages at
        drop_mapped_pages(m)  # 10M users): their pages go now, not after `observe`, which reads the kept copies
    mech = mechanism if mechanism is not None else mechanism_for(PublicSpec.of(cfg), features.shape[1])
    rep = report if report is not None else mech.report()
    user_index = prep.ds.user_index  # the server's account pseudonyms
    # the node that sends each row (a reply's src_node_id), in the narrowest type of the node ids (a record each)
    node_of_row = np.zeros(len(prep.ds), narrowest(np.array([0, max(len(prep.shards) - 1, 0)])).dtype)
    for c, shard in enumerate(prep.shards):
        node_of_row[shard] = c
    senders = node_of_row[rows] if seen is None else np.zeros(len(rows), np.int8)
    del node_of_row  # a byte a record: not held through `observe` (issue #38)
    if not is_mapped(rows) and len(rows):
        # the kept record ids (4 bytes an upload) and senders (a byte) on disk: the truth's texts and the clean
        # candidates look ids up (their pages dropped with the dataset's), no attack reads the senders; resident
        # through the attacks they were ~0.15 GB of the driver at 10M users (issue #38)
        folder = spill_dir(cfg.extractor.cache_dir)
        folder.mkdir(parents=True, exist_ok=True)
        rows, senders = on_disk(rows, folder), on_disk(senders, folder)
        maps += [rows, senders]

    def drop_read() -> None:  # the texts and record ids read so far
        drop_dataset_pages(prep.ds)
        for m in maps:
            drop_mapped_pages(m)

    # With Phase A on, uploads are the trained encoder's output, not the public extractor's: the clean candidates
    # the mechanism-aware attacks compare against would be in another space, so those attacks are not run.
    clean = clean_features(prep, cfg.extractor.cache_dir) if getattr(cfg, "train", None) is None or cfg.train.rounds == 0 else None
    named = take_narrow(user_index.reshape(-1), rows)
    view, truth = observe(
        uploads=features, labels=take_narrow(prep.ds.label_codes, rows) if labels is None else labels,
        users=named if seen is None else server_users(prep, seen),
        senders=senders,
        named_users=None if seen is None else named, texts=PerUpload(prep.ds.text_column, rows, drop_read),
        attributes={spec: take_narrow(prep.ds.attribute_codes(spec.name), rows) for spec in prep.ds.attributes},
        aux=prep.roles[rows] == "aux", clean=None if clean is None else (lambda idx: clean(rows[idx])),
        mechanism=mech, epsilon=float(rep.epsilon_worst_case), delta=float(rep.delta),
        num_labels=len(prep.ds.label_names), label_epsilon=cfg.privacy.label_epsilon, seed=seed,
        attack=cfg.attack,
        word_vectors=None if clean is None or prep.extractor is None else
        (lambda words: prep.extractor.extract(list(words), progress=False)))
    drop_dataset_pages(prep.ds)  # the public texts `observe` read
    for m in maps:  # `observe` took its own narrowed copies of them
        drop_mapped_pages(m)
    # (attacked uploads,) each: not held through the attacks beside what the view holds (issue #38; it holds these
    # narrowed columns themselves, or its own narrowed copies): int64 copies of them were ~0.47 GB at 10M users
    del labels, named, senders
    out = run_attacks(view, truth)
    drop_dataset_pages(prep.ds)  # the targets' texts the referee read
    drop_mapped_pages(features)  # the target map's pages (each attack reads it through `take_rows`)
    for m in maps:  # the clean candidates' lookups (`clean`) read ``rows`` again
        drop_mapped_pages(m)
    return out

