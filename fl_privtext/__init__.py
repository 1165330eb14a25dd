"""fl_privtext: federated users who send locally-private text representations to an untrusted server.

Notebook API: ``fl_privtext.run(config) -> Result`` (docs/api.md)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def run(*args: Any, **kwargs: Any) -> Any:
    """`fl_privtext.api.run`: one federated experiment from a dict, a TOML path or an ExperimentConfig."""
    from fl_privtext.api import run as _run

    return _run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Result":
        from fl_privtext.api import Result

        return Result
    raise AttributeError(f"module 'fl_privtext' has no attribute {name!r}")
