"""The clustered bootstrap over users (fl_privtext.bootstrap): nominal coverage on clustered data, where an i.i.d.
record bootstrap (the known-bad variant) under-covers; seeds are crossed with users, not nested."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.bootstrap import UserCounts, cluster_bootstrap, counts_bootstrap, user_counts
from fl_privtext.rng import generator

TRUE_ACCURACY = 0.7
DATASETS = 200


def _clustered(g: np.random.Generator, users: int = 60, concentration: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per-record correctness of ``users`` users whose own accuracies are Beta(0.7 k, 0.3 k) (k = concentration:
    intra-user correlation 1 / (k + 1)), each with 1..19 records independent of its accuracy: the record-pooled
    population accuracy is 0.7."""
    p = g.beta(TRUE_ACCURACY * concentration, (1 - TRUE_ACCURACY) * concentration, size=users)
    m = g.integers(1, 20, size=users)
    who = np.repeat(np.arange(users), m)
    return g.random(len(who)) < p[who], who


def _coverage(interval) -> float:  # type: ignore[no-untyped-def]
    hits = 0
    for d in range(DATASETS):
        correct, users = _clustered(generator(7, "data", d))
        lo, hi = interval(correct, users, generator(7, "boot", d))
        hits += lo <= TRUE_ACCURACY <= hi
    return hits / DATASETS


def test_the_user_bootstrap_covers_at_its_nominal_rate():
    cover = _coverage(lambda c, u, g: cluster_bootstrap(c, u, g, n_boot=1000))
    assert 0.90 <= cover <= 0.99, cover


def test_an_iid_record_bootstrap_under_covers_on_clustered_users():
    # known-bad variant: every record its own "user" (the binomial view of the test set)
    cover = _coverage(lambda c, u, g: cluster_bootstrap(c, np.arange(len(c)), g, n_boot=1000))
    assert cover < 0.85, cover


def test_seeds_are_crossed_with_users_not_nested():
    """Three seeds that score the same users identically are one seed's information: the interval keeps its
    width. Resampling users independently within each seed (nested) would shrink it by about sqrt(3)."""
    correct, users = _clustered(generator(3, "data"))
    one = cluster_bootstrap(correct, users, generator(3, "boot"), n_boot=4000)
    three = cluster_bootstrap(np.tile(correct, 3), np.tile(users, 3), generator(3, "boot"), n_boot=4000,
                              seeds=np.repeat(np.arange(3), len(correct)))
    assert three[1] - three[0] == pytest.approx(one[1] - one[0], rel=0.1)
    # the nested variant, for contrast: the same data as three different user populations
    nested = cluster_bootstrap(np.tile(correct, 3), np.concatenate([users, users + 1000, users + 2000]),
                               generator(3, "boot"), n_boot=4000)
    assert nested[1] - nested[0] < 0.7 * (one[1] - one[0])


def test_seed_variation_widens_the_interval():
    # every user equally accurate within a seed, the seeds apart: the interval spans the seeds' accuracies
    users = np.repeat(np.arange(50), 10)
    per_seed = [UserCounts(np.arange(50), np.full(50, 10), np.full(50, k)) for k in (5, 7, 9)]
    lo, hi = counts_bootstrap(per_seed, generator(0, "boot"))
    assert lo < 0.6 and hi > 0.8 and 0.5 <= lo and hi <= 0.9
    assert user_counts(np.ones(len(users), bool), users).accuracy == 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one user and one seed per record"):
        cluster_bootstrap(np.ones(3, bool), np.zeros(2, np.int64), generator(0))
    with pytest.raises(ValueError, match=">= 1 record"):
        user_counts(np.ones(0, bool), np.zeros(0, np.int64))
