"""Loaders for the staged datasets (see the data root's README.md and each folder's SOURCE.md).

Every loader reads its files strictly (`_io`): a row that does not parse raises ValueError naming the file, the line and
what was expected; nothing is dropped unless an option asks for it. Data root: the `data_root` argument, else the
environment variable FL_PRIVTEXT_DATA (no default).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.data._io import (
    cached,
    find_files,
    parse_choice,
    parse_float,
    parse_int,
    read_delimited,
    read_lines,
    row_error,
)
from fl_privtext.data.schema import AttributeSpec, TextDataset, make_text_dataset
from fl_privtext.rng import generator

__all__ = [
    "as_str_tuple",
    "load_ag_news",
    "load_amazon",
    "load_blog",
    "load_imdb",
    "load_mrpc",
    "load_snips",
    "load_trustpilot_dk",
    "load_trustpilot_us",
    "load_yelp",
]

PathLike = str | os.PathLike[str]
GENDER = AttributeSpec("gender", "categorical", ("female", "male"))


def as_str_tuple(value: str | Sequence[Any] | None, what: str) -> tuple[str, ...] | None:
    """Options from flat configs arrive as "a,b,c" strings; sequences pass through."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
        return tuple(v for v in items if v)
    if isinstance(value, Sequence):
        return tuple(str(v) for v in value)
    raise ValueError(f"{what} must be a list of strings or a comma-separated string, got {value!r}.")


def _subsample(n: int, max_rows: int | None, seed: int, what: str) -> np.ndarray:
    """Sorted row indices of a seeded uniform subsample of size max_rows (all rows when None or >= n)."""
    if max_rows is None or max_rows == 0 or int(max_rows) >= n:
        if max_rows is not None and int(max_rows) < 0:
            raise ValueError(f"{what}: max_rows must be a positive integer or None, got {max_rows}.")
        return np.arange(n)
    if int(max_rows) < 0:
        raise ValueError(f"{what}: max_rows must be a positive integer or None, got {max_rows}.")
    rng = generator(int(seed), "data", what, "subsample")
    return np.sort(rng.choice(n, size=int(max_rows), replace=False))


# ---------------------------------------------------------------------------------------------------- blog
BLOG_FILE = "blog_authorship/blog_posts_balanced_60k.tsv.gz"
BLOG_COLUMNS = (
    "blogger_id", "gender", "age", "age_group", "industry", "sign", "date", "post_idx", "n_words", "lda_topic",
    "lda_topic_prob", "split", "text",
)  # fmt: skip
BLOG_AGE_GROUPS = ("10s", "20s", "30s")
BLOG_SPLITS = ("train", "dev", "test")
BLOG_LABELS = ("lda_topic", "industry", "gender", "age_group")


def _parse_blog(path: Path) -> dict[str, Any]:
    _, rows, lines = read_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, header=BLOG_COLUMNS)
    c = {name: i for i, name in enumerate(BLOG_COLUMNS)}
    n = len(rows)
    topic = np.empty(n, dtype=np.int64)
    prob = np.empty(n, dtype=np.float64)
    for i, (r, ln) in enumerate(zip(rows, lines)):
        parse_choice(r[c["gender"]], GENDER.classes, path, ln, "gender")
        parse_choice(r[c["age_group"]], BLOG_AGE_GROUPS, path, ln, "age_group")
        parse_choice(r[c["split"]], BLOG_SPLITS, path, ln, "split")
        topic[i] = parse_int(r[c["lda_topic"]], path, ln, "lda_topic", lo=0, hi=9)
        prob[i] = parse_float(r[c["lda_topic_prob"]], path, ln, "lda_topic_prob")
        if not r[c["blogger_id"]]:
            raise row_error(path, ln, "column 'blogger_id' expected a non-empty id, found ''.")
    col = {
        name: tuple(r[c[name]] for r in rows)
        for name in ("blogger_id", "gender", "age_group", "industry", "split", "text")
    }
    topic.flags.writeable = False
    prob.flags.writeable = False
    return {**col, "lda_topic": topic, "lda_topic_prob": prob}


