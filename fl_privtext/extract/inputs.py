"""Input checks shared by every extractor."""

from __future__ import annotations

from collections.abc import Sequence


def text_lists(texts: Sequence[str], text_pairs: Sequence[str] | None) -> tuple[list[str], list[str] | None]:
    """``texts`` and ``text_pairs`` as lists, refusing a bare string and pairs of another length."""
    if isinstance(texts, str):
        raise ValueError("extract expects a sequence of texts, got a single string.")  # noqa: TRY004
    texts = list(texts)
    pairs = None if text_pairs is None else list(text_pairs)
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError(f"Got {len(texts)} texts but {len(pairs)} text_pairs; they must match.")
    return texts, pairs
