"""The eavesdropper's record: read-only views of the replies' bytes, equal to what Flower decodes."""

import sys

import numpy as np
import pytest
from flwr.app import Array

from fl_privtext.federation.eavesdropper import numpy_view


def test_numpy_view_equals_array_numpy_without_a_copy():
    g = np.random.default_rng(0)
    for x in (g.normal(size=(7, 5)).astype(np.float32), g.integers(-9, 9, 11), np.arange(24, dtype=np.int8).reshape(2, 3, 4),
              np.float64(2.5), g.normal(size=(3, 4)) > 0):
        a = Array(np.asarray(x))
        v = numpy_view(a)
        np.testing.assert_array_equal(v, a.numpy())
        assert v.dtype == a.numpy().dtype and v.shape == a.numpy().shape
        assert not v.flags.writeable and not v.flags.owndata  # a view of the message's immutable bytes
    for x in (np.zeros((0, 50), np.float32), np.asfortranarray(g.normal(size=(4, 3)))):  # decoded instead
        a = Array(x)
        v = numpy_view(a)
        np.testing.assert_array_equal(v, x)
        assert v.shape == x.shape


def test_uploads_matching_shares_the_servers_merge_only_when_every_value_agrees():
    """The record checked in place against what the server merged: equal -> the server's arrays themselves (no
    third copy); any difference (a value, a row id, a missing upload, a dtype) -> the record's own merged copy,
    which then differs from the server's (`same_uploads` reports it). Rows repeat and replies arrive unsorted, as
    merge_uploads handles them; chunk=2 exercises the chunked comparison."""
    from fl_privtext.client import merge_uploads, same_uploads
    from fl_privtext.federation.eavesdropper import EavesdroppingGrid, Observation

    g = np.random.default_rng(1)

    def part(rows):
        rows = np.asarray(rows, np.int64)
        return {"features": g.normal(size=(len(rows), 3)).astype(np.float32), "labels": rows % 2, "rows": rows}

    parts = [part([5, 1, 9]), part([0, 5, 2, 7]), part([3])]
    received = merge_uploads(parts)

    def grid(ps):
        eaves = EavesdroppingGrid(None)  # type: ignore[arg-type]  # nothing is sent: the record is given
        eaves.observations = [Observation(node, "query.upload", arrays={"upload": p}) for node, p in enumerate(ps)]
        return eaves

    assert grid(parts).uploads_matching(received, chunk=2) is received
    unique = [part([5, 1, 9]), part([0, 6, 2]), part([3])]  # one round: each record once, replies in any order
    merged_unique = merge_uploads(unique)
    assert grid(unique[::-1]).uploads_matching(merged_unique, chunk=2) is merged_unique
    # a repeated row: its copies' order is the replies' (a stable merge), so the answer is the record's own merge
    assert same_uploads(grid(parts[::-1]).uploads_matching(received, chunk=2), merge_uploads(parts[::-1]))
    changed = [dict(p) for p in parts]
    changed[1]["features"] = changed[1]["features"].copy()
    changed[1]["features"][3, 2] += 1e-3
    other_rows = [dict(p) for p in parts]
    other_rows[2]["rows"] = np.array([4])
    wider = [dict(p) for p in parts]
    wider[0]["features"] = wider[0]["features"].astype(np.float64)
    for bad in (changed, other_rows, parts[:2], wider):
        got = grid(bad).uploads_matching(received, chunk=2)
        assert got is not received and not same_uploads(got, received)
        assert same_uploads(got, merge_uploads(bad))  # what the record says, as uploads() merges it



def test_a_spilled_record_holds_no_view_of_the_replys_bytes_and_maps_them_back(tmp_path):
    """Issue #38, a budget of zero bytes: spilling, the record of a reply (`_keep`, what `_record` stores per
    ArrayRecord) keeps nothing of its representations (the old record kept a view, so every reply's bytes stayed
    resident until the round was read: ~0.7 GB at 1M users) and reads them back, equal, from the spill; its 1-D
    arrays are copies. Known-bad: without a spill folder the record is views of the reply's bytes."""
    from fl_privtext.federation.eavesdropper import EavesdroppingGrid, Observation

    g = np.random.default_rng(2)
    feats, rows = g.normal(size=(40, 5)).astype(np.float32), np.arange(40, dtype=np.int64)
    for folder in (tmp_path, None):
        record = {"features": Array(feats), "labels": Array(rows % 2), "rows": Array(rows)}
        wire = {k: numpy_view(a) for k, a in record.items()}  # views of the reply's bytes, as `_record` makes them
        eaves = EavesdroppingGrid(None)  # type: ignore[arg-type]  # nothing is sent: the record is given
        eaves.spill_to(None if folder is None else str(folder))
        obs = Observation(0, "query.upload")
        obs.arrays["upload"] = eaves._keep(obs, "upload", wire)
        eaves.observations.append(obs)
        shares = any(np.shares_memory(a, w) for a in obs.arrays["upload"].values() for w in wire.values())
        assert shares == (folder is None)
        got = eaves.uploads()
        np.testing.assert_array_equal(got["features"], feats)
        np.testing.assert_array_equal(got["rows"], rows)


