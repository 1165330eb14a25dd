"""Keyword inversion (Song & Raghunathan, CCS'20, Sec. 5): which words of a vocabulary does an upload's text hold?

The attacker builds the vocabulary of the top-K non-stopword words (document frequency) of its public texts, passes
those texts through the public extractor and the mechanism itself (with its own noise stream, never a client's),
and fits three decoders from privatized representation to word presence: ``learned`` (a multi-label logistic
model), ``nearest`` (cosine of the denoised, whitened upload with each word's vector, Song & Raghunathan's attack
on averaged word embeddings, calibrated by a logistic model shared by all words) and ``nearest+votes`` (the same
with the words of the public texts nearest to the upload, see `_Nearest`). Each decoder's global decision threshold
is chosen on a held-out fifth of the public texts to maximise set F1, and the decoder with the best held-out F1
answers. The word-frequency baseline predicts the j most frequent vocabulary words for every text, with j chosen
the same way. Scoring (micro set precision, recall, F1 over (text, word) pairs, and recall of entity words -
vocabulary words written capitalised in most of their public occurrences) is done by
:mod:`fl_privtext.attacks.evaluate` against the targets' texts.

Sparse recovery does not work here (measured on blog / GloVe-50, K = 2000): a mean over ~150 tokens holding ~30
vocabulary words is far from sparse in 50 dimensions; non-negative least squares of the upload on the vocabulary
vectors (with or without stopword atoms and a sum-to-one row) picks <= 50 words of which 2-5% are in the text (set
F1 0.08-0.10, below the frequency baseline), and still 8% on the mean of the text's vocabulary tokens alone.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import sparse

from fl_privtext import rng
from fl_privtext.attacks.attribute import fit_logistic
from fl_privtext.attacks.chunks import row_chunks
from fl_privtext.attacks.view import AttackView
from fl_privtext.memory import distinct, take_rows

_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "let's", "me", "more", "most", "mustn't", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom", "why", "why's", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "just", "like", "get", "got", "one", "also", "really", "know", "will", "im", "dont", "go", "going", "well", "even", "still", "much", "would", "could", "back", "now", "think", "time", "make", "way", "thing", "things", "lol", "u", "ur", "nbsp", "urllink"])


VOTES = (30, 300)  # neighbour counts of the "nearest+votes" decoder's votes (see `_Nearest`)


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _lower_tokens(text: str) -> list[str]:
    """``tokens(text)``. For an ASCII text, lower-casing first finds the same words (the pattern's classes are
    closed under ASCII case and ``str.lower`` maps only A-Z there), in one call instead of one per word."""
    return _WORD.findall(text.lower()) if text.isascii() else tokens(text)


def vocabulary(texts: Sequence[str], size: int, entity_share: float = 0.2) -> tuple[str, ...]:
    """The ``size`` most document-frequent words of ``texts`` that are not stopwords (>= 3 letters), with up to
    ``entity_share`` of the slots kept for entity words (capitalised in most occurrences, see `entity_words`) that
    the frequency order alone would leave out; in document-frequency order."""
    df: Counter[str] = Counter()
    for t in texts:
        df.update({w for w in tokens(t) if len(w) >= 3 and w not in STOPWORDS})
    ranked = [w for w, _ in sorted(df.items(), key=lambda kv: (-kv[1], kv[0])) if df[w] >= 2 or len(df) <= size]
    top = ranked[:size]
    if len(ranked) <= size or entity_share <= 0:
        return tuple(top)
    extra = [w for w in entity_words(texts, ranked[size:]) if df[w] >= 2][: int(size * entity_share)]
    keep = set(top[: size - len(extra)]) | set(extra)
    return tuple(w for w in ranked if w in keep)


def presence(texts: Sequence[str], vocab: Sequence[str]) -> np.ndarray:
    """(n, K) 0/1: does text i contain vocabulary word j."""
    pos = {w: j for j, w in enumerate(vocab)}
    words = frozenset(pos)
    hit_rows: list[int] = []
    hit_cols: list[int] = []
    for i, t in enumerate(texts):
        for w in words.intersection(_lower_tokens(t)):
            hit_rows.append(i)
            hit_cols.append(pos[w])
    out = np.zeros((len(texts), len(vocab)), np.int8)
    out[hit_rows, hit_cols] = 1
    return out


def entity_words(texts: Sequence[str], vocab: Sequence[str]) -> tuple[str, ...]:
    """Vocabulary words written capitalised in more than half of their occurrences not opening a sentence."""
    cap: Counter[str] = Counter()
    total: Counter[str] = Counter()
    vset = set(vocab)
    for t in texts:
        for m in re.finditer(r"(?<![.!?]\s)(?<!^)\b([A-Za-z][A-Za-z']+)", t):
            w = m.group(1)
            lw = w.lower()
            if lw in vset:
                total[lw] += 1
                cap[lw] += w[0].isupper()
    return tuple(w for w in vocab if total[w] >= 3 and cap[w] > total[w] / 2)


def set_counts(truth: np.ndarray, pred: np.ndarray) -> tuple[int, int, int]:
    """(true positives, predicted, true) over (text, word) pairs: what `prf` needs; sums over chunks of texts."""
    return int((truth.astype(bool) & pred.astype(bool)).sum()), int(pred.sum()), int(truth.sum())


def prf(tp: int, predicted: int, true: int) -> tuple[float, float, float]:
    """Micro precision, recall, F1 from `set_counts`."""
    p = float(tp) / max(float(predicted), 1.0)
    r = float(tp) / max(float(true), 1.0)
    return p, r, (2 * p * r / (p + r) if p + r > 0 else 0.0)


def set_prf(truth: np.ndarray, pred: np.ndarray) -> tuple[float, float, float]:
    """Micro precision, recall, F1 over (text, word) pairs."""
    return prf(*set_counts(truth, pred))


@dataclass(frozen=True)
class InversionGuess:
    vocab: tuple[str, ...]
    entities: tuple[str, ...]
    target_index: np.ndarray  # (T,) uploads attacked
    decoder: str  # the decoder answering: the one with the better held-out F1 on the attacker's public texts
    heldout_f1: dict[str, float]  # decoder -> set F1 on the held-out fifth of the public texts
    decoders: dict[str, Callable[[np.ndarray], np.ndarray]]  # name -> (rows of target_index) -> (len, K) 0/1
    baseline_pred: np.ndarray  # (T, K) the word-frequency baseline (one row broadcast: read-only)
    threshold: float
    baseline_words: int
    word_vectors: str  # where the nearest-neighbour decoder's word vectors come from
    targets_total: int = 0  # target uploads in the population (target_index: those of the sampled target users)

    def predict(self, rows: np.ndarray | slice, decoder: str | None = None) -> np.ndarray:
        """(len(rows), K) 0/1 predicted word presence of target uploads ``target_index[rows]``."""
        return self.decoders[decoder or self.decoder](np.arange(len(self.target_index))[rows])

    @property
    def pred(self) -> np.ndarray:
        """(T, K) the answering decoder's predictions for every target (materialised: small runs and tests)."""
        return self.predict(slice(None))


