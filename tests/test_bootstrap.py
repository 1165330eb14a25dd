"""The clustered bootstrap over users (fl_privtext.bootstrap): nominal coverage on clustered data, where an i.i.d.
record bootstrap (the known-bad variant) under-covers; seeds are crossed with users, not nested."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.bootstrap import (
    ACCURACY,
    Ratios,
    UserCounts,
    UserSums,
    _replicate_counts,
    cluster_bootstrap,
    counts_bootstrap,
    seeds_interval,
    sums_bootstrap,
    user_counts,
    user_sums,
)
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
    # every user equally accurate within a seed, the seeds apart: no user variance, so the interval is the seeds'
    # Student t interval, mean 0.7 +- t_2(0.975) * 0.2 / sqrt(3) = 0.7 +- 0.497, clipped to [0, 1]
    users = np.repeat(np.arange(50), 10)
    per_seed = [UserCounts(np.arange(50), np.full(50, 10), np.full(50, k)) for k in (5, 7, 9)]
    lo, hi = counts_bootstrap(per_seed, generator(0, "boot"))
    assert lo == pytest.approx(0.7 - 4.302653 * 0.2 / np.sqrt(3), abs=1e-5) and hi == 1.0
    assert user_counts(np.ones(len(users), bool), users).accuracy == 1.0


def _seed_dominated(g: np.random.Generator, seeds: int = 3) -> list[UserCounts]:
    """Per-seed counts of 200 users x 20 records whose accuracy in a seed is 0.7 + that seed's N(0, 0.06) effect
    (the mechanism's noise and the server's training: the same users, another model)."""
    out = []
    for _ in range(seeds):
        p = TRUE_ACCURACY + g.normal(0.0, 0.06)
        out.append(UserCounts(np.arange(200), np.full(200, 20), g.binomial(20, p, size=200)))
    return out


def _percentile_over_seeds(per_seed: list[UserCounts], g: np.random.Generator, n_boot: int = 500
                           ) -> tuple[float, float]:
    """The known-bad variant (this module before): seeds resampled with replacement in each replicate."""
    n = np.stack([s.n for s in per_seed]).astype(float)  # (S, U)
    c = np.stack([s.correct for s in per_seed]).astype(float)
    users = n.shape[1]
    draws = g.integers(users, size=(n_boot, users)) + users * np.arange(n_boot)[:, None]
    w = np.bincount(draws.ravel(), minlength=n_boot * users).reshape(n_boot, users).astype(float)
    acc = (w @ c.T) / (w @ n.T)  # (B, S)
    stats = np.take_along_axis(acc, g.integers(len(per_seed), size=acc.shape), axis=1).mean(axis=1)
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return float(lo), float(hi)


def test_three_seeds_covered_at_the_nominal_rate_where_a_percentile_bootstrap_over_seeds_is_not():
    ours = bad = 0
    for d in range(DATASETS):
        per_seed = _seed_dominated(generator(11, "data", d))
        lo, hi = counts_bootstrap(per_seed, generator(11, "boot", d), n_boot=500)
        ours += lo <= TRUE_ACCURACY <= hi
        lo, hi = _percentile_over_seeds(per_seed, generator(11, "bad", d))
        bad += lo <= TRUE_ACCURACY <= hi
    print(f"coverage at a nominal 95%: ours {ours / DATASETS:.3f}, percentile over seeds {bad / DATASETS:.3f}")
    assert ours / DATASETS >= 0.92, ours / DATASETS
    assert bad / DATASETS < 0.82, bad / DATASETS


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one user and one seed per record"):
        cluster_bootstrap(np.ones(3, bool), np.zeros(2, np.int64), generator(0))
    with pytest.raises(ValueError, match=">= 1 record"):
        user_counts(np.ones(0, bool), np.zeros(0, np.int64))


def test_seeds_interval_is_the_users_interval_for_equal_seeds_and_the_t_interval_without_user_noise():
    # identical seeds: each seed's own interval (the seeds add nothing)
    assert seeds_interval([0.6, 0.6, 0.6], [0.55, 0.55, 0.55], [0.66, 0.66, 0.66]) == pytest.approx((0.55, 0.66))
    # no user noise, the seeds apart: Student's t over the seeds, 0.7 +- t_2 0.2 / sqrt 3, clipped to [0, 1]
    lo, hi = seeds_interval([0.5, 0.7, 0.9], [0.5, 0.7, 0.9], [0.5, 0.7, 0.9])
    assert lo == pytest.approx(0.7 - 4.302653 * 0.2 / np.sqrt(3), abs=1e-5) and hi == 1.0
    # both: each side in quadrature, wider than either part and than the mean of the seeds' ends (the old figure)
    lo, hi = seeds_interval([0.58, 0.62], [0.53, 0.57], [0.63, 0.67])
    half = 12.7062 * 0.02 * np.sqrt(2) / np.sqrt(2)
    assert hi - 0.6 == pytest.approx(np.hypot(0.05, half), rel=1e-4) and lo < 0.55
    with pytest.raises(ValueError, match="one accuracy, low and high per seed"):
        seeds_interval([0.5], [0.4, 0.4], [0.6])


def test_seeds_interval_of_an_advantage_is_clipped_to_its_own_range_not_to_zero():
    # an advantage over a prior lies in [-1, 1]: a significantly negative one keeps its lower end below zero, where
    # the accuracy's [0, 1] clip would report an interval that excludes its own estimate
    adv = [-0.033, -0.037, -0.034]
    lo, hi = seeds_interval(adv, [a - 0.01 for a in adv], [a + 0.01 for a in adv], bounds=(-1.0, 1.0))
    assert lo < -0.04 and -0.03 < hi < 0.0
    assert seeds_interval(adv, [a - 0.01 for a in adv], [a + 0.01 for a in adv])[0] == 0.0  # the known-bad clip


# ---- per-upload attack figures (issue #37): several uploads per target user ---------------------------------------
def _planted_attack(g: np.random.Generator, users: int = 100, m: int = 9) -> tuple[np.ndarray, ...]:
    """Targets of a binary attribute, ``m`` IDENTICAL uploads per user: the attacker is right on all of a user's
    uploads (probability TRUE_ACCURACY) or on none; the prior answers class 0."""
    z_user = g.integers(0, 2, users)
    right_user = g.random(users) < TRUE_ACCURACY
    who = np.repeat(np.arange(users), m)
    z = z_user[who]
    pred = np.where(right_user[who], z, 1 - z)
    return z, pred, np.zeros_like(z), who


def test_the_attack_figures_pooled_from_user_sums_are_the_reported_ones():
    from fl_privtext import metrics
    from fl_privtext.attacks.evaluate import upload_figures

    g = generator(5, "planted")
    z, pred, prior, who = _planted_attack(g)
    pred[:7] = 2  # a third class the attacker predicts but no target has: macro-F1 counts it (sklearn's rule)
    cols, figures = upload_figures(z, pred, prior, 3, multilabel=False)
    pooled = user_sums(cols, who).sums.sum(axis=0)
    assert figures["accuracy"].value(pooled) == pytest.approx(metrics.accuracy(z, pred))
    assert figures["advantage"].value(pooled) == pytest.approx(metrics.accuracy(z, pred) - metrics.accuracy(z, prior))
    assert figures["macro_f1"].value(pooled) == pytest.approx(metrics.macro_f1(z, pred, 3))
    zm = np.stack([z, 1 - z, np.zeros_like(z)], axis=1)
    pm = np.stack([pred % 2, z, np.zeros_like(z)], axis=1)
    cols, figures = upload_figures(zm, pm, np.zeros_like(zm), 3, multilabel=True)
    pooled = cols.sum(axis=0)
    assert figures["accuracy"].value(pooled) == pytest.approx(metrics.accuracy(zm, pm))
    assert figures["f1"].value(pooled) == pytest.approx(metrics.multilabel_f1(zm, pm))


def test_with_m_identical_uploads_per_user_the_user_interval_is_sqrt_m_wider_and_covers_where_iid_does_not():
    """Each user's m uploads are one observation m times: the interval over users is sqrt(m) wider than one that
    resamples the uploads independently (the known-bad variant), and only the former covers the true accuracy at
    about its nominal rate over repeated data sets (measured: width ratio 2.98 at m = 9; coverage 0.95 against
    0.48 over 200 data sets)."""
    from fl_privtext.attacks.evaluate import upload_figures

    m, hits, widths = 9, {"users": 0, "uploads": 0}, {"users": [], "uploads": []}
    for d in range(DATASETS):
        z, pred, prior, who = _planted_attack(generator(11, "planted", d), m=m)
        cols, figures = upload_figures(z, pred, prior, 2, multilabel=False)
        for side, owners in (("users", who), ("uploads", np.arange(len(who)))):
            lo, hi = sums_bootstrap([user_sums(cols, owners)], {"accuracy": figures["accuracy"]},
                                    generator(11, "boot", side, d), n_boot=500)["accuracy"]
            hits[side] += lo <= TRUE_ACCURACY <= hi
            widths[side].append(hi - lo)
    ratio = np.mean(widths["users"]) / np.mean(widths["uploads"])
    assert ratio == pytest.approx(np.sqrt(m), rel=0.1), ratio
    assert 0.90 <= hits["users"] / DATASETS <= 0.99, hits
    assert hits["uploads"] / DATASETS < 0.6, hits


def test_sums_bootstrap_of_accuracy_is_counts_bootstrap_and_an_advantage_may_be_negative():
    g = generator(2, "data")
    per_seed = []
    for _ in range(3):
        correct, users = _clustered(g)
        per_seed.append(user_counts(correct, users))
    want = counts_bootstrap(per_seed, generator(2, "boot"), n_boot=300)
    sums = [UserSums(c.users, np.stack([c.n, c.correct], axis=1).astype(float)) for c in per_seed]
    assert sums_bootstrap(sums, {"accuracy": ACCURACY}, generator(2, "boot"), n_boot=300)["accuracy"] == want
    worse = Ratios(np.array([[1.0, -2.0]]), np.array([[1.0, 0.0]]), low=-1.0)  # 1 - 2 accuracy: about -0.4
    lo, hi = sums_bootstrap(sums, {"worse": worse}, generator(2, "boot"), n_boot=300)["worse"]
    assert -1.0 <= lo < hi < 0.0
    with pytest.raises(ValueError, match="one column count"):
        sums_bootstrap(sums, {"bad": Ratios(np.ones((1, 3)), np.ones((1, 3)))}, generator(2, "boot"))


def test_per_user_sums_and_ratios_compare_by_value():
    """Two paths' results are compared whole (Flower against the plain loop): their per-user sums must compare by
    their arrays, not by identity."""
    from fl_privtext.bootstrap import ACCURACY, Ratios, user_sums

    cols, users = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]]), np.array([3, 3, 5])
    assert user_sums(cols, users) == user_sums(cols.copy(), users.copy())
    assert user_sums(cols, users) != user_sums(cols, np.array([3, 5, 5]))
    assert ACCURACY == Ratios(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]))
    assert ACCURACY != Ratios(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]), high=2.0)


@pytest.mark.parametrize("num_users", [1, 7, 5000])
def test_replicate_counts_are_the_offset_bincount_of_the_same_draws(num_users: int) -> None:
    """Per-row counts of int32 draws equal the one-bincount-over-offset-ids formula on int64 draws of the same
    stream (the intervals of every saved result depend on these numbers)."""
    b = 13
    old = np.random.default_rng(3).integers(num_users, size=(b, num_users)) + num_users * np.arange(b)[:, None]
    want = np.bincount(old.ravel(), minlength=b * num_users).reshape(b, num_users).astype(np.float64)
    got = _replicate_counts(np.random.default_rng(3), b, num_users)
    assert got.dtype == np.float64 and np.array_equal(got, want)
    assert np.all(got.sum(axis=1) == num_users)


def test_one_seeds_sums_are_read_in_place_with_the_figures_of_the_copying_path() -> None:
    """One seed whose users are sorted (every `user_sums`) is bootstrapped on its own sums, not a (1, U, K) copy
    (issue #38: the attack's referee holds one per attribute); the intervals are those of the general path, which
    places the same sums by user (here reached by listing the users in reverse order)."""
    g = np.random.default_rng(11)
    correct, users = _clustered(g, users=3_000)
    sums = user_counts(correct, users)
    one = UserSums(sums.users, np.stack([sums.n, sums.correct], axis=1).astype(np.float64))
    flipped = UserSums(one.users[::-1].copy(), one.sums[::-1].copy())
    got = sums_bootstrap([one], {"accuracy": ACCURACY}, generator(3, "t"))
    assert got == sums_bootstrap([flipped], {"accuracy": ACCURACY}, generator(3, "t"))


def test_sums_bootstrap_of_narrow_counts_equals_the_float64_one_bit_for_bit():
    """Counts held in their narrowest unsigned type (`counts_dtype`, the attack referee's per-user sums) widen a
    block of users at a time: the same replicates and the same interval as the float64 sums, to the last bit
    (integer sums are exact in any order), with more users than one widening block; float32 (the former holding
    type) too."""
    from fl_privtext import bootstrap as b

    g = np.random.default_rng(3)
    users = np.arange(b._WIDEN_USERS + 1234)
    right = g.integers(0, 4, len(users)).astype(np.float64)
    sums = np.stack([np.full(len(users), 4.0), right, np.minimum(right, 2.0)], axis=1)
    figures = {"accuracy": b.Ratios(np.eye(3)[[1]], np.eye(3)[[0]]),
               "advantage": b.Ratios(np.eye(3)[[1]] - np.eye(3)[[2]], np.eye(3)[[0]], low=-1.0)}
    wide = b.sums_bootstrap([b.UserSums(users, sums)], figures, np.random.default_rng(7), n_boot=40)
    narrow_sums = sums.astype(b.counts_dtype(4))
    assert narrow_sums.dtype == np.uint8 and np.array_equal(narrow_sums, sums)
    for held in (narrow_sums, sums.astype(np.float32)):
        narrow = b.sums_bootstrap([b.UserSums(users, held)], figures, np.random.default_rng(7), n_boot=40)
        assert narrow == wide


def test_counts_dtype_is_the_narrowest_type_that_holds_the_largest_sum():
    from fl_privtext import bootstrap as b

    assert [b.counts_dtype(m) for m in (0, 255, 256, 65535, 65536, 2**32 - 1, 2**32)] == \
        [np.uint8, np.uint8, np.uint16, np.uint16, np.uint32, np.uint32, np.float64]


@pytest.mark.parametrize("block", [1 << 16, 999])
def test_gathered_replicates_equal_the_counted_ones_bit_for_bit(monkeypatch, block: int) -> None:
    """Beyond `_CHUNK_CELLS` users, integer sums are pooled by gathering each replicate's drawn users, a block of
    draws at a time (`_gathered_replicate`: no (users,) counts or weights per replicate, issue #38): the same
    draws and the same intervals, to the last bit, as the counted replicates, at two draw blocks (one spanning a
    replicate, one cutting it into pieces); float sums keep the counted path."""
    from fl_privtext import bootstrap as b

    g = np.random.default_rng(11)
    users = np.arange(5_003)
    records = g.integers(1, 6, len(users))
    right = np.minimum(g.binomial(records, 0.6), records)
    sums = np.stack([records, right, np.minimum(right, 2)], axis=1).astype(b.counts_dtype(int(records.max())))
    figures = {"accuracy": b.Ratios(np.eye(3)[[1]], np.eye(3)[[0]]),
               "advantage": b.Ratios(np.eye(3)[[1]] - np.eye(3)[[2]], np.eye(3)[[0]], low=-1.0)}
    counted = b.sums_bootstrap([b.UserSums(users, sums)], figures, np.random.default_rng(5), n_boot=60)
    calls: list[int] = []
    real = b._gathered_replicate
    monkeypatch.setattr(b, "_gathered_replicate", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(b, "_CHUNK_CELLS", 1000)
    monkeypatch.setattr(b, "_DRAW_BLOCK", block)
    gathered = b.sums_bootstrap([b.UserSums(users, sums)], figures, np.random.default_rng(5), n_boot=60)
    assert len(calls) == 60 and gathered == counted
    calls.clear()
    as_float = b.sums_bootstrap([b.UserSums(users, sums.astype(np.float64))], figures, np.random.default_rng(5),
                                n_boot=60)
    assert not calls and as_float == counted


def test_user_counts_by_chunks_equal_np_uniques_counts_in_any_integer_type(monkeypatch) -> None:
    """`user_counts` sorts the ids in their own type and counts a chunk at a time (issue #38): the same int64 users,
    records and correct records as ``np.unique(int64 users, return_inverse=True)`` and two bincounts, whatever the
    ids' type and order, across chunk edges."""
    from fl_privtext import bootstrap

    monkeypatch.setattr(bootstrap, "_COUNT_CHUNK", 13)
    g = np.random.default_rng(6)
    for dtype in (np.int32, np.int64, np.uint16, np.int8):
        users = g.integers(0, 90, 1000).astype(dtype)
        correct = g.random(1000) < 0.4
        ids, inv = np.unique(users.astype(np.int64), return_inverse=True)
        got = user_counts(correct, users)
        assert got == UserCounts(ids, np.bincount(inv).astype(np.int64),
                                 np.bincount(inv, weights=correct).astype(np.int64))
        assert got.users.dtype == got.n.dtype == got.correct.dtype == np.int64
