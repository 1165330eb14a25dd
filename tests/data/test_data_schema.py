"""The record schema: TextDataset columns and accessors, validation, fingerprint, from_hf."""

from __future__ import annotations

import os
import subprocess
import sys

import datasets
import numpy as np
import pyarrow as pa
import pytest

from fl_privtext.data import AttributeSpec, TextDataset, from_hf, make_text_dataset

ENT = AttributeSpec("ent", "multilabel", ("a", "b", "c"))
GEN = AttributeSpec("gender", "categorical", ("female", "male"))


def small(**over):
    kw = {
        "texts": ["t0", "t1", "t2", "t3"],
        "labels": [0, 1, 1, -1],
        "label_names": ("neg", "pos"),
        "attributes": [(GEN, [0, 1, 1, 0]), (ENT, [[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 1, 1]])],
        "user_ids": ["u1", "u1", "u2", "u3"],
        "splits": ["train", "train", "test", "dev"],
    }
    kw.update(over)
    return make_text_dataset("small", **kw)


def test_columns_and_accessors():
    ds = small()
    assert isinstance(ds.table, datasets.Dataset)
    assert set(ds.table.column_names) == {"user_id", "text", "label", "split", "z_gender", "z_ent"}
    assert ds.table.features["label"] == datasets.Value("int64")
    assert len(ds) == 4 and ds.texts == ["t0", "t1", "t2", "t3"] and ds.text_pairs is None
    assert ds.labels.dtype == np.int64 and ds.labels.tolist() == [0, 1, 1, -1]
    assert ds.user_ids.tolist() == ["u1", "u1", "u2", "u3"] and ds.num_users == 3
    assert ds.source_split.tolist() == ["train", "train", "test", "dev"]
    g = ds.attribute("gender")
    assert g.dtype == np.int64 and g.shape == (4,) and g.tolist() == [0, 1, 1, 0]
    e = ds.attribute("ent")
    assert e.dtype == np.int8 and e.shape == (4, 3) and e.sum(axis=0).tolist() == [2, 2, 2]
    assert ds.attribute_names == ("gender", "ent") and ds.attributes == (GEN, ENT)
    assert ds.num_classes == 2 and ds.label_names == ("neg", "pos")
    with pytest.raises(ValueError, match="no private attribute 'age'.*gender"):
        ds.attribute("age")
    # cached arrays are read-only so no caller corrupts them for the next
    with pytest.raises(ValueError):
        ds.labels[0] = 5
    s = ds.summary()
    assert s["labels"] == {"neg": 1, "pos": 2} and s["unlabelled"] == 1
    assert s["attribute:ent"] == {"a": 2, "b": 2, "c": 2} and s["splits"] == {"dev": 1, "test": 1, "train": 2}


def test_pairs_and_no_label():
    ds = make_text_dataset("p", texts=["a", "b"], text_pairs=["c", "d"])
    assert ds.text_pairs == ["c", "d"] and ds.has_pairs
    assert ds.labels.tolist() == [-1, -1] and ds.label_names == () and not ds.has_labels
    assert ds.user_ids.tolist() == ["p-0", "p-1"]  # each row its own user
    assert ds.source_split.tolist() == ["all", "all"]


@pytest.mark.parametrize(
    "over, match",
    [
        ({"labels": [0, 1, 2, 0]}, r"labels must be in \[-1, 1\]"),
        ({"attributes": [(GEN, [0, 1, 2, 0])]}, r"class indices in \[0, 1\]"),
        ({"attributes": [(ENT, [[1, 0, 2]] * 4)]}, "0/1 values only"),
        ({"label_names": ("only",), "labels": [0, 0, 0, 0]}, "at least 2 classes"),
        ({"user_ids": ["u1", "u2"]}, "expected 4"),
        ({"labels": None}, "label_names .* given without labels"),
    ],
)
def test_validation_errors(over, match):
    with pytest.raises(ValueError, match=match):
        small(**over)


