"""Scoring every target in bounded memory: row chunks whose results equal the unchunked computation.

At a million users the eavesdropper's targets are millions of uploads; scoring them all at once materialises
(targets x width) float64 intermediates (several GB). Scoring them ``ROW_CHUNK`` rows at a time gives the same
numbers bit for bit: elementwise steps are per row, each BLAS product row only depends on its own row as long as
no chunk is short (OpenBLAS multiplies small matrices with other kernels, which sum in another order, so the last
chunk takes the remainder instead of being short), and ``ROW_CHUNK`` is a multiple of the 8,192-row batches of
`fl_privtext.learn.MLPClassifier.logits`, so the MLP sees the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator

ROW_CHUNK = 1 << 16  # rows scored at once (a multiple of MLPClassifier.logits' 8,192-row batches)


def row_chunks(n: int, size: int = ROW_CHUNK) -> Iterator[slice]:
    """Slices covering ``range(n)`` in order, each ``size`` rows long except the last, which holds between
    ``size`` and ``2 * size - 1`` rows (or all ``n`` when ``n < 2 * size``)."""
    if size < 1:
        raise ValueError(f"size must be >= 1 row; got {size}.")
    full = max(n // size - 1, 0)  # chunks of exactly ``size`` rows; the last one takes the rest
    for i in range(full):
        yield slice(i * size, (i + 1) * size)
    yield slice(full * size, n)
