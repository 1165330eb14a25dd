"""Model selection from a secure sum (``server.aggregate = secagg``, ``server.learner = auto``): two-fold
cross-validation on aggregates only, the constant predictor among the candidates.

The server holds no per-user data, so it cannot cross-validate as on uploads (`fl_privtext.server.selection`).
Instead the clients split their users into two folds by a PUBLIC rule on the user id
(`fl_privtext.client.aggregate.user_fold`, a keyed hash with a public seed) and put both folds' statistics (per-class
counts, sums and the second moment) into the same secure sum, one block per fold. A user lies in one fold, so the
sum's sensitivity and its privacy are those of the unsplit sum (proof in `fl_privtext.client.aggregate`); the price is
utility: the model finally fitted on both folds carries twice the noise variance of an unsplit sum (the two blocks'
noises add), and the scoring needs the second moment.

Per direction (fit on fold a, score on fold b, then the other way round) and candidate (``constant``: the log prior;
``centroid``; ``lda`` when the second moment is in the sum), the candidate's linear rule s(x) = W x + b (K x D, the
exported clean head of `fl_privtext.server.aggregate.fit_from_aggregate`) is scored on fold b by its held-out accuracy
under a Gaussian model of the K-dimensional scores: for class k's records z = W x is taken as N(W mu_k, W S_w W^T), with
mu_k fold b's class mean and S_w its pooled within-class covariance, both from fold b's first and second moments:
u_k = W sums_k, Q = W second W^T, S_w = (Q - sum_k u_k u_k^T / c_k + v W W^T sum_k 1 / c_k) / (n - K) (the last term:
errors-in-variables for the known noise of variance v per coordinate in the class sums; the noise in Q has mean 0).
Accuracy_k = P(argmax(z + b) = k) by Monte Carlo from a public seed (common random numbers across candidates); the
held-out accuracy is sum_k c_k accuracy_k / n. For the constant it is exactly fold b's share of fold a's majority
class. Only K x K projections of fold b's moments enter, which keeps the criterion resolvable where the D x D second
moment is not. Without the second moment in the sum (public data, ``privacy.projection = pca``:
`fl_privtext.server.aggregate.public_within`) S_w is the public rows' total covariance: wider than the within-class one
by the between-class part, so every candidate's held-out accuracy is understated alike (the constant's is exact).
What the model assumes: Gaussian class-conditional scores with a shared covariance (a projection of
D-dimensional embeddings onto K directions; the check is the on-device evaluation, which is exact).

Decision (as on uploads, `fl_privtext.server.selection`): the moment head (centroid or lda) with the higher held-out
accuracy ships unless that accuracy is significantly BELOW the constant's (``worse_than_constant``: more than z
standard errors, one-sided 95%, Bonferroni over the learners tried); then the constant. Why not "a head only where it
beats the constant significantly" (``beats_constant``, still reported), the rule until 2026-11-28 (eleventh session): its test has no
power at the sizes that matter and what it throws away is resolved. Both heads carry their own gate: their class-mean
deviations are James-Stein shrunk by the sum's known noise (`fl_privtext.server.aggregate.denoised_means`), so an
unresolved class falls back to the grand mean and a head without signal answers as the constant does
(tests/server/test_secure_stats_selection.py). Measured on blog 10k (MiniLM, central epsilon 1, 10 repetitions,
`simulations/secagg_blog.py --seeds 10`; docs/results/secagg_selection.md): the held-out advantage of the heads over
the constant was +7.0 points with a standard error of 6.5, so the old rule kept the constant in 7 of 10 repetitions
(34.9% exact on device) while the shipped head reaches 53-56% in every one; "the best estimate, the constant where
no head is estimated better" still kept it in 4 (43.4%). The standard error has two parts: the sum's noise (a
parametric bootstrap: fold b's statistics redrawn with the known noise law, the same redraws for every candidate)
and the users' sampling (E[d^2] <= P(the candidate and the constant disagree) for the per-user difference d of
correctness, a bound, from the same Gaussian model, divided by n). ``utility.candidates`` holds every score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from fl_privtext.client.aggregate import StatsLayout
from fl_privtext.rng import generator
from fl_privtext.server.aggregate import Aggregate, fit_from_aggregate
from fl_privtext.server.learners import linear_export

__all__ = ["ConstantRule", "candidate_rule", "held_out_accuracy", "select_from_folds"]

DRAWS = 4000  # Monte-Carlo draws of the Gaussian score model, per class
REDRAWS = 40  # parametric-bootstrap redraws of the held-out fold's noise
ALPHA = 0.05  # one-sided level of "beats the constant" (Bonferroni over the learners tried)


@dataclass(frozen=True)
class ConstantRule:
    """The constant predictor as a linear head (W = 0, b = log priors): what the clients run when every head is significantly worse."""

    w: np.ndarray
    b: np.ndarray

    def export(self) -> dict[str, np.ndarray]:
        return linear_export(self.w, self.b)


def candidate_rule(name: str, agg: Aggregate, public: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(W (K, D), b (K,)): the clean linear head of candidate ``name`` fitted on ``agg`` (``public``: the public
    covariance, `fl_privtext.server.aggregate.public_within`)."""
    k, d = agg.layout.num_classes, agg.layout.dim
    if name == "constant":
        return np.zeros((k, d)), np.log(agg.stats.priors)
    model, _ = fit_from_aggregate(name, agg, public)
    return np.asarray(model.w_clean, np.float64), np.asarray(model.b_clean, np.float64)


