"""data.name = "hf": a save_to_disk folder, a Parquet file and an Arrow file load into the same records as the
equivalent JSONL through the csv loader's column options; bad columns and missing paths are one-line errors."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest

from fl_privtext.data import load_dataset

ROWS = [
    {"text": "great phone, fast delivery", "stars": "pos", "gender": "f", "uid": "u1", "ents": ["PER"]},
    {"text": "the screen broke in a week", "stars": "neg", "gender": "m", "uid": "u2", "ents": []},
    {"text": "fine for the price", "stars": "pos", "gender": "m", "uid": "u1", "ents": ["ORG", "PER"]},
    {"text": "", "stars": "neg", "gender": "f", "uid": "u3", "ents": ["ORG"]},
]
OPTIONS = {"text": "text", "label": "stars", "attributes": "gender", "multilabel_attributes": "ents", "user": "uid"}


def _same(a, b) -> None:
    assert list(a.texts) == list(b.texts) and a.label_names == b.label_names
    np.testing.assert_array_equal(a.labels, b.labels)
    assert list(a.user_ids) == list(b.user_ids)
    for spec in a.attributes:
        np.testing.assert_array_equal(a.attribute(spec.name), b.attribute(spec.name))
    assert [s.classes for s in a.attributes] == [s.classes for s in b.attributes]


def test_save_to_disk_parquet_and_arrow_equal_jsonl(tmp_path):
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    ref = load_dataset("csv", path=str(jsonl), **OPTIONS)
    hf = datasets.Dataset.from_list(ROWS)
    hf.save_to_disk(str(tmp_path / "saved"))
    hf.to_parquet(str(tmp_path / "d.parquet"))
    for path in (tmp_path / "saved", tmp_path / "d.parquet", next((tmp_path / "saved").glob("*.arrow"))):
        _same(load_dataset("hf", path=str(path), **OPTIONS), ref)


def test_dataset_dict_splits_become_source_splits(tmp_path):
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:3]),
                               "test": datasets.Dataset.from_list(ROWS[3:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    ds = load_dataset("hf", path=str(tmp_path / "dd"), **OPTIONS)
    assert len(ds) == 4 and list(ds.source_split) == ["train", "train", "train", "test"]


def test_bad_columns_empty_and_missing_paths_are_one_line_errors(tmp_path):
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match=r"expected the column\(s\) \['review'\]") as exc:
        load_dataset("hf", path=str(tmp_path / "saved"), text="review")
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="was not found"):
        load_dataset("hf", path=str(tmp_path / "nowhere"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="neither a save_to_disk folder nor Parquet"):
        load_dataset("hf", path=str(tmp_path / "notes.txt"))
    with pytest.raises(ValueError, match="needs the option path"):
        load_dataset("hf")


def test_a_label_column_mixing_integer_and_text_labels_is_refused(tmp_path):
    rows = [{**r, "stars": s} for r, s in zip(ROWS, ["1", "0", "pos", "neg"])]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    with pytest.raises(ValueError, match=r"d.parquet: column 'stars' mixes integer and text labels "
                                         r"\({'0', '1'} with {'neg', 'pos'}\); use one encoding"):
        load_dataset("hf", path=str(tmp_path / "d.parquet"), **OPTIONS)
