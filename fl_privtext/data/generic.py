"""The generic loader `csv`: the user's own CSV / TSV / JSONL file with a column mapping given in the config.

Example (flat config keys under data.*; lists may be comma-separated strings)::

    load_dataset("csv", path="reviews.tsv", text="review", label="stars", label_type="str",
                 attributes="gender,age_band", user="author", split="part")

Every row is read (the csv module for CSV/TSV, json for JSONL); a row that does not parse or lacks a mapped column
raises ValueError naming the file, the line number and what was expected.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.data._io import (
    DataNotFoundError,
    Quoting,
    read_delimited,
    read_lines,
    row_error,
)
from fl_privtext.data.schema import AttributeSpec, TextDataset, make_text_dataset, sort_key
from fl_privtext.datafiles import resolve_path as _resolve_path

__all__ = ["FORMATS", "LABEL_TYPES", "load_csv", "load_hf"]

FORMATS = ("csv", "tsv", "jsonl")
HF_SPLIT_KEY = "__hf_split__"  # the split a row of a DatasetDict came from (data.split = source)
LABEL_TYPES = ("auto", "int", "str")
QUOTING: dict[str, Quoting] = {"minimal": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}


def _mapping(value: str | Sequence[str] | Mapping[str, str] | None, what: str) -> dict[str, str]:
    """Attribute name -> column from "a,b", "name=column,...", a list of columns or a dict."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    out: dict[str, str] = {}
    for item in items:
        if not item:
            continue
        name, sep, column = item.partition("=")
        name, column = name.strip(), (column.strip() if sep else name.strip())
        if name in out:
            raise ValueError(f"{what}: attribute {name!r} is mapped twice.")
        out[name] = column
    return out


def _infer_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    last = suffixes[-1] if suffixes else ""
    if last in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if last in (".tsv", ".tab"):
        return "tsv"
    if last == ".csv":
        return "csv"
    raise ValueError(
        f"Dataset 'csv': cannot tell the format of {path} from its suffix; pass format= one of {list(FORMATS)}."
    )


def _column_key(column: str, header: bool) -> str | int:
    if header:
        return column
    try:
        return int(column)
    except ValueError:
        raise ValueError(
            f"Dataset 'csv': header=False, so columns are 0-based field numbers; got the column name {column!r}."
        ) from None


def _records(
    path: Path,
    fmt: str,
    *,
    delimiter: str | None,
    encoding: str,
    header: bool,
    quoting: str,
    needed: list[str],
) -> Iterator[tuple[int, Callable[[str], Any]]]:
    """(line number, getter column -> raw value) for every record of the file."""
    if fmt == "hf":
        table, splits = _hf_table(path)
        missing = [c for c in needed if c not in table.column_names and c != HF_SPLIT_KEY]
        if missing:
            raise ValueError(f"{path}: expected the column(s) {missing}; the dataset has columns "
                             f"{table.column_names}.")
        for i, row in enumerate(table, start=1):
            row[HF_SPLIT_KEY] = splits[i - 1]
            yield i, row.get
        return
    if fmt == "jsonl":
        lines, numbers = read_lines(path, encoding=encoding)
        while lines and not lines[-1].strip():  # trailing blank lines only
            lines.pop()
        for line, ln in zip(lines, numbers):
            if not line.strip():
                raise row_error(path, ln, "blank line inside the data (expected a JSON object).")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise row_error(path, ln, f"expected a JSON object, found invalid JSON ({e.msg}).") from None
            if not isinstance(obj, dict):
                raise row_error(path, ln, f"expected a JSON object, found {type(obj).__name__}.")
            missing = [c for c in needed if c not in obj]
            if missing:
                raise row_error(
                    path, ln, f"expected the key(s) {missing}; the object has keys {sorted(obj)}."
                )
            yield ln, obj.get
        return
    if quoting not in QUOTING:
        raise ValueError(f"Dataset 'csv': quoting must be one of {list(QUOTING)}, got {quoting!r}.")
    delim = delimiter if delimiter else ("\t" if fmt == "tsv" else ",")
    head, rows, lines_ = read_delimited(
        path, delimiter=delim, quoting=QUOTING[quoting], encoding=encoding, header=header
    )
    if head is not None:
        dup = sorted({h for h in head if head.count(h) > 1})
        if dup:
            raise row_error(path, 1, f"expected unique column names in the header, found duplicates {dup}.")
        index: dict[str | int, int] = {h: i for i, h in enumerate(head)}
        missing = [c for c in needed if c not in index]
        if missing:
            raise row_error(path, 1, f"expected the column(s) {missing} in the header; found columns {head}.")
    else:
        width = len(rows[0]) if rows else 0
        index = {i: i for i in range(width)}
        missing = [c for c in needed if _column_key(c, False) not in index]
        if missing and rows:
            raise row_error(
                path, lines_[0], f"expected field number(s) {missing} (0-based); rows have {width} fields."
            )
    for r, ln in zip(rows, lines_):
        yield ln, _getter(r, index, head is not None)