def test_table_validation():
    t = pa.table(
        {"user_id": ["u"], "text": ["x"], "label": pa.array([0], pa.int64()), "split": ["all"], "z_age": [1]}
    )
    with pytest.raises(ValueError, match="without an AttributeSpec"):
        TextDataset("x", datasets.Dataset(t), ("a", "b"), ())
    t2 = t.drop(["split", "z_age"])
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['split'\]"):
        TextDataset("x", datasets.Dataset(t2), ("a", "b"), ())
    with pytest.raises(ValueError, match="kind"):
        AttributeSpec("age", "ordinal", ("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate class"):
        AttributeSpec("age", "categorical", ("a", "a"))


def test_fingerprint_content_based():
    a, b = small(), small()
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
    users = ["u1", "u2", "u3", "u4"]
    # the name is not content: the same rows under another name share the embedding cache
    assert (
        make_text_dataset("x", texts=a.texts, user_ids=users).fingerprint
        == make_text_dataset("y", texts=a.texts, user_ids=users).fingerprint
    )
    changed = [
        small(texts=["t0", "t1", "t2", "t3 "]),
        small(labels=[0, 1, 0, -1]),
        small(user_ids=["u1", "u1", "u2", "u4"]),
        small(splits=["train", "train", "test", "test"]),
        small(attributes=[(GEN, [0, 1, 1, 1]), (ENT, [[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 1, 1]])]),
        small(label_names=("negative", "pos")),
        small(texts=["t0t", "1", "t2", "t3"]),  # same characters, different boundaries
    ]
    prints = {a.fingerprint} | {d.fingerprint for d in changed}
    assert len(prints) == 1 + len(changed)


def test_fingerprint_stable_across_processes(default_ds):
    code = "from fl_privtext.data import load_dataset; print(load_dataset('default').fingerprint)"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # str hashing differs from this process's
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == default_ds.fingerprint


def test_select():
    ds = small()
    sub = ds.select([3, 0])
    assert sub.texts == ["t3", "t0"] and sub.attribute("ent").tolist() == [[1, 1, 1], [1, 0, 0]]
    assert sub.fingerprint != ds.fingerprint
    assert ds.select(np.array([True, False, True, False])).texts == ["t0", "t2"]
    with pytest.raises(ValueError, match="Row indices"):
        ds.select([7])


def test_from_hf_maps_columns():
    hf = datasets.Dataset.from_dict(
        {
            "sentence": ["a", "b", "c", "d"],
            "y": [1, 0, 1, 1],
            "sex": ["m", "f", "f", "m"],
            "who": ["x", "x", "y", "z"],
            "persons": [["Bob"], [], ["Ann", "Bob"], ["Ann"]],
        },
        features=datasets.Features(
            {
                "sentence": datasets.Value("string"),
                "y": datasets.ClassLabel(names=["bad", "good"]),
                "sex": datasets.Value("string"),
                "who": datasets.Value("string"),
                "persons": datasets.List(datasets.Value("string")),
            }
        ),
    )
    ds = from_hf(hf, text="sentence", label="y", attributes={"gender": "sex", "people": "persons"},
                 multilabel=["people"], user="who", name="mine")  # fmt: skip
    assert ds.label_names == ("bad", "good") and ds.labels.tolist() == [1, 0, 1, 1]
    assert ds.attribute_spec("gender").classes == ("f", "m") and ds.attribute("gender").tolist() == [
        1,
        0,
        0,
        1,
    ]
    assert ds.attribute_spec("people").classes == ("Ann", "Bob")
    assert ds.attribute("people").tolist() == [[0, 1], [0, 0], [1, 1], [1, 0]]
    assert ds.user_ids.tolist() == ["x", "x", "y", "z"]
    # a shuffled view (indices mapping) keeps its own row order
    shuffled = hf.select([3, 2, 1, 0])
    assert from_hf(shuffled, text="sentence").texts == ["d", "c", "b", "a"]
    with pytest.raises(ValueError, match="no column 'nope'"):
        from_hf(hf, text="nope")


def test_from_hf_dataset_dict_gives_split_column():
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]}),
            "test": datasets.Dataset.from_dict({"text": ["c"], "label": ["y"]}),
        }
    )
    ds = from_hf(dd, text="text", label="label")
    assert ds.source_split.tolist() == ["train", "train", "test"]
    assert ds.label_names == ("x", "y") and ds.labels.tolist() == [0, 1, 1]


