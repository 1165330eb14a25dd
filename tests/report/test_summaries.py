"""The point's traffic summaries: the records a round did not deliver."""

import numpy as np

from fl_privtext.report.summaries import _missing


def test_missing_records_are_setdiff_of_expected_and_received():
    """Sorted distinct ids expected but not received, as np.setdiff1d (received repeats and extra ids ignored)."""
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
