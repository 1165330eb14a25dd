"""Row chunks for scoring targets: they cover every row in order, none is short, and scores match all-at-once."""

import inspect

import numpy as np
import pytest

from fl_privtext.attacks.chunks import ROW_CHUNK, distinct_counts, gathered_mean, row_chunks
from fl_privtext.learn import MLPClassifier


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 8, 9, 11, 12, 13, 40])
def test_row_chunks_cover_in_order_and_none_is_short(n: int) -> None:
    chunks = list(row_chunks(n, 4))
    assert np.array_equal(np.concatenate([np.arange(n)[c] for c in chunks]), np.arange(n))
    lengths = [c.stop - c.start for c in chunks]
    assert all(length == 4 for length in lengths[:-1])
    assert (4 <= lengths[-1] < 8) if n >= 4 else lengths == [n]
    with pytest.raises(ValueError, match="size must be >= 1"):
        list(row_chunks(n, 0))


def test_chunked_blas_scores_equal_all_at_once() -> None:
    # what the logistic attacker does to its targets: standardise (float32), then a float64 matrix product
    g = np.random.default_rng(0)
    x = g.normal(size=(2 * ROW_CHUNK + 123, 52)).astype(np.float32)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    w, b = g.normal(size=(52, 3)), g.normal(size=3)
    whole = ((x - mean) / std) @ w + b
    chunked = np.concatenate([((x[c] - mean) / std) @ w + b for c in row_chunks(len(x))])
    np.testing.assert_array_equal(chunked, whole)
    batch = inspect.signature(MLPClassifier.logits).parameters["batch_size"].default
    assert ROW_CHUNK % batch == 0  # MLPClassifier.logits' batches line up with the chunks


@pytest.mark.parametrize("rows", [None, "some"])
def test_group_rows_equals_numpy_unique(rows: str | None) -> None:
    from fl_privtext.attacks.chunks import group_rows

    g = np.random.default_rng(1)
    users = g.integers(0, 5_000, 3 * ROW_CHUNK + 17)
    picked = None if rows is None else np.flatnonzero(g.random(len(users)) < 0.7)
    uniq, inv = group_rows(users, picked)
    want_uniq, want_inv = np.unique(users if picked is None else users[picked], return_inverse=True)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inv, want_inv.reshape(-1))
    assert inv.dtype == np.int32
    empty_uniq, empty_inv = group_rows(np.zeros(0, np.int64))
    assert len(empty_uniq) == 0 and len(empty_inv) == 0


