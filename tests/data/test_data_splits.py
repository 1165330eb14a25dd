"""User-level roles and user partitions into virtual clients."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.data import assign_roles, make_text_dataset, partition_users, source_roles


def synthetic(num_users: int, seed: int = 0, num_classes: int = 4, max_rows: int = 6):
    """Users with 1..max_rows rows each, labels drawn around a per-user favourite class; rows interleaved."""
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, max_rows + 1, num_users)
    users = np.repeat(np.arange(num_users), per_user)
    fav = rng.integers(0, num_classes, num_users)[users]
    labels = np.where(rng.random(len(users)) < 0.8, fav, rng.integers(0, num_classes, len(users)))
    order = rng.permutation(len(users))  # a user's rows are not contiguous
    users, labels = users[order], labels[order]
    return make_text_dataset(
        "syn",
        texts=[""] * len(users),
        labels=labels,
        label_names=[f"c{k}" for k in range(num_classes)],
        user_ids=[f"user{u}" for u in users],
    )


@pytest.fixture(scope="module")
def ds():
    return synthetic(2000)


def user_sets(ds, mask):
    return set(ds.user_ids[mask].tolist())


# ------------------------------------------------------------------------------------------------ roles
def test_roles_are_user_disjoint_and_sized(ds):
    roles = assign_roles(ds, test_frac=0.2, aux_frac=0.3, seed=7)
    assert roles.shape == (len(ds),) and set(roles.tolist()) == {"train", "test", "aux"}
    tr, te, ax = (user_sets(ds, roles == r) for r in ("train", "test", "aux"))
    assert not (tr & te) and not (tr & ax) and not (te & ax)
    assert (len(te), len(ax), len(tr)) == (400, 600, 1000)  # fractions are of users
    for role, frac in (("test", 0.2), ("aux", 0.3), ("train", 0.5)):
        assert abs((roles == role).mean() - frac) < 0.04  # rows follow users: approximately


def test_roles_reproducible_and_seeded(ds):
    a = assign_roles(ds, seed=1)
    assert (a == assign_roles(ds, seed=1)).all()
    b = assign_roles(ds, seed=2)
    assert (a != b).mean() > 0.2
    # independent of the row order: a user keeps its role when rows are permuted
    perm = np.random.default_rng(0).permutation(len(ds))
    c = assign_roles(ds.user_ids[perm], seed=1)
    assert (c == a[perm]).all()
    rng_roles = assign_roles(ds, seed=np.random.default_rng(5))
    assert set(rng_roles.tolist()) == {"train", "test", "aux"}


@pytest.mark.parametrize(
    "test_frac, aux_frac, match",
    [
        (0.0, 0.2, "test_frac must be a number strictly between 0 and 1"),
        (0.2, 1.0, "aux_frac must be a number strictly between 0 and 1"),
        (-0.1, 0.2, "test_frac"),
        (0.5, 0.5, r"test_frac \+ aux_frac must be < 1"),
        (True, 0.2, "test_frac"),
    ],
)
def test_role_fraction_validation(ds, test_frac, aux_frac, match):
    with pytest.raises(ValueError, match=match):
        assign_roles(ds, test_frac=test_frac, aux_frac=aux_frac, seed=0)


def test_roles_need_three_users():
    tiny = make_text_dataset("t", texts=["a", "b", "c"], user_ids=["x", "x", "y"])
    with pytest.raises(ValueError, match="Cannot split 2 user"):
        assign_roles(tiny, seed=0)


# ------------------------------------------------------------------------------------------------ partitions
def check_partition(ds, rows, parts):
    allr = np.concatenate(parts)
    assert len(allr) == len(rows) and set(allr.tolist()) == set(np.asarray(rows).tolist())  # every row once
    owner: dict[str, int] = {}
    for c, p in enumerate(parts):
        assert len(p) > 0 and (np.diff(p) > 0).all()  # non-empty, ascending
        for u in set(ds.user_ids[p].tolist()):
            assert owner.setdefault(u, c) == c  # a user never split across clients


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shard", "linear"])
def test_partition_covers_rows_and_keeps_users(ds, scheme):
    roles = assign_roles(ds, seed=0)
    rows = np.flatnonzero(roles == "train")
    parts = partition_users(ds, rows, num_clients=37, scheme=scheme, alpha=0.5, seed=3)
    assert len(parts) == 37
    check_partition(ds, rows, parts)
    again = partition_users(ds, rows, num_clients=37, scheme=scheme, alpha=0.5, seed=3)
    assert all((a == b).all() for a, b in zip(parts, again))
    other = partition_users(ds, rows, num_clients=37, scheme=scheme, alpha=0.5, seed=4)
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(parts, other))


def test_iid_balances_users(ds):
    parts = partition_users(ds, None, num_clients=30, scheme="iid", seed=0)
    users_per_client = [len(set(ds.user_ids[p].tolist())) for p in parts]
    assert max(users_per_client) - min(users_per_client) <= 1
    check_partition(ds, np.arange(len(ds)), parts)
    sub = synthetic(300, seed=1)
    assert sum(map(len, partition_users(sub, np.ones(len(sub), bool), num_clients=5, seed=0))) == len(sub)


def label_skew(ds, parts) -> float:
    """Mean over clients of the share of the client's most frequent label (1/K = uniform, 1 = one label)."""
    shares = []
    for p in parts:
        counts = np.bincount(ds.labels[p], minlength=ds.num_classes)
        shares.append(counts.max() / counts.sum())
    return float(np.mean(shares))