def load_blog(
    *,
    data_root: PathLike | None = None,
    label: str = "lda_topic",
    min_topic_prob: float = 0.0,
    age_groups: str | Sequence[str] | None = None,
    max_rows: int | None = None,
    seed: int = 0,
    user_per_record: bool = False,
) -> TextDataset:
    """Blog Authorship Corpus, balanced 60k-post subset: user = blogger_id; label = 10-topic LDA (or 40 industries).

    `user_per_record` makes every post its own user (id `<blogger_id>/<post_idx>`-like, unique per row): scale
    benchmarks need more users than the corpus has bloggers; user-level splits then become post-level.

    Attributes: gender (female/male), age_group (10s/20s/30s, or the subset `age_groups`, e.g. "10s,30s" as in
    Coavoux et al.). `min_topic_prob` keeps posts whose LDA topic probability EXCEEDS it (strictly, as the papers'
    "> 0.8" filter: 0.8 keeps 7,568 of 60,000 posts; the default 0 keeps all).
    `max_rows` draws a seeded uniform subsample of posts after the filters (file order kept).
    `label = "gender"` or `"age_group"` makes a private attribute the TASK (it stays an attribute too): Coavoux et
    al.'s "trained upper bound", a model trained end to end to predict the attribute from the text.
    """
    (path,) = find_files("blog", data_root, [BLOG_FILE])
    raw = cached([path], ("blog",), lambda: _parse_blog(path))
    if label not in BLOG_LABELS:
        raise ValueError(f"Dataset 'blog': label must be one of {list(BLOG_LABELS)}, got {label!r}.")
    groups = as_str_tuple(age_groups, "age_groups") or BLOG_AGE_GROUPS
    bad = [g for g in groups if g not in BLOG_AGE_GROUPS]
    if bad or len(set(groups)) < 2:
        raise ValueError(
            f"Dataset 'blog': age_groups must be at least two of {list(BLOG_AGE_GROUPS)}, got {list(groups)}."
        )
    groups = tuple(g for g in BLOG_AGE_GROUPS if g in groups)  # canonical order
    if not 0.0 <= float(min_topic_prob) < 1.0:
        raise ValueError(f"Dataset 'blog': min_topic_prob must be in [0, 1), got {min_topic_prob}.")
    age = np.asarray(raw["age_group"])
    keep = np.isin(age, groups) & (raw["lda_topic_prob"] > float(min_topic_prob))
    idx = np.flatnonzero(keep)
    idx = idx[_subsample(len(idx), max_rows, seed, "blog")]
    take = idx.tolist()

    def pick(name: str) -> list[str]:
        col = raw[name]
        return [col[i] for i in take]

    if label == "lda_topic":
        label_names: tuple[str, ...] = tuple(f"topic_{k}" for k in range(10))
        labels = raw["lda_topic"][idx]
    elif label == "gender":
        label_names = GENDER.classes
        labels = np.asarray([label_names.index(v) for v in pick("gender")], dtype=np.int64)
    elif label == "age_group":
        label_names = groups
        labels = np.asarray([groups.index(v) for v in age[idx]], dtype=np.int64)
    else:
        industries = sorted(set(raw["industry"]))
        label_names = tuple(industries)
        pos = {v: i for i, v in enumerate(industries)}
        labels = np.asarray([pos[v] for v in pick("industry")], dtype=np.int64)
    gpos = {v: i for i, v in enumerate(GENDER.classes)}
    apos = {v: i for i, v in enumerate(groups)}
    return make_text_dataset(
        "blog",
        texts=pick("text"),
        labels=labels,
        label_names=label_names,
        attributes=[
            (GENDER, np.asarray([gpos[v] for v in pick("gender")], dtype=np.int64)),
            (
                AttributeSpec("age_group", "categorical", groups),
                np.asarray([apos[v] for v in age[idx]], dtype=np.int64),
            ),
        ],
        user_ids=[f"post{i}" for i in take] if user_per_record else pick("blogger_id"),
        splits=pick("split"),
    )


# ---------------------------------------------------------------------------------------------------- AG news
AG_FILE = "ag_news_entities/ag_data.txt"
AG_LABELS = ("topic_0", "topic_1", "sports", "business")  # ids 0/1 both read as world/US politics (SOURCE.md)
AG_ENTITIES = AttributeSpec("entities", "multilabel", ("Bush", "Kerry", "Arafat", "Blair", "Sharon"))
AG_SEPARATOR = "=" * 20


