"""`fl_privtext.attacks.evaluate.PerUser`: the referee's per-user epsilons as sorted arrays (issue #38: the dicts
held ~200 MB of Python objects at a million users) must read as the dicts did."""

import numpy as np
import pytest

from fl_privtext.attacks.evaluate import PerUser


def test_per_user_reads_as_the_dict_it_replaces_and_refuses_what_a_dict_would():
    g = np.random.default_rng(0)
    users = g.integers(0, 50, 400)
    uniq, counts = np.unique(users, return_counts=True)
    as_dict = {int(u): float(c * 1.7) for u, c in zip(uniq, counts, strict=True)}
    per = PerUser(uniq, counts * 1.7)
    assert len(per) == len(as_dict) and all(per[u] == v for u, v in as_dict.items())
    np.testing.assert_array_equal(per.at(users), np.array([as_dict[int(u)] for u in users]))
    named = PerUser(np.array([3, 60, 70]), np.array([9.0, 1.0, 2.0]))  # 3 in both: update takes named's value
    as_dict.update({3: 9.0, 60: 1.0, 70: 2.0})
    both = per.updated(named)
    assert {int(u): float(v) for u, v in zip(both.users, both.values, strict=True)} == as_dict
    with pytest.raises(KeyError):
        per.at(np.array([uniq.max() + 1]))  # a user without observed uploads: a dict's KeyError, not a neighbour's
    with pytest.raises(ValueError, match="sorted and unique"):
        PerUser(np.array([2, 1]), np.array([0.5, 0.5]))
    assert per.at(np.zeros(0, np.int64)).shape == (0,)
