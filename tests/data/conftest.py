"""Fixtures for the data tests: the staged data root (tests that need it skip when it is absent) and loaded datasets."""

from __future__ import annotations

from pathlib import Path

import pytest

# The staged datasets live next to the repository (../shared/data); only these tests use that location.
STAGED_ROOT = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_root() -> Path:
    if not (STAGED_ROOT / "README.md").is_file():
        pytest.skip(f"staged datasets not found at {STAGED_ROOT}")
    return STAGED_ROOT


@pytest.fixture(scope="session")
def blog(data_root: Path):
    from fl_privtext.data import load_dataset

    return load_dataset("blog", data_root=data_root)


@pytest.fixture(scope="session")
def default_ds():
    from fl_privtext.data import load_dataset

    return load_dataset("default")
