"""Exact discrete Laplace / discrete Gaussian samplers over numpy arrays, from a cryptographically secure bit source.

Distributions (Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020):
discrete Laplace DLap(t) on the integers, P(Y = y) = (1 - q)/(1 + q) q^|y| with q = e^(-1/t), and discrete Gaussian
N_Z(0, sigma^2), P(Y = y) proportional to e^(-y^2 / (2 sigma^2)), sampled as in CKS Algorithm 3 (DLap(floor(sigma)+1)
proposals accepted with probability e^(-(|Y| - sigma^2/t)^2 / (2 sigma^2))).

How it is exact, vectorized: a geometric G with ratio q is floor(-t ln U) for a uniform real U in (0, 1). U is drawn
as a 63-bit prefix (the rest of its binary expansion is drawn only when needed). numpy evaluates -t ln U in float64;
when the result is farther than ``MARGIN`` (2^-18) from an integer, and U >= 2^-16, the float64 error (< 2^-21 for
t < 2^26: the 2^-64 width of U's prefix interval, one rounding of U, one ulp of the logarithm, one of the product)
cannot move it across the integer, so floor() is the exact value for every U in the prefix interval. The rare rest
(~2e-5 of the draws) is decided exactly by :func:`_geometric_exact`: correctly rounded decimal logarithms at growing
precision, extending U by 64 random bits until the prefix interval lies inside one cell. The Gaussian's acceptance
coin U < p is decided the same way (compare -ln U with the exponent; exact decimal arithmetic when they are close).
The sign is one random bit; (negative, 0) is rejected so that 0 is not counted twice (CKS Algorithm 2).

Random bits: AES-256 in counter mode (`SecureBits`). Its key is secret and never reused: `SecureBits.keyed_by(rng)`
derives it by SHA-256 from the caller's generator's SEED (its SeedSequence entropy and spawn key, which never
leave the client: 128 bits of OS entropy by default) and a fresh 128-bit nonce drawn from that generator, so every
call gets a new key, while the client ledger's replay of a stored release and the reproducible mode (a client
seed) redraw the same noise. The generator's outputs (which label flips, for instance, reveal) are never the key
material alone. A generator without a SeedSequence gets a key from ``os.urandom``. AES-CTR comes from
the ``cryptography`` package (pyca; OpenSSL, AES-NI), which Flower already requires, so no new dependency. Why not
``os.urandom`` for every bit: the kernel's ChaCha20 stream measured ~2x slower here for the 300 MB of one
100,000 x 384 release; AES-CTR keyed from the OS is the NIST SP 800-90A CTR_DRBG construction.
"""

from __future__ import annotations

import math
import os
from decimal import Decimal, localcontext

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MARGIN = 2.0**-18  # distance from an integer below which the float64 floor is not trusted
MIN_U = 2.0**-16  # below it the prefix interval of U is too wide (relative) for the float64 decision
MAX_T = 2.0**26  # the float64 error bound above holds for t (and sigma) below this
CHUNK = 1 << 16  # values per vectorized pass (cache-sized temporaries)
GRID_BITS = 24  # the grid is 2^(floor(log2 noise) - GRID_BITS): noise / grid in [2^24, 2^25)


class SecureBits:
    """A stream of uniformly random 64-bit words: AES-256-CTR under a secret key (``os.urandom`` by default; see the
    module text and `keyed_by`)."""

    def __init__(self, key: bytes | None = None) -> None:
        key = os.urandom(32) if key is None else key
        if len(key) != 32:
            raise ValueError(f"SecureBits needs a 32-byte key; got {len(key)} bytes.")
        self._enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()  # one key per stream: nonce 0
        self._zeros = bytes(8 * CHUNK)

    @classmethod
    def keyed_by(cls, rng: np.random.Generator | None) -> SecureBits:
        """A stream keyed by SHA-256(the generator's seed, a fresh nonce from it): reproducible from the seed, never
        the same key twice for one generator, and not computable from the generator's outputs."""
        seq = getattr(getattr(rng, "bit_generator", None), "seed_seq", None)
        entropy = getattr(seq, "entropy", None)
        if rng is None or entropy is None:
            return cls()
        import hashlib

        spawn = ",".join(str(k) for k in getattr(seq, "spawn_key", ()))
        nonce = rng.bytes(16)
        return cls(hashlib.sha256(b"fl_privtext/secure-bits\0" + str(entropy).encode() + b"\0" + spawn.encode()
                                  + b"\0" + nonce).digest())

    def words(self, n: int) -> np.ndarray:
        """n independent uniform uint64 words."""
        out = np.empty(n, dtype=np.uint64)
        for s in range(0, n, CHUNK):
            k = min(CHUNK, n - s)
            out[s:s + k] = np.frombuffer(self._enc.update(self._zeros[: 8 * k]), dtype=np.uint64)
        return out

    def word(self) -> int:
        return int(self.words(1)[0])