def test_dirichlet_skews_labels(ds):
    iid = label_skew(ds, partition_users(ds, num_clients=20, scheme="iid", seed=0))
    d_half = label_skew(ds, partition_users(ds, num_clients=20, scheme="dirichlet", alpha=0.5, seed=0))
    d_small = label_skew(ds, partition_users(ds, num_clients=20, scheme="dirichlet", alpha=0.05, seed=0))
    d_large = label_skew(ds, partition_users(ds, num_clients=20, scheme="dirichlet", alpha=1000.0, seed=0))
    assert iid < 0.35  # 4 classes: close to uniform
    assert d_half > iid + 0.15 and d_small > d_half and d_small > 0.8
    assert abs(d_large - iid) < 0.08  # huge alpha -> IID-like


def test_shard_gives_each_client_about_two_labels(ds):
    iid = label_skew(ds, partition_users(ds, num_clients=20, scheme="iid", seed=0))
    shard = partition_users(ds, num_clients=20, scheme="shard", seed=0)
    check_partition(ds, np.arange(len(ds)), shard)
    # 4 classes, 2 label-sorted shards per client: the top label holds >= half a client's rows, far above IID's
    assert label_skew(ds, shard) > max(0.5, iid + 0.2)


@pytest.mark.parametrize("scheme,growth", [("linear", lambda i: i + 1), ("square", lambda i: (i + 1) ** 2),
                                           ("exponential", lambda i: np.exp(i))])
def test_size_based_partitioners_give_growing_clients(ds, scheme, growth):
    parts = partition_users(ds, num_clients=5, scheme=scheme, seed=0)
    check_partition(ds, np.arange(len(ds)), parts)
    users = np.array([len(set(ds.user_ids[p].tolist())) for p in parts], float)
    want = np.array([growth(i) for i in range(5)], float)
    np.testing.assert_allclose(users / users.sum(), want / want.sum(), atol=0.02)  # flwr-datasets' size law


def test_natural_groups_by_user(ds):
    parts = partition_users(ds, None, num_clients=None, scheme="natural", seed=0)
    assert len(parts) == ds.num_users
    users = sorted(set(ds.user_ids.tolist()))
    for u, p in zip(users, parts):  # one client per user, ordered by user id
        assert set(ds.user_ids[p].tolist()) == {u}
        assert (ds.user_ids == u).sum() == len(p)
    assert len(partition_users(ds, None, num_clients=0, scheme="natural", seed=0)) == ds.num_users
    # fewer clients: consecutive users (in id order) grouped, deterministic (no seed dependence)
    grouped = partition_users(ds, None, num_clients=7, scheme="natural", seed=0)
    check_partition(ds, np.arange(len(ds)), grouped)
    assert all(
        (a == b).all()
        for a, b in zip(grouped, partition_users(ds, None, num_clients=7, scheme="natural", seed=9))
    )
    per_client = [sorted(set(ds.user_ids[p].tolist())) for p in grouped]
    assert [len(u) for u in per_client] == [len(c) for c in np.array_split(users, 7)]
    assert [u for group in per_client for u in group] == users


