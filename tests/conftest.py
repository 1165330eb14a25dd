"""Shared fixtures: the staged data root (tests that need it skip without it), a seeded generator, a cache dir."""

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_CANDIDATES = [os.environ.get("FL_PRIVTEXT_DATA", ""), str(ROOT.parent / "shared" / "data")]


def staged_data_root() -> Path | None:
    for c in _CANDIDATES:
        if c and (Path(c) / "README.md").is_file():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = staged_data_root()
    if root is None:
        pytest.skip("staged datasets not found (set FL_PRIVTEXT_DATA or place shared/data beside the repo)")
    return root


@pytest.fixture
def gen() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One embedding cache for the whole test session (extraction is deterministic; cache keys are content-based)."""
    env = os.environ.get("FL_PRIVTEXT_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("fl_privtext_cache")
