"""Fixed-point binary code of OME Algorithm 1 (step 2): 1 sign bit, m integer bits, n fraction bits per value.

Layout of one value (l = 1 + m + n bits, most significant first)::

    [sign | integer bits 2^(m-1) .. 2^0 | fraction bits 2^-1 .. 2^-n]     sign: 1 = negative, 0 = positive or zero

A row of r values becomes r*l bits, value i occupying bits [i*l, (i+1)*l). The magnitude is truncated to the
grid 2^-n (so in-range values decode within 2^-n); magnitudes >= 2^m saturate to the largest code 2^m - 2^-n and
are counted (``saturated``). The paper uses m=4, n=5, l=10.
"""

from __future__ import annotations

import numpy as np

from fl_privtext.privacy.stage import Stage

MAX_MAGNITUDE_BITS = 32


def check_bits(int_bits: int, frac_bits: int) -> None:
    """Raise ValueError unless 0 <= int_bits, 0 <= frac_bits and 1 <= int_bits + frac_bits <= 32."""
    for name, v in (("int_bits", int_bits), ("frac_bits", frac_bits)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}.")
    if not 1 <= int_bits + frac_bits <= MAX_MAGNITUDE_BITS:
        raise ValueError(
            f"int_bits + frac_bits must be between 1 and {MAX_MAGNITUDE_BITS}, got {int_bits} + {frac_bits}."
        )


def code_length(int_bits: int, frac_bits: int) -> int:
    """Bits per value, l = 1 + m + n."""
    return 1 + int_bits + frac_bits


def max_value(int_bits: int, frac_bits: int) -> float:
    """Largest representable magnitude, 2^m - 2^-n."""
    return float(2.0**int_bits - 2.0**-frac_bits)


def encode(x: np.ndarray, int_bits: int = 4, frac_bits: int = 5) -> Stage:
    """Encode an (N, r) real array to (N, r*l) uint8 bits; ``info["saturated"]`` counts clipped values."""
    check_bits(int_bits, frac_bits)
    v = np.asarray(x)
    if v.ndim != 2:
        raise ValueError(f"encode expects an (N, r) array, got shape {v.shape}.")
    if not np.isfinite(v).all():
        raise ValueError("encode expects finite values (found NaN or inf).")
    n_rows, r = v.shape
    mag_bits = int_bits + frac_bits
    top = (1 << mag_bits) - 1
    scaled = np.floor(np.abs(v).astype(np.float64) * 2.0**frac_bits)  # (N, r) integer-valued
    saturated = int(np.count_nonzero(scaled > top))
    word_dtype = ">u2" if mag_bits <= 16 else ">u4"
    width = 16 if mag_bits <= 16 else 32
    ints = np.minimum(scaled, top).astype(word_dtype)  # big-endian so unpackbits gives MSB first
    unpacked = np.unpackbits(ints.view(np.uint8).reshape(n_rows, r, width // 8), axis=-1)  # (N, r, width)
    bits = np.empty((n_rows, r, 1 + mag_bits), dtype=np.uint8)
    bits[..., 0] = np.signbit(v) & (v != 0)
    bits[..., 1:] = unpacked[..., width - mag_bits:]
    return Stage(
        bits.reshape(n_rows, r * (1 + mag_bits)),
        {"method": "fixed-point", "int_bits": int_bits, "frac_bits": frac_bits, "values": int(v.size),
         "saturated": saturated},
    )


def decode(bits: np.ndarray, int_bits: int = 4, frac_bits: int = 5) -> np.ndarray:
    """Inverse of :func:`encode` (up to truncation/saturation): (N, r*l) bits -> (N, r) float64."""
    check_bits(int_bits, frac_bits)
    b = np.asarray(bits)
    l = code_length(int_bits, frac_bits)
    if b.ndim != 2 or b.shape[1] % l:
        raise ValueError(f"decode expects an (N, r*{l}) array, got shape {b.shape}.")
    blocks = b.reshape(b.shape[0], -1, l).astype(np.float64)
    weights = 2.0 ** np.arange(int_bits - 1, -frac_bits - 1, -1, dtype=np.float64)  # (m+n,)
    magnitude = blocks[..., 1:] @ weights
    return np.where(blocks[..., 0] > 0, -magnitude, magnitude)