def _parse_ag(path: Path) -> TextDataset:
    lines, numbers = read_lines(path)
    splits = ("train", "dev", "test")
    texts: list[str] = []
    labels: list[int] = []
    ents: list[list[int]] = []
    split_col: list[str] = []
    part = 0
    for line, ln in zip(lines, numbers):
        if line == AG_SEPARATOR:
            part += 1
            continue
        if part >= len(splits):
            raise row_error(
                path, ln, f"expected nothing after the third {AG_SEPARATOR!r} separator line, found a record."
            )
        fields = line.split("\t")
        if len(fields) != 3:
            raise row_error(
                path,
                ln,
                f"expected 3 TAB-separated fields (topic, text, entity ids) or a separator line, found {len(fields)}.",
            )
        labels.append(parse_int(fields[0], path, ln, "topic", lo=0, hi=len(AG_LABELS) - 1))
        vec = [0] * AG_ENTITIES.num_classes
        for tok in fields[2].split():
            vec[parse_int(tok, path, ln, "entity ids", lo=0, hi=AG_ENTITIES.num_classes - 1)] = 1
        ents.append(vec)
        texts.append(fields[1])
        split_col.append(splits[part])
    if part != len(splits):
        raise ValueError(
            f"{path}: expected 3 splits (train, dev, test) each closed by a {AG_SEPARATOR!r} line, found {part} separators."
        )
    return make_text_dataset(
        "ag_news",
        texts=texts,
        labels=np.asarray(labels, dtype=np.int64),
        label_names=AG_LABELS,
        attributes=[
            (AG_ENTITIES, np.asarray(ents, dtype=np.int8).reshape(len(texts), AG_ENTITIES.num_classes))
        ],
        user_ids=[f"ag_news-{i}" for i in range(len(texts))],
        splits=split_col,
    )


def load_ag_news(*, data_root: PathLike | None = None) -> TextDataset:
    """AG news with person entities (DPNR setting): label = topic (4, names of ids 0/1 unverified); attribute
    `entities` multilabel over Bush, Kerry, Arafat, Blair, Sharon; each article is its own user; splits train/dev/test."""
    (path,) = find_files("ag_news", data_root, [AG_FILE])
    return cached([path], ("ag_news",), lambda: _parse_ag(path))


# ---------------------------------------------------------------------------------------------------- Trustpilot
TP_US_FILES = ("trustpilot/lip_trustpilot_english_train.csv", "trustpilot/lip_trustpilot_english_test.csv")
TP_US_AGE = AttributeSpec("age_group", "categorical", ("15-24", "25-54", "55-64", "65+"))
TP_GENDER = {"F": 0, "M": 1}  # -> GENDER classes (female, male)


def _parse_tp_us(paths: list[Path], drop_empty: bool) -> TextDataset:
    texts: list[str] = []
    gender: list[int] = []
    age: list[int] = []
    split_col: list[str] = []
    apos = {v: i for i, v in enumerate(TP_US_AGE.classes)}
    for path, split in zip(paths, ("train", "test")):
        _, rows, lines = read_delimited(path, delimiter=",", header=("text", "age", "age_cat", "gender"))
        for r, ln in zip(rows, lines):
            parse_int(r[1], path, ln, "age")
            parse_choice(r[2], TP_US_AGE.classes, path, ln, "age_cat")
            parse_choice(r[3], tuple(TP_GENDER), path, ln, "gender")
            if drop_empty and not r[0].strip():
                continue
            texts.append(r[0])
            age.append(apos[r[2]])
            gender.append(TP_GENDER[r[3]])
            split_col.append(split)
    return make_text_dataset(
        "trustpilot_us",
        texts=texts,
        attributes=[
            (GENDER, np.asarray(gender, dtype=np.int64)),
            (TP_US_AGE, np.asarray(age, dtype=np.int64)),
        ],
        user_ids=[f"trustpilot_us-{i}" for i in range(len(texts))],
        splits=split_col,
    )