def grid_for(noise: float) -> float:
    """The grid spacing used for noise of scale ``noise``: a power of two, noise / grid in [2^24, 2^25)."""
    if not (noise > 0 and math.isfinite(noise)):
        raise ValueError(f"The noise scale must be finite and > 0, got {noise}.")
    return math.ldexp(1.0, math.frexp(noise)[1] - 1 - GRID_BITS)


def _digits(n: int) -> int:
    return int(n * 0.302) + 40  # decimal digits: resolves the 2^-n prefix interval with room to spare


def _interval_floor(v: int, n: int, t: Decimal, bits: SecureBits) -> int:
    """floor(-t ln U) exactly, U uniform with binary prefix v / 2^n (n bits); more bits drawn while undecided.

    Decimal ln is correctly rounded; every rounding (prefix ends, ln, product) is within a relative 10^-(prec-1), so
    ``err`` bounds the distance from the computed ends to the true ones."""
    while True:
        if v > 0:
            with localcontext() as ctx:
                ctx.prec = _digits(n)
                scale = Decimal(2) ** n
                y_hi = -t * (Decimal(v) / scale).ln()
                y_lo = -t * (Decimal(v + 1) / scale).ln()
                err = (abs(y_hi) + t + 1) * Decimal(10) ** (-(ctx.prec - 5))
                a, b = math.floor(y_lo - err), math.floor(y_hi + err)
            if a == b:
                return a
        v = (v << 64) | bits.word()
        n += 64


def _uniform(v: np.ndarray) -> np.ndarray:
    """float64 midpoint of the prefix interval [v, v + 1) * 2^-63."""
    u = v.astype(np.float64)
    u *= 2.0**-63
    u += 2.0**-64
    return u


def _geometric(v: np.ndarray, t: float, bits: SecureBits) -> np.ndarray:
    """Exact geometric draws floor(-t ln U) (float64 integers) from 63-bit prefixes ``v`` of U."""
    u = _uniform(v)
    x = np.log(u)
    x *= -t
    m = np.floor(x)
    frac = x - m
    bad = np.flatnonzero((u < MIN_U) | (frac < MARGIN) | (frac > 1.0 - MARGIN))
    if bad.size:
        td = Decimal(t)
        for i in bad:
            m[i] = _interval_floor(int(v[i]), 63, td, bits)
    return m


def _check_scale(name: str, value: float) -> None:
    if not (0 < value < MAX_T and math.isfinite(value)):
        raise ValueError(f"{name} must be in (0, 2^26) grid steps, got {value!r}.")


def _dlap_chunk(k: int, t: float, bits: SecureBits) -> np.ndarray:
    w = bits.words(k)
    m = _geometric(w >> np.uint64(1), t, bits)
    negative = (w & np.uint64(1)) == 0
    np.negative(m, out=m, where=negative)
    redo = negative & (m == 0)  # (negative, 0) is rejected: 0 would otherwise have twice its probability
    if redo.any():
        m[redo] = _dlap_chunk(int(redo.sum()), t, bits)
    return m


def discrete_laplace(n: int, t: float, bits: SecureBits) -> np.ndarray:
    """n i.i.d. DLap(t) integers (as float64): P(y) proportional to exp(-|y| / t) on all integers y."""
    _check_scale("t", t)
    out = np.empty(n, dtype=np.float64)
    for s in range(0, n, CHUNK):
        out[s:s + CHUNK] = _dlap_chunk(min(CHUNK, n - s), t, bits)
    return out