def _score_model(w: np.ndarray, b: np.ndarray, counts: np.ndarray, sums: np.ndarray, second: np.ndarray | None,
                 noise_var: float, z: np.ndarray, public: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """(held-out accuracy, per-class prediction shares (K, K): row k = the law of the predicted class of class k);
    the within-class covariance from ``second``, else the ``public`` covariance."""
    k = len(counts)
    c = np.clip(counts, 1e-9, None)
    n = float(c.sum())
    u = sums @ w.T  # (K classes, K scores)
    if second is None:
        if public is None:
            raise ValueError("scoring a held-out fold needs its second moment or a public covariance.")
        within = w @ public @ w.T
    else:
        q = w @ second @ w.T
        ww = w @ w.T
        within = (q - (u.T / c) @ u + noise_var * ww * float((1.0 / c).sum())) / max(n - k, 1.0)
    within = (within + within.T) / 2
    lam, vec = np.linalg.eigh(within)
    root = vec * np.sqrt(np.clip(lam, 0.0, None))  # (K, K): within = root root^T (negative noise eigenvalues cut)
    mu = u / c[:, None] + b
    shares = np.zeros((k, k))
    spread = z @ root.T  # (DRAWS, K)
    for cls in range(k):
        pred = (mu[cls] + spread).argmax(axis=1)
        shares[cls] = np.bincount(pred, minlength=k) / len(pred)
    acc = float((c * np.diag(shares)).sum() / n)
    return acc, shares


def held_out_accuracy(w: np.ndarray, b: np.ndarray, counts: np.ndarray, sums: np.ndarray, second: np.ndarray,
                      noise_var: float = 0.0, draws: int = DRAWS, seed: int = 0) -> float:
    """Held-out accuracy of the rule argmax(W x + b) on a fold with statistics (counts (K,), sums (K, D), second
    (D, D)) whose class sums carry noise of variance ``noise_var`` per coordinate (module docstring)."""
    k = len(counts)
    if w.shape != (k, sums.shape[1]) or b.shape != (k,) or second.shape != (sums.shape[1],) * 2:
        raise ValueError(f"held_out_accuracy expects W (K, D), b (K,), second (D, D); got {w.shape}, {b.shape}, "
                         f"{second.shape}.")
    z = generator(int(seed), "aggregate-selection-draws", k).standard_normal((draws, k))
    return _score_model(w, b, counts, sums, second, noise_var, z)[0]


def _redraw(g: np.random.Generator, counts: np.ndarray, sums: np.ndarray, second: np.ndarray | None, v: float,
            second_var: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The fold's statistics with a fresh draw of the sum's noise law added (second moment: v second_var on the
    diagonal, half that off it: the law of the unscaled upper triangle, divided by the layout's weight)."""
    sd = math.sqrt(v)
    if second is None:
        return counts + g.normal(0.0, sd, counts.shape), sums + g.normal(0.0, sd, sums.shape), None
    d = second.shape[0]
    sm = sd * math.sqrt(second_var)
    e = np.triu(g.normal(0.0, sm / math.sqrt(2.0), (d, d)), 1)
    e = e + e.T + np.diag(g.normal(0.0, sm, d))
    return counts + g.normal(0.0, sd, counts.shape), sums + g.normal(0.0, sd, sums.shape), second + e


def select_from_folds(total: np.ndarray, layout: StatsLayout, *, seed: int = 0, alpha: float = ALPHA,
                      redraws: int = REDRAWS, draws: int = DRAWS, public: np.ndarray | None = None
                      ) -> tuple[str, dict[str, dict[str, Any]]]:
    """The learner ``auto`` picks from a two-fold secure sum (module docstring) and, per candidate, its held-out
    accuracy (mean of both directions), its advantage over the constant, that advantage's standard error and
    whether it beats the constant. ``seed``: the public seed of the Monte-Carlo and bootstrap draws; ``public``:
    the public covariance standing in for the second moment (`fl_privtext.server.aggregate.public_within`)."""
    if layout.folds != 2 or not (layout.second or public is not None):
        raise ValueError("selection from aggregates needs a two-fold layout with the second moment "
                         f"(StatsLayout(folds=2, second=True)) or a public covariance; got {layout!r}.")
    names = ("constant", "centroid", "lda")
    k = layout.num_classes
    z = generator(int(seed), "aggregate-selection-draws", k).standard_normal((draws, k))
    acc: dict[str, list[float]] = {n: [] for n in names}
    diff_var = {n: 0.0 for n in names}
    for fit in (0, 1):
        agg = Aggregate.of(total, layout, fold=fit)
        held = layout.split_fold(total, 1 - fit)
        v = agg.noise_var
        rules = {n: candidate_rule(n, agg, public) for n in names}
        base: dict[str, float] = {}
        shares: dict[str, np.ndarray] = {}
        for n, (w, b) in rules.items():
            base[n], shares[n] = _score_model(w, b, held[0], held[1], held[2], v, z, public)
            acc[n].append(base[n])
        g = generator(int(seed), "aggregate-selection-noise", fit)
        boot = {n: np.zeros(redraws) for n in names}
        for r in range(redraws):
            c2, s2, m2 = _redraw(g, held[0], held[1], held[2], v, layout.second_var)
            for n, (w, b) in rules.items():
                boot[n][r] = _score_model(w, b, c2, s2, m2, v, z, public)[0]
        c = np.clip(held[0], 1e-9, None)
        n_users = max(float(c.sum()), 1.0)
        j = int(np.argmax(rules["constant"][1]))
        for n in names:
            noise = float(np.var(boot[n] - boot["constant"], ddof=1)) if redraws > 1 else 0.0
            disagree = float((c * (1.0 - shares[n][:, j])).sum() / n_users)  # P(prediction != the constant's)
            diff_var[n] += (noise + disagree / n_users) / 4.0  # the mean of the two directions
    tried = len(names) - 1
    crit = float(sps.norm.ppf(1.0 - alpha / tried))
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        adv = float(np.mean(acc[n]) - np.mean(acc["constant"]))
        se = math.sqrt(diff_var[n])
        out[n] = {"accuracy": float(np.mean(acc[n])), "advantage": adv, "standard_error": se,
                  "beats_constant": bool(n != "constant" and adv > crit * se),
                  "worse_than_constant": bool(n != "constant" and adv < -crit * se)}
    head = max(names[1:], key=lambda n: out[n]["accuracy"])  # the moment head estimated best on device
    return ("constant" if out[head]["worse_than_constant"] else head), out
