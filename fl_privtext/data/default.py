"""The embedded `default` dataset: SYNTHETIC product reviews shipped inside the package (no data root needed).

2,960 reviews by 800 synthetic users; task label sentiment (negative/positive); private attributes gender
(female/male) and age_group (18-29/30-49/50+) that leak through word choice. Generated deterministically by
fl_privtext/data/default/make_default.py; what it is and how strongly each attribute leaks: docs/datasets.md.
"""

from __future__ import annotations

import importlib.resources
import json
import os

import numpy as np

from fl_privtext.data._io import cached, row_error
from fl_privtext.data.schema import AttributeSpec, TextDataset, make_text_dataset

__all__ = ["DEFAULT_ATTRIBUTES", "DEFAULT_FILE", "DEFAULT_LABELS", "load_default"]

DEFAULT_FILE = "reviews.jsonl"
DEFAULT_LABELS = ("negative", "positive")
DEFAULT_ATTRIBUTES = (
    AttributeSpec("gender", "categorical", ("female", "male")),
    AttributeSpec("age_group", "categorical", ("18-29", "30-49", "50+")),
)
_KEYS = ("user_id", "text", "label", "gender", "age_group")


def _parse(raw: bytes, where: str) -> TextDataset:
    lines = raw.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    classes = {"label": DEFAULT_LABELS, **{a.name: a.classes for a in DEFAULT_ATTRIBUTES}}
    cols: dict[str, list[str]] = {k: [] for k in _KEYS}
    for ln, line in enumerate(lines, start=1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise row_error(where, ln, f"expected a JSON object, found invalid JSON ({e.msg}).") from None
        if not isinstance(obj, dict) or sorted(obj) != sorted(_KEYS):
            raise row_error(where, ln, f"expected an object with exactly the keys {list(_KEYS)}.")
        for k in _KEYS:
            v = obj[k]
            if not isinstance(v, str) or (k in classes and v not in classes[k]):
                raise row_error(
                    where, ln, f"key {k!r} expected {list(classes.get(k, ['a string']))}, found {v!r}."
                )
            cols[k].append(v)

    def codes(key: str) -> np.ndarray:
        pos = {c: i for i, c in enumerate(classes[key])}
        return np.asarray([pos[v] for v in cols[key]], dtype=np.int64)

    return make_text_dataset(
        "default",
        texts=cols["text"],
        labels=codes("label"),
        label_names=DEFAULT_LABELS,
        attributes=[(spec, codes(spec.name)) for spec in DEFAULT_ATTRIBUTES],
        user_ids=cols["user_id"],
        splits="all",
    )


def load_default(*, data_root: str | os.PathLike[str] | None = None) -> TextDataset:
    """The embedded synthetic reviews (`data_root` is accepted and ignored: the file ships with the package)."""
    del data_root
    resource = importlib.resources.files("fl_privtext.data") / "default" / DEFAULT_FILE
    with importlib.resources.as_file(resource) as path:
        if not path.is_file():
            raise FileNotFoundError(
                f"The embedded default dataset {path} is missing from the installed package; reinstall fl_privtext "
                "or regenerate it with `python fl_privtext/data/default/make_default.py`."
            )
        return cached([path], ("default",), lambda: _parse(path.read_bytes(), str(path)))
