"""The generic `csv` loader: column mapping, formats, and errors that name file, line and expectation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_privtext.data import DataNotFoundError, load_dataset


def write(tmp_path: Path, name: str, content: str, encoding: str = "utf-8") -> Path:
    p = tmp_path / name
    p.write_text(content, encoding=encoding, newline="")
    return p


CSV = (
    "review,stars,sex,age band,author,part,people\r\n"
    '"Great, really great",5,F,18-29,anna,train,Bob|Ann\r\n'
    '"Two\nlines ""quoted""",1,M,50+,ben,train,\r\n'
    "ok,3,F,30-49,anna,test,Ann\r\n"
    "meh,1,M,18-29,carl,test,Bob\r\n"
)


def test_csv_with_arbitrary_mapping(tmp_path):
    p = write(tmp_path, "r.csv", "\ufeff" + CSV)  # with a byte-order mark
    ds = load_dataset(
        "csv",
        path=str(p),
        text="review",
        label="stars",
        attributes="gender=sex,age=age band",
        multilabel_attributes="people",
        user="author",
        split="part",
        name="mine",
    )
    assert len(ds) == 4 and ds.name == "mine"
    assert ds.texts == ["Great, really great", 'Two\nlines "quoted"', "ok", "meh"]
    assert ds.label_names == ("1", "3", "5") and ds.labels.tolist() == [
        2,
        0,
        1,
        0,
    ]  # integers sorted numerically
    assert ds.attribute_spec("gender").classes == ("F", "M") and ds.attribute("gender").tolist() == [
        0,
        1,
        0,
        1,
    ]
    assert ds.attribute_spec("age").classes == ("18-29", "30-49", "50+")
    assert ds.attribute_spec("people").classes == ("Ann", "Bob")
    assert ds.attribute("people").tolist() == [[1, 1], [0, 0], [1, 0], [0, 1]]
    assert ds.user_ids.tolist() == ["anna", "ben", "anna", "carl"] and ds.num_users == 3
    assert ds.source_split.tolist() == ["train", "train", "test", "test"]


def test_label_names_and_string_labels(tmp_path):
    p = write(tmp_path, "r.csv", CSV)
    ds = load_dataset("csv", path=str(p), text="review", label="stars", label_type="str", label_names="5,3,1")
    assert ds.label_names == ("5", "3", "1") and ds.labels.tolist() == [0, 2, 1, 2]
    ds = load_dataset("csv", path=str(p), text="review", label="sex")
    assert ds.label_names == ("F", "M") and ds.labels.tolist() == [0, 1, 0, 1]
    ds = load_dataset("csv", path=str(p), text="review")  # no label: attacker-only data
    assert ds.labels.tolist() == [-1] * 4 and ds.label_names == () and ds.num_users == 4


def test_tsv_pairs_headerless_and_jsonl(tmp_path):
    p = write(tmp_path, "pairs.tsv", "a\tb\t1\nc\td\t0\n\n")  # a trailing blank line is fine
    ds = load_dataset("csv", path=str(p), header=False, text="0", text_pair="1", label="2", label_type="int",
                      label_names="no,yes")  # fmt: skip
    assert ds.texts == ["a", "c"] and ds.text_pairs == ["b", "d"] and ds.labels.tolist() == [1, 0]
    assert ds.label_names == ("no", "yes")
    rows = [{"t": "x", "y": 2, "g": "f", "e": ["P"]}, {"t": "z", "y": 7, "g": "m", "e": []}]
    p = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    ds = load_dataset(
        "csv", path=str(p), text="t", label="y", attributes=["g"], multilabel_attributes={"ents": "e"}
    )
    assert ds.labels.tolist() == [0, 1] and ds.label_names == ("2", "7")
    assert ds.attribute("ents").tolist() == [[1], [0]] and ds.attribute("g").tolist() == [0, 1]


def test_quote_none_keeps_stray_quotes(tmp_path):
    p = write(tmp_path, "q.tsv", 'text\tlabel\n"a stray quote\t1\nplain\t0\n')
    ds = load_dataset("csv", path=str(p), label="label", quoting="none")
    assert ds.texts == ['"a stray quote', "plain"]


def test_relative_path_against_data_root(tmp_path, monkeypatch):
    write(tmp_path, "r.csv", CSV)
    monkeypatch.chdir(tmp_path.parent)
    ds = load_dataset("csv", data_root=tmp_path, path="r.csv", text="review")
    assert len(ds) == 4


# ------------------------------------------------------------------------------------------------ errors
def test_wrong_field_count_names_file_and_line(tmp_path):
    bad = CSV + "extra,1,F,18-29,dan,test,Bob,SURPLUS\r\n"
    p = write(tmp_path, "bad.csv", bad)
    with pytest.raises(ValueError) as e:
        load_dataset("csv", path=str(p), text="review")
    msg = str(e.value)
    # the quoted text on line 3 spans two physical lines, so the bad record starts on line 7
    assert "bad.csv" in msg and "line 7" in msg and "expected 7 comma-separated fields, found 8" in msg