def _best_topj(freq_order: np.ndarray, truth: np.ndarray) -> int:
    """The j for which predicting the j most frequent words for every text has the best set F1 (closed form over
    j: true positives are the cumulative column sums, predictions j per text)."""
    tp = np.cumsum(truth.sum(axis=0)[freq_order].astype(np.float64))
    j = np.arange(1, truth.shape[1] + 1)
    f1 = 2 * tp / (j * truth.shape[0] + float(truth.sum()))  # 2PR/(P+R) = 2 tp / (predicted + true)
    return int(j[int(np.argmax(f1))])


def chunk_rows(vocab_size: int) -> int:
    """Rows scored at once: (rows x K x features) float64 intermediates stay near 100 MB at any K."""
    return max(64, (1 << 21) // max(1, vocab_size))


def _unit(a: np.ndarray) -> np.ndarray:
    return a / (np.sqrt((a * a).sum(axis=-1, keepdims=True)) + 1e-12)


class _Learned:
    """Multi-label logistic model from the (privatized) representation to word presence, one output per word."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.mean, self.std = x.mean(axis=0), x.std(axis=0) + 1e-6
        self.w, self.b = fit_logistic((x - self.mean) / self.std, y, y.shape[1], multilabel=True)

    def probs(self, x: np.ndarray, users: np.ndarray | None = None) -> np.ndarray:
        """(n, K) word probabilities (``users``: unused, the interface the other decoders share)."""
        return 1.0 / (1.0 + np.exp(-(((x - self.mean) / self.std) @ self.w + self.b)))


class _Nearest:
    """Nearest-neighbour decoder for averaged word embeddings (Song & Raghunathan, CCS'20, Sec. 5).

    An upload of a mean-of-word-vectors extractor lies near the vectors of the words the text holds. The upload is
    first denoised by the ridge map from privatized to clean public representations (identity without privacy),
    centred on the public mean, whitened by the public texts' covariance and compared by cosine with every
    vocabulary word's vector, centred and whitened the same way. A word's
    probability is a logistic function, fitted on the public texts over all (text, word) pairs, of that cosine,
    the word's public log document frequency, the log distance of the denoised upload to the public mean (a
    mean over many tokens lies close to the mean: longer texts, more words present) and their products: a handful
    of weights shared by all words, so thousands of words need no per-word fit.

    ``votes`` (k1, k2, ...) adds, per k, the neighbour vote of the public texts: the log share of the k public texts
    nearest to the upload (cosine of the whitened denoised upload with their whitened clean representations) that
    hold the word, with its products with the cosine, the distance and the frequency. Texts of the upload's own
    user never vote: a target's author has no public text, so a public text's own user is left out as well when
    the weights are fitted and the held-out F1 measured. Texts near the upload share its words and the words that
    co-occur with them (topic, register): what one word's vector alone does not tell.
    """

    def __init__(self, noisy: np.ndarray, clean: np.ndarray, y: np.ndarray, vectors: np.ndarray,
                 users: np.ndarray, votes: tuple[int, ...] = ()):
        self.nmean, self.cmean = noisy.mean(axis=0), clean.mean(axis=0)
        a, c = noisy - self.nmean, clean - self.cmean
        lam = 1e-3 * float(np.trace(a.T @ a)) / max(1, a.shape[1])
        self.map = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ c)  # (D, D) ridge denoiser
        # whitened by the public texts' clean covariance (lightly shrunk): the directions in which texts differ
        # little (the common stopword mass) stop dominating the cosine
        cov = c.T @ c / max(1, len(c) - 1)
        ev, basis = np.linalg.eigh(cov + 1e-3 * float(np.trace(cov)) / len(cov) * np.eye(len(cov)))
        white = (basis / np.sqrt(ev)) @ basis.T
        self.map = self.map @ white
        self.vec = _unit((vectors - self.cmean) @ white)  # (K, D)
        self.logf = np.log(y.mean(axis=0) + 1.0 / (len(y) + 1))  # (K,)
        self.votes = votes
        self.pool = _unit(c @ white)  # (P, D) the public texts the votes count, their presence and users
        self.neg_pool_t = -self.pool.T  # negated once: q @ -pool.T is -(q @ pool.T) bit for bit
        self.pool_y = sparse.csr_matrix(y.astype(np.float32))
        self.pool_users = np.asarray(users)
        take = chunk_rows(y.shape[1])  # the shared weights are fitted on at most ~2M (text, word) pairs
        # rows come in the caller's (random) order; features standardised one at a time, (take, K, F) float32
        x = np.stack([np.broadcast_to(f, (min(take, len(y)), y.shape[1])).astype(np.float32)
                      for f in self._features(noisy[:take], self.pool_users[:take])], axis=-1)
        self.fmean = x.reshape(-1, x.shape[-1]).mean(axis=0, dtype=np.float64)
        self.fstd = x.reshape(-1, x.shape[-1]).std(axis=0, dtype=np.float64) + 1e-9
        x -= self.fmean.astype(np.float32)
        x /= self.fstd.astype(np.float32)
        w, b = fit_logistic(x.reshape(-1, x.shape[-1]), y[:take].reshape(-1, 1), 1, multilabel=True, l2=1e-4)
        self.w, self.b = w[:, 0], float(b[0])

    def _neighbour_votes(self, q: np.ndarray, users: np.ndarray) -> list[np.ndarray]:
        """Per k of ``votes``: (n, K) log share of the k nearest public texts (unit whitened ``q``), not of the
        same user, holding each word (+ 0.5/k: a word no neighbour holds is rare, not impossible).

        The share of a word among n voting neighbours, m of which hold it, is read from `_vote_table` (the sum of
        m terms 1/n, as a sparse (selection x presence) product adds them, and its log) at the integer counts:
        the same numbers as that product, without building it. Counts of a larger k add the next neighbours'
        words to those of the smaller k."""
        p = len(self.pool)
        kmax = min(max(self.votes), p)
        k_words = self.pool_y.shape[1]
        out = [np.empty((len(q), k_words)) for _ in self.votes]
        step = max(1, (1 << 22) // max(1, p))  # (step, P) similarities at a time: ~32 MB at any P
        # each query's same-user pool texts, found by a sorted lookup: a (step, P) comparison of users cost more
        # than the similarities themselves (targets have no public text; only the attacker's own fits need it)
        by_user = np.argsort(self.pool_users, kind="stable")
        sorted_users = self.pool_users[by_user]
        first, last = np.searchsorted(sorted_users, users, "left"), np.searchsorted(sorted_users, users, "right")
        ks = sorted({min(k, kmax) for k in self.votes})
        tables = {kk: _vote_table(kk) for kk in ks}
        indptr, indices = self.pool_y.indptr, self.pool_y.indices
        for lo in range(0, len(q), step):
            hi = min(lo + step, len(q))
            s = q[lo:hi] @ self.neg_pool_t  # -similarity: the same values as negating q @ pool.T
            own = last[lo:hi] - first[lo:hi]
            if own.any():
                rows = np.repeat(np.arange(hi - lo), own)
                starts = np.repeat(first[lo:hi] - np.cumsum(own) + own, own)
                s[rows, by_user[starts + np.arange(len(rows))]] = np.inf  # same-user texts never vote
            near, sims = _nearest(s, kmax)
            ok = np.isfinite(sims)  # same-user texts never vote
            counts = np.zeros((hi - lo) * k_words, np.int64)
            done = 0
            by_k: dict[int, np.ndarray] = {}
            for kk in ks:  # the words of neighbours done..kk of each row, added to the counts
                r, c = np.nonzero(ok[:, done:kk])
                j = near[r, done + c]
                length = indptr[j + 1] - indptr[j]
                word = indices[np.repeat(indptr[j] - np.cumsum(length) + length, length) + np.arange(length.sum())]
                counts += np.bincount(np.repeat(r, length) * k_words + word, minlength=counts.size)
                by_k[kk] = tables[kk][ok[:, :kk].sum(axis=1)[:, None], counts.reshape(hi - lo, k_words)]
                done = kk
            for v, k in zip(out, self.votes, strict=True):
                v[lo:hi] = by_k[min(k, kmax)]
        return out

    def _features(self, x: np.ndarray, users: np.ndarray) -> Iterator[np.ndarray]:
        """The shared logistic's inputs one at a time, each (n, K) or broadcastable to it."""
        d = (x - self.nmean) @ self.map  # denoised, centred
        u = _unit(d)
        s = u @ self.vec.T  # (n, K) cosine
        r = np.log(np.sqrt((d * d).sum(axis=1)) + 1e-9)[:, None]
        lf = self.logf[None, :]
        yield from (s, lf, r, lf * r, s * r, s * lf)
        for v in self._neighbour_votes(u, users) if self.votes else []:
            yield from (v, v * r, v * s, v * lf)

    def probs(self, x: np.ndarray, users: np.ndarray) -> np.ndarray:
        out = np.empty((len(x), len(self.logf)))
        for c in row_chunks(len(x), chunk_rows(len(self.logf))):
            z = np.full((c.stop - c.start, len(self.logf)), self.b)
            for j, f in enumerate(self._features(x[c], users[c])):
                z += self.w[j] * ((f - self.fmean[j]) / self.fstd[j])
            out[c] = 1.0 / (1.0 + np.exp(-z))
        return out


def _nearest(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` smallest entries of ``s`` (n, P), ascending: (positions, values), as numpy's
    ``argpartition`` then ``argsort`` of the values give them, in ~1/2-1/3 of their time (`torch.topk`, which
    reads ``s`` in place). Where the values are distinct the two agree (the order of distinct values is unique); a
    row with a tie among its k + 1 smallest (duplicated texts, several same-user infinities) takes numpy's own
    choice, so the votes are the same bit for bit (tests/attacks/test_inversion.py)."""
    vals_t, idx_t = torch.topk(torch.from_numpy(s), min(k + 1, s.shape[1]), dim=1, largest=False, sorted=True)
    top = vals_t.numpy()
    vals, idx = top[:, :k], idx_t.numpy()[:, :k]
    tied = np.flatnonzero((top[:, 1:] == top[:, :-1]).any(axis=1))
    if len(tied):
        sub = s[tied]
        near = np.argpartition(sub, k - 1, axis=1)[:, :k]
        sims = np.take_along_axis(sub, near, 1)  # gathered from s once, then put in order with the indices
        by_sim = np.argsort(sims, axis=1)
        idx[tied] = np.take_along_axis(near, by_sim, 1)
        vals[tied] = np.take_along_axis(sims, by_sim, 1)
    return idx, vals


def _vote_table(k: int) -> np.ndarray:
    """(k + 1, k + 1): at [n, m], log(m terms 1/max(n, 1) summed one after another + 0.5/k): a neighbour vote's
    value when m of its n voting neighbours hold the word (rows m > n are never read). The sum is built term by
    term as a sparse product of the 1/n selection weights with 0/1 presence accumulates it, so the table holds
    that product's numbers bit for bit (a product m * (1/n) can differ from them in the last place)."""
    share = np.zeros((k + 1, k + 1))
    step = 1.0 / np.maximum(np.arange(k + 1), 1).astype(np.float64)
    for m in range(1, k + 1):
        share[:, m] = share[:, m - 1] + step
    return np.log(share + 0.5 / k)


def _word_vectors(view: AttackView, vocab: Sequence[str], clean: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, str]:
    """(K, D) vectors of the vocabulary words: the public extractor on each word alone when the view offers it
    (``meta["word_vectors"]``, Kerckhoffs: the extractor is public) and its width matches; else the mean clean
    representation of the public texts holding the word (any extractor; the public mean for an unseen word)."""
    embed = view.meta.get("word_vectors")
    if callable(embed):
        vec = np.asarray(embed(list(vocab)), np.float64)
        if vec.shape == (len(vocab), clean.shape[1]):
            return vec, "extractor"
    counts = y.sum(axis=0)[:, None].astype(np.float64)
    sums = y.T.astype(np.float64) @ clean
    return np.where(counts > 0, sums / np.maximum(counts, 1.0), clean.mean(axis=0)), "public-text centroids"


DECODERS = ("learned", "nearest", "nearest+votes")  # in the order their held-out F1s are compared (ties: learned)
Decoder = _Learned | _Nearest


@dataclass(frozen=True)
class Public:
    """What every decoder fit and the scoring share, drawn once from ``(seed, "attack", "inversion")``: the
    vocabulary and its presence in the public texts, the texts' clean and attacker-privatized representations, the
    random order (its first fifth held out), the word vectors, the entity words and the sampled targets. Read-only
    for the pieces below (`heldout`, `fit`, `predict`), which draw nothing: any order of them, side by side or
    one after the other, gives the same numbers."""

    vocab: tuple[str, ...]
    entities: tuple[str, ...]
    y: np.ndarray  # (P, K) 0/1 presence
    clean: np.ndarray  # (P, D) float64
    x: np.ndarray  # (P, D) float64, privatized by the attacker
    users: np.ndarray  # (P,) pseudonyms of the public texts' authors
    order: np.ndarray  # (P,) every public text in a random order
    held: np.ndarray  # the held-out fifth of ``order``
    fit: np.ndarray  # the rest
    vectors: np.ndarray  # (K, D) word vectors for the full fits
    vectors_fit: np.ndarray  # (K, D) for the held-out fits (the same unless they are public-text centroids)
    source: str  # where the word vectors come from
    targets: np.ndarray  # (T,) target uploads attacked (those of the sampled target users)
    targets_total: int  # target uploads in the population


def check(view: AttackView) -> None:
    """Raise ValueError when the view offers no public texts to fit on."""
    if view.public_features is None or len(view.public_texts) < 10:
        raise ValueError("Keyword inversion needs at least 10 public texts with their representations.")


def prepare(view: AttackView) -> Public:
    """The attacker's public texts as every decoder fit reads them (`Public`)."""
    check(view)
    assert view.public_features is not None
    texts = view.public_texts
    vocab = vocabulary(texts, view.config.inversion_vocab)
    y = presence(texts, vocab)  # (P, K)
    g = rng.generator(view.seed, "attack", "inversion")
    clean = np.asarray(view.public_features, np.float64)
    x = np.asarray(view.mechanism.privatize(np.asarray(view.public_features, np.float32), g), np.float64)
    order = g.permutation(len(texts))
    held, fit = order[: max(1, len(texts) // 5)], order[max(1, len(texts) // 5):]
    vectors, source = _word_vectors(view, vocab, clean, y)
    vectors_fit = vectors if source == "extractor" else _word_vectors(view, vocab, clean[fit], y[fit])[0]
    all_targets = view.target_rows()
    targets = sample_target_users(all_targets, view.user, view.config.inversion_target_users, view.seed)
    return Public(vocab=vocab, entities=entity_words(texts, vocab), y=y, clean=clean, x=x,
                  users=np.asarray(view.public_user), order=order, held=held, fit=fit, vectors=vectors,
                  vectors_fit=vectors_fit, source=source, targets=targets, targets_total=len(all_targets))


def _make(pub: Public, name: str, rows: np.ndarray, vectors: np.ndarray) -> Decoder:
    if name == "learned":
        return _Learned(pub.x[rows], pub.y[rows])
    return _Nearest(pub.x[rows], pub.clean[rows], pub.y[rows], vectors, pub.users[rows],
                    votes=VOTES if name == "nearest+votes" else ())


THRESHOLDS = np.concatenate([np.linspace(0.01, 0.05, 5), np.linspace(0.075, 0.95, 36)])  # the threshold grid


def heldout(pub: Public, name: str) -> tuple[float, float]:
    """(threshold, held-out set F1) of decoder ``name`` fitted on four fifths of the public texts: the threshold of
    the grid with the best set F1 on the held-out fifth (the first of equals), and that F1. The held-out texts are
    scored `chunk_rows` at a time and each threshold's (text, word) counts summed over the chunks: the counts of
    the whole (held, K) probability matrix, which is never held (a _Nearest decoder scores those chunks anyway)."""
    model = _make(pub, name, pub.fit, pub.vectors_fit)
    counts = np.zeros((len(THRESHOLDS), 3), np.int64)
    for c in row_chunks(len(pub.held), chunk_rows(len(pub.vocab))):
        rows = pub.held[c]
        counts += _grid_counts(model.probs(pub.x[rows], pub.users[rows]), pub.y[rows])
    return _best(counts)


def _grid_counts(probs: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(len(THRESHOLDS), 3): `set_counts` of ``probs > t`` for each threshold t of the grid."""
    return np.array([set_counts(truth, probs > t) for t in THRESHOLDS], np.int64)


def _best(counts: np.ndarray) -> tuple[float, float]:
    """(threshold, set F1) of the grid's best threshold by `_grid_counts` (the first of equals)."""
    f1 = [prf(*(int(v) for v in row))[2] for row in counts]
    best = int(np.argmax(f1))
    return float(THRESHOLDS[best]), f1[best]


def _best_threshold(probs: np.ndarray, truth: np.ndarray) -> float:
    """The grid's threshold with the best set F1 of ``probs > t`` against ``truth`` (the first of equals)."""
    return _best(_grid_counts(probs, truth))[0]


def fit(pub: Public, name: str) -> Decoder:
    """Decoder ``name`` fitted on every public text (in the random order)."""
    return _make(pub, name, pub.order, pub.vectors)


def answer(heldout_f1: dict[str, float]) -> str:
    """The decoder with the best held-out F1 (learned among equals, then the first in `DECODERS`)."""
    return max(heldout_f1, key=lambda k: (heldout_f1[k], k == "learned"))


def predict(view: AttackView, pub: Public, model: Decoder, threshold: float, rows: np.ndarray) -> np.ndarray:
    """(len(rows), K) 0/1: ``model``'s words for target uploads ``pub.targets[rows]``, scored in chunks."""
    parts = [(model.probs(np.asarray(take_rows(view.uploads, pub.targets[rows[c]]), np.float64),
                          view.user[pub.targets[rows[c]]]) > threshold).astype(np.int8)
             for c in row_chunks(len(rows), chunk_rows(len(pub.vocab)))]  # in chunks
    return np.concatenate(parts) if parts else np.zeros((0, len(pub.vocab)), np.int8)


def baseline(pub: Public) -> tuple[int, np.ndarray]:
    """(j, (K,) 0/1): the word-frequency baseline's j most frequent words, predicted for every text."""
    freq_order = np.argsort(-pub.y.mean(axis=0), kind="stable")
    j = _best_topj(freq_order, pub.y)
    row = np.zeros(len(pub.vocab), np.int8)
    row[freq_order[:j]] = 1
    return j, row


def guess(view: AttackView, pub: Public, held: dict[str, tuple[float, float]],
          models: dict[str, Decoder]) -> InversionGuess:
    """The `InversionGuess` of the pieces: ``held`` (decoder -> `heldout`), ``models`` (decoder -> `fit`)."""
    heldout_f1 = {name: held[name][1] for name in DECODERS}
    chosen = answer(heldout_f1)

    def decoder(name: str) -> Callable[[np.ndarray], np.ndarray]:
        return lambda rows: predict(view, pub, models[name], held[name][0], rows)

    j, row = baseline(pub)
    base = np.broadcast_to(row, (len(pub.targets), len(pub.vocab)))  # the same j words for every text: one row
    return InversionGuess(vocab=pub.vocab, entities=pub.entities, target_index=pub.targets, decoder=chosen,
                          heldout_f1=heldout_f1, decoders={n: decoder(n) for n in DECODERS}, baseline_pred=base,
                          threshold=held[chosen][0], baseline_words=j, word_vectors=pub.source,
                          targets_total=pub.targets_total)


def invert(view: AttackView) -> InversionGuess:
    """Predict the vocabulary words of every target upload's text with the learned decoder and the
    nearest-neighbour decoder without and with the public texts' neighbour votes; the one with the best F1 on a
    held-out fifth of the public texts answers. One piece after the other (`prepare`, `heldout` and `fit` per
    decoder); `fl_privtext.attacks.evaluate` schedules the same pieces side by side."""
    pub = prepare(view)
    return guess(view, pub, {n: heldout(pub, n) for n in DECODERS}, {n: fit(pub, n) for n in DECODERS})


def sample_target_users(targets: np.ndarray, user: np.ndarray, max_users: int, seed: int) -> np.ndarray:
    """The target uploads of at most ``max_users`` target users (a seeded sample of whole users, in upload order;
    every target when ``max_users`` is 0 or not smaller than their number). A mean over the sample estimates the
    population's; a user's uploads stay together, as the clustered interval over users needs."""
    users = distinct(user, targets)  # np.unique(user[targets]) without its copies (issue #38)
    if max_users == 0 or len(users) <= max_users:
        return targets
    chosen = rng.generator(seed, "attack", "inversion-targets").choice(users, size=max_users, replace=False)
    keep = np.empty(len(targets), bool)
    for c in row_chunks(len(targets)):  # a chunk of targets at a time: no (targets,) copy of their users
        keep[c] = np.isin(user[targets[c]], chosen)
    return targets[keep]