def test_table_view_is_materialised():
    ds = small()
    view = ds.table.select([2, 1])
    again = TextDataset("v", view, ds.label_names, ds.attributes)
    assert again.texts == ["t2", "t1"] and again.labels.tolist() == [1, 1]


def test_pickle_roundtrip():
    import pickle

    ds = small()
    _ = ds.labels, ds.texts  # populate caches; they are not pickled
    back = pickle.loads(pickle.dumps(ds))
    assert "_texts" not in back.__dict__ and "labels" not in back.__dict__
    assert isinstance(back.table, datasets.Dataset) and back.fingerprint == ds.fingerprint
    assert back.texts == ds.texts and back.attribute("ent").tolist() == ds.attribute("ent").tolist()


def test_from_hf_integer_labels_keep_unlabelled():
    hf = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"], "y": [3, -1, 7, 3]})
    ds = from_hf(hf, text="text", label="y")
    assert ds.label_names == ("3", "7") and ds.labels.tolist() == [0, -1, 1, 0]


def test_lazy_text_column_and_user_index_match_the_eager_accessors():
    from fl_privtext.data import load_dataset

    ds = load_dataset("default")
    col = ds.text_column
    assert len(col) == len(ds) and col[0] == ds.texts[0] and col[-1] == ds.texts[-1]
    assert col[10:20] == ds.texts[10:20] and col[::700] == ds.texts[::700] and col[5:2] == []
    with pytest.raises(IndexError):
        col[len(ds)]
    assert ds.text_pair_column is None
    uniq, inv = np.unique(ds.user_ids, return_inverse=True)
    np.testing.assert_array_equal(ds.user_index, inv)
    assert ds.num_users == len(uniq)


def test_user_index_from_arrow_orders_ids_as_numpy_does_beyond_ascii():
    """`user_index` sorts the distinct ids in Arrow (UTF-8 byte order); numpy sorts str by code point: the same order
    for every string, which ids mixing cases, digits, accents, CJK and astral characters must show."""
    from fl_privtext.data.schema import make_text_dataset
    from fl_privtext.data.splits import user_index

    ids = ["zoë", "Zoe", "ü", "u", "10", "9", "東京", "😀", "é", "e\u0301", "zoë", "9", "a b", "A"]
    ds = make_text_dataset("ids", texts=[f"text {i}" for i in range(len(ids))], user_ids=ids)
    uniq, inv = np.unique(np.asarray(ids, dtype=str), return_inverse=True)
    np.testing.assert_array_equal(ds.user_index, inv)
    names, index = user_index(ds)
    assert names.tolist() == uniq.tolist() and ds.num_users == len(uniq)
    np.testing.assert_array_equal(index, inv)


def test_attribute_codes_and_user_ids_at_read_what_is_held_or_only_the_rows_asked():
    """Issue #38: `attribute_codes` is the held narrow array itself (the same object on every call, read-only),
    `attribute` its int64 widening (a fresh copy a call: what readers of a few rows no longer pay); multilabel values
    are held as they are. `user_ids_at(rows)` equals ``user_ids[rows]`` (in the rows' order, repeats kept) without
    building `user_ids` for every record."""
    ds = small()
    codes = ds.attribute_codes("gender")
    assert codes is ds.attribute_codes("gender") and not codes.flags.writeable
    assert codes.dtype == np.int8 and ds.attribute("gender").dtype == np.int64
    np.testing.assert_array_equal(codes, ds.attribute("gender"))
    assert ds.attribute("gender") is not ds.attribute("gender")  # the widening is a copy each call
    assert ds.attribute_codes("ent") is ds.attribute("ent") and ds.attribute("ent").dtype == np.int8
    rows = np.array([3, 0, 0, 2])
    ds.__dict__.pop("user_ids", None)
    got = ds.user_ids_at(rows)
    assert "user_ids" not in ds.__dict__ and not got.flags.writeable
    assert got.tolist() == ds.user_ids[rows].tolist() == ["u3", "u1", "u1", "u2"]
    assert ds.user_ids_at(np.zeros(0, np.int64)).tolist() == []
