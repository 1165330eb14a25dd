"""`quiet_solver` when a point's seeds run side by side: the filters come off when the LAST block leaves."""

from __future__ import annotations

import warnings

from sklearn.exceptions import ConvergenceWarning

from fl_privtext.server.learners import quiet_solver


def test_interleaved_blocks_restore_the_filters_once_the_last_leaves():
    before = warnings.filters[:]
    a, b = quiet_solver(), quiet_solver()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)  # the first one in leaves first (another seed's thread is still fitting)
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("inside b", ConvergenceWarning, stacklevel=1)
    assert not caught  # still quiet for b
    b.__exit__(None, None, None)
    assert warnings.filters == before  # nothing left on for good

    # the known-bad variant: one catch_warnings per block, exited in the same order, leaves a filter on for good
    with warnings.catch_warnings():  # restores the test's filters whatever happens inside
        x, y = warnings.catch_warnings(), warnings.catch_warnings()
        x.__enter__()
        warnings.simplefilter("ignore", ConvergenceWarning)
        y.__enter__()
        warnings.simplefilter("ignore", ConvergenceWarning)
        x.__exit__(None, None, None)
        y.__exit__(None, None, None)
        assert warnings.filters != before
