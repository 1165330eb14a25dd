"""Vectorised randomisers (the last pipeline stage). Each takes an explicit ``numpy.random.Generator``.

Samplers are floating-point and pseudo-random: right for simulation, not deployment-grade DP samplers (Mironov
2012, "On significance of the least significant bits for differential privacy"). Bit flips compare float64
uniforms with the per-bit probability, so each realised probability is within 2^-53 of the stated one.
Work is done in row chunks of about ``CHUNK_VALUES`` values to bound temporary memory; the output of one call
depends only on the generator state and the input.
"""

from __future__ import annotations

import numpy as np

CHUNK_VALUES = 1 << 20


def _rows_per_chunk(width: int) -> int:
    return max(1, CHUNK_VALUES // max(1, width))


def flip_bits(bits: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Independent per-bit randomisation of an (N, D) 0/1 array -> (N, D) float32 of 0/1.

    Bit j is reported as 1 with probability ``p[j]`` when it is 1 and ``q[j]`` when it is 0
    (p = Pr[1 -> 1], q = Pr[0 -> 1], the notation of OME and Wang et al. 2017).
    """
    b = np.asarray(bits)
    n_rows, width = b.shape
    p64 = np.asarray(p, dtype=np.float64)
    q64 = np.asarray(q, dtype=np.float64)
    if p64.shape != (width,) or q64.shape != (width,):
        raise ValueError(f"p and q must have shape ({width},), got {p64.shape} and {q64.shape}.")
    out = np.empty((n_rows, width), dtype=np.float32)
    step = _rows_per_chunk(width)
    for s in range(0, n_rows, step):
        chunk = b[s:s + step]
        u = rng.random(chunk.shape)  # (rows, D) float64 in [0, 1)
        np.less(u, np.where(chunk != 0, p64, q64), out=out[s:s + step], casting="unsafe")
    return out


def laplace_noise(shape: tuple[int, int], scale: float, rng: np.random.Generator) -> np.ndarray:
    """(N, D) float32 Laplace(0, scale) noise, as the difference of two standard exponentials (ziggurat)."""
    n_rows, width = shape
    out = np.empty(shape, dtype=np.float32)
    tmp = np.empty((min(n_rows, _rows_per_chunk(width)), width), dtype=np.float32)
    step = tmp.shape[0] if n_rows else 1
    for s in range(0, n_rows, step):
        dst = out[s:s + step]
        rng.standard_exponential(dtype=np.float32, out=dst)
        t = tmp[: dst.shape[0]]
        rng.standard_exponential(dtype=np.float32, out=t)
        dst -= t
    out *= np.float32(scale)
    return out


def gaussian_noise(shape: tuple[int, int], std: float, rng: np.random.Generator) -> np.ndarray:
    """(N, D) float32 N(0, std^2) noise (ziggurat)."""
    out = np.empty(shape, dtype=np.float32)
    rng.standard_normal(dtype=np.float32, out=out)
    out *= np.float32(std)
    return out