def test_partition_errors(ds):
    small = synthetic(12)
    with pytest.raises(ValueError, match=r"num_clients=13 is more than the 12 users"):
        partition_users(small, None, num_clients=13, seed=0)
    with pytest.raises(ValueError, match=r"valid schemes are \['iid', 'dirichlet', 'natural', 'shard', 'linear'"):
        partition_users(ds, None, num_clients=3, scheme="pathological", seed=0)
    with pytest.raises(ValueError, match="must not repeat"):
        partition_users(ds, [0, 0, 1], num_clients=1, seed=0)
    with pytest.raises(ValueError, match="alpha"):
        partition_users(ds, None, num_clients=3, scheme="dirichlet", alpha=0, seed=0)
    unlabelled = make_text_dataset("u", texts=["a"] * 4)
    with pytest.raises(ValueError, match="has no task label"):
        partition_users(unlabelled, None, num_clients=2, scheme="dirichlet", seed=0)
    with pytest.raises(ValueError, match="positive integer"):
        partition_users(ds, None, num_clients=0, seed=0)
    with pytest.raises(ValueError, match=r"ExponentialPartitioner cannot split 2000 users into 37 clients"):
        partition_users(ds, None, num_clients=37, scheme="exponential", seed=0)
    with pytest.raises(ValueError, match=r"'shard' deals 2 shards of users per client: 7 clients need at least 14"):
        partition_users(small, None, num_clients=7, scheme="shard", seed=0)


def test_partition_scales_to_a_thousand_clients():
    # speed belongs in benchmarks; here: 20,000 users into 1,000 clients is complete, disjoint and user-intact
    big = synthetic(20_000, seed=2, max_rows=3)
    for scheme in ("dirichlet",):  # iid goes through the same public load_partition path (tested above)
        parts = partition_users(big, None, num_clients=1000, scheme=scheme, seed=0)
        assert len(parts) == 1000 and sum(map(len, parts)) == len(big)
        assert len(np.unique(np.concatenate(parts))) == len(big)
        owner = np.empty(len(big), np.int64)
        for c, p in enumerate(parts):
            owner[p] = c
        for u in np.unique(big.user_ids)[:200]:
            assert len(np.unique(owner[big.user_ids == u])) == 1


# ------------------------------------------------------------------------------------------------ source roles
def _with_splits(splits, users=None):
    return make_text_dataset("src", texts=[""] * len(splits), user_ids=users, splits=list(splits))


def test_source_roles_follow_the_files():
    splits = ["train", "dev", "test", "train", "test", "dev"]
    ds = _with_splits(splits, users=["u0", "u1", "u2", "u0", "u3", "u4"])
    roles = source_roles(ds)
    # test file -> test users (the attacker's targets); train and dev -> aux (train the server, known to the attacker)
    assert roles.tolist() == ["aux", "aux", "test", "aux", "test", "aux"]


@pytest.mark.parametrize("splits, users, match", [
    (["all", "all"], None, "no source train/dev/test splits"),
    (["train", "dev"], None, "with a test split"),
    (["test", "test"], None, "with a test split and a train or dev split"),
    (["train", "valid", "test"], None, r"has \['test', 'train', 'valid'\]"),
    (["train", "test", "test"], ["a", "a", "b"], "keeps users intact, but 1 user"),
])
def test_source_roles_refuse_what_they_cannot_split(splits, users, match):
    with pytest.raises(ValueError, match=match):
        source_roles(_with_splits(splits, users))


def test_data_split_config_names_its_values():
    from fl_privtext.config import ExperimentConfig

    assert ExperimentConfig().data.split == "random"
    with pytest.raises(ValueError, match="data.split must be one of random, source; got 'paper'"):
        ExperimentConfig.from_flat({"data.split": "paper"})