def _hf_table(path: Path) -> tuple[Any, list[str]]:
    """A Hugging Face dataset as one `datasets.Dataset` and each row's split name: a `save_to_disk` folder (a
    Dataset or a DatasetDict, whose splits are concatenated in order), a Parquet or Arrow file, or a folder of
    them."""
    import datasets

    def split_names(parts: dict[str, Any]) -> tuple[Any, list[str]]:
        names = [name for name, part in parts.items() for _ in range(len(part))]
        return datasets.concatenate_datasets(list(parts.values())), names

    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file()
                          or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return split_names(dict(loaded)) if isinstance(loaded, datasets.DatasetDict) else (loaded, ["all"] * len(
            loaded))
    files = sorted(path.glob("*.parquet")) + sorted(path.glob("*.arrow")) if path.is_dir() else [path]
    kinds = {f.suffix.lower() for f in files}
    if not files or not kinds <= {".parquet", ".arrow"} or len(kinds) != 1:
        raise ValueError(f"Dataset 'hf': {path} is neither a save_to_disk folder nor Parquet or Arrow file(s) (a "
                         "folder of .parquet or .arrow files, or one such file).")
    builder = "parquet" if kinds == {".parquet"} else "arrow"
    loaded = datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train")
    return loaded, ["all"] * len(loaded)


def _getter(row: list[str], index: dict[str | int, int], header: bool) -> Callable[[str], Any]:
    def get(column: str) -> Any:
        return row[index[_column_key(column, header)]]

    return get


