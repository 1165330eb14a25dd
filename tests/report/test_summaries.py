"""The point's traffic summaries: the records a round did not deliver."""

import numpy as np


def _missing(expected: np.ndarray, received: np.ndarray, num_records: int) -> np.ndarray:
    """The reference `missing_rows` is checked against (the package's expression before it went client by client):
    ``np.setdiff1d(expected, received)`` for record ids in [0, ``num_records``) through a mask."""
    seen = np.zeros(num_records, bool)
    seen[np.asarray(received, np.int64)] = True
    expected = np.asarray(expected, np.int64)
    return np.unique(expected[~seen[expected]])


def test_missing_records_are_setdiff_of_expected_and_received():
    """The reference: sorted distinct ids expected but not received, as np.setdiff1d (received repeats and extra
    ids ignored)."""
    expected = np.array([7, 3, 3, 9, 0, 5])
    received = np.array([5, 5, 0, 8])
    assert _missing(expected, received, 10).tolist() == [3, 7, 9] == np.setdiff1d(expected, received).tolist()
    assert _missing(expected, np.arange(10), 10).size == 0  # every client delivered
    assert _missing(np.zeros(0, np.int64), received, 10).size == 0


def test_the_seeds_learner_label_breaks_ties_by_seed_order_in_every_process():
    """Three seeds that shipped three heads: the label is the first seed's, whatever the process's string hash seed
    (the set-based rule gave centroid in one run of the frontier and linear in the next, same results)."""
    import os
    import subprocess
    import sys

    code = ("from fl_privtext.report.results import most_frequent as f; "
            "print(f(['linear', 'lda', 'centroid']), f(['lda', 'centroid', 'centroid']))")
    answers = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout.strip() for h in range(6)}
    assert answers == {"linear centroid"}
    # the known-bad rule: a set's order follows the hash seed, so some of six processes disagree
    bad = ("names = ['linear', 'lda', 'centroid']; print(max(set(names), key=names.count))")
    seen = {subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout.strip() for h in range(6)}
    assert len(seen) > 1


def test_faults_names_the_users_never_heard_from_without_every_records_id_string(tmp_path, monkeypatch):
    """Issue #38: the report names (at most 1,000) users the server never heard from by reading the ids of their
    records only (`TextDataset.user_ids_at`), not `user_ids` (every record's id as a string, kept: ~36 bytes a
    record, 1.3 GB in the driver at 10M users). The same answer as the old expression (sorted ids of the rows of the
    missing users), with a client that timed out and with every client delivered; the dataset never holds
    ``user_ids``. Known-bad: the old expression builds and keeps it."""
    from types import SimpleNamespace

    from fl_privtext.config import FederationConfig
    from fl_privtext.data import load_dataset
    from fl_privtext.report.summaries import expected_rows, faults, missing_rows

    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(tmp_path))
    ds = load_dataset("synthetic", users=300, seed=1)
    ds.__dict__.pop("user_ids", None)
    user = ds.user_index
    shards = [np.flatnonzero(user % 3 == c) for c in range(3)]
    client = SimpleNamespace(shards=shards)
    prep = SimpleNamespace(ds=ds, shards=shards, client=client)
    fed = FederationConfig()

    def collected(lost_client):
        rows = np.sort(np.concatenate([s for c, s in enumerate(shards) if c != lost_client]))
        failures = [] if lost_client is None else [{"node": lost_client, "kind": "timeout", "reason": "late"}]
        rnd = SimpleNamespace(revealed=None, uploads={"rows": rows}, failures=failures)
        return [SimpleNamespace(seed=0, rounds=[rnd], received={"rows": rows}, refused=())]

    for lost in (1, None):
        got = faults(prep, fed, collected(lost))
        assert "user_ids" not in ds.__dict__
        missing = np.unique(user[shards[lost]]) if lost is not None else np.zeros(0, np.int64)
        want = np.unique(ds.user_ids[np.isin(user, missing[:1000])]).tolist()  # the old expression (known-bad)
        assert "user_ids" in ds.__dict__  # ... which keeps every record's id string
        ds.__dict__.pop("user_ids")
        assert got["users_not_heard_from"] == want and got["num_users_not_heard_from"] == len(missing)
        assert (len(want) > 50) == (lost is not None)
        rows = collected(lost)[0].received["rows"]  # the round's missing records, client by client: the same ids
        old = _missing(expected_rows(prep, fed, 0), rows, len(ds))
        assert np.array_equal(missing_rows(prep, fed, 0, rows), old) and len(old) == got["records_not_received"]