def test_pipeline_uses_the_source_split_and_says_when_there_is_none():
    from fl_privtext import pipeline
    from fl_privtext.config import ExperimentConfig

    cfg = ExperimentConfig.from_flat({"data.split": "source"})
    with pytest.raises(ValueError, match="'default' has no source train/dev/test splits"):
        pipeline.prepare(cfg, features="none")


def test_ag_news_source_split_gives_the_papers_majority_rows(data_root):
    """DPNR's AG majority rows (main 57.79, privacy 49.34) are the source test file's: the majority topic of the
    training data, and 1 - F of the attacker's majority guess (the entities present in more than half of the known
    users' rows; micro F1 over the 5 presence labels) on the test rows."""
    from fl_privtext import metrics, pipeline
    from fl_privtext.config import ExperimentConfig

    cfg = ExperimentConfig.from_flat({"data.name": "ag_news", "data.root": str(data_root), "data.split": "source"})
    prep = pipeline.prepare(cfg, features="none")
    roles, ds = prep.roles, prep.ds
    assert (roles == "test").sum() == 1457 and (roles == "aux").sum() == 11_657 + 1457 and "train" not in roles
    assert (ds.source_split[roles == "test"] == "test").all()
    known, test = roles != "test", roles == "test"
    assert round(100 * metrics.majority_baseline(ds.labels[known], ds.labels[test]), 2) == 57.79
    z = ds.attribute("entities")
    guess = np.tile(z[known].mean(axis=0) > 0.5, (int(test.sum()), 1))
    assert round(100 * (1 - metrics.multilabel_f1(z[test], guess)), 2) == 49.34
    # the same numbers with a random split differ (the reason for data.split = source)
    rnd = pipeline.prepare(ExperimentConfig.from_flat({"data.name": "ag_news", "data.root": str(data_root),
                                                       "data.test-frac": 0.1}), features="none").roles
    assert round(100 * metrics.majority_baseline(ds.labels[rnd != "test"], ds.labels[rnd == "test"]), 2) != 57.79


@pytest.mark.parametrize("name, test_rows, known_rows", [("snips", 700, 13_784), ("mrpc", 1725, 4076)])
def test_snips_and_mrpc_source_splits(data_root, name, test_rows, known_rows):
    from fl_privtext.data import load_dataset

    roles = source_roles(load_dataset(name, data_root=data_root))
    assert ((roles == "test").sum(), (roles == "aux").sum()) == (test_rows, known_rows)


def test_roles_in_one_byte_answer_as_the_names_do():
    """`Roles` (what `prepare` holds) answers every question the platform asks of the "<U5" names the same way,
    and fails on a name that is not a role instead of answering for its codes."""
    from fl_privtext.data.splits import Roles

    names = assign_roles(np.asarray([f"u{i % 37}" for i in range(500)]), test_frac=0.2, aux_frac=0.3, seed=4)
    roles = Roles.of(names)
    assert roles.codes.dtype == np.int8 and roles.codes.nbytes == len(names)
    rows = np.random.default_rng(0).permutation(500)[:123]
    for role in ("train", "test", "aux", "nobody"):
        np.testing.assert_array_equal(roles == role, names == role)
        np.testing.assert_array_equal(roles != role, names != role)
        np.testing.assert_array_equal(roles[rows] == role, names[rows] == role)
        assert (role in roles) == (role in names.tolist())
    assert [roles[i] for i in (0, 7, 499)] == [str(names[i]) for i in (0, 7, 499)]
    assert list(roles) == names.tolist() and len(roles) == len(names) and roles.shape == names.shape
    np.testing.assert_array_equal(np.asarray(roles), names)
    assert "train" not in Roles.of(np.asarray(["test", "aux"]))
    with pytest.raises(ValueError, match="one of"):
        Roles.of(np.asarray(["train", "tset"]))


