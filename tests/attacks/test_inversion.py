"""Keyword inversion: the vocabulary keeps entity words, the baseline's j is the best one, and the nearest-neighbour
decoder reads averaged word embeddings (and needs the right word vectors to do so)."""

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
        thr = inv._best_threshold(model.probs(xp[held]), yp[held])
        return inv.set_prf(yt, model.probs(xt) > thr)[2]

    order = np.argsort(-yp.mean(axis=0), kind="stable")
    base = np.zeros(k, np.int8)
    base[order[: inv._best_topj(order, yp)]] = 1
    f_base = inv.set_prf(yt, np.broadcast_to(base, yt.shape))[2]
    f_near = f1(inv._Nearest(xp[fit], xp[fit], yp[fit], vectors))
    f_learned = f1(inv._Learned(xp[fit], yp[fit]))
    f_wrong = f1(inv._Nearest(xp[fit], xp[fit], yp[fit], vectors[g.permutation(k)]))
    assert f_near > f_base + 0.15, (f_near, f_base)
    assert f_near > f_learned + 0.05, (f_near, f_learned)
    assert f_wrong < f_base + 0.05, (f_wrong, f_base)
