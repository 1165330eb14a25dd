"""fl_privtext: federated users who send locally-private text representations to an untrusted server.

Notebook API: ``fl_privtext.run(config) -> Result`` and ``fl_privtext.run_sweep(spec) -> SweepResult``
(docs/api.md)."""

from __future__ import annotations

import importlib
from typing import Any

from fl_privtext.version import __version__

__all__ = ["Result", "SweepResult", "__version__", "run", "run_sweep"]


_API_NAMES = {"Result": "api", "run": "api", "SweepResult": "sweep", "run_sweep": "sweep"}  # name -> its module


def __getattr__(name: str) -> Any:
    """`fl_privtext.api`'s run and Result, `fl_privtext.sweep`'s run_sweep and SweepResult, imported on first use
    (PEP 562).

    Deferred on purpose: every ``import fl_privtext.<module>`` (in each Ray worker too) runs this file first, and
    the API pulls scipy.stats through the report (about 1.5 s) and, when a run starts, torch, Flower and Ray."""
    if name in _API_NAMES:
        # deferred: scipy.stats through the report; torch, flwr and ray once a run starts
        return getattr(importlib.import_module(f"fl_privtext.{_API_NAMES[name]}"), name)
    raise AttributeError(f"module 'fl_privtext' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API_NAMES})