# ------------------------------------------------------------------------------------------------ narrow paths
def test_role_codes_are_the_names_draw_bit_for_bit(ds):
    """`assign_role_codes` (one byte a record, what `prepare` holds) draws exactly the roles of the reference
    gather of per-user "<U5" names (the code before issue #38's narrowing), and `assign_roles` still returns them."""
    from fl_privtext.data.splits import ROLES, assign_role_codes
    from fl_privtext.rng import generator

    for seed, test_frac, aux_frac in ((0, 0.2, 0.2), (7, 0.1, 0.45), (123, 0.33, 0.33)):
        codes = assign_role_codes(ds, test_frac=test_frac, aux_frac=aux_frac, seed=seed)
        num_users = ds.num_users
        n_test, n_aux = max(1, round(test_frac * num_users)), max(1, round(aux_frac * num_users))
        order = generator(seed, "data", "assign_roles").permutation(num_users)
        names = np.empty(num_users, dtype="<U5")
        names[order[:n_test]], names[order[n_test : n_test + n_aux]] = "test", "aux"
        names[order[n_test + n_aux :]] = "train"
        reference = names[ds.user_index]
        assert codes.codes.dtype == np.int8 and set(np.unique(codes.codes).tolist()) == {0, 1, 2}
        np.testing.assert_array_equal(np.asarray(codes), reference)
        np.testing.assert_array_equal(np.asarray(ROLES)[codes.codes], reference)
        np.testing.assert_array_equal(assign_roles(ds, test_frac=test_frac, aux_frac=aux_frac, seed=seed), reference)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shard", "linear", "natural"])
def test_partition_of_every_row_is_the_int64_sort_bit_for_bit(ds, scheme, monkeypatch):
    """Every row (``rows=None``, the path `prepare` takes: no id array, no re-sort of the users, the clients
    sorted in their narrowest type, a chunk at a time) gives, bit for bit and in int32 (`row_dtype`), the shards
    of an explicit ``arange`` and of an all-true mask, and those of the reference: each row's client in int64,
    stably argsorted and cut per client."""
    from fl_privtext.data import partition

    monkeypatch.setattr(partition, "SORT_ROWS", 7)  # many chunks, each cutting users and clients anywhere
    n = len(ds)
    parts = partition_users(ds, None, num_clients=37, scheme=scheme, alpha=0.5, seed=3)
    check_partition(ds, np.arange(n), parts)
    assert all(p.dtype == np.int32 == partition.row_dtype(n) for p in parts)
    for rows in (np.arange(n), np.ones(n, bool), np.random.default_rng(1).permutation(n)):
        again = partition_users(ds, rows, num_clients=37, scheme=scheme, alpha=0.5, seed=3)
        assert len(again) == len(parts) and all(a.dtype == b.dtype and (a == b).all() for a, b in zip(parts, again))
    client_of_user = np.full(ds.num_users, -1, np.int64)
    for c, p in enumerate(parts):
        client_of_user[ds.user_index[p]] = c
    client_of_row = client_of_user[ds.user_index]  # the reference: int64 keys, np.arange(n) as the row ids
    by_client = np.argsort(client_of_row, kind="stable")
    bounds = np.cumsum(np.bincount(client_of_row, minlength=37))[:-1]
    reference = [np.arange(n, dtype=np.int64)[part] for part in np.split(by_client, bounds)]
    assert all((a == b).all() for a, b in zip(parts, reference, strict=True))
    # a strict subset still takes the general path (users renumbered among the rows present)
    sub = np.flatnonzero(np.arange(n) % 3 != 0)
    check_partition(ds, sub, partition_users(ds, sub, num_clients=37, scheme=scheme, alpha=0.5, seed=3))


def test_labels_are_held_narrow_and_read_as_int64(ds):
    """The dataset holds its labels in one byte a record (`label_codes`); `labels` is the same int64 column."""
    assert ds.label_codes.dtype == np.int8 and not ds.label_codes.flags.writeable
    labels = ds.labels
    assert labels.dtype == np.int64 and not labels.flags.writeable
    np.testing.assert_array_equal(labels, ds._pa.column("label").to_numpy())
    np.testing.assert_array_equal(labels, ds.label_codes)
