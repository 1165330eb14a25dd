"""`synthetic`: a SYNTHETIC population of any size, grown from the embedded default's generator.

    load_dataset("synthetic", users=1_000_000, seed=0)       # config: data.name = "synthetic", data.options.users

The model is the one of `fl_privtext/data/default/make_default.py` (its vocabulary, templates, probabilities and
leak knobs are read from that file, not copied): each user has a gender (1:1), an age group (AGE_PROBS), 1-8
reviews (REVIEWS_PER_USER_PROBS) and a positivity p ~ U(0.3, 0.9); each review's sentiment label is Bernoulli(p);
a review is an opening naming a product (category weighted by gender and age) and a purpose (partner / family cues
with fidelity < 1), 1-3 sentiment sentences, optional mixed, filler, age-style and gender-style sentences in random
order, and an optional closing. So gender and age_group leak through the words, as in `default` (docs/datasets.md).

Only the sampler differs: the default file is drawn review by review with `random.Random` (byte-stable, 800 users);
here every batch of USERS_PER_BATCH users is drawn at once with numpy from ``rng.generator(seed, "synthetic",
batch)``, and texts are assembled in Arrow (a review is a list of sentence ids, joined by `binary_join`), so a
million users take seconds, not minutes. Deterministic per (users, seed).

Memory stays bounded: batches are generated and appended one at a time to an Arrow stream file in the cache
directory (``<FL_PRIVTEXT_CACHE or ~/.cache/fl_privtext>/synthetic/``, written to a temp file and renamed), which
the dataset then memory-maps; a later load with the same (users, seed, generator version) maps the file again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import os
import re
import runpy
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fl_privtext.data.default import DEFAULT_ATTRIBUTES, DEFAULT_LABELS
from fl_privtext.data.schema import TextDataset
from fl_privtext.datafiles import resolve_cache_dir
from fl_privtext.rng import generator

__all__ = ["GENERATOR_VERSION", "SYNTHETIC_NAME", "USERS_PER_BATCH", "generate_batches", "load_synthetic"]

SYNTHETIC_NAME = "synthetic"
GENERATOR_VERSION = "synthetic-1"  # bump whenever the sampler changes its output (invalidates the files)
USERS_PER_BATCH = 50_000  # users drawn per batch (fixed: part of what the output depends on)
DEFAULT_USERS = 10_000
_MAX_SLOTS = 9  # opening + up to 3 sentiment + mixed + filler + age style + gender style + closing


# ------------------------------------------------------------------------------------------------ the model
@functools.cache
def _generator_module() -> dict[str, Any]:
    resource = importlib.resources.files("fl_privtext.data") / "default" / "make_default.py"
    with importlib.resources.as_file(resource) as path:
        return runpy.run_path(str(path), run_name="make_default")  # no __pycache__ inside the package data


@dataclass(frozen=True)
class _Model:
    """make_default's model as lookup tables: one table of every sentence the generator can emit, and id ranges."""

    g: dict[str, Any]  # the generator module's globals
    sentences: pa.Array  # (S,) string: openings (template x product x purpose), then the other sentences
    cat_cum: np.ndarray  # (2, 3, C) cumulative category weights per (gender, age)
    cat_first: np.ndarray  # (C,) first product id of each category
    cat_size: np.ndarray  # (C,) products per category
    n_products: int
    partner: np.ndarray  # (2, 3, 3) purpose ids per (gender, age), a 1-tuple repeated to 3 (uniform pick = same)
    family: np.ndarray  # (3, F) purpose ids per age group (padded with -1)
    family_size: np.ndarray  # (3,)
    neutral: np.ndarray  # (K,) purpose ids
    n_purposes: int
    n_templates: int
    sentiment: np.ndarray  # (2, 14) sentence ids per label (negative, positive)
    closing: np.ndarray  # (2, 5)
    filler: np.ndarray  # (8,)
    age_style: np.ndarray  # (3, 8)
    gender_style: np.ndarray  # (2, 6)


