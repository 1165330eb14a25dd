"""Where a dataset's files are: the data root and the paths under it, the cache root (`resolve_cache_dir`) and the
``records_per_user`` option's check, with no heavy import (stdlib only).

It lives outside `fl_privtext.data` because importing that package loads Hugging Face ``datasets`` and pyarrow
(seconds); the up-front checks (`fl_privtext.pipeline.preflight`) use these functions before any such import, so a missing
data root or file is reported at once, in the same words the loaders use (`fl_privtext.data._io` re-exports them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENV_DATA_ROOT = "FL_PRIVTEXT_DATA"


class DataNotFoundError(FileNotFoundError, ValueError):
    """A data root or data file is missing (both a FileNotFoundError and a ValueError)."""


def resolve_data_root(data_root: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The data root and where it came from: the argument, else env FL_PRIVTEXT_DATA; no default."""
    if data_root is not None and str(data_root) != "":
        return Path(data_root).expanduser(), "the data_root argument"
    env = os.environ.get(ENV_DATA_ROOT, "")
    if env:
        return Path(env).expanduser(), f"the environment variable {ENV_DATA_ROOT}"
    raise DataNotFoundError(
        f"No data root given: pass data_root=... or set the environment variable "
        f"{ENV_DATA_ROOT} to the folder holding the staged datasets (blog_authorship/, ag_news_entities/, trustpilot/, "
        "sentiment_sentences_kotzias/, snips_intents/, mrpc/). Only the 'default' dataset needs no data root."
    )


def find_files(dataset: str, data_root: str | os.PathLike[str] | None, relpaths: Sequence[str]) -> list[Path]:
    """Absolute paths of `relpaths` under the data root; a DataNotFoundError lists every file looked for and where."""
    root, origin = resolve_data_root(data_root)
    paths = [root / p for p in relpaths]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        where = f"data root {str(root)!r} (from {origin})"
        if not root.is_dir():
            head = f"Dataset {dataset!r}: the {where} is not a directory."
        else:
            head = f"Dataset {dataset!r}: {len(missing)} of {len(paths)} file(s) missing under the {where}."
        looked = "; ".join(f"{p} ({'found' if p.is_file() else 'MISSING'})" for p in paths)
        raise DataNotFoundError(
            f"{head} Looked for: {looked}. Pass data_root=... or set {ENV_DATA_ROOT} to the folder that contains "
            f"{', '.join(sorted({p.split('/')[0] + '/' for p in relpaths}))}."
        )
    return paths


def resolve_path(path: str | os.PathLike[str], data_root: str | os.PathLike[str] | None,
                 *, folder: bool = False, what: str = "csv") -> Path:
    """The file (or, with ``folder``, file or folder) a csv / hf dataset's ``path`` option names: as given (relative
    to the working directory), else relative to the data root."""
    p = Path(path).expanduser()
    tried = [p if p.is_absolute() else Path.cwd() / p]
    if p.is_file() or (folder and p.is_dir()):
        return p
    if not p.is_absolute():
        root = data_root if data_root not in (None, "") else os.environ.get(ENV_DATA_ROOT) or None
        if root is not None:
            q = Path(root).expanduser() / p
            tried.append(q)
            if q.is_file() or (folder and q.is_dir()):
                return q
    raise DataNotFoundError(
        f"Dataset {what!r}: the {'file or folder' if folder else 'file'} {str(path)!r} was not found; looked for: "
        f"{', '.join(str(t) for t in tried)}. "
        f"A relative path is tried against the working directory, then against the data root (data_root argument "
        f"or the environment variable {ENV_DATA_ROOT})."
    )


CACHE_ENV = "FL_PRIVTEXT_CACHE"  # the cache root of extracted features and generated corpora


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Cache directory: ``cache_dir`` argument > env ``FL_PRIVTEXT_CACHE`` > ``~/.cache/fl_privtext``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fl_privtext"


def spill_dir(cache_dir: str | None) -> Path:
    """Where a run's uploads live between stages (`fl_privtext.memory.Spill`): ``spill/`` in its cache
    (``extractor.cache-dir``, "" for the default); the server's round copies and the eavesdropper's target map."""
    return resolve_cache_dir(cache_dir or None) / "spill"


def records_per_user(value: Any) -> int:
    """``data.options.records_per_user``: an integer >= 1 (the up-front checks and `fl_privtext.pipeline.preparation.first_records`)."""
    try:
        k = int(value)
    except (TypeError, ValueError):
        k = 0
    if k < 1 or str(value).strip() != str(k):
        raise ValueError(f"data.options.records_per_user must be an integer >= 1; got {value!r}.")
    return k
