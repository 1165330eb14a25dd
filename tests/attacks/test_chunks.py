"""Row chunks for scoring targets: they cover every row in order, none is short, and scores match all-at-once."""

import inspect

import numpy as np
import pytest

from fl_privtext.attacks.chunks import ROW_CHUNK, row_chunks
from fl_privtext.learn import MLPClassifier


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 8, 9, 11, 12, 13, 40])
def test_row_chunks_cover_in_order_and_none_is_short(n: int) -> None:
    chunks = list(row_chunks(n, 4))
    assert np.array_equal(np.concatenate([np.arange(n)[c] for c in chunks]), np.arange(n))
    lengths = [c.stop - c.start for c in chunks]
    assert all(length == 4 for length in lengths[:-1])
    assert (4 <= lengths[-1] < 8) if n >= 4 else lengths == [n]
    with pytest.raises(ValueError, match="size must be >= 1"):
        list(row_chunks(n, 0))


def test_chunked_blas_scores_equal_all_at_once() -> None:
    # what the logistic attacker does to its targets: standardise (float32), then a float64 matrix product
    g = np.random.default_rng(0)
    x = g.normal(size=(2 * ROW_CHUNK + 123, 52)).astype(np.float32)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    w, b = g.normal(size=(52, 3)), g.normal(size=3)
    whole = ((x - mean) / std) @ w + b
    chunked = np.concatenate([((x[c] - mean) / std) @ w + b for c in row_chunks(len(x))])
    np.testing.assert_array_equal(chunked, whole)
    batch = inspect.signature(MLPClassifier.logits).parameters["batch_size"].default
    assert ROW_CHUNK % batch == 0  # MLPClassifier.logits' batches line up with the chunks
