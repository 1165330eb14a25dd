"""Exact discrete Laplace / discrete Gaussian samplers over numpy arrays, from a cryptographically secure bit source.

Distributions (Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020):
discrete Laplace DLap(t) on the integers, P(Y = y) = (1 - q)/(1 + q) q^|y| with q = e^(-1/t), and discrete Gaussian
N_Z(0, sigma^2), P(Y = y) proportional to e^(-y^2 / (2 sigma^2)), sampled as in CKS Algorithm 3 (discrete Laplace
proposals accepted with probability e^(-(|Y| - sigma^2/t)^2 / (2 sigma^2)); see :func:`_dgauss_fill`).

How it is exact, vectorized: a geometric G with ratio q is floor(-t ln U) for a uniform real U in (0, 1), and a
coin "V < e^-x" is "ln V + x < 0". U (or V) is drawn as a binary prefix, the rest of its expansion only when needed.
Each decision is made in stages, each with an error bound over the whole prefix interval (width, roundings, the
logarithm's ulps); a decision farther than the bound (with >= 12x room) from the integer / from 0 is exact for
every U in the interval, the rest goes to the next stage with more bits:
1. float32 on a 24-bit prefix (small t <= SMALL_T, and the Gaussian's acceptance coin): ~1-4% go on;
2. float64 on a 63-bit prefix (``MARGIN`` t from an integer; U >= 2^-16): ~3e-5 go on;
3. long double on a 127-bit prefix (x86's 64-bit significand; skipped where long double is float64);
4. correctly rounded decimal logarithms at growing precision, 64 more random bits per round, until the prefix
   interval lies inside one cell (:func:`_interval_floor`, :func:`_accept_exact`).
The sign is one random bit; (negative, 0) is rejected so that 0 is not counted twice (CKS Algorithm 2). The tests
force every stage alone and compare the pmf with the closed form and with OpenDP (tests/privacy/test_privacy_exact).
Speed: numpy passes over cache-sized chunks with reused buffers (fresh 512 KB temporaries cost page faults), the
keystream written in place, 32-bit words where 32 bits suffice.

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
from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MARGIN = 2.0**-42  # times t: distance from an integer below which the float64 floor is not trusted (error < t 2^-46)
MIN_U = 2.0**-16  # below it the prefix interval of U is too wide (relative) for the float64 decision
MARGIN32 = 2.0**-12  # times t: the same for the float32 first stage of small t (error < t 2^-15.6)
SMALL_T = 128.0  # t up to this starts in float32 (fallback rate ~ 2 MARGIN32 t + 2^-8 < 7%)
MAX_T = 2.0**26  # t (and sigma) must be below this (the integer draws stay far below 2^53)
LD_MARGIN = 2.0**-50  # times t: the same for the long-double refinement (error < t 2^-57 on x86's 64-bit significand)
LD_MIN_U = 2.0**-50  # below it the 127-bit prefix of U is too wide for the long-double decision
ACCEPT_TOL32 = 2.0**-12  # the same for the float32 first decision (error < 2^-15.8)
ACCEPT_TOL = 2.0**-30  # |ln V + E| below which the float64 acceptance decision is not trusted (error < 2^-40)
ACCEPT_MIN_V = 2.0**-23  # below it the 63-bit prefix of V is too wide (relative) for the float64 acceptance decision
CHUNK = 1 << 16  # values per vectorized pass (cache-sized temporaries)
_GAUSS_BATCH = CHUNK  # proposals per discrete Gaussian pass (one per output slot; acceptance ~0.65-0.75)
COARSE_T = 32.0  # the discrete Gaussian's coarse geometric scale (float32 fallback ~2.3%, remainder acceptance > 0.97)
GRID_BITS = 24  # the grid is 2^(floor(log2 noise) - GRID_BITS): noise / grid in [2^24, 2^25)
_TWO63 = 2.0**-63
_LONG_DOUBLE_64 = np.finfo(np.longdouble).nmant >= 63  # x86 extended or quad precision: the refinement applies
_SIGN = np.uint64(1 << 63)
_ONE = np.uint64(1)
_SHIFT63 = np.uint64(63)


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

    def words(self, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """n independent uniform uint64 words; into ``out[:n]`` when given (a uint64 buffer of n + 2 words or more:
        the keystream is written in place, no fresh pages)."""
        if out is not None and out.size >= n + 2:
            if len(self._zeros) < 8 * n:
                self._zeros = bytes(8 * n)
            dst = out.view(np.uint8)[: 8 * n + 16]  # update_into needs 15 bytes of room past the data
            self._enc.update_into(memoryview(self._zeros)[: 8 * n], dst)  # type: ignore[arg-type]
            return out[:n]
        if n > len(self._zeros) // 8:
            if n > 4 * CHUNK:
                res = np.empty(n, dtype=np.uint64)
                for s in range(0, n, 4 * CHUNK):
                    res[s:s + 4 * CHUNK] = self.words(min(4 * CHUNK, n - s))
                return res
            self._zeros = bytes(8 * n)
        return np.frombuffer(self._enc.update(memoryview(self._zeros)[: 8 * n]), dtype=np.uint64)

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


def _refine(v: np.ndarray, t: float, bits: SecureBits) -> np.ndarray:
    """floor(-t ln U) exactly for U with 63-bit prefixes ``v`` (uint64) that the float64 pass left undecided.

    Each U gets 64 more random bits (a 127-bit prefix) and the floor is decided in long double where that has a
    64-bit significand or more (x86: v and the new word convert exactly, the prefix sum rounds by 2^-64, logl is
    within a few ulps of |ln U| < 35, so the error is < t 2^-57 against a margin of t 2^-50); what is still close,
    or U < 2^-50, is decided by :func:`_interval_floor` (exact decimal arithmetic) from the same 127-bit prefix."""
    ext = bits.words(v.size)
    out = np.empty(v.size, dtype=np.float64)
    todo: Any = slice(None)
    if _LONG_DOUBLE_64:
        u = v.astype(np.longdouble) * np.longdouble(_TWO63) + ext.astype(np.longdouble) * np.longdouble(2.0**-127)
        with np.errstate(divide="ignore"):
            x = -np.log(u) * np.longdouble(t)
        m = np.floor(x)
        frac = x - m
        margin = LD_MARGIN * max(t, 1.0)
        todo = (u < LD_MIN_U) | (frac < margin) | (frac > 1 - margin)
        out[~todo] = m[~todo].astype(np.float64)
    td = Decimal(t)
    for i in np.arange(v.size)[todo]:
        out[i] = _interval_floor((int(v[i]) << 64) | int(ext[i]), 127, td, bits)
    return out


class _Work:
    """Reusable float64 / bool buffers of one chunk (fresh 512 KB temporaries per numpy call cost page faults)."""

    def __init__(self, k: int) -> None:
        self.x, self.m, self.e = (np.empty(k, dtype=np.float64) for _ in range(3))
        self.b1, self.b2, self.b3 = (np.empty(k, dtype=bool) for _ in range(3))
        self.u = np.empty(k, dtype=np.uint64)
        self.w = np.empty(2 * k + 2, dtype=np.uint64)  # keystream (SecureBits.words(..., out=w))
        self.x32, self.m32 = np.empty(k, dtype=np.float32), np.empty(k, dtype=np.float32)
        self.u32 = np.empty(k, dtype=np.uint32)


def _geometric(w: np.ndarray, t: float, bits: SecureBits, work: _Work | None = None) -> np.ndarray:
    """Exact geometric draws floor(-t ln U) (float64 integers, +0.0 at 0), U's 63-bit prefix = ``w`` >> 1.

    x = -t ln u in float64 with u = (w >> 1) 2^-63 (the low bit of w is the caller's sign bit; the shift keeps the
    uint64 -> float64 conversion on the fast signed path): for U >= 2^-16 the error over the interval is below t (2^-47
    (interval) + 2^-53 (u's rounding) + 2^-49 (one ulp of |ln u| < 16) + 2^-49 (the product)) < t 2^-46, so where x
    is more than MARGIN t from an integer (16 ulps of room in the logarithm) its floor is exact for every U in the
    interval. The rest (~3e-5 of the draws at t ~ 2^25, ~2e-5 at small t) goes to :func:`_refine`."""
    k = w.size
    wk = work if work is not None and work.x.size >= k else _Work(k)
    x, m, bad, tmp, v = wk.x[:k], wk.m[:k], wk.b1[:k], wk.b2[:k], wk.u[:k]
    np.right_shift(w, _ONE, out=v)
    np.multiply(v.view(np.int64), _TWO63, out=x)
    with np.errstate(divide="ignore", invalid="ignore"):  # u = 0: x = inf, flagged below
        np.log(x, out=x)
        x *= -t
        np.floor(x, out=m)
        x -= m  # the fraction (exact)
    margin = MARGIN * max(t, 1.0)
    np.less(x, margin, out=bad)
    bad |= np.greater(x, 1.0 - margin, out=tmp)
    bad |= np.less(v, np.uint64(int(MIN_U * 2.0**63)), out=tmp)  # U < MIN_U = 2^-16 (also u = 0: x = inf)
    if bad.any():
        idx = np.flatnonzero(bad)
        m[idx] = _refine(v[idx], t, bits)
    return m


def _geometric32(w: np.ndarray, t: float, bits: SecureBits, wk: _Work) -> np.ndarray:
    """Exact floor(-t ln U) for t <= SMALL_T from 32-bit words ``w`` (uint32): U's 31-bit prefix is w >> 1 (the low
    bit is the caller's sign bit); into wk.m (float64).

    First stage in float32 on the 24-bit prefix w >> 8 (exact in float32): for U >= 2^-8 the error of x = -t ln u
    over the prefix interval is below t (2^-16 (interval) + 2^-19 (4 ulps of |ln u| < 8: numpy's float32 log is
    within 4 ulps) + 2^-21 (the product)) < t 2^-15.6, so the floor is exact where x is more than MARGIN32 t
    (2^-12 t: 12x room) from an integer. The rest (~4% at t = 64) continues exactly in float64 (:func:`_geometric`)
    on the 63-bit prefix = the 31 bits of w >> 1 followed by 32 fresh bits."""
    k = w.size
    x, m32, bad, tmp, v = wk.x32[:k], wk.m32[:k], wk.b1[:k], wk.b2[:k], wk.u32[:k]
    np.right_shift(w, np.uint32(8), out=v)
    np.copyto(x, v.view(np.int32), casting="unsafe")  # exact: < 2^24
    x *= np.float32(2.0**-24)
    with np.errstate(divide="ignore", invalid="ignore"):  # u = 0: x = inf, flagged below
        np.log(x, out=x)
        x *= np.float32(-t)
        np.floor(x, out=m32)
        x -= m32  # the fraction (exact)
    margin = MARGIN32 * t
    np.less(x, margin, out=bad)
    bad |= np.greater(x, 1.0 - margin, out=tmp)
    bad |= np.less(v, np.uint32(1 << 16), out=tmp)  # U < 2^-8 (also u = 0: x = inf)
    m = wk.m[:k]
    np.copyto(m, m32)
    if bad.any():
        idx = np.flatnonzero(bad)
        fresh = bits.words(idx.size) >> np.uint64(32)
        v63 = (np.right_shift(w[idx], np.uint32(1)).astype(np.uint64) << np.uint64(32)) | fresh
        m[idx] = _geometric(v63 << _ONE, t, bits)
    return m


def _check_scale(name: str, value: float) -> None:
    if not (0 < value < MAX_T and math.isfinite(value)):
        raise ValueError(f"{name} must be in (0, 2^26) grid steps, got {value!r}.")


def _sign_bits32(w: np.ndarray, wk: _Work) -> np.ndarray:
    """uint64 words with only bit 63 set to the low bit of each uint32 in ``w`` (in wk.u)."""
    u = wk.u[: w.size]
    np.copyto(u, w, casting="unsafe")
    u <<= _SHIFT63
    return u


def _signed(m: np.ndarray, w: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """m (float64 >= +0.0) with the sign bit of each entry set from the low bit of ``w`` (in place; ``tmp`` a uint64
    scratch buffer of m's size)."""
    mv = m.view(np.uint64)
    mv |= np.left_shift(w, _SHIFT63, out=tmp)
    return m


def _dlap_spare(k: int, t: float) -> int:
    """Spare draws per k DLap(t) draws: ~1.3x the expected (negative, 0) rejections, (1 - e^(-1/t)) / 2 each."""
    return int(-math.expm1(-1.0 / t) / 2.0 * 1.3 * k) + 16


def _dlap_chunk(k: int, t: float, bits: SecureBits, work: _Work | None = None) -> np.ndarray:
    """k i.i.d. DLap(t) draws (float64; in ``work``'s buffers when given). t <= SMALL_T: one 32-bit word per draw
    (:func:`_geometric32`); else one 64-bit word (:func:`_geometric`).

    Y = +-G with (negative, 0) rejected (0 would otherwise have twice its probability; CKS Algorithm 2). A few spare
    draws are made with the k; a rejected one among the first k takes the next valid spare (in order: which spare
    goes where depends only on the rejection pattern, so each output is an independent DLap(t) draw)."""
    kk = k + _dlap_spare(k, t)
    wk = work if work is not None and work.x.size >= kk else _Work(kk)
    if t <= SMALL_T:
        w32 = bits.words((kk + 1) // 2, wk.w).view(np.uint32)[:kk]
        m = _geometric32(w32, t, bits, wk)
        mv = m.view(np.uint64)
        mv |= _sign_bits32(w32, wk)
    else:
        w = bits.words(kk, wk.w)
        m = _signed(_geometric(w, t, bits, wk), w, wk.u[:kk])
    redo = np.equal(m.view(np.uint64), _SIGN, out=wk.b1[:kk])
    if redo[:k].any():
        bad = np.flatnonzero(redo[:k])
        spare = k + np.flatnonzero(~redo[k:])[: bad.size]
        m[bad[: spare.size]] = m[spare]
        if spare.size < bad.size:
            m[bad[spare.size:]] = _dlap_chunk(bad.size - spare.size, t, bits)
    return m[:k]


def discrete_laplace(n: int, t: float, bits: SecureBits) -> np.ndarray:
    """n i.i.d. DLap(t) integers (as float64): P(y) proportional to exp(-|y| / t) on all integers y."""
    _check_scale("t", t)
    out = np.empty(n, dtype=np.float64)
    k = min(CHUNK, n)
    wk = _Work(k + _dlap_spare(k, t))
    for s in range(0, n, CHUNK):
        out[s:s + CHUNK] = _dlap_chunk(min(CHUNK, n - s), t, bits, wk)
    return out


class LaplaceDraws:
    """Repeated DLap(t) draws from one bit stream with reused buffers: ``draws(k)`` returns k i.i.d. draws (float64)
    in a buffer that the next call overwrites (k <= CHUNK per call is cheapest; more is drawn chunk by chunk)."""

    def __init__(self, t: float, bits: SecureBits) -> None:
        _check_scale("t", t)
        self.t, self.bits = t, bits
        self._work = _Work(CHUNK + _dlap_spare(CHUNK, t))

    def __call__(self, k: int) -> np.ndarray:
        if k <= CHUNK:
            return _dlap_chunk(k, self.t, self.bits, self._work)
        return discrete_laplace(k, self.t, self.bits)


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


def _accept64(v: np.ndarray, g: np.ndarray, r: np.ndarray, s2: float, t: float, bits: SecureBits) -> np.ndarray:
    """Acceptance V < exp(-(r/t + E)) exactly, E = (g - s2/t)^2 / (2 s2), V with 63-bit prefixes ``v`` (uint64),
    for proposals |Y| = ``g`` = t A + r (float64 integers; t a power of two).

    Float64 decision: ln v is within 2^-47 of ln V for V >= 2^-23, and r/t + E within (r/t + E) 2^-50 + 2^-45 of
    its exact value, so the sign of ln V + r/t + E is exact where it is more than ACCEPT_TOL from 0 (the exponent
    is < 2^19 there; a larger one is a sure rejection since -ln V <= 16 for V >= 2^-23); the rest is decided
    exactly by :func:`_accept_exact` (decimal arithmetic)."""
    e = g - s2 / t
    e *= e
    e *= 1.0 / (2.0 * s2)
    e += r / t
    with np.errstate(divide="ignore"):
        lv = np.log(v.view(np.int64) * _TWO63)
    bad = lv < math.log(ACCEPT_MIN_V)
    lv += e
    accept = lv < 0.0
    bad |= np.abs(lv) <= ACCEPT_TOL
    if bad.any():
        sd, td = Decimal(s2), Decimal(t)
        for i in np.flatnonzero(bad):
            with localcontext() as ctx:
                ctx.prec = 200  # exact: g, r, s2 and t are floats (<= 2^53 bits), so 200 digits hold them
                dd = Decimal(int(g[i])) - sd / td
                ex = Decimal(int(r[i])) / td + dd * dd / (2 * sd)
            accept[i] = _accept_exact(int(v[i]), ex, bits)
    return accept


def proposal_scale(sigma: float) -> float:
    """The discrete Gaussian's proposal scale: the power of two nearest sigma (within a factor sqrt 2)."""
    return math.ldexp(1.0, max(0, round(math.log2(sigma))))


def _dgauss_fill(out: np.ndarray, sigma: float, bits: SecureBits, wk: _Work) -> None:
    """Fill ``out`` with i.i.d. N_Z(0, sigma^2) (sigma^2 = the float64 sigma * sigma), exactly.

    CKS 2020 Algorithm 3 (rejection from a discrete Laplace proposal) with the Laplace itself sampled by rejection
    (as in CKS Algorithm 1, a coarse geometric plus a uniform remainder), both acceptances decided by one uniform:
    - proposal: |Y| = c A + R and a sign, t = :func:`proposal_scale` (a power of two), t' = min(t, COARSE_T), c =
      t / t', A ~ Geometric(e^(-1/t')) = floor(-t' ln U) exactly (:func:`_geometric32`), R uniform on {0, ..., c - 1}
      (log2 c secure bits), the sign one bit; (negative, 0) rejected. P(|Y| = g) is proportional to e^(-A/t').
    - accept when V < e^(-R/t) exp(-(g - sigma^2/t)^2 / (2 sigma^2)), i.e. ln V + R/t + E < 0: the kept law is
      proportional to e^(-g/t) e^(-(g - sigma^2/t)^2 / (2 sigma^2)), which is proportional to e^(-g^2 / (2 sigma^2)),
      for any t > 0 (acceptance ~0.66-0.75 for t/sigma in [0.7, 1.4], times e^(-1/t') at worst for R).
    Every slot of ``out`` gets one proposal, all decided at once; the rejected slots then take the accepted
    proposals of a further batch, in order (which proposals are used depends only on the accept pattern, so each
    output is an independent draw of the target).

    The acceptance is decided first in float32 on V's 24-bit prefix (exact in float32): for V >= 2^-8 ln u is
    within 2^-16 (interval) + 2^-19 (4 ulps of |ln u| < 8) of ln V, the exponent is computed in float64, so the
    sign is exact where ln u + R/t + E is more than ACCEPT_TOL32 (2^-12: 14x room) from 0. The rest (~1%) continues
    in :func:`_accept64` on V's 63-bit prefix = its 32 bits and 31 fresh bits."""
    n = out.size
    y, accept = _dgauss_propose(n, sigma, bits, wk)
    out[:] = y
    todo = np.flatnonzero(~accept)  # slots whose proposal was rejected
    while todo.size:  # they take the accepted proposals of one more batch, in order
        y, accept = _dgauss_propose(min(wk.x.size, int(todo.size / 0.6) + 64), sigma, bits, wk)
        got = y[accept][: todo.size]
        out[todo[: got.size]] = got
        todo = todo[got.size:]


def _dgauss_propose(k: int, sigma: float, bits: SecureBits, wk: _Work) -> tuple[np.ndarray, np.ndarray]:
    """k proposals of :func:`_dgauss_fill` (signed, float64) and their exact accept decisions (in wk's buffers)."""
    t = proposal_scale(sigma)
    tp = min(t, COARSE_T)
    j = int(math.log2(t / tp))
    s2 = sigma * sigma
    a, b = s2 / t, 1.0 / (2.0 * s2)
    w = bits.words((3 * k + 1) // 2, wk.w).view(np.uint32)
    wa, wr, wv = w[:k], w[k:2 * k], w[2 * k:3 * k]  # A's U; R (top j bits) and the sign (bit 0); V
    g = _geometric32(wa, tp, bits, wk)  # A, in wk.m; wk.x, x32, b1, b2, u, u32 are free again
    e, r, lv, accept, bad, tmp = wk.e[:k], wk.x[:k], wk.x[:k], wk.b1[:k], wk.b2[:k], wk.b3[:k]
    x32, v24 = wk.x32[:k], wk.u32[:k]
    if j:
        np.right_shift(wr, np.uint32(32 - j), out=v24)
        np.copyto(r, v24)
        g *= t / tp
        g += r  # c A + R: exact integers < 2^53
    np.subtract(g, a, out=e)
    e *= e
    e *= b
    if j:
        r *= 1.0 / t  # exact (t a power of two)
        e += r  # R/t + E
    np.right_shift(wv, np.uint32(8), out=v24)
    np.copyto(x32, v24.view(np.int32), casting="unsafe")  # exact: < 2^24
    x32 *= np.float32(2.0**-24)
    with np.errstate(divide="ignore"):
        np.log(x32, out=x32)
    np.less(x32, np.float32(-5.5), out=bad)  # u < e^-5.5 (covers u < 2^-8; u = 0)
    np.add(x32, e, out=lv)  # ln u + R/t + E (float64); r is no longer needed
    np.less(lv, 0.0, out=accept)
    np.abs(lv, out=lv)
    bad |= np.less_equal(lv, ACCEPT_TOL32, out=tmp)
    if bad.any():
        idx = np.flatnonzero(bad)
        fresh = bits.words(idx.size) >> np.uint64(33)
        v63 = (wv[idx].astype(np.uint64) << np.uint64(31)) | fresh
        ri = (wr[idx] >> np.uint32(32 - j)).astype(np.float64) if j else np.zeros(idx.size)
        accept[idx] = _accept64(v63, g[idx], ri, s2, t, bits)
    if np.equal(g, 0.0, out=tmp).any():
        tmp &= (wr & np.uint32(1)) == 1
        accept[tmp] = False  # (negative, 0) is rejected (CKS Algorithm 2)
    su = wk.u[:k]
    np.copyto(su, wr)
    return _signed(g, su, wk.x.view(np.uint64)[:k]), accept  # sign = bit 0 of wr


def discrete_gaussian(n: int, sigma: float, bits: SecureBits) -> np.ndarray:
    """n i.i.d. N_Z(0, sigma^2) integers (as float64), CKS Algorithm 3 vectorized with exact acceptance."""
    _check_scale("sigma", sigma)
    out = np.empty(n, dtype=np.float64)
    wk = _Work(_GAUSS_BATCH)
    for s in range(0, n, CHUNK):
        _dgauss_fill(out[s:s + CHUNK], sigma, bits, wk)
    return out


def _noisy(values: np.ndarray, noise: float, draw: Callable[[int], np.ndarray], dtype: Any) -> np.ndarray:
    """values rounded to grid_for(noise) plus integer noise ``draw(k)`` on it, chunk by chunk (cache-sized
    temporaries): rint(v / grid) and the sum are exact in float64 (grid a power of two, integers < 2^53); the
    result is cast to ``dtype`` (a post-processing)."""
    g = grid_for(noise)
    flat = np.ascontiguousarray(values).reshape(-1)
    out = np.empty(flat.size, dtype=dtype)
    buf = np.empty(min(CHUNK, flat.size), dtype=np.float64)
    for s in range(0, flat.size, CHUNK):
        k = min(CHUNK, flat.size - s)
        z = buf[:k]
        np.multiply(flat[s:s + k], 1.0 / g, out=z, dtype=np.float64)
        np.rint(z, out=z)
        z += draw(k)
        np.multiply(z, g, out=out[s:s + k], casting="same_kind")
    return out.reshape(np.shape(values))


def laplace(values: np.ndarray, scale: float, bits: SecureBits | None = None, dtype: Any = np.float64) -> np.ndarray:
    """values rounded to grid_for(scale), plus i.i.d. exact discrete Laplace noise of scale ``scale`` (``dtype``,
    float64 by default: exact on the grid; float32 output is the float64 result rounded, a post-processing)."""
    t = scale / grid_for(scale)
    _check_scale("t", t)
    b = bits or SecureBits()
    k = min(CHUNK, int(np.size(values)))
    wk = _Work(k + _dlap_spare(k, t))
    return _noisy(values, scale, lambda k: _dlap_chunk(k, t, b, wk), dtype)


def gaussian(values: np.ndarray, std: float, bits: SecureBits | None = None, dtype: Any = np.float64) -> np.ndarray:
    """values rounded to grid_for(std), plus i.i.d. exact discrete Gaussian noise of parameter ``std`` (``dtype``,
    as :func:`laplace`)."""
    sigma = std / grid_for(std)
    _check_scale("sigma", sigma)
    b = bits or SecureBits()

    buf = np.empty(min(CHUNK, int(np.size(values))), dtype=np.float64)
    wk = _Work(_GAUSS_BATCH)

    def draw(k: int) -> np.ndarray:
        _dgauss_fill(buf[:k], sigma, b, wk)
        return buf[:k]

    return _noisy(values, std, draw, dtype)


def laplace_epsilon(scale: float, l1_sensitivity: float, dim: int) -> float:
    """Pure epsilon of :func:`laplace` on a ``dim``-vector: rounding moves each coordinate by <= grid / 2, so the
    rounded inputs differ by <= l1_sensitivity + dim * grid in L1; DLap(scale / grid) per grid step gives that over
    scale (CKS 2020, Proposition on the discrete Laplace)."""
    return (l1_sensitivity + dim * grid_for(scale)) / scale


def gaussian_l2_sensitivity(std: float, l2_sensitivity: float, dim: int) -> float:
    """L2 distance of two grid-rounded inputs: <= l2_sensitivity + sqrt(dim) * grid."""
    return l2_sensitivity + math.sqrt(dim) * grid_for(std)
