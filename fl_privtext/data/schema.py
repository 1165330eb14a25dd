"""The one record schema shared by every dataset: `TextDataset` over an Arrow table (`datasets.Dataset`).

Table columns (contract in docs/design.md):

- `user_id` (string): who wrote the row; every row of a user shares a role and a virtual client.
- `text` (string), and `text_pair` (string) only for pair datasets (paraphrase).
- `label` (int64): task class index in `[0, len(label_names))`, or -1 when the dataset has no task label.
- `split` (string): the source's split (`train` / `dev` / `test`) or `all`.
- `z_<name>` per private attribute: int64 class index (categorical) or a fixed-length list of int8 0/1 (multilabel).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, overload

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fl_privtext.memory import drop_dataset_pages, narrowest, on_disk, release_arrow_memory

__all__ = [
    "ATTRIBUTE_PREFIX",
    "SCHEMA_VERSION",
    "AttributeSpec",
    "StringColumn",
    "TextDataset",
    "encode_categorical",
    "from_hf",
    "make_text_dataset",
]

ATTRIBUTE_PREFIX = "z_"
# Bumped whenever the meaning of a column or the fingerprint recipe changes (invalidates embedding caches).
SCHEMA_VERSION = "fl_privtext.data/1"
_KINDS = ("categorical", "multilabel")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BASE_COLUMNS = ("user_id", "text", "text_pair", "label", "split")


@dataclass(frozen=True)
class AttributeSpec:
    """A private attribute z: `categorical` (one class per row) or `multilabel` (a 0/1 vector over `classes`)."""

    name: str
    kind: Literal["categorical", "multilabel"]
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"Attribute name {self.name!r} is not valid: use letters, digits and underscores, "
                "starting with a letter or underscore."
            )
        if self.kind not in _KINDS:
            raise ValueError(
                f"Attribute {self.name!r} has kind {self.kind!r}; valid kinds are {list(_KINDS)}."
            )
        classes = tuple(str(c) for c in self.classes)
        object.__setattr__(self, "classes", classes)
        if len(classes) < 1 or (self.kind == "categorical" and len(classes) < 2):
            raise ValueError(
                f"Attribute {self.name!r} needs at least {2 if self.kind == 'categorical' else 1} classes, "
                f"got {list(classes)}."
            )
        if len(set(classes)) != len(classes):
            raise ValueError(f"Attribute {self.name!r} has duplicate class names: {list(classes)}.")

    @property
    def column(self) -> str:
        """Table column holding this attribute (`z_<name>`)."""
        return ATTRIBUTE_PREFIX + self.name

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "classes": list(self.classes)}


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _string_column(table: pa.Table, name: str) -> list[str]:
    return table.column(name).to_pylist()


def _hash_strings(h: Any, column: pa.ChunkedArray, drop: Callable[[], object] = lambda: None) -> None:
    """Length-prefixed UTF-8 (all byte lengths as little-endian int64, then all bytes) so that ["ab", "c"] and
    ["a", "bc"] differ. Read straight from the Arrow buffers (offsets and UTF-8 data): no Python string per row.
    ``drop`` is called after every `HASH_SLICE` bytes read: a memory-mapped column's pages are given back as the
    hash goes (`fl_privtext.memory.drop_dataset_pages`) instead of the whole file being resident at its end (the
    synthetic file at 3M users: +2.4 GB in the driver, issue #38)."""
    parts = []
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        kind = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=kind)[chunk.offset : chunk.offset + len(chunk) + 1]
        for a in range(0, len(chunk), WIDEN_ROWS):  # the lengths as int64, a slice at a time (the same bytes)
            h.update(np.diff(offsets[a : a + WIDEN_ROWS + 1]).astype("<i8").tobytes())
        parts.append((chunk.buffers()[2], int(offsets[0]), int(offsets[-1])))
    drop()
    for data, start, stop in parts:
        for a in range(start, stop, HASH_SLICE):
            h.update(memoryview(data)[a : min(stop, a + HASH_SLICE)])
            drop()


HASH_SLICE = 64 * 1024 * 1024  # bytes of a column hashed between two page drops
WIDEN_ROWS = 1 << 20  # rows of an integer column widened (or narrowed) at once: 8 MiB as int64