def _chunk_world(n: int, k: int, multilabel: bool):  # type: ignore[no-untyped-def]
    """A view of ``n`` uploads (users of 1-6 uploads, in no order), labels in the clear, one attribute."""
    from fl_privtext.attacks import evaluate
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.data import AttributeSpec
    from fl_privtext.privacy import make_mechanism

    g = np.random.default_rng(k)
    user = g.permutation(np.arange(n) % (n // 3))
    x = g.normal(size=(n, 6))
    if multilabel:
        z = (g.random((n // 3, k)) < 0.3).astype(np.int8)[user]
        x[:, :k] += z
        spec = AttributeSpec("ents", "multilabel", tuple(f"c{j}" for j in range(k)))
    else:
        z = g.integers(0, k, n // 3)[user]
        x[:, 0] += 0.5 * z
        spec = AttributeSpec("secret", "categorical", tuple(f"c{j}" for j in range(k)))
    labels = np.where(g.random(n) < 0.3, (z if z.ndim == 1 else z[:, 0]) % 2, g.integers(0, 2, n))
    cfg = ExperimentConfig.from_flat({"attack.families": "logistic", "attack.extra": False, "run.progress": False})
    return evaluate.observe(
        uploads=x.astype(np.float32), labels=labels.astype(np.int64), users=user, senders=user % 2,
        texts=[""] * n, attributes={spec: z}, aux=np.isin(user, g.permutation(n // 3)[:400]), clean=None,
        mechanism=make_mechanism("none"), epsilon=2.0, delta=0.0, num_labels=2, label_epsilon=0.0, seed=k,
        attack=cfg.attack)


@pytest.mark.parametrize(("k", "multilabel"), [(3, False), (2, True)])
def test_the_attribute_attack_answers_the_same_at_two_chunk_sizes(monkeypatch, k: int, multilabel: bool) -> None:
    """Issue #38: the attack scores its targets (and the referee sums their figures) a chunk at a time; the answers,
    the per-user combinations and every results.json figure are the same at another chunk size (each chunk of
    either size is large enough for the regular BLAS kernels, `test_chunked_blas_scores_equal_all_at_once`)."""
    import functools
    import json

    from fl_privtext.attacks import attribute, ceilings, chunks, evaluate
    from fl_privtext.attacks import view as view_module

    view, truth = _chunk_world(5 * ROW_CHUNK // 2, k, multilabel)
    name = next(iter(view.known))

    def answers() -> tuple[list[np.ndarray], str]:
        guess, floor = attribute.infer_attribute(view, name), attribute.plain_logistic(view, name)
        arrays = [guess.upload_pred, guess.user_pred, guess.learned_upload_pred, guess.learned_user_pred,
                  *(a for pair in guess.baselines.values() for a in pair), floor.upload_pred,
                  *floor.user_pred.values()]
        scored = evaluate.score_attribute(view, truth, name)
        return arrays, json.dumps({key: v for key, v in scored.items() if not key.startswith("_")}, sort_keys=True,
                                  default=repr)

    whole, whole_json = answers()
    for module in (attribute, evaluate, chunks, ceilings, view_module):
        monkeypatch.setattr(module, "row_chunks", functools.partial(chunks.row_chunks, size=ROW_CHUNK // 2))
    half, half_json = answers()
    assert all(np.array_equal(a, b) for a, b in zip(whole, half, strict=True)) and half_json == whole_json


def test_a_one_call_family_is_fitted_once_and_handed_out_in_the_same_chunks(monkeypatch) -> None:
    """A family registered with the one-call form ``fit(problem, train, rows, key)`` cannot score later: `stream`
    calls it once on every target and hands its answer out chunk by chunk; a built-in (`FITS`) fits once and scores
    each chunk, with the numbers of one call on every row."""
    from fl_privtext.attacks import attribute
    from fl_privtext.names import ATTACK_FAMILIES

    view, _ = _chunk_world(5 * ROW_CHUNK // 2, 3, False)
    prob = attribute._Problem(view, view.known["secret"])
    calls: list[int] = []

    def one_call(p, train, rows, key):  # type: ignore[no-untyped-def]
        calls.append(len(rows))
        return np.log(np.full((len(rows), p.k), 1 / p.k)) + 1e-3 * np.arange(len(rows))[:, None] * np.arange(p.k)

    ATTACK_FAMILIES.register("toy-one-call")(one_call)
    try:
        targets = np.flatnonzero(view.target_mask())
        train = np.arange(len(prob.idx))
        got = list(prob.stream("toy-one-call", train, targets, "all"))
        assert calls == [len(targets)] and len(got) == len(list(row_chunks(len(targets)))) > 1
        assert np.array_equal(np.concatenate([lp for _, lp in got]), one_call(prob, train, targets, "all"))
        fits: list[int] = []
        real = attribute.FITS[attribute.logistic_family]
        monkeypatch.setitem(attribute.FITS, attribute.logistic_family,
                            lambda p, tr, key: fits.append(1) or real(p, tr, key))
        chunked = np.concatenate([lp for _, lp in prob.stream("logistic", train, targets, "all")])
        assert fits == [1] and np.array_equal(chunked, attribute.logistic_family(prob, train, targets, "all"))
    finally:
        del ATTACK_FAMILIES["toy-one-call"]


def _old_user_truth(values: np.ndarray, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`user_truth` as it was before issue #38's narrowing: float64 counts, int64 answers, every row at once."""
    uniq, inv = np.unique(users, return_inverse=True)
    counts = np.zeros((len(uniq), int(values.max()) + 1))
    np.add.at(counts, (inv.reshape(-1), values), 1)
    return uniq, counts.argmax(axis=1)


@pytest.mark.parametrize("size", [ROW_CHUNK, 1000])
def test_narrow_chunked_referee_pieces_equal_the_whole_array_forms(monkeypatch, size: int) -> None:
    """Issue #38's chunked, narrowed forms against the whole-array ones, at two chunk sizes: the targets' indices
    (int32, no int64 copy), the users' true attribute (int32 counts, int8 answers, with ties: the first class of
    equal counts, as argmax), and the per-user ceilings (row chunks, a broadcast prior never copied)."""
    import functools

    from fl_privtext.attacks import attribute, ceilings, chunks
    from fl_privtext.attacks import view as view_module

    for module in (attribute, chunks, ceilings, view_module):
        monkeypatch.setattr(module, "row_chunks", functools.partial(chunks.row_chunks, size=size))
    view, _ = _chunk_world(5 * ROW_CHUNK // 2, 3, False)
    rows = view.target_rows()
    assert rows.dtype == np.int32 and np.array_equal(rows, np.flatnonzero(view.target_mask()))

    g = np.random.default_rng(size)
    users = g.integers(0, 20_000, 3 * ROW_CHUNK + 11).astype(np.int32)
    values = g.integers(0, 4, len(users)).astype(np.int8)  # several uploads a user, values disagreeing: ties
    picked = np.flatnonzero(g.random(len(users)) < 0.8).astype(np.int32)
    uniq, answer = attribute.user_truth(values[picked], users, picked)
    want_uniq, want = _old_user_truth(values[picked], users[picked])
    assert np.array_equal(uniq, want_uniq) and np.array_equal(answer, want) and answer.dtype == np.int8

    priors = g.dirichlet(np.ones(4), len(uniq))
    eps, deltas = g.exponential(2.0, len(uniq)), g.random(len(uniq)) * 1e-3
    eps[:5] = [np.inf, 800.0, 0.0, 700.0, 1e-9]

    def old(p: np.ndarray, e: np.ndarray, d: np.ndarray) -> np.ndarray:  # the whole-array form it replaced
        p = -np.sort(-np.asarray(p, np.float64), axis=1)
        p = p / p.sum(axis=1, keepdims=True)
        with np.errstate(over="ignore"):
            e = np.where(np.isinf(e) | (e > 700), 0.0, np.exp(-np.minimum(e, 700)))
        s = np.arange(1, p.shape[1] + 1)[None, :]
        best = np.max(np.cumsum(p, axis=1) / (1 + (s - 1) * e[:, None]), axis=1)
        return np.minimum(1.0, best + np.broadcast_to(d, best.shape))

    got = ceilings.attribute_ceiling_many(priors, eps, deltas)
    assert np.array_equal(got, old(priors, eps, deltas)) and got.mean() == old(priors, eps, deltas).mean()
    one = priors[0]
    shared = ceilings.attribute_ceiling_many(np.broadcast_to(one, priors.shape), eps, 0.0)
    assert np.array_equal(shared, old(np.tile(one, (len(uniq), 1)), eps, np.float64(0.0)))


@pytest.mark.parametrize("n", [0, 1, 7, 129, 8_193, 70_001, 1_000_003])
def test_gathered_mean_is_numpys_mean_of_the_gather_bit_for_bit(n: int) -> None:
    """`gathered_mean` follows numpy's pairwise sum over the gathered array (a subtree of at most ``leaf`` entries
    gathered at a time): the same float64 as ``values[index].mean()``, at any leaf size; a plain running sum of the
    chunks (also tried here) is not always."""
    g = np.random.default_rng(n)
    values = g.random(6) * np.array([1.0, 1e6, 1e-6, 3.0, 7e3, 0.1])
    index = g.integers(0, 6, n).astype(np.int8)
    want = values[index].mean() if n else np.nan
    for leaf in (8, 128, 1_000, 1 << 12, ROW_CHUNK):
        got = gathered_mean(values, index, leaf)
        assert got == want or (np.isnan(got) and np.isnan(want))
    if n >= 1_000_003:
        running = sum(float(values[index[c]].sum()) for c in row_chunks(n, 1 << 12)) / n
        assert running != want  # the order matters: the test would see a plain chunked sum


@pytest.mark.parametrize(("n", "high", "dtype"), [(0, 5, np.int32), (1, 5, np.int32), (1_000, 30, np.int16),
                                                  (300_000, 200_000, np.int32), (5_000, 2**40, np.int64)])
def test_distinct_counts_equal_numpy_unique_with_counts(n: int, high: int, dtype: type) -> None:
    """`distinct_counts` (the referee's per-user upload counts, `observe`) answers ``np.unique(users,
    return_counts=True)``: the same sorted users in their own type, the same counts in their narrowest type."""
    from fl_privtext.memory import narrowest

    users = np.random.default_rng(n).integers(0, high, n).astype(dtype)
    uniq, counts = distinct_counts(users)
    want, want_counts = np.unique(users, return_counts=True)
    assert uniq.dtype == want.dtype and np.array_equal(uniq, want)
    assert counts.dtype == narrowest(want_counts).dtype and np.array_equal(counts, want_counts)
