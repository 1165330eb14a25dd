"""Fixtures for the extractor tests: private cache root, tiny duck-typed dataset, shared real extractors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fl_privtext.extract import GloveExtractor, make_extractor
from fl_privtext.extract.transformer import HFExtractor


@dataclass(frozen=True)
class TinyDataset:
    """What ``extract_cached`` needs of ``TextDataset``: fingerprint, texts, text_pairs, len()."""

    texts: list[str]
    text_pairs: list[str] | None = None
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        if not self.fingerprint:
            h = hashlib.sha256()
            for t in self.texts + (self.text_pairs or []):
                h.update(t.encode() + b"\0")
            object.__setattr__(self, "fingerprint", h.hexdigest())

    def __len__(self) -> int:
        return len(self.texts)


@pytest.fixture(autouse=True, scope="session")
def _private_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Model-file hash sidecars go to the default cache dir: keep them out of the user's ~/.cache during tests.
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("fl_privtext_cache")
    mp.setenv("FL_PRIVTEXT_CACHE", str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="session")
def glove() -> GloveExtractor:
    return GloveExtractor()


@pytest.fixture(scope="session")
def minilm() -> HFExtractor:
    ext = make_extractor("minilm", batch_size=16)
    assert isinstance(ext, HFExtractor)
    return ext