def _ids(offset: int, n: int) -> np.ndarray:
    return np.arange(offset, offset + n, dtype=np.int32)


@functools.cache
def _model() -> _Model:
    g = _generator_module()
    genders, ages, labels = g["GENDERS"], g["AGE_GROUPS"], g["LABELS"]
    cats = list(g["PRODUCTS"])
    products = [p for c in cats for p in g["PRODUCTS"][c]]
    cat_size = np.array([len(g["PRODUCTS"][c]) for c in cats], np.int64)
    cat_first = np.concatenate(([0], np.cumsum(cat_size)[:-1])).astype(np.int64)
    weights = np.array([[g["_category_weights"](ge, a) for a in ages] for ge in genders], np.float64)
    purposes: list[str] = []

    def pid(text: str) -> int:
        if text not in purposes:
            purposes.append(text)
        return purposes.index(text)

    partner = np.array([[[pid(t) for t in (g["PARTNER"][(ge, a)] * 3)[:3]] if len(g["PARTNER"][(ge, a)]) in (1, 3)
                         else _bad_tuple() for a in ages] for ge in genders], np.int64)
    fam_lists = [[pid(t) for t in g["FAMILY"][a]] for a in ages]
    width = max(len(f) for f in fam_lists)
    family = np.array([f + [-1] * (width - len(f)) for f in fam_lists], np.int64)
    neutral = np.array([pid(t) for t in g["NEUTRAL_PURPOSE"]], np.int64)
    templates = g["OPENINGS"]
    openings = [t.format(product=p, purpose=u) for t in templates for p in products for u in purposes]
    rest: list[str] = []

    def block(items: Sequence[str]) -> np.ndarray:
        ids = _ids(len(openings) + len(rest), len(items))
        rest.extend(items)
        return ids

    sentiment = np.stack([block(g["SENTIMENT"][lab]) for lab in labels])
    closing = np.stack([block(g["CLOSING"][lab]) for lab in labels])
    filler = block(g["FILLER"])
    age_style = np.stack([block(g["AGE_STYLE"][a]) for a in ages])
    gender_style = np.stack([block(g["GENDER_STYLE"][ge]) for ge in genders])
    return _Model(g=g, sentences=pa.array(openings + rest, pa.string()), cat_cum=np.cumsum(weights, axis=-1),
                  cat_first=cat_first, cat_size=cat_size, n_products=len(products), partner=partner, family=family,
                  family_size=np.array([len(f) for f in fam_lists], np.int64), neutral=neutral,
                  n_purposes=len(purposes), n_templates=len(templates), sentiment=sentiment, closing=closing,
                  filler=filler, age_style=age_style, gender_style=gender_style)


def _bad_tuple() -> list[int]:
    raise ValueError("make_default.PARTNER must map each (gender, age) to 1 or 3 phrases (the uniform pick is "
                     "vectorised over 3 slots).")


def _pick(rng: np.random.Generator, sizes: np.ndarray | int) -> np.ndarray:
    """A uniform index in [0, size) per entry (as make_default's `Draw.pick`)."""
    return np.minimum((rng.random(np.shape(sizes) or None) * sizes).astype(np.int64), np.asarray(sizes) - 1)


def _other(rng: np.random.Generator, own: np.ndarray, k: int, fidelity: float) -> np.ndarray:
    """``own`` with probability ``fidelity``, else one of the other k - 1 classes uniformly (`Draw.other`)."""
    shift = 1 + _pick(rng, np.full(len(own), k - 1))
    return np.where(rng.random(len(own)) < fidelity, own, (own + shift) % k)


def _categorical(rng: np.random.Generator, probs: Sequence[float], n: int) -> np.ndarray:
    cum = np.cumsum(np.asarray(probs, np.float64))
    return np.minimum(np.searchsorted(cum, rng.random(n) * cum[-1], side="right"), len(cum) - 1)


