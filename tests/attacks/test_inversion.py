"""Keyword inversion: the vocabulary keeps entity words, the baseline's j is the best one, the nearest-neighbour
decoder reads averaged word embeddings (and needs the right word vectors to do so), and the public texts'
neighbour votes add what co-occurring words tell (and never count the querying user's own texts)."""

from __future__ import annotations

import numpy as np

from fl_privtext.attacks import inversion as inv


def test_vocabulary_keeps_slots_for_entity_words():
    common = [f"word{c}" for c in "abcdefghij"]
    texts = [" ".join(common) + f" and then Zorro met Alma on day {i}." for i in range(4)]
    texts += [" ".join(common)] * 6
    plain = inv.vocabulary(texts, 10, entity_share=0.0)
    assert set(plain) == {w.lower() for w in common}
    kept = inv.vocabulary(texts, 10)
    assert {"zorro", "alma"} <= set(kept) and len(kept) == 10
    assert set(inv.entity_words(texts, kept)) >= {"zorro", "alma"}


def test_best_topj_is_the_argmax_of_the_set_f1():
    g = np.random.default_rng(0)
    y = (g.random((50, 30)) < np.linspace(0.6, 0.01, 30)).astype(np.int8)
    order = np.argsort(-y.mean(axis=0), kind="stable")

    def f1(j: int) -> float:
        pred = np.zeros_like(y)
        pred[:, order[:j]] = 1
        return inv.set_prf(y, pred)[2]

    brute = max(range(1, 31), key=f1)
    assert inv._best_topj(order, y) == brute


def _averaged_embeddings(g, n, vectors, stop, freq):
    """Texts of 2-8 vocabulary words (Zipf-like frequencies) plus as many stopword tokens; their mean vectors."""
    k = len(vectors)
    y = np.zeros((n, k), np.int8)
    x = np.empty((n, vectors.shape[1]))
    for i in range(n):
        words = g.choice(k, size=g.integers(2, 9), p=freq)
        y[i, words] = 1
        stops = stop[g.integers(0, len(stop), size=len(words))]
        x[i] = np.concatenate([vectors[words], stops]).mean(axis=0)
    return x, y


def test_nearest_neighbour_decoder_reads_averaged_embeddings_and_needs_the_right_vectors():
    g = np.random.default_rng(1)
    k, d = 400, 50
    vectors = g.normal(size=(k, d))
    stop = g.normal(size=(20, d)) * 0.5 + 2.0  # a common stopword mass, far from the content words
    freq = 1.0 / np.arange(1, k + 1) ** 0.8
    freq /= freq.sum()
    xp, yp = _averaged_embeddings(g, 300, vectors, stop, freq)
    xt, yt = _averaged_embeddings(g, 1000, vectors, stop, freq)
    fit, held = np.arange(240), np.arange(240, 300)

    def f1(model) -> float:
        thr = inv._best_threshold(model.probs(xp[held], held), yp[held])
        return inv.set_prf(yt, model.probs(xt, -1 - np.arange(len(xt))) > thr)[2]

    order = np.argsort(-yp.mean(axis=0), kind="stable")
    base = np.zeros(k, np.int8)
    base[order[: inv._best_topj(order, yp)]] = 1
    f_base = inv.set_prf(yt, np.broadcast_to(base, yt.shape))[2]
    users = np.arange(len(xp))
    f_near = f1(inv._Nearest(xp[fit], xp[fit], yp[fit], vectors, users[fit]))
    f_learned = f1(inv._Learned(xp[fit], yp[fit]))
    f_wrong = f1(inv._Nearest(xp[fit], xp[fit], yp[fit], vectors[g.permutation(k)], users[fit]))
    assert f_near > f_base + 0.15, (f_near, f_base)
    assert f_near > f_learned + 0.05, (f_near, f_learned)
    assert f_wrong < f_base + 0.05, (f_wrong, f_base)


def _topical_texts(g, n, vectors, stop, topics, words=(6, 16)):
    """Texts of one topic each (``topics``: (T, K) 0/1 word sets) with 6-15 of its words and twice as many stopword
    tokens: word presence co-occurs within topics; their mean vectors. ``topics`` with one row of all words gives
    texts without co-occurrence structure."""
    x = np.empty((n, vectors.shape[1]))
    y = np.zeros((n, vectors.shape[0]), np.int8)
    for i in range(n):
        pool = np.flatnonzero(topics[g.integers(len(topics))])
        words_i = g.choice(pool, size=g.integers(*words), replace=False)
        y[i, words_i] = 1
        stops = stop[g.integers(0, len(stop), size=2 * len(words_i))]
        x[i] = np.concatenate([vectors[words_i], stops]).mean(axis=0)
    return x, y


