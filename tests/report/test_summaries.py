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