def _hash_int64(h: Any, values: np.ndarray) -> None:
    """``h.update(np.ascontiguousarray(values, "<i8").data)`` (the same digest: sha256 of a concatenation is that
    of its parts in order), widened `WIDEN_ROWS` rows at a time: the fingerprint widened each held column whole,
    8 bytes a record at once (29 bytes a synthetic user, issue #38)."""
    for a in range(0, len(values), WIDEN_ROWS):
        h.update(np.ascontiguousarray(values[a : a + WIDEN_ROWS], "<i8").data)


def _narrowest_column(column: pa.ChunkedArray) -> np.ndarray:
    """``narrowest(column.to_numpy())`` (the same values and type, `fl_privtext.memory.narrowest`) without the
    numpy copy of the whole column: the range is read in Arrow, then the column is narrowed `WIDEN_ROWS` rows at
    a time into the result (an int64 column was copied whole first: 8 bytes a record, the largest temporary of a
    10M-user dataset's load, issue #38). A column that is not of signed integers, is empty or holds nulls takes the plain
    path."""
    if not len(column) or column.null_count or not pa.types.is_signed_integer(column.type):
        return narrowest(column.to_numpy())
    bounds = pc.min_max(column)
    dtype = narrowest(np.array([bounds["min"].as_py(), bounds["max"].as_py()], np.int64)).dtype
    out = np.empty(len(column), dtype)
    start = 0
    for chunk in column.chunks:
        values = chunk.to_numpy()
        for a in range(0, len(values), WIDEN_ROWS):
            part = values[a : a + WIDEN_ROWS]
            out[start : start + len(part)] = part
            start += len(part)
    return out