def load_trustpilot_us(*, data_root: PathLike | None = None, drop_empty: bool = False) -> TextDataset:
    """Trustpilot US English reviews (Hovy et al.; LIP repo copy): NO task label (label -1, attacker-only).

    Attributes: gender (female/male), age_group (15-24, 25-54, 55-64, 65+). Splits train (5,004) / test (403); each
    review its own user. The 8 empty train texts are kept unless `drop_empty=True`.
    """
    paths = find_files("trustpilot_us", data_root, TP_US_FILES)
    return cached(paths, ("trustpilot_us", bool(drop_empty)), lambda: _parse_tp_us(paths, bool(drop_empty)))


TP_DK_FILE = "trustpilot/dmvmt_trustpilot_denmark_english.csv"
TP_DK_AGE = AttributeSpec("age_group", "categorical", ("<=18", "19-29", "30-39", "40-98"))  # age in 2020
TP_DK_LABELS = ("1", "2", "3", "4", "5")


def _parse_tp_dk(path: Path) -> TextDataset:
    _, rows, lines = read_delimited(path, delimiter=",", header=False, num_fields=8)
    texts, labels, gender, age = [], [], [], []
    for r, ln in zip(rows, lines):
        age.append(parse_int(r[1], path, ln, "birth_year_category", lo=0, hi=3))
        gender.append(TP_GENDER[parse_choice(r[2], tuple(TP_GENDER), path, ln, "gender")])
        labels.append(parse_int(r[3], path, ln, "rating", lo=1, hi=5) - 1)
        texts.append(r[0])
    return make_text_dataset(
        "trustpilot_dk",
        texts=texts,
        labels=np.asarray(labels, dtype=np.int64),
        label_names=TP_DK_LABELS,
        attributes=[
            (GENDER, np.asarray(gender, dtype=np.int64)),
            (TP_DK_AGE, np.asarray(age, dtype=np.int64)),
        ],
        user_ids=[f"trustpilot_dk-{i}" for i in range(len(texts))],
        splits="all",
    )


def load_trustpilot_dk(*, data_root: PathLike | None = None) -> TextDataset:
    """Trustpilot Denmark, English reviews (DMVMT copy): label = rating 1-5 (5 classes, index = stars - 1).

    Attributes: gender (female/male), age_group = the source's birth-year category (<=18, 19-29, 30-39, 40-98; age in
    2020). 824 rows, split "all", each review its own user.
    """
    (path,) = find_files("trustpilot_dk", data_root, [TP_DK_FILE])
    return cached([path], ("trustpilot_dk",), lambda: _parse_tp_dk(path))


# ---------------------------------------------------------------------------------------------------- Kotzias
KOTZIAS_FILES = {
    "imdb": "sentiment_sentences_kotzias/imdb_labelled.txt",
    "amazon": "sentiment_sentences_kotzias/amazon_cells_labelled.txt",
    "yelp": "sentiment_sentences_kotzias/yelp_labelled.txt",
}
SENTIMENT_LABELS = ("negative", "positive")


def _parse_kotzias(name: str, path: Path) -> TextDataset:
    # Split each line on its LAST tab: the texts hold stray double quotes, so no CSV quoting rules apply.
    lines, numbers = read_lines(path)
    texts, labels = [], []
    for line, ln in zip(lines, numbers):
        text, sep, lab = line.rpartition("\t")
        if not sep:
            raise row_error(path, ln, "expected 'sentence<TAB>label', found no TAB.")
        labels.append(parse_int(lab, path, ln, "label", lo=0, hi=1))
        texts.append(text)
    return make_text_dataset(
        name,
        texts=texts,
        labels=np.asarray(labels, dtype=np.int64),
        label_names=SENTIMENT_LABELS,
        user_ids=[f"{name}-{i}" for i in range(len(texts))],
        splits="all",
    )


def _load_kotzias(name: str, data_root: PathLike | None) -> TextDataset:
    (path,) = find_files(name, data_root, [KOTZIAS_FILES[name]])
    return cached([path], (name,), lambda: _parse_kotzias(name, path))


def load_imdb(*, data_root: PathLike | None = None) -> TextDataset:
    """Kotzias et al. IMDB sentences: 1,000 rows, sentiment negative/positive, no attributes, split "all"."""
    return _load_kotzias("imdb", data_root)


