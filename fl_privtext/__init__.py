"""fl_privtext: federated users who send locally-private text representations to an untrusted server.

Notebook API: ``fl_privtext.run(config) -> Result`` and ``fl_privtext.run_sweep(spec) -> SweepResult``
(docs/api.md)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("fl_privtext")  # the installed distribution's, so it never disagrees with pyproject.toml
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0.0.0+unknown"


def run(*args: Any, **kwargs: Any) -> Any:
    """`fl_privtext.api.run`: one federated experiment from a dict, a TOML path or an ExperimentConfig."""
    from fl_privtext.api import run as _run

    return _run(*args, **kwargs)


def run_sweep(*args: Any, **kwargs: Any) -> Any:
    """`fl_privtext.api.run_sweep`: a sweep file (or dict) run through one federation; returns a SweepResult
    (``.rows``, ``.to_pandas()``)."""
    from fl_privtext.api import run_sweep as _run_sweep

    return _run_sweep(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("Result", "SweepResult"):
        from fl_privtext import api

        return getattr(api, name)
    raise AttributeError(f"module 'fl_privtext' has no attribute {name!r}")
