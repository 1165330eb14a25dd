"""Text records in one schema, user-level roles, and user partitions into virtual clients.

```python
from fl_privtext.data import load_dataset, TextDataset, AttributeSpec, assign_roles, partition_users

ds = load_dataset("default")                                   # ships with the package
ds = load_dataset("blog", data_root="/data", min_topic_prob=0.8, age_groups="10s,30s")
roles = assign_roles(ds, test_frac=0.2, aux_frac=0.2, seed=0)  # (N,) "train" / "test" / "aux", by user
roles = source_roles(ds)                      # the source's own split: test -> "test", train/dev -> "aux"
shards = partition_users(ds, roles == "train", num_clients=10, scheme="dirichlet", alpha=0.5, seed=0)
```

Data root for the staged datasets: the `data_root` argument, else the environment variable FL_PRIVTEXT_DATA.
Dataset documentation (sources, counts, the synthetic default's leak strengths): docs/datasets.md.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from fl_privtext.data._io import ENV_DATA_ROOT, DataNotFoundError, resolve_data_root
from fl_privtext.data.default import load_default
from fl_privtext.data.generic import load_csv, load_hf
from fl_privtext.data.loaders import (
    load_ag_news,
    load_amazon,
    load_blog,
    load_imdb,
    load_mrpc,
    load_snips,
    load_trustpilot_dk,
    load_trustpilot_us,
    load_yelp,
)
from fl_privtext.data.partition import SCHEMES, partition_users
from fl_privtext.data.schema import AttributeSpec, TextDataset, from_hf, make_text_dataset
from fl_privtext.data.splits import ROLES, SPLITS, assign_roles, source_roles
from fl_privtext.data.synthetic import load_synthetic

__all__ = [
    "DATASETS",
    "ENV_DATA_ROOT",
    "ROLES",
    "SCHEMES",
    "SPLITS",
    "SYNTHETIC_DATASETS",
    "AttributeSpec",
    "DataNotFoundError",
    "TextDataset",
    "assign_roles",
    "dataset_options",
    "from_hf",
    "load_dataset",
    "make_text_dataset",
    "partition_users",
    "resolve_data_root",
    "source_roles",
]

# The registry: name -> loader(*, data_root=None, **options) -> TextDataset.
DATASETS: dict[str, Callable[..., TextDataset]] = {
    "default": load_default,
    "blog": load_blog,
    "ag_news": load_ag_news,
    "trustpilot_us": load_trustpilot_us,
    "trustpilot_dk": load_trustpilot_dk,
    "imdb": load_imdb,
    "amazon": load_amazon,
    "yelp": load_yelp,
    "snips": load_snips,
    "mrpc": load_mrpc,
    "csv": load_csv,
    "hf": load_hf,
    "synthetic": load_synthetic,
}

# Datasets of generated users (no real person behind any row); every output says so.
SYNTHETIC_DATASETS = ("default", "synthetic")


def dataset_options(name: str) -> tuple[str, ...]:
    """The options a dataset's loader accepts (besides data_root)."""
    loader = _loader(name)
    return tuple(p for p in inspect.signature(loader).parameters if p != "data_root")


def _loader(name: str) -> Callable[..., TextDataset]:
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; known datasets are {sorted(DATASETS)}.")
    return DATASETS[name]


def load_dataset(
    name: str, /, *, data_root: str | os.PathLike[str] | None = None, **options: Any
) -> TextDataset:
    """Load a registered dataset by name. Unknown names or options raise ValueError listing the valid ones."""
    loader = _loader(name)
    accepted = dataset_options(name)
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for dataset {name!r}; it accepts {list(accepted) or 'no options'}."
        )
    return loader(data_root=data_root, **options)