def test_the_servers_merge_and_senders_on_disk_are_the_in_memory_arrays_bit_for_bit(tmp_path):
    """Issue #38: `merge_spilled` writes every column of a round (its labels and record ids too, not only the
    representations) to the run's spill and `spilled_senders` the ids each reply carried: the maps hold exactly
    `merge_uploads`' arrays and the replies' ids (dtype, shape, values; duplicates and unsorted replies as the merge
    orders them), read-only and backed by files, not memory. Known-bad: a merge that sorted unstably or a sender
    slice off by one would differ."""
    from fl_privtext.client import merge_uploads
    from fl_privtext.federation.server_app import merge_spilled, spilled_senders
    from fl_privtext.memory import Spill, is_mapped

    g = np.random.default_rng(3)
    parts = []
    for size in (7, 0, 12, 5):
        rows = g.integers(0, 20, size).astype(np.int64)  # repeats across and within replies, unsorted
        parts.append({"features": g.normal(size=(size, 4)).astype(np.float32),
                      "labels": g.integers(0, 3, size).astype(np.int64), "rows": rows})
    arrived = [{k: v for k, v in p.items() if k != "features"} for p in parts if len(p["rows"])]
    for chunk in (None, 3):
        spill2 = Spill(tmp_path)
        for p in parts:
            if len(p["rows"]):
                spill2.append({"features": p["features"]})
        got = merge_spilled([dict(a) for a in arrived], spill2.mapped(), str(tmp_path), chunk)
        want = merge_uploads(parts)
        assert list(got) == list(want)
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
            np.testing.assert_array_equal(got[k], want[k])
            assert is_mapped(got[k]) and not got[k].flags.writeable
    senders = spilled_senders([(node, p["rows"]) for node, p in zip((5, 6, 7, 8), parts)], str(tmp_path))
    assert list(senders) == [5, 7, 8]  # the node that sent nothing is left out
    for node, p in zip((5, 6, 7, 8), parts):
        if len(p["rows"]):
            assert senders[node].dtype == np.int64 and is_mapped(senders[node])
            np.testing.assert_array_equal(senders[node], p["rows"])
    assert spilled_senders([(1, np.zeros(0, np.int64))], str(tmp_path)) == {}


def _old_uploads_matching(parts, received):
    """The record's check before issue #38's lookup: every part against ``merge_positions``' places (a reference)."""
    from fl_privtext.client import UPLOAD_KEYS, merge_positions, merge_uploads

    if sum(len(p["rows"]) for p in parts) != len(received["rows"]):
        return merge_uploads(parts)
    dest, start = merge_positions(parts), 0
    for p in parts:
        where = dest[start : start + len(p["rows"])]
        for k in UPLOAD_KEYS:
            x, y = p[k], received[k]
            if x.dtype != y.dtype or x.shape[1:] != y.shape[1:] or not np.array_equal(x, y[where]):
                return merge_uploads(parts)
        start += len(p["rows"])
    return received