def load_amazon(*, data_root: PathLike | None = None) -> TextDataset:
    """Kotzias et al. Amazon (cell phones) sentences: 1,000 rows, sentiment, no attributes, split "all"."""
    return _load_kotzias("amazon", data_root)


def load_yelp(*, data_root: PathLike | None = None) -> TextDataset:
    """Kotzias et al. Yelp sentences: 1,000 rows, sentiment, no attributes, split "all"."""
    return _load_kotzias("yelp", data_root)


# ---------------------------------------------------------------------------------------------------- SNIPS
SNIPS_INTENTS = (
    "AddToPlaylist", "BookRestaurant", "GetWeather", "PlayMusic", "RateBook", "SearchCreativeWork",
    "SearchScreeningEvent",
)  # fmt: skip
SNIPS_SPLITS = (("train", "train"), ("valid", "dev"), ("test", "test"))


def _parse_snips(paths: list[Path]) -> TextDataset:
    texts, labels, split_col = [], [], []
    pos = {v: i for i, v in enumerate(SNIPS_INTENTS)}
    for k, (_, split) in enumerate(SNIPS_SPLITS):
        seq_in, label_path, seq_out = paths[3 * k : 3 * k + 3]
        utts, _ = read_lines(seq_in)
        intents, nums = read_lines(label_path)
        tags, _ = read_lines(seq_out)
        if not (len(utts) == len(intents) == len(tags)):
            raise ValueError(
                f"SNIPS {split}: the line-aligned files must have equal line counts; found {seq_in}: {len(utts)}, "
                f"{label_path}: {len(intents)}, {seq_out}: {len(tags)}."
            )
        for utt, intent, ln in zip(utts, intents, nums):
            labels.append(pos[parse_choice(intent, SNIPS_INTENTS, label_path, ln, "intent")])
            if not utt.strip():
                raise row_error(seq_in, ln, "expected an utterance, found an empty line.")
            texts.append(utt)
            split_col.append(split)
    return make_text_dataset(
        "snips",
        texts=texts,
        labels=np.asarray(labels, dtype=np.int64),
        label_names=SNIPS_INTENTS,
        user_ids=[f"snips-{i}" for i in range(len(texts))],
        splits=split_col,
    )


def load_snips(*, data_root: PathLike | None = None) -> TextDataset:
    """SNIPS 7 intents (Goo et al. split): train 13,084 / dev (source "valid") 700 / test 700; label = intent."""
    rel = [f"snips_intents/{d}/{f}" for d, _ in SNIPS_SPLITS for f in ("seq.in", "label", "seq.out")]
    paths = find_files("snips", data_root, rel)
    return cached(paths, ("snips",), lambda: _parse_snips(paths))


# ---------------------------------------------------------------------------------------------------- MRPC
MRPC_FILES = ("mrpc/msr_paraphrase_train.txt", "mrpc/msr_paraphrase_test.txt")
MRPC_HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
MRPC_LABELS = ("not_paraphrase", "paraphrase")


def _parse_mrpc(paths: list[Path]) -> TextDataset:
    texts, pairs, labels, split_col = [], [], [], []
    for path, split in zip(paths, ("train", "test")):
        _, rows, lines = read_delimited(
            path, delimiter="\t", quoting=csv.QUOTE_NONE, encoding="utf-8-sig", header=MRPC_HEADER
        )
        for r, ln in zip(rows, lines):
            labels.append(parse_int(r[0], path, ln, "Quality", lo=0, hi=1))
            texts.append(r[3])
            pairs.append(r[4])
            split_col.append(split)
    return make_text_dataset(
        "mrpc",
        texts=texts,
        text_pairs=pairs,
        labels=np.asarray(labels, dtype=np.int64),
        label_names=MRPC_LABELS,
        user_ids=[f"mrpc-{i}" for i in range(len(texts))],
        splits=split_col,
    )


def load_mrpc(*, data_root: PathLike | None = None) -> TextDataset:
    """MRPC sentence pairs: text + text_pair, label paraphrase (1) or not (0); train 4,076 / test 1,725."""
    paths = find_files("mrpc", data_root, MRPC_FILES)
    return cached(paths, ("mrpc",), lambda: _parse_mrpc(paths))
