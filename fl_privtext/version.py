"""The package's version, read from the installed distribution (stdlib only).

A ground module of its own so that modules that record it (the extractors' cache identities) need not import the
package face, and through it the API."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("fl_privtext")  # the installed distribution's, so it never disagrees with pyproject.toml
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0.0.0+unknown"