def test_non_integer_label(tmp_path):
    p = write(tmp_path, "lab.csv", "text,y\na,1\nb,two\n")
    with pytest.raises(
        ValueError, match=r"lab\.csv, line 3: column 'y' expected an integer label, found 'two'"
    ):
        load_dataset("csv", path=str(p), label="y", label_type="int")
    with pytest.raises(ValueError, match=r"line 3: column 'y' expected one of the label names \['0', '1'\]"):
        load_dataset("csv", path=str(p), label="y", label_type="str", label_names=["0", "1"])
    p = write(tmp_path, "idx.csv", "text,y\na,1\nb,2\n")
    with pytest.raises(ValueError, match=r"idx\.csv, line 3: .*label index in \[0, 1\]"):
        load_dataset("csv", path=str(p), label="y", label_names=["no", "yes"])


def test_missing_column(tmp_path):
    p = write(tmp_path, "m.csv", CSV)
    with pytest.raises(
        ValueError, match=r"m\.csv, line 1: expected the column\(s\) \['rating'\] in the header"
    ):
        load_dataset("csv", path=str(p), text="review", label="rating")
    p = write(tmp_path, "m.jsonl", '{"text": "a", "y": 1}\n{"text": "b"}\n')
    with pytest.raises(ValueError, match=r"m\.jsonl, line 2: expected the key\(s\) \['y'\]"):
        load_dataset("csv", path=str(p), label="y")


def test_empty_values_and_blank_lines(tmp_path):
    p = write(tmp_path, "e.csv", "text,g\na,x\nb,\nc,y\n")
    with pytest.raises(ValueError, match=r"e\.csv, line 3: column 'g' expected a non-empty value"):
        load_dataset("csv", path=str(p), attributes="g")
    p = write(tmp_path, "b.csv", "text,g\na,x\n\nc,y\n")
    with pytest.raises(ValueError, match=r"b\.csv, line 3: blank line inside the data"):
        load_dataset("csv", path=str(p), attributes="g")
    p = write(tmp_path, "j.jsonl", '{"text": "a"}\n{"text": \n')
    with pytest.raises(ValueError, match=r"j\.jsonl, line 2: expected a JSON object, found invalid JSON"):
        load_dataset("csv", path=str(p))
    p = write(tmp_path, "c.csv", "text,g\na,x\na,x\n")
    with pytest.raises(ValueError, match="single class"):
        load_dataset("csv", path=str(p), attributes="g")


def test_missing_file_and_bad_options(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_PRIVTEXT_DATA", str(tmp_path))
    with pytest.raises(
        DataNotFoundError, match=r"'nope\.csv' was not found; looked for: .*nope\.csv.*FL_PRIVTEXT_DATA"
    ):
        load_dataset("csv", path="nope.csv")
    with pytest.raises(ValueError, match="needs the option path"):
        load_dataset("csv")
    p = write(tmp_path, "r.csv", CSV)
    with pytest.raises(
        ValueError, match=r"Unknown option\(s\) \['colum'\] for dataset 'csv'; it accepts \['path'"
    ):
        load_dataset("csv", path=str(p), colum="x")
    with pytest.raises(ValueError, match="label_type must be one of"):
        load_dataset("csv", path=str(p), text="review", label="stars", label_type="float")
    with pytest.raises(ValueError, match="cannot tell the format"):
        load_dataset("csv", path=str(write(tmp_path, "r.dat", CSV)))


def test_a_column_mixing_integer_and_text_labels_is_refused_in_one_line(tmp_path):
    # 0/1 beside neg/pos: two encodings of one binary label, which "auto" used to read as 4 classes
    p = write(tmp_path, "reviews.csv", "text,label,sex\na,0,F\nb,1,M\nc,pos,F\nd,neg,M\n")
    with pytest.raises(ValueError) as exc:
        load_dataset("csv", path=str(p), label="label")
    msg = str(exc.value)
    assert "\n" not in msg and "reviews.csv" in msg
    assert "column 'label' mixes integer and text labels ({'0', '1'} with {'neg', 'pos'}); use one encoding" in msg
    j = write(tmp_path, "reviews.jsonl", "".join(json.dumps({"text": t, "label": v}) + "\n"
                                                 for t, v in [("a", 0), ("b", 1), ("c", "pos"), ("d", "neg")]))
    with pytest.raises(ValueError, match=r"column 'label' mixes integer and text labels \({'0', '1'} with"):
        load_dataset("csv", path=str(j), label="label")
    # saying they are four class names is the way through; one encoding loads as before
    assert load_dataset("csv", path=str(p), label="label", label_type="str").label_names == ("0", "1", "neg", "pos")
    ok = write(tmp_path, "ok.csv", "text,label\na,neg\nb,pos\n")
    assert load_dataset("csv", path=str(ok), label="label").label_names == ("neg", "pos")


def test_an_attribute_column_mixing_integer_and_text_values_is_refused(tmp_path):
    p = write(tmp_path, "r.csv", "text,label,sex\na,0,0\nb,1,1\nc,0,F\nd,1,M\n")
    with pytest.raises(ValueError, match=r"column 'sex' \(attribute 'gender'\) mixes integer and text labels "
                                         r"\({'0', '1'} with {'F', 'M'}\)") as exc:
        load_dataset("csv", path=str(p), label="label", attributes="gender=sex")
    assert "\n" not in str(exc.value) and "r.csv" in str(exc.value)
    ds = load_dataset("csv", path=str(p), label="label", attributes="gender=sex",
                      attribute_classes={"gender": ["0", "1", "F", "M"]})  # declared: four classes on purpose
    assert ds.attribute_spec("gender").classes == ("0", "1", "F", "M")
