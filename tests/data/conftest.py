"""Fixtures for the data tests: the staged data root (tests that need it skip when it is absent) and loaded datasets."""

from __future__ import annotations

from pathlib import Path

import pytest

# `data_root` comes from tests/conftest.py: FL_PRIVTEXT_DATA, else ../shared/data beside the repository.


@pytest.fixture(scope="session")
def blog(data_root: Path):
    from fl_privtext.data import load_dataset

    return load_dataset("blog", data_root=data_root)


@pytest.fixture(scope="session")
def default_ds():
    from fl_privtext.data import load_dataset

    return load_dataset("default")