def test_uploads_matching_answers_as_the_stable_merge_on_random_records():
    """The row lookup (`_distinct_rows_found`: distinct sorted rows, each entry at its searchsorted place) answers
    as the check through `merge_positions` did, on 300 random records: rows distinct or repeated, each reply in row
    order or not (`_equal_in_row_order`), a row missing or foreign, parts in any order, a changed value, received
    unsorted or shorter; chunks of 1-5 rows."""
    from fl_privtext.client import merge_uploads, same_uploads
    from fl_privtext.federation.eavesdropper import EavesdroppingGrid, Observation

    g = np.random.default_rng(5)
    shares = 0
    for trial in range(300):
        n = int(g.integers(1, 30))
        rows = g.permutation(n * 2)[:n] if trial % 3 else g.integers(0, n, n)  # distinct, or with repeats
        cuts = np.sort(g.integers(0, n + 1, int(g.integers(0, 4))))
        parts = [{"features": g.normal(size=(len(r), 2)).astype(np.float32), "labels": (r % 3).astype(np.int64),
                  "rows": r.astype(np.int64)} for r in np.split(rows, cuts) if len(r)]
        if trial % 7 < 4:  # each reply in row order (a client's shard): the read in row order
            parts = [{k: v[np.argsort(p["rows"], kind="stable")] for k, v in p.items()} for p in parts]
        received = merge_uploads(parts)
        received = {k: np.array(v) for k, v in received.items()}
        case = trial % 5
        if case == 1 and n > 1:  # a foreign row in place of one
            received["rows"][g.integers(n)] += 1000
        elif case == 2:  # a changed value
            received["features"][g.integers(n), g.integers(2)] += 1.0
        elif case == 3 and n > 1:  # received out of order
            received = {k: v[::-1].copy() for k, v in received.items()}
        elif case == 4:  # the replies in another order
            parts = parts[::-1]
        eaves = EavesdroppingGrid(None)  # type: ignore[arg-type]
        eaves.observations = [Observation(i, "query.upload", arrays={"upload": p}) for i, p in enumerate(parts)]
        got = eaves.uploads_matching(received, chunk=int(g.integers(1, 6)))
        want = _old_uploads_matching(parts, received)
        assert (got is received) == (want is received), trial
        assert same_uploads(got, want), trial
        shares += got is received
    assert 50 < shares < 250  # both answers were exercised


def test_uploads_matching_allocates_a_byte_per_upload_not_the_merges_row_order():
    """Issue #38, the eavesdropper's record at its peak: checking one round of distinct rows (100 replies of
    interleaved rows, 400k uploads) against the server's merge allocates about a byte an upload (tracemalloc:
    numpy's buffers), not `merge_positions`' argsort, inverse and arange (24 bytes an upload). Known-bad: the same
    record with one row repeated takes that path and allocates over 16 bytes an upload."""
    import tracemalloc

    from fl_privtext.client import merge_uploads
    from fl_privtext.federation.eavesdropper import EavesdroppingGrid, Observation

    n, clients = 400_000, 100
    g = np.random.default_rng(3)
    owner = g.integers(0, clients, n)
    parts = [{"features": np.zeros((int((owner == c).sum()), 2), np.float32),
              "labels": np.zeros(int((owner == c).sum()), np.int8),
              "rows": np.flatnonzero(owner == c).astype(np.int64)} for c in range(clients)]

    def peak(ps):
        received = merge_uploads(ps)
        eaves = EavesdroppingGrid(None)  # type: ignore[arg-type]
        eaves.observations = [Observation(i, "query.upload", arrays={"upload": p}) for i, p in enumerate(ps)]
        tracemalloc.start()
        try:
            got = eaves.uploads_matching(received, chunk=4096)
            return tracemalloc.get_traced_memory()[1], got is received
        finally:
            tracemalloc.stop()

    used, shared = peak(parts)
    assert shared and used < 1.5 * n + 2_000_000, used
    repeated = [dict(p) for p in parts]
    repeated[1]["rows"] = parts[1]["rows"].copy()
    repeated[1]["rows"][0] = parts[0]["rows"][0]  # a row sent twice: the stable merge's own positions
    used_bad, shared_bad = peak(repeated)
    assert shared_bad and used_bad > 16 * n, used_bad