class StringColumn(Sequence[str]):
    """A read-only view of an Arrow string column as a sequence of str, decoded only where indexed or sliced
    (`TextDataset.text_column`): a client or an attack that reads some rows never builds every row's Python
    string, and an extraction reads the texts chunk by chunk."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            return self._column.slice(start, max(0, stop - start)).to_pylist()
        j = int(i)
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        return self._column[j].as_py()


@dataclass(frozen=True, eq=False)
class TextDataset:
    """A dataset in the shared schema. Build with `make_text_dataset` / `from_hf` or a loader (`load_dataset`).

    `fingerprint` is the sha256 (hex) of the content (every column, the label names and the attribute specs, not
    `name`); it is computed when left empty and keys the on-disk embedding cache.
    """

    name: str
    table: datasets.Dataset
    label_names: tuple[str, ...]
    attributes: tuple[AttributeSpec, ...]
    fingerprint: str = field(default="")

    # ---------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"TextDataset name must be a non-empty string, got {self.name!r}.")
        if not isinstance(self.table, datasets.Dataset):
            raise TypeError(f"TextDataset.table must be a datasets.Dataset, got {type(self.table).__name__}.")
        object.__setattr__(self, "label_names", tuple(str(n) for n in self.label_names))
        object.__setattr__(self, "attributes", tuple(self.attributes))
        if len(set(self.label_names)) != len(self.label_names):
            raise ValueError(f"Dataset {self.name!r} has duplicate label names: {list(self.label_names)}.")
        if len(self.label_names) == 1:
            raise ValueError(
                f"Dataset {self.name!r} has a single label name {list(self.label_names)}; a task label needs at "
                "least 2 classes (or none: empty label_names and label -1)."
            )
        for spec in self.attributes:
            if not isinstance(spec, AttributeSpec):
                raise TypeError(f"Dataset {self.name!r}: attributes must be AttributeSpec, got {spec!r}.")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"Dataset {self.name!r} has duplicate attribute names: {names}.")

        table = self.table
        if table._indices is not None:  # a select()/shuffle() view: materialise so columns are in row order
            table = datasets.Dataset(table.with_format("arrow")[:])
            object.__setattr__(self, "table", table)
        pt = self._pa
        cols = set(pt.column_names)
        required = ["user_id", "text", "label", "split"] + [a.column for a in self.attributes]
        missing = [c for c in required if c not in cols]
        if missing:
            raise ValueError(
                f"Dataset {self.name!r} lacks the column(s) {missing}; the schema needs {required} "
                f"(found {sorted(cols)})."
            )
        undeclared = sorted(c for c in cols if c.startswith(ATTRIBUTE_PREFIX) and c[2:] not in names)
        if undeclared:
            raise ValueError(
                f"Dataset {self.name!r} has attribute column(s) {undeclared} without an AttributeSpec "
                f"(declared: {names})."
            )
        for c in ("user_id", "text", "split") + (("text_pair",) if "text_pair" in cols else ()):
            if not pa.types.is_string(pt.schema.field(c).type) and not pa.types.is_large_string(
                pt.schema.field(c).type
            ):
                raise ValueError(
                    f"Dataset {self.name!r}: column {c!r} must hold strings, has {pt.schema.field(c).type}."
                )
        for c in pt.column_names:
            n_null = pt.column(c).null_count
            if n_null:
                raise ValueError(f"Dataset {self.name!r}: column {c!r} has {n_null} missing (null) values.")
        if pt.schema.field("label").type != pa.int64():
            raise ValueError(
                f"Dataset {self.name!r}: column 'label' must be int64, has {pt.schema.field('label').type}."
            )
        labels = self.label_codes
        k = len(self.label_names)
        if len(labels):
            lo, hi = int(labels.min()), int(labels.max())
            if k == 0 and (lo != -1 or hi != -1):
                raise ValueError(
                    f"Dataset {self.name!r} has no label names, so every label must be -1; found values in [{lo}, {hi}]."
                )
            if k and (lo < -1 or hi >= k):
                raise ValueError(
                    f"Dataset {self.name!r}: labels must be in [-1, {k - 1}] for label names {list(self.label_names)}; "
                    f"found values in [{lo}, {hi}]."
                )
        for spec in self.attributes:
            values = self.attribute_codes(spec.name)  # as held (the int64 widening: 8 bytes a record)
            if spec.kind == "categorical":
                if len(values) and (values.min() < 0 or values.max() >= spec.num_classes):
                    raise ValueError(
                        f"Dataset {self.name!r}: attribute {spec.name!r} must hold class indices in "
                        f"[0, {spec.num_classes - 1}] for classes {list(spec.classes)}; found [{values.min()}, {values.max()}]."
                    )
            elif len(values) and not np.isin(values, (0, 1)).all():
                raise ValueError(
                    f"Dataset {self.name!r}: multilabel attribute {spec.name!r} must hold 0/1 values only."
                )
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", self._compute_fingerprint())
        elif not re.fullmatch(r"[0-9a-f]{64}", self.fingerprint):
            raise ValueError(f"Dataset {self.name!r}: fingerprint must be 64 lowercase hex digits (sha256).")

    def __getstate__(self) -> dict[str, Any]:
        # Pickle (e.g. to Ray actors) only the fields, the table as plain Arrow (a pickled datasets.Dataset is twice
        # the size); cached column views are rebuilt on demand.
        state = {f: self.__dict__[f] for f in ("name", "label_names", "attributes", "fingerprint")}
        state["table"] = self._pa
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        state["table"] = datasets.Dataset(state["table"])
        self.__dict__.update(state)

    # ---------------------------------------------------------------- columns
    @cached_property
    def _pa(self) -> pa.Table:
        return self.table.data.table

    def __len__(self) -> int:
        return self._pa.num_rows

    def __repr__(self) -> str:
        attrs = ", ".join(f"{a.name}:{a.kind}[{a.num_classes}]" for a in self.attributes)
        return (
            f"TextDataset(name={self.name!r}, rows={len(self)}, users={self.num_users}, "
            f"labels={list(self.label_names)}, attributes=[{attrs}], pairs={self.has_pairs}, "
            f"fingerprint={self.fingerprint[:12]})"
        )

    @cached_property
    def _texts(self) -> tuple[str, ...]:
        return tuple(_string_column(self._pa, "text"))

    @property
    def texts(self) -> list[str]:
        """The texts, in row order (a fresh list)."""
        return list(self._texts)

    @cached_property
    def _text_pairs(self) -> tuple[str, ...] | None:
        return tuple(_string_column(self._pa, "text_pair")) if self.has_pairs else None

    @property
    def text_pairs(self) -> list[str] | None:
        """Second texts of pair datasets (e.g. MRPC), in row order; None for single-text datasets."""
        return None if self._text_pairs is None else list(self._text_pairs)

    @property
    def text_column(self) -> StringColumn:
        """The texts as a lazy sequence (strings decoded only for the rows read; see `StringColumn`)."""
        return StringColumn(self._pa.column("text"))

    @property
    def text_pair_column(self) -> StringColumn | None:
        """The second texts as a lazy sequence, None for single-text datasets."""
        return StringColumn(self._pa.column("text_pair")) if self.has_pairs else None

    @property
    def has_pairs(self) -> bool:
        return "text_pair" in self._pa.column_names

    @cached_property
    def label_codes(self) -> np.ndarray:
        """(N,) the task labels as held: their narrowest integer type (`fl_privtext.memory.narrowest`: one byte a
        record for fewer than 128 classes), read-only. The int64 column was held through a run by the driver (8
        bytes a record: 0.29 GB at 10M synthetic users, issue #38); readers that index or compare take these, and
        `labels` widens. On disk beside a file-backed dataset (`hold`)."""
        return self.hold(_narrowest_column(self._pa.column("label")))

    @property
    def labels(self) -> np.ndarray:
        """(N,) int64 task labels, -1 where absent (read-only): a fresh widening of `label_codes` on each call,
        the same values."""
        return _read_only(self.label_codes.astype(np.int64))

    @property
    def has_labels(self) -> bool:
        return len(self.label_names) > 0

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @cached_property
    def user_ids(self) -> np.ndarray:
        """(N,) str user ids (read-only)."""
        return _read_only(np.asarray(_string_column(self._pa, "user_id"), dtype=str))

    @cached_property
    def user_index(self) -> np.ndarray:
        """(N,) int32 position of each row's user among the sorted distinct user ids (read-only): the same values
        as ``np.unique(user_ids, return_inverse=True)[1]``, computed once, in Arrow: the distinct ids are sorted
        (UTF-8 byte order is code-point order, numpy's order for str) and each row looked up among them, so no
        Python string is made per row (``user_ids`` through a Python list peaked at ~90 bytes a row: +1 GB in the
        driver at 3M synthetic users, issue #38). int32 as Arrow's lookup gives it: held by the driver through a run
        (int64 was 8 bytes a record, 0.29 GB at 10M synthetic users, issue #38); readers that do arithmetic widen
        what they take (`fl_privtext.client.ClientData.users_of`, its digest). On disk beside a file-backed dataset
        (`hold`)."""
        col = self._pa.column("user_id")
        if col.null_count:  # not a valid dataset (the builders reject missing ids); numpy's answer, whatever it is
            return _read_only(np.unique(self.user_ids, return_inverse=True)[1].reshape(-1).astype(np.int32))
        out = np.empty(len(col), np.int32)
        start = 0
        for chunk in pc.index_in(col, value_set=self._sorted_user_ids()).chunks:
            out[start : start + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
            start += len(chunk)
        release_arrow_memory()  # the lookup's distinct ids, hash table and sort: freed, but kept by Arrow's pool
        drop_dataset_pages(self)  # the id column's pages of a mapped file (read again from the page cache if asked)
        return self.hold(out)

    def user_ids_at(self, rows: np.ndarray) -> np.ndarray:
        """``user_ids[rows]`` (str, read-only) from the Arrow column's ``rows`` only: `user_ids` turns every row's id
        into a Python string, then a '<U' array it keeps (~90 bytes a record at the peak, ~36 held: 1.3 GB at 10M
        synthetic users after the report named a few users, issue #38)."""
        idx = pa.array(np.asarray(rows, np.int64).reshape(-1), type=pa.int64())
        return _read_only(np.asarray(self._pa.column("user_id").take(idx).to_pylist(), dtype=str))

    def _sorted_user_ids(self) -> pa.Array:
        uniq = pc.unique(self._pa.column("user_id"))
        return uniq.take(pc.array_sort_indices(uniq))

    def user_names(self) -> np.ndarray:
        """(num_users,) str: the distinct user ids, sorted (``user_index`` points into it)."""
        col = self._pa.column("user_id")
        if col.null_count:
            return np.unique(self.user_ids)
        return np.asarray(self._sorted_user_ids().to_pylist(), dtype=str)

    @cached_property
    def num_users(self) -> int:
        """The number of distinct users (read once: each read of ``user_index`` whole faults in its pages)."""
        return int(self.user_index.max()) + 1 if len(self) else 0

    @cached_property
    def source_split(self) -> np.ndarray:
        """(N,) str split of the source (train/dev/test) or "all" (read-only)."""
        return _read_only(np.asarray(_string_column(self._pa, "split"), dtype=str))

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def attribute_spec(self, name: str) -> AttributeSpec:
        for spec in self.attributes:
            if spec.name == name:
                return spec
        raise ValueError(
            f"Dataset {self.name!r} has no private attribute {name!r}; its attributes are {list(self.attribute_names)}."
        )

    def attribute(self, name: str) -> np.ndarray:
        """Values of a private attribute: (N,) int64 class indices, or (N, K) int8 0/1 for multilabel (read-only).
        Held (once read) in the narrowest integer type and widened on each call: 16 bytes a record for two
        categorical attributes held through a run were ~0.6 GB at 10M synthetic users (issue #38)."""
        held = self.attribute_codes(name)
        return held if held.ndim == 2 or held.dtype == np.int64 else _read_only(held.astype(np.int64))

    def attribute_codes(self, name: str) -> np.ndarray:
        """`attribute`'s values as held (read-only, no copy): categorical class indices in their narrowest integer
        type (`fl_privtext.memory.narrowest`), multilabel (N, K) int8. Readers that index rows out of it take
        these: `attribute` widens every record (8 bytes a record each call: 0.29 GB at 10M synthetic users,
        issue #38), the same values."""
        cache: dict[str, np.ndarray] = self.__dict__.setdefault("_attr_cache", {})
        if name not in cache:
            spec = self.attribute_spec(name)
            col = self._pa.column(spec.column)
            if spec.kind == "categorical":
                values = _narrowest_column(col)
            else:
                arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
                if isinstance(arr, pa.ChunkedArray):  # zero chunks (empty table)
                    values = np.zeros((0, spec.num_classes), dtype=np.int8)
                else:
                    lengths = (
                        np.asarray(arr.value_lengths()) if not pa.types.is_fixed_size_list(arr.type) else None
                    )
                    if lengths is not None and len(lengths) and not (lengths == spec.num_classes).all():
                        raise ValueError(
                            f"Dataset {self.name!r}: multilabel attribute {name!r} needs {spec.num_classes} values "
                            "per row."
                        )
                    flat = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int8)
                    if len(flat) != len(arr) * spec.num_classes:
                        raise ValueError(
                            f"Dataset {self.name!r}: multilabel attribute {name!r} needs {spec.num_classes} values "
                            "per row."
                        )
                    values = flat.reshape(len(arr), spec.num_classes)
            cache[name] = self.hold(values)
        return cache[name]

    def hold(self, column: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """A column derived from this dataset (or the concatenation of its parts) as the run holds it, read-only: a
        file-backed dataset's on disk beside its file (`fl_privtext.memory.on_disk`; in memory where that folder
        cannot be written), an in-memory dataset's in memory. The driver held its users, labels, attributes, roles
        and shards in memory from the split to the report (44 bytes a synthetic user at 300k users, issue #38),
        though each stage reads them in passes; `fl_privtext.memory.drop_dataset_pages` drops this process's pages
        of every column held here, as of the dataset's file."""
        parts = [column] if isinstance(column, np.ndarray) else list(column)
        files = [f["filename"] for f in (self.table.cache_files or ()) if f.get("filename")]
        if files and sum(p.nbytes for p in parts):
            try:
                held = on_disk(parts, os.path.dirname(files[0]))
            except OSError:  # a read-only folder: the column stays in memory
                pass
            else:
                self.__dict__.setdefault("_held", []).append(weakref.ref(held))
                return held
        return _read_only(parts[0] if len(parts) == 1 else np.concatenate(parts))

    def held_columns(self) -> list[np.ndarray]:
        """The columns `hold` put on disk that are still in use."""
        return [a for a in (r() for r in self.__dict__.get("_held", ())) if a is not None]

    # ---------------------------------------------------------------- derived datasets
    def select(self, rows: Iterable[int] | np.ndarray, *, name: str | None = None) -> TextDataset:
        """A new dataset with the given rows (in the given order); fingerprint recomputed."""
        idx = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows)
        if idx.dtype == bool:
            if idx.shape != (len(self),):
                raise ValueError(f"A boolean row mask must have shape ({len(self)},), got {idx.shape}.")
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise ValueError(f"Row indices must be in [0, {len(self) - 1}] for dataset {self.name!r}.")
        sub = self._pa.take(pa.array(idx, type=pa.int64()))
        return TextDataset(
            name=name or self.name,
            table=datasets.Dataset(sub),
            label_names=self.label_names,
            attributes=self.attributes,
        )

    def summary(self) -> dict[str, Any]:
        """Counts for reports and docs: rows, users, per split, label and attribute class counts."""
        out: dict[str, Any] = {
            "name": self.name,
            "rows": len(self),
            "users": self.num_users,
            "fingerprint": self.fingerprint,
            "splits": {str(k): int(v) for k, v in zip(*np.unique(self.source_split, return_counts=True))},
        }
        if self.has_labels:
            counts = np.bincount(self.labels[self.labels >= 0], minlength=self.num_classes)
            out["labels"] = {n: int(c) for n, c in zip(self.label_names, counts)}
            out["unlabelled"] = int((self.labels < 0).sum())
        for spec in self.attributes:
            v = self.attribute(spec.name)
            counts = (
                np.bincount(v, minlength=spec.num_classes) if spec.kind == "categorical" else v.sum(axis=0)
            )
            out[f"attribute:{spec.name}"] = {n: int(c) for n, c in zip(spec.classes, counts)}
        return out

    # ---------------------------------------------------------------- fingerprint
    def _compute_fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(SCHEMA_VERSION.encode())
        meta = repr((self.label_names, [a.to_json() for a in self.attributes], self.has_pairs, len(self)))
        h.update(meta.encode("utf-8"))
        for col in ("user_id", "text", "text_pair", "split"):
            if col in self._pa.column_names:
                h.update(b"\x00" + col.encode())
                _hash_strings(h, self._pa.column(col), lambda: drop_dataset_pages(self))
        h.update(b"\x00label")
        _hash_int64(h, self.label_codes)  # the int64 column's bytes
        for spec in self.attributes:
            h.update(b"\x00" + spec.column.encode())
            _hash_int64(h, self.attribute_codes(spec.name))
        drop_dataset_pages(self)
        return h.hexdigest()


# -------------------------------------------------------------------- builders
def _as_str_list(values: Sequence[Any] | np.ndarray, what: str, n: int | None = None) -> list[str]:
    out = [v if isinstance(v, str) else None for v in values]
    bad = [i for i, v in enumerate(out) if v is None]
    if bad:
        raise ValueError(
            f"{what} must be strings; row {bad[0]} holds {values[bad[0]]!r} ({len(bad)} such rows)."
        )
    if n is not None and len(out) != n:
        raise ValueError(f"{what} has {len(out)} values, expected {n} (one per text).")
    return out  # type: ignore[return-value]


def make_text_dataset(
    name: str,
    *,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray | None = None,
    label_names: Sequence[str] = (),
    attributes: Sequence[tuple[AttributeSpec, Sequence[Any] | np.ndarray]] = (),
    user_ids: Sequence[str] | np.ndarray | None = None,
    splits: Sequence[str] | np.ndarray | str = "all",
    text_pairs: Sequence[str] | None = None,
) -> TextDataset:
    """Build a `TextDataset` from encoded columns.

    `labels` are class indices into `label_names` (or None: no task label, all -1). `attributes` pairs each spec with
    its values: (N,) class indices (categorical) or (N, K) 0/1 (multilabel). `user_ids` None makes each row its own
    user (`<name>-<row>`). `splits` is one string for all rows or one per row.
    """
    text_list = _as_str_list(texts, "texts")
    n = len(text_list)
    columns: dict[str, pa.Array] = {}
    if user_ids is None:
        users = [f"{name}-{i}" for i in range(n)]
    else:
        users = _as_str_list(list(user_ids), "user_ids", n)
    columns["user_id"] = pa.array(users, type=pa.string())
    columns["text"] = pa.array(text_list, type=pa.string())
    if text_pairs is not None:
        columns["text_pair"] = pa.array(_as_str_list(text_pairs, "text_pairs", n), type=pa.string())
    if labels is None:
        if label_names:
            raise ValueError(f"Dataset {name!r}: label_names {list(label_names)} given without labels.")
        lab = np.full(n, -1, dtype=np.int64)
    else:
        lab = np.asarray(labels)
        if lab.shape != (n,) or not np.issubdtype(lab.dtype, np.integer):
            raise ValueError(
                f"Dataset {name!r}: labels must be {n} integers, got shape {lab.shape} dtype {lab.dtype}."
            )
    columns["label"] = pa.array(lab.astype(np.int64), type=pa.int64())
    split_list = [splits] * n if isinstance(splits, str) else _as_str_list(list(splits), "splits", n)
    columns["split"] = pa.array(split_list, type=pa.string())
    specs: list[AttributeSpec] = []
    for spec, values in attributes:
        arr = np.asarray(values)
        if spec.kind == "categorical":
            if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(
                    f"Dataset {name!r}: attribute {spec.name!r} must be {n} class indices, got shape {arr.shape} "
                    f"dtype {arr.dtype}."
                )
            columns[spec.column] = pa.array(arr.astype(np.int64), type=pa.int64())
        else:
            k = spec.num_classes
            if arr.shape != (n, k):
                raise ValueError(
                    f"Dataset {name!r}: multilabel attribute {spec.name!r} must have shape ({n}, {k}), got {arr.shape}."
                )
            flat = pa.array(arr.astype(np.int8).reshape(-1), type=pa.int8())
            columns[spec.column] = pa.FixedSizeListArray.from_arrays(flat, k)
        specs.append(spec)
    table = pa.table(columns)
    return TextDataset(
        name=name, table=datasets.Dataset(table), label_names=tuple(label_names), attributes=tuple(specs)
    )


def sort_key(v: Any) -> tuple[int, Any]:
    """Order for attribute values of mixed types (bools, then numbers, then strings): classes get stable ids."""
    if isinstance(v, bool):
        return (0, int(v))
    if isinstance(v, (int, np.integer)):
        return (0, int(v))
    if isinstance(v, (float, np.floating)):
        return (0, float(v))
    return (1, str(v))


def encode_categorical(
    values: Sequence[Any] | np.ndarray, classes: Sequence[Any] | None = None, *, what: str = "values"
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Map raw values to class indices. `classes` None: the sorted distinct values (numbers numerically).

    Returns (codes int64 (N,), class names as strings). A value outside `classes` raises ValueError.
    """
    vals = list(values)
    for i, v in enumerate(vals):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            raise ValueError(f"{what}: row {i} is missing (None/NaN).")
    if classes is None:
        distinct = sorted(set(vals), key=sort_key)
    else:
        distinct = list(classes)
    names = tuple(str(c) for c in distinct)
    index = {str(c): i for i, c in enumerate(distinct)}
    codes = np.empty(len(vals), dtype=np.int64)
    for i, v in enumerate(vals):
        j = index.get(str(v))
        if j is None:
            raise ValueError(f"{what}: row {i} holds {v!r}, which is not one of the classes {list(names)}.")
        codes[i] = j
    return codes, names


def _column_values(hf: datasets.Dataset, column: str) -> list[Any]:
    if column not in hf.column_names:
        raise ValueError(
            f"The Hugging Face dataset has no column {column!r}; its columns are {hf.column_names}."
        )
    return hf.data.table.column(column).to_pylist() if hf._indices is None else hf[column]


def _class_label_names(hf: datasets.Dataset, column: str) -> tuple[str, ...] | None:
    feat = hf.features.get(column)
    if isinstance(feat, datasets.ClassLabel):
        return tuple(feat.names)
    inner = getattr(feat, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        return tuple(inner.names)
    return None


def from_hf(
    dataset: datasets.Dataset | datasets.DatasetDict,
    *,
    text: str,
    label: str | None = None,
    attributes: Sequence[str] | Mapping[str, str] = (),
    user: str | None = None,
    text_pair: str | None = None,
    split: str | None = None,
    label_names: Sequence[str] | None = None,
    multilabel: Sequence[str] = (),
    name: str = "hf",
) -> TextDataset:
    """Map a Hugging Face `datasets.Dataset` (or a `DatasetDict`, one split column per key) to the schema.

    `attributes`: column names (attribute named like the column) or a mapping attribute name -> column. Columns
    listed in `multilabel` (by attribute name) hold lists of classes per row. ClassLabel features keep their names;
    other columns get the sorted distinct values as classes. `label_names` given: the label column holds indices
    into it (ints) or its names (strings). No hub access happens here: load the dataset yourself.
    """
    if isinstance(dataset, datasets.DatasetDict):
        parts = []
        for key, part in dataset.items():
            if split is not None:
                raise ValueError(
                    "Pass either a DatasetDict (splits from its keys) or split=COLUMN, not both."
                )
            parts.append(part.add_column("__split__", [str(key)] * len(part)))
        dataset = datasets.concatenate_datasets(parts)
        split = "__split__"
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"from_hf expects a datasets.Dataset or DatasetDict, got {type(dataset).__name__}.")
    texts = _column_values(dataset, text)
    n = len(texts)
    pairs = _column_values(dataset, text_pair) if text_pair else None
    users = None if user is None else [str(u) for u in _column_values(dataset, user)]
    splits: list[str] | str = "all" if split is None else [str(s) for s in _column_values(dataset, split)]
    labels = None
    names: tuple[str, ...] = ()
    if label is not None:
        raw = _column_values(dataset, label)
        given = tuple(label_names) if label_names is not None else _class_label_names(dataset, label)
        if given is not None and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in raw
        ):
            labels = np.asarray(raw, dtype=np.int64)
            names = tuple(given)
            if n and (labels.min() < -1 or labels.max() >= len(names)):
                raise ValueError(
                    f"Label column {label!r} holds values outside [-1, {len(names) - 1}] for names {list(names)}."
                )
        elif (
            given is None
            and raw
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in raw)
        ):
            # integer labels without names: classes = the distinct values >= 0; -1 (HF's "unlabelled") stays -1
            ints = np.asarray(raw, dtype=np.int64)
            present = np.unique(ints[ints >= 0])
            labels = np.where(ints >= 0, np.searchsorted(present, ints), -1).astype(np.int64)
            names = tuple(str(v) for v in present.tolist())
        else:
            labels, names = encode_categorical(raw, given, what=f"label column {label!r}")
    attr_map = dict(attributes) if isinstance(attributes, Mapping) else {a: a for a in attributes}
    unknown_multi = [m for m in multilabel if m not in attr_map]
    if unknown_multi:
        raise ValueError(f"multilabel names {unknown_multi} are not among the attributes {list(attr_map)}.")
    attrs: list[tuple[AttributeSpec, np.ndarray]] = []
    for attr_name, column in attr_map.items():
        raw = _column_values(dataset, column)
        given = _class_label_names(dataset, column)
        if attr_name in multilabel:
            if given is None:
                distinct = sorted({v for row in raw for v in (row or [])}, key=sort_key)
                classes = tuple(str(v) for v in distinct)
                index = {str(v): j for j, v in enumerate(distinct)}
            else:
                classes = given
                index = {**{str(j): j for j in range(len(given))}, **{c: j for j, c in enumerate(given)}}
            mat = np.zeros((n, len(classes)), dtype=np.int8)
            for i, row in enumerate(raw):
                for v in row or []:
                    mat[i, index[str(v)]] = 1
            attrs.append((AttributeSpec(attr_name, "multilabel", classes), mat))
        else:
            if given is not None and all(isinstance(v, (int, np.integer)) for v in raw):
                codes, classes = np.asarray(raw, dtype=np.int64), given
            else:
                codes, classes = encode_categorical(raw, given, what=f"attribute column {column!r}")
            attrs.append((AttributeSpec(attr_name, "categorical", classes), codes))
    return make_text_dataset(
        name,
        texts=texts,
        labels=labels,
        label_names=names,
        attributes=attrs,
        user_ids=users,
        splits=splits,
        text_pairs=pairs,
    )
