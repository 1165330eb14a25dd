"""data.options.records_per_user: each user's first k records, in the data's order (fl_privtext.pipeline.preparation)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline.preparation import load


def test_each_user_keeps_its_first_records_in_order():
    full = load(ExperimentConfig())
    users = np.asarray(full.user_index)
    for k in (1, 2):
        sub = load(ExperimentConfig.from_flat({"data.options.records_per_user": k}))
        got = np.asarray(sub.user_index)
        counts = np.bincount(users)
        assert np.array_equal(np.bincount(got, minlength=len(counts)), np.minimum(counts, k))
        # the kept rows are each user's first k rows of the full data, in order
        expected = [i for i in range(len(users)) if np.sum(users[:i] == users[i]) < k]
        assert list(sub.text_column[:50]) == [full.text_column[i] for i in expected[:50]]


@pytest.mark.parametrize("bad", [0, -1, "two", 1.5])
def test_bad_records_per_user_is_a_one_line_error(bad):
    with pytest.raises(ValueError, match="records_per_user must be an integer >= 1"):
        load(ExperimentConfig.from_flat({"data.options.records_per_user": bad}))