def _sample_batch(m: _Model, rng: np.random.Generator, n_users: int) -> dict[str, np.ndarray]:
    """One batch: per user (gender, age, #reviews); per review (user index in the batch, label, sentence ids)."""
    g = m.g
    gender = _categorical(rng, (0.5, 0.5), n_users)
    age = _categorical(rng, g["AGE_PROBS"], n_users)
    n_reviews = 1 + _categorical(rng, g["REVIEWS_PER_USER_PROBS"], n_users)
    lo, hi = g["POSITIVITY_RANGE"]
    positivity = lo + (hi - lo) * rng.random(n_users)
    user = np.repeat(np.arange(n_users), n_reviews)
    r = len(user)
    ge, ag = gender[user], age[user]
    label = (rng.random(r) < positivity[user]).astype(np.int64)  # 1 = positive

    cum = m.cat_cum[ge, ag]  # (R, C)
    cat = np.minimum((cum < (rng.random(r) * cum[:, -1])[:, None]).sum(axis=1), cum.shape[1] - 1)
    product = m.cat_first[cat] + _pick(rng, m.cat_size[cat])
    x = rng.random(r)
    relation, family = x < g["P_RELATION"], (x >= g["P_RELATION"]) & (x < g["P_RELATION"] + g["P_FAMILY"])
    pg = _other(rng, ge, 2, g["FIDELITY_RELATION"])
    pa_ = _other(rng, ag, 3, g["FIDELITY_FAMILY"])
    purpose = np.where(relation, m.partner[pg, ag, _pick(rng, np.full(r, 3))],
                       np.where(family, m.family[pa_, _pick(rng, m.family_size[pa_])],
                                m.neutral[_pick(rng, np.full(r, len(m.neutral)))]))
    template = _pick(rng, np.full(r, m.n_templates))
    opening = (template * m.n_products + product) * m.n_purposes + purpose

    slots = np.full((r, _MAX_SLOTS), -1, np.int64)
    slots[:, 0] = opening
    k = 1 + (rng.random(r) < 0.5) + (rng.random(r) < 0.2)  # sentiment sentences, without replacement
    order = np.argsort(rng.random((r, m.sentiment.shape[1])), axis=1)[:, :3]
    chosen = m.sentiment[label[:, None], order]
    for j in range(3):
        slots[:, 1 + j] = np.where(j < k, chosen[:, j], -1)
    n_sent = m.sentiment.shape[1]
    slots[:, 4] = np.where(rng.random(r) < g["P_MIXED"], m.sentiment[1 - label, _pick(rng, np.full(r, n_sent))], -1)
    slots[:, 5] = np.where(rng.random(r) < g["P_FILLER"], m.filler[_pick(rng, np.full(r, len(m.filler)))], -1)
    sa = _other(rng, ag, 3, g["FIDELITY_AGE_STYLE"])
    style = m.age_style[sa, _pick(rng, np.full(r, m.age_style.shape[1]))]
    slots[:, 6] = np.where(rng.random(r) < g["P_AGE_STYLE"], style, -1)
    sg = _other(rng, ge, 2, g["FIDELITY_GENDER_STYLE"])
    style = m.gender_style[sg, _pick(rng, np.full(r, m.gender_style.shape[1]))]
    slots[:, 7] = np.where(rng.random(r) < g["P_GENDER_STYLE"], style, -1)
    # the middle sentences in random order (absent ones sort last)
    keys = np.where(slots[:, 1:8] >= 0, rng.random((r, 7)), 2.0)
    slots[:, 1:8] = np.take_along_axis(slots[:, 1:8], np.argsort(keys, axis=1), axis=1)
    slots[:, 8] = np.where(rng.random(r) < g["P_CLOSING"], m.closing[label, _pick(rng, np.full(r, 5))], -1)
    return {"gender": gender, "age": age, "user": user, "label": label, "slots": slots}