def test_a_spilled_reply_keeps_no_byte_of_its_uploads_and_the_round_reads_them_back(tmp_path, monkeypatch):
    """Issue #38, a budget of zero bytes an upload: `spill_upload` moves every array of a reply's upload (the
    representations, and the labels and record ids the old code left in the reply: 16 bytes an upload, held
    until the round's last reply was in: ~0.6 GB of the driver at 10M users) to the round's spill; `collect`
    reads each reply's part back as slices of the spill, its senders as slices of the spilled ids (no second
    copy), and merges them as `merge_uploads` does. Known-bad: a reply whose arrays differ in length is refused;
    an error, an empty upload and a reply without one are kept as they are (nothing spilled)."""
    import itertools

    import pytest
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fl_privtext.client import merge_uploads
    from fl_privtext.federation.server_app import merge_spilled, spill_upload, spilled_senders
    from fl_privtext.memory import Spill, is_mapped

    for name in ("_task_id", "_run_id", "_node_id"):  # Messages are built by a running ServerApp: stand in for it
        monkeypatch.setattr(TaskIdentity, name, 1 if name != "_node_id" else 0)
    g = np.random.default_rng(5)

    def reply(rows):
        rows = np.asarray(rows, np.int64)
        up = {"features": g.normal(size=(len(rows), 4)).astype(np.float32), "labels": rows % 3, "rows": rows}
        msg = Message(RecordDict({"upload": ArrayRecord({k: Array(v) for k, v in up.items()}),
                                  "stats": MetricRecord({"num_uploads": len(rows)})}), dst_node_id=1,
                      message_type="query.upload")
        return msg, up

    sent = [reply(r) for r in ([9, 2, 4], [], [7, 0], [4, 1])]
    spill = Spill(tmp_path)
    counts = []
    for msg, up in sent:
        got, n = spill_upload(msg, spill)
        assert got is msg and n == len(up["rows"])
        kept = msg.content.array_records["upload"]
        assert set(kept) == (set() if n else set(up))  # a spilled reply keeps no array of its upload; an empty one all
        counts.append(n)
    arrived = spill.mapped()
    bounds = np.cumsum([0, *counts])
    parts = [{k: v[a:b] for k, v in arrived.items()} for a, b in itertools.pairwise(bounds) if b > a]
    merged = merge_spilled(parts, arrived, str(tmp_path), chunk=2)
    want = merge_uploads([up for _, up in sent])
    for k in want:
        assert merged[k].dtype == want[k].dtype and is_mapped(merged[k])
        np.testing.assert_array_equal(merged[k], want[k])
    senders = spilled_senders([(node, p["rows"]) for node, p in zip((3, 5, 6), parts)], str(tmp_path))
    for (node, rows), (_, up) in zip(senders.items(), [s for s in sent if len(s[1]["rows"])]):
        np.testing.assert_array_equal(rows, up["rows"])
        assert np.shares_memory(rows, arrived["rows"])  # the spill's own map, not a copy
    bad, _ = reply([1, 2])
    bad.content["upload"] = ArrayRecord({"features": Array(np.zeros((2, 4), np.float32)),
                                         "labels": Array(np.zeros(3, np.int64)), "rows": Array(np.arange(2))})
    with pytest.raises(ValueError, match="one length"):
        spill_upload(bad, Spill(tmp_path))
    plain = Message(RecordDict({"stats": MetricRecord({"num_uploads": 0})}), dst_node_id=1, message_type="query.upload")
    assert spill_upload(plain, Spill(tmp_path)) == (plain, 0)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(key)).split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status VmHWM, clear_refs (Linux)")
def test_the_row_order_check_of_a_spilled_round_keeps_few_pages_of_its_maps(tmp_path):
    """Issue #38, a budget: the record check of one round (100 replies of interleaved rows, 3M uploads) against the
    server's merge, both spilled and mapped as in a run, raises this process's peak RSS (file pages included:
    VmHWM) by under 24 bytes an upload (measured 9.1; mostly fixed: a large page cache folio or so per map).
    Each scattered read of a map faults in a whole folio around it; the chunks' first ids and each part's bounds
    for them, then a chunk's slices of all 100 parts between two page drops, kept 43 bytes an upload resident here
    (the old check; 66 at 50 dimensions and 3.66M uploads; a 10M run's record stage: the driver +0.55 GB)."""
    from fl_privtext.federation.eavesdropper import _equal_in_row_order
    from fl_privtext.memory import CHUNK_ROWS, Spill, drop_mapped_pages

    n, clients, d = 3_000_000, 100, 16
    g = np.random.default_rng(8)
    owner = g.integers(0, clients, n)
    rows = np.arange(n, dtype=np.int64)
    features = g.standard_normal((n, d), dtype=np.float32)
    labels = (rows % 5).astype(np.int64)
    sent, spans, start = Spill(tmp_path), [], 0
    for c in range(clients):
        mine = np.flatnonzero(owner == c)
        sent.append({"features": features[mine], "labels": labels[mine], "rows": rows[mine]})
        spans.append((start, len(mine)))
        start += len(mine)
    merged = Spill(tmp_path)
    merged.append({"features": features, "labels": labels, "rows": rows})
    del features, labels, rows, owner, mine
    arrived, received = sent.mapped(), merged.mapped()
    parts = [{k: v[a : a + m] for k, v in arrived.items()} for a, m in spans]
    for a in (*arrived.values(), *received.values()):
        drop_mapped_pages(a)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the RSS now
    before = _status_kib("VmRSS:")
    assert _equal_in_row_order(parts, received, CHUNK_ROWS)
    rise = (_status_kib("VmHWM:") - before) * 1024
    assert rise < 24 * n, f"{rise / n:.1f} bytes an upload"