def _accept_exact(v: int, exponent: Decimal, bits: SecureBits) -> bool:
    """U < exp(-exponent) exactly, U with 63-bit prefix v; i.e. -ln U > exponent."""
    n = 63
    while True:
        if v > 0:
            with localcontext() as ctx:
                ctx.prec = _digits(n)
                scale = Decimal(2) ** n
                e_lo = -(Decimal(v + 1) / scale).ln()  # -ln U over the prefix interval is in [e_lo, e_hi]
                e_hi = -(Decimal(v) / scale).ln()
                err = (abs(e_hi) + abs(exponent) + 1) * Decimal(10) ** (-(ctx.prec - 5))
                if e_lo - err > exponent:
                    return True
                if e_hi + err < exponent:
                    return False
        v = (v << 64) | bits.word()
        n += 64


def _dgauss_chunk(k: int, sigma: float, bits: SecureBits) -> np.ndarray:
    t = float(math.floor(sigma) + 1)
    s2 = sigma * sigma
    out = np.empty(k, dtype=np.float64)
    todo = np.arange(k)
    while todo.size:
        y = _dlap_chunk(todo.size, t, bits)
        expo = np.abs(y)
        expo -= s2 / t
        np.square(expo, out=expo)
        expo /= 2.0 * s2
        w = bits.words(todo.size) >> np.uint64(1)
        u = _uniform(w)
        e = np.log(u)
        np.negative(e, out=e)
        accept = e > expo
        bad = np.flatnonzero((u < MIN_U) | (np.abs(e - expo) <= 2.0**-30 * (1.0 + e + expo)))
        if bad.size:
            sd, td = Decimal(s2), Decimal(t)
            for i in bad:
                with localcontext() as ctx:
                    ctx.prec = 200  # exact: |y|, s2 and t are floats (<= 2^53 bits), so 200 digits hold them
                    dd = Decimal(abs(int(y[i]))) - sd / td
                    ex = dd * dd / (2 * sd)
                accept[i] = _accept_exact(int(w[i]), ex, bits)
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out


def discrete_gaussian(n: int, sigma: float, bits: SecureBits) -> np.ndarray:
    """n i.i.d. N_Z(0, sigma^2) integers (as float64), CKS Algorithm 3 vectorized with exact acceptance."""
    _check_scale("sigma", sigma)
    out = np.empty(n, dtype=np.float64)
    for s in range(0, n, CHUNK):
        out[s:s + CHUNK] = _dgauss_chunk(min(CHUNK, n - s), sigma, bits)
    return out


def _on_grid(values: np.ndarray, noise_int: np.ndarray, grid: float) -> np.ndarray:
    # values rounded to the grid (exact in float64: grid is a power of two) plus integer noise on it
    flat = np.rint(np.ascontiguousarray(values, dtype=np.float64).ravel() / grid)
    flat += noise_int
    flat *= grid
    return flat.reshape(values.shape)


def laplace(values: np.ndarray, scale: float, bits: SecureBits | None = None) -> np.ndarray:
    """values rounded to grid_for(scale), plus i.i.d. exact discrete Laplace noise of scale ``scale`` (float64)."""
    g = grid_for(scale)
    return _on_grid(values, discrete_laplace(int(np.size(values)), scale / g, bits or SecureBits()), g)


def gaussian(values: np.ndarray, std: float, bits: SecureBits | None = None) -> np.ndarray:
    """values rounded to grid_for(std), plus i.i.d. exact discrete Gaussian noise of parameter ``std`` (float64)."""
    g = grid_for(std)
    return _on_grid(values, discrete_gaussian(int(np.size(values)), std / g, bits or SecureBits()), g)


def laplace_epsilon(scale: float, l1_sensitivity: float, dim: int) -> float:
    """Pure epsilon of :func:`laplace` on a ``dim``-vector: rounding moves each coordinate by <= grid / 2, so the
    rounded inputs differ by <= l1_sensitivity + dim * grid in L1; DLap(scale / grid) per grid step gives that over
    scale (CKS 2020, Proposition on the discrete Laplace)."""
    return (l1_sensitivity + dim * grid_for(scale)) / scale


def gaussian_l2_sensitivity(std: float, l2_sensitivity: float, dim: int) -> float:
    """L2 distance of two grid-rounded inputs: <= l2_sensitivity + sqrt(dim) * grid."""
    return l2_sensitivity + math.sqrt(dim) * grid_for(std)