def _join(m: _Model, slots: np.ndarray) -> pa.Array:
    """(R, S) sentence ids (-1 = absent) -> R texts, sentences joined by one space (in Arrow, no Python loop)."""
    present = slots >= 0
    flat = slots[present]  # row-major: each review's sentences in slot order
    offsets = np.concatenate(([0], np.cumsum(present.sum(axis=1)))).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), m.sentences.take(pa.array(flat)))
    return pc.binary_join(lists, " ")


def _schema() -> pa.Schema:
    fields = [pa.field("user_id", pa.string()), pa.field("text", pa.string()), pa.field("label", pa.int64()),
              pa.field("split", pa.string())]
    return pa.schema(fields + [pa.field(a.column, pa.int64()) for a in DEFAULT_ATTRIBUTES])


def generate_batches(users: int, seed: int) -> Iterator[pa.RecordBatch]:
    """The population as Arrow record batches of USERS_PER_BATCH users each, in user order (u0..0, u0..1, ...)."""
    users, seed = _check(users, seed)
    m = _model()
    width = len(str(users - 1))
    schema = _schema()
    for b, first in enumerate(range(0, users, USERS_PER_BATCH)):
        n = min(USERS_PER_BATCH, users - first)
        s = _sample_batch(m, generator(seed, "synthetic", GENERATOR_VERSION, b), n)
        ids = pa.array([f"u{i:0{width}d}" for i in range(first, first + n)], pa.string())
        r = len(s["user"])
        cols = [ids.take(pa.array(s["user"])), _join(m, s["slots"]), pa.array(s["label"], pa.int64()),
                pa.array(np.full(r, "all"), pa.string()),
                pa.array(s["gender"][s["user"]], pa.int64()), pa.array(s["age"][s["user"]], pa.int64())]
        yield pa.RecordBatch.from_arrays(cols, schema=schema)


# ------------------------------------------------------------------------------------------------ the file
def _check(users: Any, seed: Any) -> tuple[int, int]:
    def as_int(v: Any, what: str, lo: int) -> int:
        out: int | None = None
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out = int(v)
        elif isinstance(v, str) and re.fullmatch(r"\s*\d[\d_]*\s*", v):  # flat configs may pass "1_000_000"
            out = int(v.strip().replace("_", ""))
        if out is None or out < lo:
            raise ValueError(f"Dataset 'synthetic': {what} must be an integer >= {lo}, got {v!r}.")
        return out

    return as_int(users, "users (data.options.users, the number of synthetic users)", 1), as_int(seed, "seed", 0)


def _file(users: int, seed: int) -> Path:
    return resolve_cache_dir() / "synthetic" / f"{GENERATOR_VERSION}-users{users}-seed{seed}.arrow"


def _write(path: Path, users: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f, pa.ipc.new_stream(f, _schema()) as writer:
            for batch in generate_batches(users, seed):
                writer.write_batch(batch)
        os.replace(tmp, path)  # atomic: a reader never maps a partial file; concurrent writers write the same bytes
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_synthetic(*, data_root: str | os.PathLike[str] | None = None, users: int = DEFAULT_USERS,
                   seed: int = 0) -> TextDataset:
    """``users`` synthetic users (several reviews each) drawn from make_default's model with ``seed``.

    Label: sentiment (negative / positive); attributes gender and age_group, which leak through the text as in
    `default`. Split "all". `data_root` is accepted and ignored (nothing is read from it). The rows are generated
    once per (users, seed) into the cache directory and memory-mapped (see the module docstring).
    """
    del data_root
    users, seed = _check(users, seed)
    path = _file(users, seed)
    if not path.is_file():
        _write(path, users, seed)
    table = datasets.Dataset.from_file(str(path), in_memory=False)
    return TextDataset(name=SYNTHETIC_NAME, table=table, label_names=DEFAULT_LABELS, attributes=DEFAULT_ATTRIBUTES)