def test_neighbour_votes_read_the_public_texts_words_and_need_the_right_ones():
    """Texts of 15 topics (20 words each): the neighbour votes add much to the nearest-neighbour decoder; with the
    pool's presence rows shuffled among public texts (votes from texts that are not the neighbours) they do not."""
    g = np.random.default_rng(2)
    k, d = 300, 50
    topics = np.kron(np.eye(15, dtype=np.int8), np.ones((1, 20), np.int8))  # (15, 300) disjoint word sets
    vectors = g.normal(size=(k, d))
    stop = g.normal(size=(20, d)) * 0.5 + 2.0
    xp, yp = _topical_texts(g, 1500, vectors, stop, topics)
    xt, yt = _topical_texts(g, 1000, vectors, stop, topics)
    users = np.arange(len(xp)) // 3  # three public texts per user
    fit, held = np.arange(1200), np.arange(1200, 1500)

    def f1(votes: tuple[int, ...] = (), shuffle: bool = False) -> float:
        m = inv._Nearest(xp[fit], xp[fit], yp[fit], vectors, users[fit], votes=votes)
        if shuffle:
            m.pool_y = m.pool_y[g.permutation(len(fit))]
        thr = inv._best_threshold(m.probs(xp[held], users[held]), yp[held])
        return inv.set_prf(yt, m.probs(xt, np.full(len(xt), -1)) > thr)[2]

    near, votes, shuffled = f1(), f1(inv.VOTES), f1(inv.VOTES, shuffle=True)
    assert votes > near + 0.15, (votes, near)
    assert shuffled < near + 0.02, (shuffled, near)


def test_neighbour_votes_never_count_the_querying_users_own_texts():
    g = np.random.default_rng(3)
    x = g.normal(size=(40, 8))
    y = (g.random((40, 12)) < 0.3).astype(np.int8)
    users = np.arange(40) // 2  # two texts per user
    m = inv._Nearest(x, x, y, g.normal(size=(12, 8)), users, votes=(1,))
    q = m.pool[:1]
    sims = m.pool @ q[0]
    other = int(np.argmax(np.where(users == users[0], -np.inf, sims)))  # nearest text of another user
    own = m._neighbour_votes(q, users[:1])[0][0]
    np.testing.assert_allclose(own, np.log(y[other] + 0.5))
    stranger = m._neighbour_votes(q, np.array([-1]))[0][0]  # a target's user: text 0 itself is its nearest
    np.testing.assert_allclose(stranger, np.log(y[0] + 0.5))


def _votes_by_sparse_product(m: inv._Nearest, q: np.ndarray, users: np.ndarray) -> list[np.ndarray]:
    """The neighbour votes as first written: the (rows x pool) selection of each row's k nearest texts of other
    users, weighted 1/n, times the pool's presence as a sparse product; the log of that share + 0.5/k."""
    from scipy import sparse

    p = len(m.pool)
    kmax = min(max(m.votes), p)
    s = -(q @ m.pool.T)
    s[users[:, None] == m.pool_users[None, :]] = np.inf
    near = np.argpartition(s, kmax - 1, axis=1)[:, :kmax]
    near = np.take_along_axis(near, np.argsort(np.take_along_axis(s, near, 1), axis=1), 1)
    out = []
    for k in m.votes:
        kk = min(k, kmax)
        ok = np.isfinite(np.take_along_axis(s, near[:, :kk], 1))
        sel = sparse.csr_matrix((ok.ravel() / np.maximum(ok.sum(axis=1), 1).repeat(kk), near[:, :kk].ravel(),
                                 np.arange(0, ok.size + 1, kk)), shape=(len(ok), p))
        out.append(np.log((sel @ sparse.csr_matrix(m.pool_y.toarray())).toarray() + 0.5 / kk))
    return out


