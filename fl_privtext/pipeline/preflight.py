"""Up-front checks of a configuration that need no heavy import: keys, types and ranges (`fl_privtext.config`), the
files that must exist (--config, the dataset's files under the data root, a csv / hf ``path``, a local model folder,
the output directory), the dataset's options and the mechanism's name and parameters.

``fl-privtext run`` / ``sweep`` and ``fl_privtext.run`` / ``run_sweep`` call these BEFORE importing torch, Flower,
Ray, transformers, datasets or scikit-learn (seconds to import, a minute on a loaded machine), so a typo is answered
at once. Each failure raises the same ValueError (FileNotFoundError for --config) with the same words as the later,
data-dependent checks (`fl_privtext.pipeline.runner.validate`), which still run.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.datafiles import DataNotFoundError, find_files, records_per_user, resolve_path
from fl_privtext.names import DATASET_FILES, DATASET_OPTIONS, DATASETS, MECHANISMS, RECORDS_PER_USER
from fl_privtext.pipeline.checks import check_extractor
from fl_privtext.pipeline.checks import check_output as writable
from fl_privtext.public import PublicSpec, check_public_data
from fl_privtext.rundir import RESULTS_FILE

# what the checks here must not import (tests/pipeline/test_preflight.py checks sys.modules after a refused configuration)
HEAVY_MODULES = ("torch", "flwr", "ray", "transformers", "datasets", "sklearn")


def check_dataset(name: str, root: str, options: dict[str, Any]) -> None:
    """A known dataset, options its loader accepts, and its files present, in the loader's own words
    (`fl_privtext.data.load_dataset`)."""
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; known datasets are {sorted(DATASETS)}.")
    accepted = DATASET_OPTIONS[name]
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for dataset {name!r}; it accepts {list(accepted) or 'no options'}."
        )
    if name in DATASET_FILES:
        find_files(name, root or None, DATASET_FILES[name])
    elif name in ("csv", "hf"):
        path = options.get("path")
        if path is None or str(path) == "":
            what = "FILE (a CSV, TSV or JSONL file)" if name == "csv" else \
                "FOLDER_OR_FILE (a save_to_disk folder, or Parquet or Arrow file(s))"
            raise ValueError(f"Dataset {name!r} needs the option path={what}.")
        try:
            resolve_path(path, root or None, folder=name == "hf", what=name)
        except DataNotFoundError:
            # hf: a hub id ("owner/name") is fetched when no such local path exists (online only)
            if name == "csv" or "/" not in str(path) or Path(str(path)).expanduser().is_absolute() or \
                    os.environ.get("HF_HUB_OFFLINE"):
                raise


def check_data(cfg: ExperimentConfig) -> None:
    """[data]: the dataset, its options and files; ``records_per_user`` (any dataset)."""
    d = cfg.data
    check_dataset(d.name, d.root, {k: v for k, v in d.options.items() if k != RECORDS_PER_USER})
    if RECORDS_PER_USER in d.options:
        records_per_user(d.options[RECORDS_PER_USER])


def check_privacy(cfg: ExperimentConfig) -> None:
    """[privacy]: the mechanism's name, its parameters (built for a stand-in width where no projection needs the
    real one, as the runner's check does) and a pca projection's public dataset."""
    name = cfg.privacy.mechanism
    if name not in MECHANISMS:
        raise ValueError(f"[privacy] (privacy.mechanism={name!r}): Unknown mechanism {name!r}; valid names: "
                         f"{', '.join(MECHANISMS)}.")
    if cfg.privacy.projection == "pca":
        base, sep, _ = check_public_data(PublicSpec.of(cfg)).partition(":")
        if not sep:
            check_dataset(base, cfg.data.root, {})
    check = cfg if cfg.server.aggregate != "secagg" else dataclasses.replace(
        cfg, privacy=dataclasses.replace(cfg.privacy, projection="none", proj_dim=0))
    if check.privacy.projection != "none":
        return  # the width comes from the extractor: fl_privtext.pipeline.runner.validate checks it
    try:
        mechanism_for(PublicSpec.of(check), 8)
    except ValueError as exc:  # the mechanism names its parameter; say which config section holds it
        raise ValueError(f"[privacy] (privacy.mechanism={name!r}): {exc}") from None


def check_point(cfg: ExperimentConfig) -> None:
    """Everything about one experiment point that can be checked without data, models or frameworks."""
    check_data(cfg)
    check_extractor(cfg.extractor)
    check_privacy(cfg)


def check_output(output: str | os.PathLike[str] | None, *, overwrite: bool) -> None:
    """The run's output directory: writable, and not holding a finished run's results unless ``overwrite``
    (`fl_privtext.rundir.claim` says the same once the run holds it)."""
    if not output:
        return  # runs/<timestamp>: a new directory
    writable(output)
    if (Path(output) / RESULTS_FILE).exists() and not overwrite:
        raise ValueError(f"output directory {str(output)!r} already holds a run's results ({RESULTS_FILE}); choose "
                         "another --output, or pass --overwrite to replace them.")


def check_run(cfg: ExperimentConfig, *, output: str | os.PathLike[str] | None = None, overwrite: bool = False) -> None:
    """``fl-privtext run`` / ``fl_privtext.run``: the output directory, then the point."""
    check_output(output or cfg.run.output, overwrite=overwrite)
    check_point(cfg)
