"""A Grid that records every client->server reply: the eavesdropper's (and the curious server's) view.

Flower has no server-side mod; every message the ServerApp receives passes through its Grid, so delegating to the
real Grid and recording each reply sees exactly the client->server traffic, in simulation and deployment.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fl_privtext.client import UPLOAD_KEYS, merge_positions, merge_uploads
from fl_privtext.federation.grid import DelegatingGrid
from fl_privtext.memory import CHUNK_ROWS, Spill, drop_mapped_pages, is_mapped, is_sorted


def numpy_view(array: Array) -> np.ndarray:
    """A read-only numpy array over a Flower ``Array``'s serialized ``.npy`` bytes, without copying them
    (``Array.numpy()`` decodes a fresh copy); falls back to ``Array.numpy()`` where a view cannot be had
    (another serialization, Fortran order, object or empty arrays)."""
    data = array.data
    try:
        buf = io.BytesIO(data)
        version = np.lib.format.read_magic(buf)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            return array.numpy()
        shape, fortran_order, dtype = read_header(buf)
        count = int(np.prod(shape, dtype=np.int64))
        if fortran_order or dtype.hasobject or count == 0:
            return array.numpy()
        return np.frombuffer(data, dtype=dtype, count=count, offset=buf.tell()).reshape(shape)
    except ValueError:
        return array.numpy()  # raises Flower's own error for a non-numpy serialization


def array_record(msg: Message, name: str) -> ArrayRecord | None:
    """``msg``'s ArrayRecord ``name``, or None (an error reply, none of that name). Read from the content itself,
    not through ``RecordDict.array_records``: every access of that builds a new view of the records whose type
    check is one of its own bound methods, a reference cycle, so the view and every record it holds stay alive until
    Python's cyclic collector runs. An upload reply's arrays (79 MB a reply at 10M users and 100 clients) then
    outlived their spill and the driver held a few replies at once during the rounds (issue #38)."""
    if msg.has_error() or not msg.has_content():
        return None
    record = msg.content.get(name)
    return record if isinstance(record, ArrayRecord) else None


@dataclass
class Observation:
    """One observed reply: who sent it, its type, and every record in it (arrays as read-only views of the reply's
    immutable bytes, `numpy_view`)."""

    src_node_id: int
    message_type: str
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    nbytes: int = 0


class EavesdroppingGrid(DelegatingGrid):
    """Delegates to ``inner`` and records every reply it returns (its arrays as read-only views of the reply's
    bytes: the record costs no copy).

    ``spill_to(folder)``: from then on (until `reset`) every array of every ``upload`` record (the representations,
    and its labels and record ids: 16 bytes an upload, copies in memory before) is written to the eavesdropper's own
    files there as it arrives, instead of being held as a view of the reply: the reply's bytes can go as soon as
    the server has taken its own copy (issue #38: the replies were resident until the eavesdropper was done, ~0.8
    GB per million users). The observation's arrays become read-only maps of that file when the record is read (`uploads`,
    `uploads_matching`)."""

    def __init__(self, inner: Grid, *, record_sent: bool = False) -> None:
        super().__init__(inner)
        self.observations: list[Observation] = []
        self.record_sent = record_sent
        self.sent: list[Observation] = []  # the server's own queries (record_sent=True): what the server knows
        self._folder: str | None = None
        self._spill: Spill | None = None
        self._spilled: list[tuple[Observation, int, int]] = []  # (observation, first row, rows) in the spill

    def spill_to(self, folder: str | None) -> None:
        """Spill the ``upload`` records observed from now on to ``folder`` (None: keep them as views)."""
        self._folder = folder

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._inner.push_messages(self._record_sent(messages))

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._record(self._inner.pull_messages(message_ids))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._record(self._inner.send_and_receive(self._record_sent(messages), timeout=timeout))

    def _record_sent(self, messages: Iterable[Message]) -> list[Message]:
        messages = list(messages)
        if self.record_sent:
            for msg in messages:
                obs = Observation(src_node_id=0, message_type=msg.metadata.message_type)
                for name, record in msg.content.items():
                    if isinstance(record, ConfigRecord):
                        obs.configs[name] = dict(record)
                self.sent.append(obs)
        return messages

    # -- recording --------------------------------------------------------------------------------------------
    def _record(self, replies: Iterable[Message]) -> list[Message]:
        replies = list(replies)
        for msg in replies:
            obs = Observation(src_node_id=int(msg.metadata.src_node_id), message_type=msg.metadata.message_type)
            if msg.has_content():
                for name, record in msg.content.items():
                    if isinstance(record, ArrayRecord):
                        arrs = {k: numpy_view(a) for k, a in record.items()}
                        obs.arrays[name] = self._keep(obs, name, arrs)
                        obs.nbytes += sum(len(a.data) for a in record.values())
                    elif isinstance(record, ConfigRecord):
                        obs.configs[name] = dict(record)
                    elif isinstance(record, MetricRecord):
                        obs.metrics[name] = dict(record)
            self.observations.append(obs)
        return replies

    def _keep(self, obs: Observation, name: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the record holds of one received ArrayRecord: views of the reply's bytes, or (spilling an upload)
        every array of it appended to the spill (empty until mapped back in `_map`)."""
        if self._folder is None or name != "upload":
            return arrays
        vectors = {k: a for k, a in arrays.items() if a.ndim >= 1 and len(a)}  # 1-D (labels, record ids) too
        rows = {len(a) for a in vectors.values()}
        if len(rows) > 1:
            raise ValueError(f"An upload record's arrays must have one length; got {sorted(rows)}.")
        if vectors:
            if self._spill is None:
                self._spill = Spill(self._folder)
            self._spilled.append((obs, self._spill.rows.get(next(iter(vectors)), 0), rows.pop()))
            self._spill.append(vectors)
        # the spilled arrays are put back as maps of the spill (`_map`, before any read): a view of the reply's bytes
        # kept here until then held every reply of the round resident (~0.7 GB at 1M users, issue #38); copies of
        # the 1-D arrays held 16 bytes an upload
        return {k: (np.empty((0, *a.shape[1:]), a.dtype) if k in vectors else np.array(a))
                for k, a in arrays.items()}

    def _map(self) -> None:
        """Put the spilled rows back into their observations, as read-only maps of the spill file."""
        if self._spill is None:
            return
        names = list(self._spill.rows)
        mapped = self._spill.mapped()
        for obs, start, n in self._spilled:
            for k in names:
                if k in obs.arrays["upload"]:
                    obs.arrays["upload"][k] = mapped[k][start : start + n]
        self._spill, self._spilled = None, []

    # -- what the attacker works with -------------------------------------------------------------------------
    def uploads(self, record: str = "upload") -> dict[str, np.ndarray]:
        """All observed uploads merged in canonical row order (`fl_privtext.client.merge_uploads`): features (M, D),
        labels (M,), rows (M,)."""
        self._map()
        parts = [o.arrays[record] for o in self.observations if record in o.arrays and len(o.arrays[record]["rows"])]
        if not parts:
            raise ValueError(f"The eavesdropper observed no {record!r} records.")
        return merge_uploads(parts)

    def uploads_matching(self, received: dict[str, np.ndarray], record: str = "upload",
                         chunk: int = CHUNK_ROWS) -> dict[str, np.ndarray]:
        """`uploads`, without its merged copy when it would equal ``received`` (what the server merged from the
        same replies): then ``received`` itself is returned, else the merged copy (whose difference the caller
        reports). Each observed part is compared, ``chunk`` rows at a time, with the rows of ``received`` that
        `merge_uploads` would write it to, so only a byte per upload is allocated (`_distinct_rows_found`; the
        merge's row order, 24 bytes an upload at its peak, where a row repeats or is missing), not a second copy of the uploads next to the replies' bytes and ``received`` (~0.7 GB per million users of
        50-dimensional uploads, at the run's peak). Pages of mapped arrays (the spill, a mapped ``received``) are
        dropped after each chunk."""
        self._map()
        parts = [o.arrays[record] for o in self.observations if record in o.arrays and len(o.arrays[record]["rows"])]
        if not parts:
            raise ValueError(f"The eavesdropper observed no {record!r} records.")
        if sum(len(p["rows"]) for p in parts) != len(received["rows"]):
            return merge_uploads(parts)
        if any(p[k].dtype != received[k].dtype or p[k].shape[1:] != received[k].shape[1:]
               for p in parts for k in UPLOAD_KEYS):
            return merge_uploads(parts)
        found = received["rows"]
        # each record once and every one among the server's (sorted, distinct) rows: merge_uploads puts each entry at
        # its row's place among them, looked up a chunk at a time; else its own positions (duplicates land where it
        # puts them: 24 bytes an upload)
        # the server's rows sorted and distinct (one pass, read by both paths)
        ordered = is_sorted(found, strict=True, chunk=chunk)
        if ordered and all(is_sorted(p["rows"], strict=True, chunk=chunk) for p in parts):
            # sorted distinct rows, each reply in row order (a client's shard): ``received`` read once, in order
            return received if _equal_in_row_order(parts, received, chunk) else merge_uploads(parts)
        dest = None if ordered and _distinct_rows_found(parts, found, chunk) else merge_positions(parts)
        start = 0
        for p in parts:
            for i in range(0, len(p["rows"]), chunk):
                j = min(i + chunk, len(p["rows"]))
                where = np.searchsorted(found, p["rows"][i:j]) if dest is None else dest[start + i : start + j]
                if not all(_equal_dropping(p[k][i:j], received[k], where) for k in UPLOAD_KEYS):
                    return merge_uploads(parts)
            start += len(p["rows"])
        return received

    def forget(self, record: str = "upload") -> None:
        """Drop ``record``'s arrays from every observation (message counts and byte sizes stay): once what they
        hold is kept elsewhere (`uploads`, checked against what the server received), the bytes are released."""
        for o in self.observations:
            o.arrays.pop(record, None)

    @property
    def bytes_observed(self) -> int:
        return sum(o.nbytes for o in self.observations)

    def reset(self) -> None:
        self.observations.clear()
        self._map()  # a spill not read yet: its file goes with the observations
        self._spilled = []


DROP_TOUCHES = 16  # scattered reads of the record's maps between two page drops (`_equal_in_row_order`)


def _equal_in_row_order(parts: list[dict[str, np.ndarray]], received: dict[str, np.ndarray], chunk: int) -> bool:
    """Whether the parts (each in strictly increasing row order) are ``received`` (strictly increasing rows, as many
    as the parts' entries) in another order: then `merge_uploads` of the parts gives ``received`` back, and only
    then. ``received`` is read ``chunk`` positions at a time, in order, each against the slice of every part whose
    rows fall in the chunk's range: every entry must lie in one chunk's range (counted), have its row there (looked
    up) and be the only one there (a byte a position), and its values must equal ``received``'s. The pages read are
    those of one chunk of each map (dropped after it). The check through `merge_positions` (24 bytes an upload:
    argsort, inverse, arange) or a lookup of each part's entries touched rows all over ``received``, whose features
    (200 bytes an upload at 50 dimensions) the kernel then mapped whole, a large page cache folio per touch (issue
    #38; the record's peak at 3.66M uploads: 356 -> 250 MB)."""
    found = received["rows"]
    maps = {id(getattr(a, "_mmap", None) or a): a for a in [*(received[k] for k in UPLOAD_KEYS),
                                                             *(p[k] for p in parts for k in UPLOAD_KEYS)]
            if is_mapped(a)}  # one view of each mapping, its pages dropped after every chunk
    # plain ndarray views of the maps (slicing a np.memmap runs Python code per slice: a third of the check's time
    # at 100 parts x 224 chunks), and each part's slice bounds for every chunk in one search per part
    rec = {k: np.asarray(received[k]) for k in UPLOAD_KEYS}
    views = [{k: np.asarray(p[k]) for k in UPLOAD_KEYS} for p in parts]

    def drop() -> None:
        for m in maps.values():
            drop_mapped_pages(m)

    # Pages are dropped every `DROP_TOUCHES` scattered reads too: each read of a map faults in a whole large page
    # cache folio (up to 2 MB) around it. The chunks' first and last ids, and each part's bounds for them, read all
    # over the ids' maps (16 bytes an upload resident: +0.11 GB at 7.3M uploads, in a scratch check); a chunk's
    # slices of 100 parts, one folio each of every part's maps (+0.16 GB more; issue #38, the record's peak).
    starts = np.arange(0, len(found), chunk)
    ends = np.minimum(starts + chunk, len(found)) - 1
    firsts, lasts = np.empty(len(starts), found.dtype), np.empty(len(starts), found.dtype)
    for s in range(0, len(starts), DROP_TOUCHES):
        firsts[s : s + DROP_TOUCHES] = rec["rows"][starts[s : s + DROP_TOUCHES]]
        lasts[s : s + DROP_TOUCHES] = rec["rows"][ends[s : s + DROP_TOUCHES]]
        drop()
    bounds = []
    for n, v in enumerate(views):
        bounds.append((np.searchsorted(v["rows"], firsts, "left"), np.searchsorted(v["rows"], lasts, "right")))
        if n % DROP_TOUCHES == DROP_TOUCHES - 1:
            drop()
    drop()
    values = [k for k in UPLOAD_KEYS if k != "rows"]
    hit = np.zeros(len(found), bool)
    covered, same = 0, True
    for c, a in enumerate(starts.tolist()):
        block = rec["rows"][a : a + chunk]
        for n, (v, (lo, hi)) in enumerate(zip(views, bounds, strict=True)):
            if n % DROP_TOUCHES == DROP_TOUCHES - 1:
                drop()
            i, j = int(lo[c]), int(hi[c])
            if i == j:
                continue
            r = v["rows"][i:j]
            at = np.searchsorted(block, r)  # within the block: r lies in its range
            same = bool((block[at] == r).all()) and not hit[a + at].any() and all(
                bool((v[k][i:j] == rec[k][a + at]).all()) for k in values)
            if not same:
                break
            hit[a + at] = True
            covered += j - i
        drop()
        if not same:
            return False
    return covered == len(found) and bool(hit.all())


def _distinct_rows_found(parts: list[dict[str, np.ndarray]], found: np.ndarray, chunk: int) -> bool:
    """For a strictly increasing ``found`` (the server's merged row ids, as many as the parts' entries; the caller
    checks the order, `memory.is_sorted`): whether the parts' row ids, taken together, are ``found`` in another order: every entry is at its `np.searchsorted`
    position in ``found`` and no two land on the same one (a byte a position). Then `merge_positions` (a stable
    sort of the concatenated ids: its argsort, inverse and arange, ~24 bytes an upload at the record's peak, issue
    #38) is that lookup, entry by entry: the row order is unique, so stable sorting has no ties to keep. Read
    ``chunk`` rows at a time, the mapped pages dropped after each chunk."""
    n = len(found)
    hit = np.zeros(n, bool)
    for p in parts:
        rows = p["rows"]
        for i in range(0, len(rows), chunk):
            r = rows[i : i + chunk]
            w = np.searchsorted(found, r)
            ok = bool(np.all(w < n)) and bool(np.array_equal(found[np.minimum(w, n - 1)], r))
            drop_mapped_pages(rows)
            drop_mapped_pages(found)  # a chunk's lookups touch pages all over ``found`` (8 bytes an upload)
            if not ok:
                return False
            hit[w] = True
    return int(np.count_nonzero(hit)) == n  # as many entries as positions, all hit: none twice


def _equal_dropping(x: np.ndarray, y: np.ndarray, where: np.ndarray) -> bool:
    """``x == y[where]``, then this process's pages of either map dropped (a no-op for in-memory arrays)."""
    same = bool(np.array_equal(x, y[where]))
    drop_mapped_pages(x)
    drop_mapped_pages(y)
    return same