def test_neighbour_votes_equal_the_sparse_product_bit_for_bit():
    """The votes read from integer counts (`_vote_table`) are the sparse product's numbers exactly: with users
    sharing texts, a user whose every text is its own (no voter), duplicated texts (tied similarities), k above
    the pool's size, and a bad variant (m * (1/n) instead of the term-by-term sum) that is not exact."""
    g = np.random.default_rng(7)
    x = g.normal(size=(120, 6))
    x[60:80] = x[:20]  # duplicated texts: tied similarities
    y = (g.random((120, 40)) < 0.25).astype(np.int8)
    users = np.repeat(np.arange(40), 3)
    m = inv._Nearest(x, x, y, g.normal(size=(40, 6)), users, votes=inv.VOTES)
    for votes in (inv.VOTES, (3, 7, 200), (1,)):
        m.votes = votes  # the pool is the same for any k
        q = inv._unit(g.normal(size=(90, 6)))
        q[:30] = m.pool[:30]
        who = np.concatenate([users[:45], np.full(45, -1)])
        for got, want in zip(m._neighbour_votes(q, who), _votes_by_sparse_product(m, q, who), strict=True):
            assert got.tobytes() == want.tobytes()
    m = inv._Nearest(x[:3], x[:3], y[:3], g.normal(size=(40, 6)), np.zeros(3, np.int64), votes=(2,))
    alone = m._neighbour_votes(m.pool[:1], np.zeros(1, np.int64))[0]  # every pool text is the user's own
    assert np.array_equal(alone, np.full((1, 40), np.log(0.25)))
    n, mm = np.meshgrid(np.arange(1, 301), np.arange(301), indexing="ij")
    ok = mm <= n
    product = np.log(mm * (1.0 / n) + 0.5 / 300)
    assert not np.array_equal(inv._vote_table(300)[1:][ok], product[ok])  # the shortcut differs in the last place


def test_inversion_targets_are_whole_users_sampled_up_to_the_cap():
    """Issue #38: the inversion is scored on at most ``attack.inversion-target-users`` target users; a user's uploads
    stay together (the interval is clustered by user), the sample is the seed's own, and no cap (0) or a cap above
    the population keeps every target."""
    g = np.random.default_rng(0)
    user = g.integers(0, 500, size=3000)
    targets = np.flatnonzero(user >= 100)  # users 0..99 are the attacker's (aux): never targets
    n_users = len(np.unique(user[targets]))
    assert np.array_equal(inv.sample_target_users(targets, user, 0, seed=1), targets)
    assert np.array_equal(inv.sample_target_users(targets, user, n_users, seed=1), targets)
    got = inv.sample_target_users(targets, user, 50, seed=1)
    chosen = np.unique(user[got])
    assert len(chosen) == 50 and np.all(chosen >= 100)
    # every upload of a chosen user is in the sample, in upload order
    assert np.array_equal(got, targets[np.isin(user[targets], chosen)])
    assert np.array_equal(got, inv.sample_target_users(targets, user, 50, seed=1))
    assert not np.array_equal(got, inv.sample_target_users(targets, user, 50, seed=2))


def _nearest_by_numpy(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest as the votes first chose them: numpy's argpartition, then argsort of the values."""
    near = np.argpartition(s, k - 1, axis=1)[:, :k]
    sims = np.take_along_axis(s, near, 1)
    by = np.argsort(sims, axis=1)
    return np.take_along_axis(near, by, 1), np.take_along_axis(sims, by, 1)


def test_nearest_is_numpys_choice_with_ties_and_without():
    """`_nearest` (torch.topk, numpy's own choice on rows with a tie) returns numpy's positions and values bit
    for bit: distinct values, duplicated columns (tied values at and inside the k smallest), same-user
    infinities, k equal to the row's length; the unguarded topk differs on the tied rows (why the guard is
    there)."""
    g = np.random.default_rng(11)
    s = g.standard_normal((200, 900))
    s[:, 450:600] = s[:, :150]  # 150 duplicated columns: ties in many rows' 40 smallest
    s[:20, :890] = np.inf  # rows with 10 finite values: infinities inside the k smallest
    s[20:40] = np.round(s[20:40], 1)  # coarse values: many ties at the boundary
    for k in (1, 7, 40, 300, 900):
        got, want = inv._nearest(s, k), _nearest_by_numpy(s, k)
        assert np.array_equal(got[0], want[0]) and got[1].tobytes() == want[1].tobytes()
    distinct = g.standard_normal((50, 700))
    assert np.array_equal(inv._nearest(distinct, 30)[0], _nearest_by_numpy(distinct, 30)[0])
    import torch

    bare = torch.topk(torch.from_numpy(s), 40, dim=1, largest=False, sorted=True).indices.numpy()
    assert not np.array_equal(bare, _nearest_by_numpy(s, 40)[0])
