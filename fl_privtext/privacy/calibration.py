"""Closed-form privacy calibration: per-bit worst-case epsilon and the analytic Gaussian mechanism."""

from __future__ import annotations

import math

import numpy as np


def per_bit_epsilon_terms(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per-bit worst-case privacy loss max(|ln(p_j/q_j)|, |ln((1-p_j)/(1-q_j))|), shape (D,).

    For bit j reported as 1 with probability p_j (input bit 1) or q_j (input bit 0), the two inputs of a pair may
    take either value and the output either value, so the largest log-likelihood ratio of that bit is the larger
    of the two terms (inf when one probability is 0 or 1 and the other is not; 0 when p_j == q_j).
    """
    p64 = np.asarray(p, dtype=np.float64)
    q64 = np.asarray(q, dtype=np.float64)
    if p64.shape != q64.shape:
        raise ValueError(f"p and q must have the same shape, got {p64.shape} and {q64.shape}.")
    if ((p64 < 0) | (p64 > 1) | (q64 < 0) | (q64 > 1)).any():
        raise ValueError("Bit probabilities must lie in [0, 1].")
    with np.errstate(divide="ignore", invalid="ignore"):
        ones = np.abs(np.log(p64) - np.log(q64))
        zeros = np.abs(np.log1p(-p64) - np.log1p(-q64))
    terms = np.fmax(ones, zeros)  # fmax ignores the NaN of an impossible output (0/0)
    return np.where(p64 == q64, 0.0, terms)


def per_bit_epsilon(p: np.ndarray, q: np.ndarray) -> float:
    """Worst-case epsilon of independent per-bit randomisation over inputs that may differ in every bit.

    eps = sum_j max(|ln(p_j/q_j)|, |ln((1-p_j)/(1-q_j))|). The bound is attained: pick, for each bit, the input
    values and output value of its larger term; independence multiplies the ratios. This is the value that must be
    reported next to any nominal claim for OME, SUE/OUE on a code, or bit-vector randomized response.
    """
    return float(np.sum(per_bit_epsilon_terms(p, q)))


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Smallest delta for which N(0, sigma^2) noise is (epsilon, delta)-DP at L2 sensitivity ``sensitivity``.

    Balle & Wang (ICML 2018), Theorem 8: delta = Phi(D/(2s) - e*s/D) - e^e * Phi(-D/(2s) - e*s/D).
    """
    from scipy import special

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    first = special.ndtr(a - b)
    second = math.exp(epsilon + float(special.log_ndtr(-a - b)))
    return float(max(0.0, first - second))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float, *, rtol: float = 1e-12) -> float:
    """Smallest sigma (to relative tolerance ``rtol``) with gaussian_delta(sigma) <= delta (Balle & Wang 2018).

    Bisection on log sigma of the exact condition; the returned sigma is on the feasible side.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}.")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in the open interval (0, 1), got {delta}.")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity}.")
    hi = classic_gaussian_sigma(min(epsilon, 1.0), delta, sensitivity)
    while gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    lo = hi / 2.0
    while gaussian_delta(lo, epsilon, sensitivity) <= delta:
        hi, lo = lo, lo / 2.0
    while (hi - lo) > rtol * hi:
        mid = math.sqrt(lo * hi)
        if gaussian_delta(mid, epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth (2014) Theorem A.1 sigma = D * sqrt(2 ln(1.25/delta)) / eps (valid only for eps <= 1)."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
