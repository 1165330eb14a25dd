"""LDP ceilings: the best any attacker can do against an (epsilon, delta)-LDP release, and the violation test.

Attribute inference (prior pi over k classes). Any guessing rule has a_z = Pr[guess z | secret z]; LDP gives
Pr[guess z | z'] >= e^-eps (a_z - delta) for every z', and the guesses of one secret sum to 1, so
a_j + e^-eps sum_{z != j} a_z <= 1 (+ delta terms). Maximising sum_z pi_z a_z over that polytope is attained by
guessing uniformly among the s most likely classes: accuracy <= max_s (pi_(1) + ... + pi_(s)) / (1 + (s-1) e^-eps),
plus delta. s = 1 is the prior's majority; s = k with a uniform prior is the textbook e^eps/(e^eps + k - 1).
tests/attacks/test_ceilings.py checks this against the linear program.

Re-identification among M candidates: top-1 <= e^eps/(e^eps + M - 1) (+ delta). Membership (one upload against
one candidate): every test's ROC lies under TPR <= min(e^eps FPR + delta, 1 - e^-eps (1 - FPR - delta)); the AUC
ceiling is the area under that curve.

A ceiling of 1 (or the upper end of the scale) is vacuous: the mechanism's true epsilon promises nothing there.
"""

from __future__ import annotations

import math

import numpy as np

from fl_privtext.attacks.chunks import row_chunks
from fl_privtext.metrics import binomial_interval

VACUOUS_TOL = 1e-6


def _exp_neg(eps: float) -> float:
    return 0.0 if math.isinf(eps) or eps > 700 else math.exp(-eps)


def attribute_ceiling(prior: np.ndarray, epsilon: float, delta: float = 0.0) -> float:
    """Largest expected accuracy of any attacker guessing a secret with ``prior`` from one eps-LDP release."""
    p = np.sort(np.asarray(prior, np.float64))[::-1]
    p = p / p.sum()
    e = _exp_neg(epsilon)
    s = np.arange(1, len(p) + 1)
    best = float(np.max(np.cumsum(p) / (1 + (s - 1) * e)))
    return min(1.0, best + delta)


def attribute_ceiling_many(priors: np.ndarray, epsilons: np.ndarray, deltas: np.ndarray | float = 0.0) -> np.ndarray:
    """Row-wise :func:`attribute_ceiling` for (U, k) priors and (U,) epsilons (one user each). Computed
    `row_chunks` rows at a time (each row's figure depends on its row alone: the same numbers), so its (U, k) float64
    temporaries (a sorted copy, its normalisation, a cumulative sum, a ratio: ~4 x 8k bytes a user, issue #38) are
    a chunk's; ``priors`` may be a broadcast view (one prior for every user) and is never copied whole."""
    priors = np.asarray(priors)
    eps_all = np.broadcast_to(np.asarray(epsilons, np.float64), priors.shape[:1])
    d_all = np.broadcast_to(np.asarray(deltas, np.float64), priors.shape[:1])
    out = np.empty(len(priors))
    s = np.arange(1, priors.shape[1] + 1)[None, :]
    for c in row_chunks(len(priors)):
        p = -np.sort(-np.asarray(priors[c], np.float64), axis=1)
        p = p / p.sum(axis=1, keepdims=True)
        eps = eps_all[c]
        with np.errstate(over="ignore"):
            e = np.where(np.isinf(eps) | (eps > 700), 0.0, np.exp(-np.minimum(eps, 700)))
        best = np.max(np.cumsum(p, axis=1) / (1 + (s - 1) * e[:, None]), axis=1)
        out[c] = np.minimum(1.0, best + d_all[c])
    return out


def reidentification_ceiling(epsilon: float, pool: int, delta: float = 0.0) -> float:
    """Top-1 accuracy bound among ``pool`` candidates: e^eps/(e^eps + M - 1) + delta."""
    e = _exp_neg(epsilon)
    return min(1.0, 1.0 / (1.0 + (pool - 1) * e) + delta)


def reidentification_topk_ceiling(epsilon: float, pool: int, k: int, delta: float = 0.0) -> float:
    """Top-k bound: k e^eps / (k e^eps + M - k) + delta (the same argument with a guess set of size k)."""
    e = _exp_neg(epsilon)
    k = min(k, pool)
    return min(1.0, k / (k + (pool - k) * e) + delta)


def membership_tpr_ceiling(epsilon: float, fpr: float, delta: float = 0.0) -> float:
    """Largest TPR at false-positive rate ``fpr`` of any test between two eps-LDP releases."""
    e = _exp_neg(epsilon)
    up = math.inf if e == 0 else fpr / e + delta
    return float(min(1.0, up, 1.0 - e * (1.0 - fpr - delta)))


def membership_auc_ceiling(epsilon: float, delta: float = 0.0, grid: int = 20001) -> float:
    """Area under the largest ROC curve an eps-LDP release allows."""
    f = np.linspace(0.0, 1.0, grid)
    e = _exp_neg(epsilon)
    up = np.full_like(f, np.inf) if e == 0 else f / e + delta
    tpr = np.clip(np.minimum(up, 1.0 - e * (1.0 - f - delta)), 0.0, 1.0)
    return float(np.trapezoid(tpr, f))


def is_vacuous(ceiling: float, top: float = 1.0) -> bool:
    return ceiling >= top - VACUOUS_TOL


def verdict(successes: float, trials: int, ceiling: float, *, top: float = 1.0) -> dict[str, object]:
    """Attack rate with its 95% Clopper-Pearson interval next to its ceiling; ``violation`` when the lower end of
    the interval exceeds the ceiling (the mechanism leaks more than its true epsilon allows: a bug)."""
    rate = successes / trials if trials else float("nan")
    lo, hi = binomial_interval(rate, trials) if trials else (0.0, 1.0)
    vac = is_vacuous(ceiling, top)
    return {"ci95": [lo, hi], "ceiling": ceiling, "ceiling_vacuous": vac,
            "violation": bool(trials and not vac and lo > ceiling + 1e-12)}
