"""Keyword inversion (Song & Raghunathan, CCS'20, Sec. 5): which words of a vocabulary does an upload's text hold?

The attacker builds the vocabulary of the top-K non-stopword words (document frequency) of its public texts, passes
those texts through the public extractor and the mechanism itself (with its own noise stream, never a client's),
and fits a multi-label logistic model from privatized representation to word presence; a global decision threshold
is chosen on a held-out fifth of the public texts to maximise set F1. The word-frequency baseline predicts the
j most frequent vocabulary words for every text, with j chosen the same way. Scoring (micro set precision, recall,
F1 over (text, word) pairs, and recall of entity words - vocabulary words written capitalised in most of their
public occurrences) is done by :mod:`fl_privtext.attacks.evaluate` against the targets' texts.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fl_privtext import rng
from fl_privtext.attacks.attribute import fit_logistic
from fl_privtext.attacks.chunks import row_chunks
from fl_privtext.attacks.view import AttackView

_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "let's", "me", "more", "most", "mustn't", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom", "why", "why's", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "just", "like", "get", "got", "one", "also", "really", "know", "will", "im", "dont", "go", "going", "well", "even", "still", "much", "would", "could", "back", "now", "think", "time", "make", "way", "thing", "things", "lol", "u", "ur", "nbsp", "urllink"])


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _lower_tokens(text: str) -> list[str]:
    """``tokens(text)``. For an ASCII text, lower-casing first finds the same words (the pattern's classes are
    closed under ASCII case and ``str.lower`` maps only A-Z there), in one call instead of one per word."""
    return _WORD.findall(text.lower()) if text.isascii() else tokens(text)


def vocabulary(texts: Sequence[str], size: int) -> tuple[str, ...]:
    """The ``size`` most document-frequent words of ``texts`` that are not stopwords (>= 3 letters)."""
    df: Counter[str] = Counter()
    for t in texts:
        df.update({w for w in tokens(t) if len(w) >= 3 and w not in STOPWORDS})
    return tuple(w for w, _ in sorted(df.items(), key=lambda kv: (-kv[1], kv[0]))[:size])


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
    pred: np.ndarray  # (T, K) 0/1 predicted word presence
    baseline_pred: np.ndarray  # (T, K) the word-frequency baseline (one row broadcast: read-only)
    threshold: float
    baseline_words: int


def _best_threshold(probs: np.ndarray, truth: np.ndarray) -> float:
    grid = np.linspace(0.05, 0.95, 19)
    return float(max(grid, key=lambda t: set_prf(truth, probs > t)[2]))


def _best_topj(freq_order: np.ndarray, truth: np.ndarray) -> int:
    def f1(j: int) -> float:
        pred = np.zeros_like(truth)
        pred[:, freq_order[:j]] = 1
        return set_prf(truth, pred)[2]
    return max(range(1, truth.shape[1] + 1), key=f1)


def invert(view: AttackView) -> InversionGuess:
    """Predict the vocabulary words of every target upload's text."""
    if view.public_features is None or len(view.public_texts) < 10:
        raise ValueError("Keyword inversion needs at least 10 public texts with their representations.")
    texts = view.public_texts
    vocab = vocabulary(texts, view.config.inversion_vocab)
    y = presence(texts, vocab)  # (P, K)
    g = rng.generator(view.seed, "attack", "inversion")
    x = np.asarray(view.mechanism.privatize(np.asarray(view.public_features, np.float32), g), np.float64)
    order = g.permutation(len(texts))
    held, fit = order[: max(1, len(texts) // 5)], order[max(1, len(texts) // 5):]
    mean, std = x[fit].mean(axis=0), x[fit].std(axis=0) + 1e-6

    def probs(w: np.ndarray, b: np.ndarray, rows: np.ndarray | None = None, xs: np.ndarray | None = None
              ) -> np.ndarray:
        z = (((x[rows] if xs is None else xs) - mean) / std) @ w + b
        return 1.0 / (1.0 + np.exp(-z))

    w, b = fit_logistic((x[fit] - mean) / std, y[fit], len(vocab), multilabel=True)
    thr = _best_threshold(probs(w, b, held), y[held])
    w, b = fit_logistic((x - mean) / std, y, len(vocab), multilabel=True)
    targets = np.flatnonzero(view.target_mask())
    pred = np.concatenate([(probs(w, b, xs=np.asarray(view.uploads[targets[c]], np.float64)) > thr).astype(np.int8)
                           for c in row_chunks(len(targets))])  # (T, K), scored in chunks (same numbers)
    freq_order = np.argsort(-y.mean(axis=0), kind="stable")
    j = _best_topj(freq_order, y)
    row = np.zeros(len(vocab), np.int8)
    row[freq_order[:j]] = 1
    base = np.broadcast_to(row, (len(targets), len(vocab)))  # the same j words for every text: one row in memory
    return InversionGuess(vocab=vocab, entities=entity_words(texts, vocab), target_index=targets, pred=pred,
                          baseline_pred=base, threshold=thr, baseline_words=j)