def _parse_label_value(raw: Any, label_type: str, path: Path, ln: int, column: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise row_error(path, ln, f"column {column!r} expected a label, found an empty value.")
    if label_type == "int":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise row_error(path, ln, f"column {column!r} expected an integer label, found {raw!r}.")
        try:
            return int(raw.strip()) if isinstance(raw, str) else raw
        except ValueError:
            raise row_error(
                path, ln, f"column {column!r} expected an integer label, found {raw!r}."
            ) from None
    if isinstance(raw, (dict, list)):
        raise row_error(path, ln, f"column {column!r} expected a label, found {raw!r}.")
    return str(raw).strip()


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    if isinstance(v, str):
        try:
            int(v.strip())
            return True
        except ValueError:
            return False
    return False


def _refuse_mixed(file: Path, what: str, values: Sequence[Any], escape: str) -> None:
    """ValueError (one line) when a class column holds integer values beside text values, e.g. ``0``/``1`` with
    ``neg``/``pos``: two encodings of the same classes, which would silently become 4 classes. ``escape`` names
    the option that says they really are distinct classes."""
    ints = sorted({str(v).strip() for v in values if _is_int(v)}, key=_sort_key_str)
    texts = sorted({str(v).strip() for v in values if not _is_int(v)}, key=_sort_key_str)
    if ints and texts:
        def show(xs: list[str]) -> str:
            return "{" + ", ".join(repr(x) for x in xs[:6]) + (", ..." if len(xs) > 6 else "") + "}"

        raise ValueError(f"{file}: {what} mixes integer and text labels ({show(ints)} with {show(texts)}); use one "
                         f"encoding, or {escape}.")


def load_csv(
    *,
    path: str | os.PathLike[str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    text: str = "text",
    text_pair: str | None = None,
    label: str | None = None,
    label_type: str = "auto",
    label_names: str | Sequence[str] | None = None,
    attributes: str | Sequence[str] | Mapping[str, str] | None = None,
    multilabel_attributes: str | Sequence[str] | Mapping[str, str] | None = None,
    attribute_classes: Mapping[str, Sequence[str] | str] | None = None,
    multilabel_sep: str = "|",
    user: str | None = None,
    split: str | None = None,
    format: str | None = None,
    delimiter: str | None = None,
    quoting: str = "minimal",
    encoding: str = "utf-8-sig",
    header: bool = True,
    name: str | None = None,
) -> TextDataset:
    """Load any CSV / TSV / JSONL file through a column mapping.

    - `text` (and `text_pair` for pair tasks): text columns. Empty texts are kept.
    - `label`: task label column or None (label -1). `label_type` "int": integers (indices into `label_names` when
      given, else classes = the sorted distinct integers); "str": class names (`label_names` fixes their order, else
      sorted); "auto": "int" if every value is an integer, else "str"; a column mixing integers and text (``0``/``1``
      with ``neg``/``pos``) is refused unless ``label_type`` "str" or ``label_names`` says what the classes are.
    - `attributes`: categorical private attributes, "a,b" (attribute named like its column) or "name=column,...";
      `multilabel_attributes`: columns holding `multilabel_sep`-joined class names (CSV) or JSON lists (JSONL);
      `attribute_classes` optionally fixes an attribute's class list (values outside it are errors; without it, a
      categorical column mixing integers and text is refused, as for labels).
    - `user`: user id column (None: each row its own user); `split`: source split column (None: "all").
    - `format` csv|tsv|jsonl (default from the suffix), `delimiter` (default "," / TAB), `quoting` "minimal" (standard
      CSV quotes) or "none", `encoding` (default utf-8-sig: a byte-order mark is dropped), `header` False: columns are
      0-based field numbers.
    """
    if path is None or str(path) == "":
        raise ValueError("Dataset 'csv' needs the option path=FILE (a CSV, TSV or JSONL file).")
    hf = format == "hf"  # load_hf: a Hugging Face dataset through the same column options
    file = path if hf and isinstance(path, Path) else _resolve_path(path, data_root)
    fmt = "hf" if hf else (format or _infer_format(file)).lower()
    if fmt not in FORMATS and not hf:
        raise ValueError(f"Dataset 'csv': format must be one of {list(FORMATS)}, got {format!r}.")
    if label_type not in LABEL_TYPES:
        raise ValueError(f"Dataset 'csv': label_type must be one of {list(LABEL_TYPES)}, got {label_type!r}.")
    cat_map = _mapping(attributes, "attributes")
    multi_map = _mapping(multilabel_attributes, "multilabel_attributes")
    both = sorted(set(cat_map) & set(multi_map))
    if both:
        raise ValueError(f"Dataset 'csv': attribute(s) {both} are listed as both categorical and multilabel.")
    fixed_classes: dict[str, tuple[str, ...]] = {}
    for k, given in (attribute_classes or {}).items():
        if k not in cat_map and k not in multi_map:
            raise ValueError(
                f"Dataset 'csv': attribute_classes names {k!r}, which is not among the attributes "
                f"{sorted(cat_map) + sorted(multi_map)}."
            )
        fixed_classes[k] = tuple(given.split(",")) if isinstance(given, str) else tuple(str(c) for c in given)
    names_given = None
    if label_names is not None:
        names_given = (
            tuple(n.strip() for n in label_names.split(","))
            if isinstance(label_names, str)
            else tuple(str(n) for n in label_names)
        )
        if label is None:
            raise ValueError("Dataset 'csv': label_names given without a label column (option label=COLUMN).")
    needed = (
        [text]
        + [c for c in (text_pair, label, user, split) if c]
        + list(cat_map.values())
        + list(multi_map.values())
    )

    texts: list[str] = []
    pairs: list[str] = []
    raw_labels: list[Any] = []
    users: list[str] = []
    splits: list[str] = []
    cat_raw: dict[str, list[str]] = {a: [] for a in cat_map}
    multi_raw: dict[str, list[list[str]]] = {a: [] for a in multi_map}
    label_lines: list[int] = []
    cat_lines: list[int] = []

    def need_str(value: Any, ln: int, column: str, *, allow_empty: bool = False) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
            raise row_error(file, ln, f"column {column!r} expected a string, found {value!r}.")
        s = value if isinstance(value, str) else str(value)
        if not allow_empty and not s.strip():
            raise row_error(file, ln, f"column {column!r} expected a non-empty value, found {value!r}.")
        return s

    if hf and not split:
        split = HF_SPLIT_KEY  # each row's split as _records reads it: a DatasetDict's split name, else "all"
    for ln, get in _records(
        file, fmt, delimiter=delimiter, encoding=encoding, header=bool(header), quoting=quoting, needed=needed
    ):
        t = get(text)
        if not isinstance(t, str):
            raise row_error(file, ln, f"column {text!r} expected a text string, found {t!r}.")
        texts.append(t)
        if text_pair:
            tp = get(text_pair)
            if not isinstance(tp, str):
                raise row_error(file, ln, f"column {text_pair!r} expected a text string, found {tp!r}.")
            pairs.append(tp)
        if label:
            raw_labels.append(_parse_label_value(get(label), label_type, file, ln, label))
            label_lines.append(ln)
        if user:
            users.append(need_str(get(user), ln, user).strip())
        if split:
            splits.append(need_str(get(split), ln, split).strip())
        for a, c in cat_map.items():
            cat_raw[a].append(need_str(get(c), ln, c).strip())
        for a, c in multi_map.items():
            v = get(c)
            if isinstance(v, list):
                items = [need_str(x, ln, c).strip() for x in v]
            else:
                s = need_str(v, ln, c, allow_empty=True)
                items = [x.strip() for x in s.split(multilabel_sep) if x.strip()] if s.strip() else []
            multi_raw[a].append(items)
        cat_lines.append(ln)

    n = len(texts)
    labels_arr = None
    final_names: tuple[str, ...] = ()
    if label:
        kind = label_type
        if kind == "auto":
            kind = "int" if all(_is_int(v) for v in raw_labels) else "str"
            if kind == "str" and names_given is None:
                _refuse_mixed(file, f"column {label!r}", raw_labels, 'label_type="str" if all of them are class names')
        if kind == "int":
            ints = [int(v.strip()) if isinstance(v, str) else int(v) for v in raw_labels]
            if names_given is not None:
                for v, ln in zip(ints, label_lines):
                    if not 0 <= v < len(names_given):
                        raise row_error(
                            file,
                            ln,
                            f"column {label!r} expected a label index in [0, {len(names_given) - 1}] "
                            f"(label_names {list(names_given)}), found {v}.",
                        )
                labels_arr, final_names = np.asarray(ints, dtype=np.int64), names_given
            else:
                distinct = sorted(set(ints))
                pos = {v: i for i, v in enumerate(distinct)}
                labels_arr = np.asarray([pos[v] for v in ints], dtype=np.int64)
                final_names = tuple(str(v) for v in distinct)
        else:
            strs = [str(v) for v in raw_labels]
            classes = names_given if names_given is not None else tuple(sorted(set(strs), key=_sort_key_str))
            pos_s = {v: i for i, v in enumerate(classes)}
            codes = []
            for v, ln in zip(strs, label_lines):
                if v not in pos_s:
                    raise row_error(
                        file,
                        ln,
                        f"column {label!r} expected one of the label names {list(classes)}, found {v!r}.",
                    )
                codes.append(pos_s[v])
            labels_arr, final_names = np.asarray(codes, dtype=np.int64), tuple(classes)
        if len(final_names) < 2:
            raise ValueError(
                f"{file}: the label column {label!r} has {len(final_names)} class(es) {list(final_names)}; a task label "
                "needs at least 2 (omit label= for a dataset without a task label)."
            )
    attrs: list[tuple[AttributeSpec, np.ndarray]] = []
    for a, c in cat_map.items():
        vals = cat_raw[a]
        if a not in fixed_classes:
            _refuse_mixed(file, f"column {c!r} (attribute {a!r})", vals,
                          "attribute_classes (its class list) if all of them are distinct classes")
        classes = fixed_classes.get(a) or tuple(sorted(set(vals), key=_sort_key_str))
        pos_a = {v: i for i, v in enumerate(classes)}
        codes = []
        for v, ln in zip(vals, cat_lines):
            if v not in pos_a:
                raise row_error(
                    file, ln, f"column {c!r} (attribute {a!r}) expected one of {list(classes)}, found {v!r}."
                )
            codes.append(pos_a[v])
        if len(classes) < 2:
            raise ValueError(
                f"{file}: attribute {a!r} (column {c!r}) has a single class {list(classes)}; need at least 2."
            )
        attrs.append((AttributeSpec(a, "categorical", classes), np.asarray(codes, dtype=np.int64)))
    for a, c in multi_map.items():
        rows = multi_raw[a]
        classes = fixed_classes.get(a) or tuple(sorted({x for r in rows for x in r}, key=_sort_key_str))
        if not classes:
            raise ValueError(f"{file}: multilabel attribute {a!r} (column {c!r}) names no class in any row.")
        pos_m = {v: i for i, v in enumerate(classes)}
        mat = np.zeros((n, len(classes)), dtype=np.int8)
        for i, (r, ln) in enumerate(zip(rows, cat_lines)):
            for x in r:
                if x not in pos_m:
                    raise row_error(
                        file,
                        ln,
                        f"column {c!r} (attribute {a!r}) expected classes from {list(classes)}, found {x!r}.",
                    )
                mat[i, pos_m[x]] = 1
        attrs.append((AttributeSpec(a, "multilabel", classes), mat))
    ds_name = name or (f"hf:{file.name}" if hf else f"csv:{file.name}")
    return make_text_dataset(
        ds_name,
        texts=texts,
        text_pairs=pairs if text_pair else None,
        labels=labels_arr,
        label_names=final_names,
        attributes=attrs,
        user_ids=users if user else None,
        splits=splits if split else "all",
    )


def load_hf(
    *,
    path: str | os.PathLike[str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    text: str = "text",
    text_pair: str | None = None,
    label: str | None = None,
    label_type: str = "auto",
    label_names: str | Sequence[str] | None = None,
    attributes: str | Sequence[str] | Mapping[str, str] | None = None,
    multilabel_attributes: str | Sequence[str] | Mapping[str, str] | None = None,
    attribute_classes: Mapping[str, Sequence[str] | str] | None = None,
    multilabel_sep: str = "|",
    user: str | None = None,
    split: str | None = None,
    name: str | None = None,
) -> TextDataset:
    """Load a Hugging Face dataset with the column options of `load_csv`: ``path`` is a `save_to_disk` folder
    (Dataset or DatasetDict; a DatasetDict's split names become the records' source splits unless ``split``
    names a column), a Parquet or Arrow file, or a folder of them; a hub id ("owner/name") is tried only when no
    such local path exists (online users; datasets' own cache and HF_HUB_OFFLINE apply)."""
    if path is None or str(path) == "":
        raise ValueError("Dataset 'hf' needs the option path=FOLDER_OR_FILE (a save_to_disk folder, or Parquet or "
                         "Arrow file(s)).")
    try:
        local = _resolve_path(path, data_root, folder=True, what="hf")
    except DataNotFoundError:
        if "/" not in str(path) or Path(str(path)).expanduser().is_absolute() or os.environ.get("HF_HUB_OFFLINE"):
            raise
        local = _hub_snapshot(str(path))
    return load_csv(path=local, text=text, text_pair=text_pair, label=label, label_type=label_type,
                    label_names=label_names, attributes=attributes, multilabel_attributes=multilabel_attributes,
                    attribute_classes=attribute_classes, multilabel_sep=multilabel_sep, user=user, split=split,
                    format="hf", name=name or f"hf:{path}")


def _hub_snapshot(repo_id: str) -> Path:  # pragma: no cover - needs the network
    """Download a hub dataset once and save it to disk in the datasets cache; return that folder."""
    import datasets

    target = Path(datasets.config.HF_DATASETS_CACHE) / "fl_privtext" / repo_id.replace("/", "__")
    if not target.is_dir():
        datasets.load_dataset(repo_id).save_to_disk(str(target))
    return target


def _sort_key_str(v: str) -> tuple[Any, ...]:
    # Integers numerically ("2" < "10"), then strings; the raw string breaks ties ("01" vs "1") deterministically.
    return (*(sort_key(int(v)) if _is_int(v) else sort_key(v)), v)
