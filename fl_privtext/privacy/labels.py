"""Optional label privacy: k-ary randomized response (Warner 1965; Kairouz et al. 2016).

Contract: neighbouring relation = any two labels of the user (replacement); the label is kept with probability
p = e^eps / (e^eps + k - 1) and replaced by each of the other k-1 classes with probability 1 / (e^eps + k - 1);
the likelihood ratio is at most p / (1/(e^eps+k-1)) = e^eps, so it is exactly eps-LDP.
"""

from __future__ import annotations

import math

import numpy as np

from fl_privtext.privacy.report import PrivacyReport


def _check(num_classes: int, epsilon: float) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}.")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}.")


def keep_probability(num_classes: int, epsilon: float) -> float:
    """p = e^eps / (e^eps + k - 1), computed stably."""
    _check(num_classes, epsilon)
    return float(1.0 / (1.0 + (num_classes - 1) * math.exp(-epsilon)))


def label_rr(labels: np.ndarray, num_classes: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Randomise an (N,) array of class indices in [0, k) -> (N,) int64."""
    p = keep_probability(num_classes, epsilon)
    y = np.asarray(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got shape {y.shape} and dtype {y.dtype}.")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got values in [{y.min()}, {y.max()}].")
    y = y.astype(np.int64)
    keep = rng.random(y.shape[0]) < p
    shift = rng.integers(1, num_classes, size=y.shape[0])  # uniform over the k-1 other classes
    return np.where(keep, y, (y + shift) % num_classes)


def label_rr_report(num_classes: int, epsilon: float) -> PrivacyReport:
    """PrivacyReport of :func:`label_rr` (exact: nominal = worst case = epsilon)."""
    p = keep_probability(num_classes, epsilon)
    return PrivacyReport(
        mechanism="label-rr",
        epsilon_nominal=epsilon,
        epsilon_worst_case=float(math.log(p * (num_classes - 1) / (1.0 - p))),
        output_dim=1,
        parameters={"num_classes": num_classes, "epsilon": epsilon},
        calibration={"keep_probability": p, "other_class_probability": (1.0 - p) / (num_classes - 1)},
        assumptions=("Local DP of the label under replacement adjacency (any two labels).",
                     "Composes additively with the representation's epsilon when both are released."),
        reference="k-ary randomized response (Warner 1965; Kairouz, Oh & Viswanath 2016).",
    )
