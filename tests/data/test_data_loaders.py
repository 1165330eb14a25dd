"""Staged datasets: every count in each SOURCE.md is reproduced (nothing dropped), plus data-root handling.

Tests that read the staged files skip when ../shared/data is absent (fixture `data_root`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.data import DATASETS, DataNotFoundError, TextDataset, load_dataset


def split_counts(ds: TextDataset, split: str) -> tuple[np.ndarray, np.ndarray]:
    m = ds.source_split == split
    return m, np.bincount(ds.labels[m], minlength=ds.num_classes)


def by_split(ds: TextDataset) -> dict[str, int]:
    return dict(Counter(ds.source_split.tolist()))


# --------------------------------------------------------------------------------------------- blog
def test_blog_counts(blog):
    assert len(blog) == 60_000 and blog.num_users == 14_437
    assert by_split(blog) == {"train": 48_046, "dev": 5_981, "test": 5_973}
    assert np.bincount(blog.labels).tolist() == [13304, 4733, 16148, 2293, 1951, 2563, 3858, 8591, 6233, 326]
    assert blog.attribute_spec("gender").classes == ("female", "male")
    assert blog.attribute_spec("age_group").classes == ("10s", "20s", "30s")
    table = {  # SOURCE.md: split -> female 10s/20s/30s, male 10s/20s/30s
        "train": [8011, 7962, 8041, 8002, 8019, 8011],
        "dev": [1017, 1015, 964, 994, 969, 1022],
        "test": [972, 1023, 995, 1004, 1012, 967],
    }
    cell = blog.attribute("gender") * 3 + blog.attribute("age_group")
    for split, expected in table.items():
        assert np.bincount(cell[blog.source_split == split], minlength=6).tolist() == expected
    # one blogger's posts share gender and age
    uid, inv = np.unique(blog.user_ids, return_inverse=True)
    for name in ("gender", "age_group"):
        v = blog.attribute(name)
        lo = np.full(len(uid), 9)
        hi = np.full(len(uid), -1)
        np.minimum.at(lo, inv, v)
        np.maximum.at(hi, inv, v)
        assert (lo == hi).all()
    assert max(len(t.split()) for t in blog.texts[:2000]) <= 300


def test_blog_parse_is_cached_in_process(data_root, blog):
    # speed is measured in benchmarks, not asserted in unit tests: here only that the parsed file is reused
    from fl_privtext.data import _io

    _io._CACHE.clear()
    cold = load_dataset("blog", data_root=data_root)
    entries = dict(_io._CACHE)
    assert entries, "the parsed file was not cached"
    load_dataset("blog", data_root=data_root, age_groups="10s,30s")
    assert dict(_io._CACHE).keys() == entries.keys()  # no second parse of the 20 MB gzip
    assert cold.fingerprint == blog.fingerprint


def test_blog_options(blog, data_root):
    hi = load_dataset("blog", data_root=data_root, min_topic_prob=0.8)
    assert len(hi) == 7_568  # SOURCE.md: posts whose top topic has probability > 0.8
    two = load_dataset("blog", data_root=data_root, age_groups=["30s", "10s"])
    assert len(two) == 40_000 and two.attribute_spec("age_group").classes == ("10s", "30s")
    assert np.bincount(two.attribute("age_group")).tolist() == [20_000, 20_000]
    ind = load_dataset("blog", data_root=data_root, label="industry")
    assert ind.num_classes == 40 and Counter(np.asarray(ind.label_names)[ind.labels])["Student"] == 12_655
    for name in ("gender", "age_group"):  # a private attribute as the task (Coavoux's trained upper bound)
        task = load_dataset("blog", data_root=data_root, label=name, age_groups="10s,30s")
        assert task.label_names == task.attribute_spec(name).classes
        assert np.array_equal(task.labels, task.attribute(name))
    a = load_dataset("blog", data_root=data_root, max_rows=1000, seed=1)
    b = load_dataset("blog", data_root=data_root, max_rows=1000, seed=1)
    c = load_dataset("blog", data_root=data_root, max_rows=1000, seed=2)
    assert len(a) == 1000 and a.fingerprint == b.fingerprint != c.fingerprint
    assert set(a.texts) <= set(blog.texts)
    with pytest.raises(ValueError, match=r"age_groups must be at least two of \['10s', '20s', '30s'\]"):
        load_dataset("blog", data_root=data_root, age_groups="10s,40s")
    with pytest.raises(ValueError, match="label must be one of"):
        load_dataset("blog", data_root=data_root, label="sign")


# --------------------------------------------------------------------------------------------- AG news
def test_ag_news_counts(data_root):
    ds = load_dataset("ag_news", data_root=data_root)
    assert by_split(ds) == {"train": 11_657, "dev": 1_457, "test": 1_457}
    spec = ds.attribute_spec("entities")
    assert spec.kind == "multilabel" and spec.classes == ("Bush", "Kerry", "Arafat", "Blair", "Sharon")
    ents = ds.attribute("entities")
    expected = {
        "train": ([6773, 4324, 80, 480], [6327, 3028, 2127, 1202, 1180], [9468, 2171, 18]),
        "dev": ([831, 540, 15, 71], [798, 366, 272, 161, 144], [1177, 276, 4]),
        "test": ([842, 548, 11, 56], [803, 367, 267, 149, 127], [1202, 254, 1]),
    }
    for split, (topics, entity_counts, per_row) in expected.items():
        m, counts = split_counts(ds, split)
        assert counts.tolist() == topics
        assert ents[m].sum(axis=0).tolist() == entity_counts
        assert np.bincount(ents[m].sum(axis=1), minlength=4)[1:].tolist() == per_row
    assert ds.num_users == len(ds)  # no author column: each article its own user
    # inferred id -> surname mapping (SOURCE.md): every row tagged with an entity mentions the surname
    texts = np.asarray(ds.texts, dtype=object)
    for j, surname in enumerate(spec.classes):
        assert all(surname in t for t in texts[ents[:, j] == 1][:300])


# --------------------------------------------------------------------------------------------- Trustpilot
def test_trustpilot_us_counts(data_root):
    ds = load_dataset("trustpilot_us", data_root=data_root)
    assert ds.label_names == () and (ds.labels == -1).all()  # attacker-only: no task label
    assert ds.attribute_spec("age_group").classes == ("15-24", "25-54", "55-64", "65+")
    for split, rows, gender, ages, empty in [
        ("train", 5004, [2502, 2502], [808, 2416, 796, 984], 8),
        ("test", 403, [202, 201], [65, 194, 65, 79], 0),
    ]:
        m = ds.source_split == split
        assert m.sum() == rows
        assert np.bincount(ds.attribute("gender")[m]).tolist() == gender
        assert np.bincount(ds.attribute("age_group")[m]).tolist() == ages
        assert sum(1 for t, k in zip(ds.texts, m) if k and not t.strip()) == empty
    assert len(load_dataset("trustpilot_us", data_root=data_root, drop_empty=True)) == 5407 - 8


def test_trustpilot_dk_counts(data_root):
    ds = load_dataset("trustpilot_dk", data_root=data_root)
    assert len(ds) == 824 and ds.label_names == ("1", "2", "3", "4", "5")
    assert np.bincount(ds.labels).tolist() == [127, 30, 32, 86, 549]
    assert np.bincount(ds.attribute("gender")).tolist() == [211, 613]  # female, male
    assert np.bincount(ds.attribute("age_group")).tolist() == [3, 67, 260, 494]
    assert ds.texts[0].startswith("We regularly buy our coffee")


# --------------------------------------------------------------------------------------------- Kotzias
@pytest.mark.parametrize("name, duplicates", [("imdb", 3), ("amazon", 10), ("yelp", 4)])
def test_kotzias_counts(data_root, name, duplicates):
    ds = load_dataset(name, data_root=data_root)
    assert len(ds) == 1000 and np.bincount(ds.labels).tolist() == [500, 500]
    assert ds.label_names == ("negative", "positive") and ds.attributes == ()
    assert len(ds) - len(set(ds.texts)) == duplicates
    assert all("\t" not in t and "\n" not in t for t in ds.texts)
    if name == "imdb":  # the stray leading quotes that make a default CSV reader lose 252 rows
        assert sum(t.startswith('"') for t in ds.texts) >= 2


# --------------------------------------------------------------------------------------------- SNIPS
def test_snips_counts(data_root):
    ds = load_dataset("snips", data_root=data_root)
    expected = {
        "train": [1818, 1881, 1896, 1914, 1876, 1847, 1852],
        "dev": [100] * 7,
        "test": [124, 92, 104, 86, 80, 107, 107],
    }
    assert ds.label_names[0] == "AddToPlaylist" and ds.label_names[-1] == "SearchScreeningEvent"
    for split, counts in expected.items():
        assert split_counts(ds, split)[1].tolist() == counts
    assert ds.texts[0].startswith("listen to westbam")


# --------------------------------------------------------------------------------------------- MRPC
def test_mrpc_counts(data_root):
    ds = load_dataset("mrpc", data_root=data_root)
    assert ds.has_pairs and len(ds.text_pairs) == len(ds)
    assert split_counts(ds, "train")[1].tolist() == [1323, 2753]
    assert split_counts(ds, "test")[1].tolist() == [578, 1147]
    assert ds.texts[0].startswith('Amrozi accused his brother, whom he called "the witness"')
    assert ds.text_pairs[0].startswith('Referring to him as only "the witness"')
    assert not any(t.endswith("\r") for t in ds.text_pairs)
    pairs = set(zip(ds.texts, ds.text_pairs))
    assert len(pairs) == len(ds)  # no pair in both files


# --------------------------------------------------------------------------------------------- data root
def test_every_staged_dataset_is_registered():
    assert set(DATASETS) == {
        "default", "blog", "ag_news", "trustpilot_us", "trustpilot_dk", "imdb", "amazon", "yelp", "snips", "mrpc",
        "csv", "hf", "synthetic",
    }  # fmt: skip


def test_unknown_dataset_lists_known():
    with pytest.raises(
        ValueError, match=r"Unknown dataset 'blogs'; known datasets are \['ag_news', 'amazon', 'blog'"
    ):
        load_dataset("blogs")


def test_data_root_from_environment(data_root, monkeypatch):
    monkeypatch.setenv("FL_PRIVTEXT_DATA", str(data_root))
    assert len(load_dataset("imdb")) == 1000
    # the argument wins over the environment
    monkeypatch.setenv("FL_PRIVTEXT_DATA", "/nonexistent")
    assert len(load_dataset("imdb", data_root=data_root)) == 1000


def test_missing_root_names_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv("FL_PRIVTEXT_DATA", raising=False)
    with pytest.raises(DataNotFoundError, match="FL_PRIVTEXT_DATA"):
        load_dataset("snips")
    with pytest.raises(ValueError, match="FL_PRIVTEXT_DATA"):  # also a ValueError
        load_dataset("blog")
    monkeypatch.setenv("FL_PRIVTEXT_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError) as e:
        load_dataset("mrpc")
    msg = str(e.value)
    assert "environment variable FL_PRIVTEXT_DATA" in msg and "is not a directory" in msg
    assert "mrpc/msr_paraphrase_train.txt" in msg and "mrpc/msr_paraphrase_test.txt" in msg


def test_missing_file_lists_what_was_looked_for(tmp_path):
    (tmp_path / "mrpc").mkdir()
    (tmp_path / "mrpc" / "msr_paraphrase_train.txt").write_text("x")
    with pytest.raises(DataNotFoundError) as e:
        load_dataset("mrpc", data_root=tmp_path)
    msg = str(e.value)
    assert "1 of 2 file(s) missing" in msg and "msr_paraphrase_train.txt (found)" in msg
    assert "msr_paraphrase_test.txt (MISSING)" in msg and "FL_PRIVTEXT_DATA" in msg


def _copy_tree(src: Path, dst: Path, rel: list[str]) -> None:
    for r in rel:
        (dst / r).parent.mkdir(parents=True, exist_ok=True)
        (dst / r).write_bytes((src / r).read_bytes())


def test_malformed_staged_file_names_line(data_root, tmp_path):
    rel = ["trustpilot/dmvmt_trustpilot_denmark_english.csv"]
    _copy_tree(data_root, tmp_path, rel)
    p = tmp_path / rel[0]
    good = p.read_text(encoding="utf-8")
    p.write_text(good + '"Fine shop.",3,M,five,denmark,fine,1,shop\n', encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"denmark_english\.csv, line 825: column 'rating' expected an integer"
    ):
        load_dataset("trustpilot_dk", data_root=tmp_path)
    p.write_text(good + '"Fine shop.",3,M,5,denmark\n', encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"denmark_english\.csv, line 825: expected 8 comma-separated fields, found 5"
    ):
        load_dataset("trustpilot_dk", data_root=tmp_path)
    rel = ["sentiment_sentences_kotzias/yelp_labelled.txt"]
    _copy_tree(data_root, tmp_path, rel)
    p = tmp_path / rel[0]
    p.write_text(p.read_text(encoding="utf-8") + "no label here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"yelp_labelled\.txt, line 1001: expected 'sentence<TAB>label'"):
        load_dataset("yelp", data_root=tmp_path)
