"""The server's (and the eavesdropper's) learners on noisy uploads: constant, centroid, lda, linear, mlp.

Every learner has two heads:
- ``logits(u)``: the rule for a NOISY upload u (per-upload evaluation, cross-validation, the attacks);
- ``export()``: the model shipped to clients for on-device inference (`fl_privtext.ondevice`), applied there to
  E[upload | x], the noise-free mean. For the moment-based learners the two differ: a noisy upload's Bayes rule
  uses the uploads' covariance, a clean point's uses the covariance of the means (uploads' minus the noise law's).

Exported format (stable; `fl_privtext.ondevice.check_model` reads it): a dict of float32 arrays, ``mean`` (D,),
``std`` (D,), ``weight_i`` (out_i, in_i) and ``bias_i`` (out_i,) for layers i = 0..L-1 with ReLU between them; the
client computes ((x - mean) / std) @ weight_0.T + bias_0 -> ... A linear learner is a 0-hidden-layer MLP (L = 1).

Why the clean heads are plug-in rules (the class means of the uploads m_k in w_k = Sigma^-1 m_k and in the bias
-m_k Sigma^-1 m_k / 2, Sigma the clean within-class covariance by the method of moments). The bias's expectation
exceeds the true -mu_k Sigma^-1 mu_k / 2 by tr(Sigma^-1 S_w) / (2 n_k) (S_w: the uploads' within-class covariance, the
mechanism's noise included), and this head used to add that back (unbiased). It must not: the score's random part,
e_k Sigma^-1 x for the error e_k of m_k, has a variance of the same order, largest for the rarest class, and an
argmax over scores made unbiased in mean picks the class with the noisiest score. Measured (one seed, on device,
MiniLM, PrivUnitG, 8k uploads, 10 classes with 39 to 2,127 uploads each, majority 27%): blog at true epsilon 4, lda
9% corrected / 49% plug-in, centroid 12% / 50%; at epsilon 1, 0.7% (the rarest class) / 32%; AG news at epsilon 4,
48% / 58% (majority 59%). The uncorrected term penalises exactly the classes whose means are least resolved; as n
grows both rules tend to the Bayes rule. ``tests/server/test_server_learners.py`` keeps the failing case.

Why the clean heads keep the UNSHRUNK means (measured 2026-11-29, issue #37 item 3: the frontier's MiniLM cells under
PrivUnitG at true epsilon, blog 1 / 2 / 4 / 8 / 16 and AG news 1 / 4 / 8, seeds 0-2, exact on device). Where the LDA
loses to the linear head (blog, seed 0: 27.4% against 31.7% at epsilon 1, 37.1% against 41.4% at 2) the plug-in means
are mostly noise: the deviation's error v_k tr S_w (`ClassStats.deviation_error`, calibrated: E||m_k - grand||^2 - v_k
tr S_w matched the squared deviations of the referee's clean class means to within 4% of the error on average) is
26-540x the squared deviation at epsilon 1, 7-140x at 2 and 2-38x at 4 (seed 0), so the plug-in penalty tr(Sigma^-1 S_w)
v_k / 2 (48 to 3,553 nats at epsilon 2) decides the rule, which then predicts only the 2-3 largest of the 10 classes.
The covariance is not the cause there (the referee's class means with this head's covariance: 60-63% at every epsilon),
nor the JS factor's error term (above), nor the means' error left out of the covariance (Sigma + S_w / n: no gain).
Putting the James-Stein means in the clean head (per class as `shrunk_means`, in the Sigma^-1 metric, or one
count-weighted factor for all classes) gains up to 10 points on blog at epsilon 2-4 (epsilon 2: 44.5-47.1% in seeds 0-1,
40.1-41.5% in seed 2; epsilon 4: 54.0-56.5%; epsilon 1: -4 to +6) but costs AG news 0.5-4.9 points in every cell (blog
at epsilon 16: up to 1.6). Why: on AG news the clean covariance is wrong along the classes' own directions (the top
clean eigenvalue, 0.094, lies inside the noise edge at epsilon 4 and `soft_spectrum` returns 0.006 along its direction),
so the rare classes' separations are overstated and the prior's shift toward the majority too small: with the referee's
class means and this covariance AG scores 55-58% at epsilon 1-4, below the constant's 58.7% (75% with the referee's
covariance too), and the shrunk means over-predict the 4% class 3x. The plug-in penalty suppresses exactly those
classes. A covariance made right along the class-mean directions does not rescue shrunk means (measured the same day on
the same 24 cells: the variance along those directions estimated from uploads cross-fitted by user, block
replacements of `soft_spectrum`'s estimate, reduced-rank LDA, Sigma + mean(v_k) S_w; and as oracles, the referee's
variances along them or its whole clean covariance): with the noisy means a more correct covariance makes the head
worse (the referee's clean covariance with the server's means: blog 2-27%, AG 36-59%), so `soft_spectrum`'s floor is
regularisation the noisy means need, and the obstacle is the means' noise as the inverse covariance weighs it. The
best rule tried met the 2-point goal in 22 of 24 cells but lost 1.8 points at blog epsilon 16; none reached blog
epsilon 1 seed 0. No server-side rule found tells the two regimes apart (the Gaussian-model estimate
`selection.clean_accuracy`, out of fold, ranks them backwards on blog at epsilon 2).

Other penalties and heads, and a server-side choice among them (measured the same day: `simulations/select_by_clean.py
--data blog-minilm,ag-minilm --eps 1,2,4,8,16 --seed-list 0,1,2 --penalty`, all 30 cells, exact on device;
`penalty_variants` there defines each head). The LDA is within 2 points of the best of centroid / lda / linear in 27 of
the 30 (blog epsilon 1 and 2 seed 0: 4.3 short; epsilon 2 seed 1: 2.1). Giving back a fraction f of the plug-in excess
v_k tr(Sigma^-1 S_w) / 2: f = 0.75 gains blog 3.3-8.2 points at epsilon 1-4 (above the linear head in every such cell
but epsilon 1 seed 0, 30.7% against 31.7%), -0.1 to +1.2 at 8, -0.8 to -2.0 at 16, and costs AG news 0.2-3.3 in all 15
cells; f = 0.25 is within 2 points in 29 of 30 but still 3.8 short at blog epsilon 1 seed 0 and up to 0.7 below the LDA
(3 cells more than 0.5); f = 1 (unbiased, as is a bias -m^A Sigma^-1 m^B / 2 cross-fitted on halves) ships the rarest
class (0.7-25% on blog at epsilon 1-2). No server-side choice of f worked: a parametric bootstrap (deviations drawn
from their empirical-Bayes posterior under a prior N(0, tau^2 Sigma), noisy means redrawn, clean points of spread
Sigma) picks 0.75 on blog at 1-8 but also 0.5-0.75 on AG at 1-4 and blog at 16 (27 of 30, up to 3.3 below the LDA); and
(scratch runs, not kept) with the raw moment covariance as the spread it picks 0 everywhere, the noisy head's
out-of-fold log-loss with the same f prefers f <= 0.25 everywhere, `selection.clean_accuracy` of the f-heads ranks f
backwards on blog, and a per-class f where the class's Sigma^-1 separation is resolved (z > 1-3) finds nothing resolved
on blog at epsilon 1-2. Other heads: those empirical-Bayes means (14 of 30, -10.4 on AG), the flat-prior predictive
N(m_k, Sigma + v_k S_w) with its class-specific quadratic term averaged (never 0.5 below the LDA, but 3.5-3.9 short at
blog epsilon 1 and 2 seed 0), LDA / linear logit blends (27 of 30, -3.4 on AG), the penalty capped at c score-noise sd,
c sqrt(v_k tr(Sigma^-1 S_w)) (scratch; c 0.5-4: at most 27 of 29, -17 points on blog at epsilon 1). So the goal (within
2 points everywhere) is not met: whatever relaxes the penalty helps blog and hurts AG news, and none of these
statistics tells the two apart.

The moment learners (centroid, lda) read only sufficient statistics (`ClassStats`: per-class counts and sums, the
total second moment), accumulated in chunks: O(K D + D^2) memory whatever the number of uploads; from uploads on
disk (a memory map, `fl_privtext.memory.rows_on_disk`) each chunk's pages are dropped once it is summed, so the
fit keeps no copy of the uploads resident. Labels that were
randomised on the clients (k-ary RR, ``privacy.label-epsilon``) are debiased in the statistics: with
R[j, k] = Pr[uploaded k | true j], E[counts_uploaded] = R^T counts and E[sums_uploaded] = R^T sums, so both are
multiplied by R^-T (unbiased; the total second moment does not depend on labels). Their error is then up to
1 / (p - q)^2 times that of exact labels, so under label RR every head uses the James-Stein-shrunk means with that
error counted (`ClassStats.means`, `ClassStats.deviation_error`), and a class whose debiased count is not resolved
from 0 gets the grand mean: the plug-in rule below is for exact labels.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fl_privtext import rng
from fl_privtext.memory import drop_mapped_pages, is_mapped, take_rows
from fl_privtext.metrics import bincount
from fl_privtext.names import LEARNERS
from fl_privtext.server.noise import NoiseLaw

__all__ = [
    "LDA",
    "LEARNERS",
    "MLP",
    "Centroid",
    "ClassStats",
    "Constant",
    "Learner",
    "LearnerInputs",
    "Linear",
    "label_rr_matrix",
    "make_learner",
]

# LEARNERS (fl_privtext.names): the config's names -> factory(LearnerInputs); "auto" picks among the built-ins and the
# constant. A new learner is a class with fit/logits/export and a ``build``, registered with LEARNERS.register.
CHUNK = 65_536
LINEAR_CS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # Linear: the L2 strengths its cross-validation tries
MAX_LINEAR_ROWS = 20_000  # the logistic regression fits on at most this many uploads (a seeded subsample)


class Learner(Protocol):
    name: str

    def fit(self, x: np.ndarray, y: np.ndarray) -> Learner: ...

    def logits(self, x: np.ndarray) -> np.ndarray: ...

    def export(self) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class LearnerInputs:
    """What the server knows when it builds a learner (`make_learner`): each registered factory takes what it needs.
    ``noise``: the mechanism's noise law (or its per-coordinate variance); ``mlp``: MLP keyword arguments (config,
    generator, progress); ``linear_c``: Linear's L2 strength, fixed (None: its own cross-validation);
    ``noisy_only``: the caller scores noisy uploads only (`logits`) and never exports the clean head, so the moment
    and linear learners skip building it (the eavesdropper's families: on the published OME's 3,840 bits the clean
    heads' D x D eigendecompositions and solves were ~20% of a frontier point's CPU; the noisy heads are the same
    numbers either way)."""

    num_classes: int
    noise: np.ndarray | NoiseLaw | None = None
    label_rr: np.ndarray | None = None
    seed: int = 0
    mlp: dict[str, Any] | None = None
    linear_c: float | None = None
    noisy_only: bool = False


def label_rr_matrix(num_classes: int, epsilon: float) -> np.ndarray:
    """(K, K) R[j, k] = Pr[uploaded label k | true label j] of k-ary randomized response (identity at eps = 0,
    which means labels are sent as they are)."""
    if epsilon <= 0:
        return np.eye(num_classes)
    p = 1.0 / (1.0 + (num_classes - 1) * math.exp(-epsilon))
    r = np.full((num_classes, num_classes), (1.0 - p) / (num_classes - 1))
    np.fill_diagonal(r, p)
    return r


MEMO_BYTES = 2 << 20  # ClassStats keeps what it derives up to this size per array (D x D float64 up to D = 512)
COUNT_RESOLUTION = 2.0  # under label RR a class mean is used only where its debiased count is this many sd from 0


@dataclass(frozen=True)
class ClassStats:
    """Sufficient statistics of labelled uploads: counts (K,), sums (K, D), second moment sum u u^T (D, D), the
    per-coordinate noise variance (D,) of the mechanism (`fl_privtext.server.noise`) and the sum of ||u||^4 (the
    standard error of the trace; 0 where unknown)."""

    counts: np.ndarray
    sums: np.ndarray
    second: np.ndarray
    noise: np.ndarray
    fourth: float = 0.0
    # under label RR (`prepared`): (K,) w_k = sum_l A[k, l]^2 c_l, A = R^-T, c the counts as uploaded; None when
    # the labels are exact. The debiased sum of class k is sum_i A[k, label_i] u_i: its error grows with w_k
    # (`deviation_error`), by up to 1 / (p - q)^2 over exact labels
    label_noise: np.ndarray | None = None
    # what is derived from these sums, computed once per object and read-only (`_once`; dataclasses.replace starts
    # afresh): a fit reads the within-class covariance and the means several times, and a selection's centroid and
    # lda fitted on the same fold read the same ones
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def _once(self, key: Any, make: Callable[[], Any], *owners: Any) -> Any:
        """``make()`` the first time ``key`` is asked, its value after that. ``owners``: the objects the value was
        made from (a noise law, an RR matrix), compared by identity and kept alive with it. A value holding an
        array of more than ``MEMO_BYTES`` is not kept (made again each time, as before): a fitted learner keeps its
        statistics, and D x D matrices kept beside them would cost 118 MB each on 3,840-bit uploads."""
        hit = self._memo.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], owners, strict=True)):
            return hit[1]
        value = make()
        parts = value if isinstance(value, tuple) else (value,)
        if all(getattr(v, "nbytes", 0) <= MEMO_BYTES for v in parts):
            self._memo[key] = (owners, value)
        return value

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray, num_classes: int, noise: np.ndarray,
           label_rr: np.ndarray | None = None) -> ClassStats:
        return cls.raw(x, y, num_classes).prepared(noise, label_rr)

    @classmethod
    def raw(cls, x: np.ndarray, y: np.ndarray, num_classes: int) -> ClassStats:
        """The plain sums over the uploads (labels as uploaded, no noise law): additive, so the statistics of a
        union of folds are the sum of theirs and a cross-validation fold's training statistics are the totals
        minus the fold's (`fl_privtext.server.selection`: one pass for every fold). `prepared` makes them usable."""
        n, d = x.shape
        mapped = is_mapped(x)  # a file's rows (`fl_privtext.memory.rows_on_disk`): its pages go after each chunk
        counts = bincount(y, num_classes).astype(np.float64)  # y in any integer type (the server's: int8)
        sums = np.zeros((num_classes, d))
        second = np.zeros((d, d))
        fourth = 0.0
        eye = np.eye(num_classes)
        for s in range(0, n, CHUNK):
            c = np.asarray(x[s:s + CHUNK], np.float64)  # (chunk, D)
            sums += eye[y[s:s + CHUNK]].T @ c  # one-hot (chunk, K) -> per-class sums, a BLAS product
            second += c.T @ c
            sq = np.einsum("ij,ij->i", c, c)
            fourth += float(sq @ sq)
            del c  # before the next chunk's copy: one chunk resident, not two
            if mapped:
                drop_mapped_pages(x)
        return cls(counts, sums, second, np.zeros(d), fourth)

    def __add__(self, other: ClassStats) -> ClassStats:
        return ClassStats(self.counts + other.counts, self.sums + other.sums, self.second + other.second,
                          self.noise, self.fourth + other.fourth)

    def __sub__(self, other: ClassStats) -> ClassStats:
        return ClassStats(self.counts - other.counts, self.sums - other.sums, self.second - other.second,
                          self.noise, self.fourth - other.fourth)

    def prepared(self, noise: np.ndarray, label_rr: np.ndarray | None = None) -> ClassStats:
        """Raw sums (`raw`) with the mechanism's per-coordinate noise variance and, under label RR, the counts and
        sums debiased (module docstring; linear, so debiasing a difference of raw sums is exact). The same object
        for the same ``noise`` and ``label_rr`` objects (`_once`)."""
        return self._once(("prepared", id(noise), id(label_rr)), lambda: self._prepared(noise, label_rr), noise,
                          label_rr)

    def _prepared(self, noise: np.ndarray, label_rr: np.ndarray | None) -> ClassStats:
        counts, sums, label_noise = self.counts, self.sums, None
        if label_rr is not None and not np.allclose(label_rr, np.eye(len(counts))):
            inv_t = np.linalg.inv(label_rr.T)
            label_noise = (inv_t * inv_t) @ np.clip(counts, 0.0, None)  # the raw counts: sum_l A[k, l]^2 c_l
            counts, sums = inv_t @ counts, inv_t @ sums
            counts = np.clip(counts, 1e-9, None)
        return ClassStats(counts, sums, self.second, np.asarray(noise, np.float64), self.fourth, label_noise)

    @property
    def n(self) -> float:
        return float(self.counts.sum())

    def plug_in_means(self) -> np.ndarray:
        """(K, D) the debiased class sums over the debiased counts; a class whose (label-RR debiased) count is below
        one upload has no resolved mean and gets the grand mean (dividing its debiased sum by a count clipped near 0
        overflowed the exported head)."""
        return self._once("plug_in_means", self._plug_in_means)

    def _plug_in_means(self) -> np.ndarray:
        grand = self.sums.sum(axis=0) / max(float(self.counts.sum()), 1e-9)
        resolved = (self.counts >= 1.0)[:, None]
        if self.label_noise is not None:  # the debiased count's own error: sd ~ sqrt(sum_i a_i^2 - n_k)
            resolved &= (self.counts >= COUNT_RESOLUTION * np.sqrt(np.clip(self.label_noise - self.counts, 0.0, None)))[:, None]
        return np.where(resolved, self.sums / np.maximum(self.counts, 1.0)[:, None], grand)

    @property
    def means(self) -> np.ndarray:
        """(K, D) the class means every head uses: the plug-in means (`plug_in_means`) with exact labels; under
        label RR their James-Stein shrinkage (`shrunk_means`). The debiased means' error is then ~1 / (p - q)^2
        times that of exact labels (1,300x for 10 classes at label epsilon 0.25) and dominates every head built on
        them: unshrunk, the shipped clean heads answered 3-10% on data whose majority is 27% (a synthetic blog-like
        population, and the trust page's blog local-DP points at 5.8% / 3.6%), their class scores decided by the
        means' noise; shrunk, a mean the labels cannot resolve falls back to the grand mean and its class to the
        prior."""
        return self._once("means", lambda: self.plug_in_means() if self.label_noise is None else
                          self._shrink(self.plug_in_means(), self.total_trace()))

    def deviation_error(self) -> np.ndarray:
        """(K,) the multiplier v_k of the uploads' spread in the covariance of the error of mean_k - grand.

        Exact labels: with e_j the error of class j's mean (covariance S_w / n_j) and w_j = n_j / n, the
        deviation's error is (1 - w_k) e_k - sum_{j != k} w_j e_j, of covariance S_w ((1 - w_k)^2 / n_k +
        (n - n_k) / n^2) = S_w (1 / n_k - 1 / n): the grand mean shares the class's own error (as
        `fl_privtext.server.aggregate.denoised_means` for secure sums).

        Label RR (R[j, k] = Pr[uploaded k | true j], A = R^-T): the debiased sum is S_k = sum_i a_i u_i with
        a_i = A[k, uploaded label of i], E[a_i] = [true label of i = k], and the debiased count C_k = sum_i a_i.
        To first order mean_k - mu_k = sum_i a_i (u_i - mu_k) / n_k and the grand mean's error is sum_i (u_i - g) / n
        (labels do not enter it), so the deviation's error is sum_i (a_i / n_k - 1 / n) (u_i - ...) with variance
        ~ s^2 (sum_i a_i^2 / n_k^2 - 1 / n), sum_i a_i^2 = sum_l A[k, l]^2 c_l (``label_noise``, c_l the counts as
        uploaded) and s^2 the uploads' spread about the class mean, which under RR includes the OTHER classes'
        mean differences (every upload enters every class's sum): `shrunk_means` takes the uploads' total spread
        about the grand mean for it (`total_trace`). With R = I this is the exact-label formula."""
        counts = np.maximum(self.counts, 1.0)
        if self.label_noise is None:
            n = max(float(counts.sum()), 1.0)
            return (1.0 - counts / n) ** 2 / counts + (n - counts) / n ** 2
        n = max(float(self.counts.sum()), 1.0)
        return np.clip(self.label_noise / counts ** 2 - 1.0 / n, 0.0, None)

    def total_trace(self) -> float:
        """tr of the uploads' covariance about their grand mean (labels do not enter it)."""
        n = max(float(self.counts.sum()), 2.0)
        grand = self.sums.sum(axis=0) / n
        return max(float(np.trace(self.second)) - n * float(grand @ grand), 0.0) / (n - 1.0)

    def shrunk_means(self) -> np.ndarray:
        """(K, D) class means with each deviation from the grand mean shrunk by the positive-part James-Stein
        factor 1 - v_k tr S_w / ||mean_k - grand||^2 (v_k tr S_w: the squared error of the DEVIATION,
        `deviation_error`). At low signal-to-noise the raw means are mostly noise, and a discriminant built on them
        fits it; shrinking keeps the posterior calibrated (prior-dominated where the means are not resolved). The
        factor once used tr S_w / n_k, the error of the class mean itself, which overstates the deviation's by up to
        1 / (1 - w_k)^2 (2x for two balanced classes): the flaw found on the secure-aggregation path (issue #37).
        Under label RR the uploads' total spread replaces tr S_w, and `means` are already these."""
        if self.label_noise is not None:
            return self.means
        return self._once("shrunk_means", lambda: self._shrink(self.means, float(np.trace(self.within()))))

    def _shrink(self, m: np.ndarray, spread: float) -> np.ndarray:
        grand = (self.counts @ m) / max(self.n, 1e-9)
        dev = m - grand
        err = spread * self.deviation_error()
        factor = np.clip(1.0 - err / np.maximum((dev * dev).sum(1), 1e-300), 0.0, 1.0)
        return grand + factor[:, None] * dev

    @property
    def priors(self) -> np.ndarray:
        c = np.clip(self.counts, 0.0, None) + 0.5
        return c / c.sum()

    def within(self) -> np.ndarray:
        """(D, D) pooled within-class covariance of the uploads."""
        return self._once("within", self._within)

    def _within(self) -> np.ndarray:
        m = self.means
        k = len(self.counts)
        out = (m.T * self.counts) @ m
        np.subtract(self.second, out, out=out)  # (second - between) / (n - k), in place: one D x D array, not three
        out /= max(self.n - k, 1.0)
        return out

    def trace_standard_error(self) -> float:
        """Standard error of tr(within()) from the uploads' fourth moment: sqrt(Var ||u||^2 / n) (an upper bound:
        the between-class spread of ||u||^2 is included); 0 when the fourth moment was not accumulated."""
        if self.fourth <= 0 or self.n <= 1:
            return 0.0
        n = self.n
        m2 = float(np.trace(self.second)) / n
        return float(np.sqrt(max(self.fourth / n - m2 * m2, 0.0) / n))


def linear_export(w: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """A linear model (k, D) weights and (k,) bias in the exported format (module docstring), no standardisation."""
    d = w.shape[1]
    return {"mean": np.zeros(d, np.float32), "std": np.ones(d, np.float32),
            "weight_0": np.asarray(w, np.float32), "bias_0": np.asarray(b, np.float32)}


def shrunk_covariance(cov: np.ndarray, n: float, scale: float, extra_err: float = 0.0) -> np.ndarray:
    """Shrink ``cov`` towards (tr/D) I with the Ledoit-Wolf oracle weight a = err / (err + dist): err ~ the
    Frobenius error of a covariance estimated from n vectors of total variance ``scale`` ((scale^2 + tr S^2) / n),
    dist = ||S - (tr S / D) I||_F^2. The eigenvalues are first floored at a small positive value (a moment
    estimate minus the noise law can be indefinite). The matrix of `shrunk_spectrum`."""
    vals, vecs = shrunk_spectrum(cov, n, scale, extra_err)
    return (vecs * vals) @ vecs.T


def shrunk_spectrum(cov: np.ndarray, n: float, scale: float, extra_err: float = 0.0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """`shrunk_covariance` as its eigenvalues and eigenvectors (the matrix is vecs diag(vals) vecs^T): a solve
    against it is two products with vecs, no D x D reconstruction or factorisation (on the published OME's 3,840
    bits those were a quarter of the Linear's clean head). The Frobenius norms are the eigenvalues' (V orthonormal):
    the same numbers as the matrix's up to float rounding."""
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
    # the target's scale from the trace (unbiased; the mean of the clipped eigenvalues is inflated by the
    # negative ones a noisy moment estimate has), floored at a small share of the positive part
    mu = max(float(vals.mean()), 1e-3 * float(vals.clip(0).mean()), 1e-12)
    vals = np.maximum(vals, 1e-3 * mu)
    err = (scale ** 2 + float((vals * vals).sum())) / max(n, 1.0) + extra_err  # + a known added noise's ||E||_F^2
    dist = float(((vals - mu) ** 2).sum())
    a = min(1.0, err / max(err + dist, 1e-300))
    return (1 - a) * vals + a * mu, vecs


def spectral_solve(vals: np.ndarray, vecs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """M^-1 ``rhs`` for M = vecs diag(vals) vecs^T (`shrunk_spectrum`, `soft_eigen`: vecs orthonormal, vals > 0):
    two products with vecs, no D x D reconstruction or factorisation."""
    return vecs @ ((vecs.T @ rhs) / vals[:, None])


def soft_spectrum(cov: np.ndarray, err: float, floor: float = 0.0) -> np.ndarray:
    """The matrix of `soft_eigen`."""
    vals, vecs = soft_eigen(cov, err, floor)
    return (vecs * vals) @ vecs.T


def soft_eigen(cov: np.ndarray, err: float, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Regularise a noisy covariance estimate by shrinking each eigenvalue's deviation from their mean mu:
    lambda -> mu + (lambda - mu) max(0, 1 - edge^2 / (lambda - mu)^2), edge = 2 sqrt(err / D) the spectral norm of
    a symmetric noise matrix of Frobenius error^2 ``err`` (semicircle edge 2 sigma sqrt(D), sigma^2 = err / D^2).
    Deviations the noise could produce are removed, resolved ones (typically the few largest) kept, less
    edge^2 / deviation; with err -> 0 it is the estimate itself. mu is floored at ``floor`` (the clean scale's
    resolution), and no eigenvalue is set below its own resolution edge / 2 (or mu, if smaller; at least 1e-3 mu):
    a small eigenvalue is a large precision, and one the noise could have produced would weigh a noise direction
    most in the discriminant. Returns the new eigenvalues and the eigenvectors (the matrix is vecs diag(vals)
    vecs^T, `soft_spectrum`): a solve against it is two products with vecs."""
    d = cov.shape[0]
    sym = cov + cov.T
    sym /= 2
    vals, vecs = np.linalg.eigh(sym)
    del sym
    mu = max(float(vals.mean()), floor, 1e-12)
    edge = 2.0 * math.sqrt(max(err, 0.0) / d)
    dev = vals - mu
    keep = np.clip(1.0 - edge * edge / np.maximum(dev * dev, 1e-300), 0.0, 1.0)
    new = np.maximum(mu + dev * keep, max(min(mu, edge / 2), 1e-3 * mu))
    return new, vecs


class _Moments:
    """Shared part of the moment learners: fit = sufficient statistics, heads from them."""

    name = "moments"
    # the class-mean deviations are James-Stein shrunk (`ClassStats.shrunk_means`): where they are unresolved the
    # head falls back to the prior, so `fl_privtext.server.selection.select` ships it without a constant gate
    shrinks_to_prior = True
    # which moment head `select` prefers where their per-upload log-losses cannot be told apart (the higher): the
    # LDA's clean covariance (`soft_spectrum`) reverts to the centroid's isotropic one where its spectrum is not
    # resolved, so the LDA nests the centroid and adds only what the uploads resolve (issue #37 item 3)
    nesting = 0
    w_noisy: np.ndarray  # (K, D) and (K,): the rule for a noisy upload
    b_noisy: np.ndarray
    w_clean: np.ndarray  # the rule for E[upload | x] (exported)
    b_clean: np.ndarray

    record: dict[str, Any]  # how the clean head was built: the noise law, its assumption, the clean scale

    def __init__(self, *, num_classes: int, noise: np.ndarray | NoiseLaw, label_rr: np.ndarray | None = None,
                 noisy_only: bool = False):
        self.law = noise if isinstance(noise, NoiseLaw) else NoiseLaw.diagonal(noise)
        self.k, self.noise, self.label_rr, self.noisy_only = num_classes, self.law.variance, label_rr, noisy_only
        self.record = {}

    @classmethod
    def build(cls, inputs: LearnerInputs) -> _Moments:
        """The registry's factory: needs the mechanism's noise law."""
        if inputs.noise is None:
            raise ValueError(f"Learner {cls.name!r} needs the mechanism's noise variance (fl_privtext.server.noise).")
        return cls(num_classes=inputs.num_classes, noise=inputs.noise, label_rr=inputs.label_rr,
                   noisy_only=inputs.noisy_only)

    def fit(self, x: np.ndarray, y: np.ndarray) -> _Moments:
        return self.fit_stats(ClassStats.raw(x, y, self.k))

    def fit_stats(self, raw: ClassStats) -> _Moments:
        """Fit from raw sums (`ClassStats.raw`) alone: what lets cross-validation fit each fold from the totals
        minus the fold's sums instead of a pass over its rows (`fl_privtext.server.selection`)."""
        self.stats = raw.prepared(self.noise, self.label_rr)
        self._heads()
        return self

    def _heads(self) -> None:
        raise NotImplementedError

    def noise_covariance(self) -> np.ndarray:
        """(D, D) E[Cov(u | x)] from the noise law and the uploads' second moment."""
        return self.law.covariance(self._second_moment(), self._directions())

    def _second_moment(self) -> np.ndarray:
        """(D, D) the uploads' second moment E[u u^T] (their sum over n), once per statistics object."""
        st = self.stats
        return st._once("second_moment", lambda: st.second / max(st.n, 1.0))  # type: ignore[no-any-return]

    def _directions(self) -> np.ndarray | None:
        """(D, D) E[v v^T] of a structured (cap) law from the uploads' second moment (`NoiseLaw.directions`; None
        for the other laws): what both the noise covariance and the clean covariance scale, computed once per
        statistics object and law (it was computed for each: ~2 ms a fit at MiniLM's 384, issue #38)."""
        if not self.law.structured:
            return None
        return self.stats._once("directions", lambda: self.law.directions(self._second_moment()),  # type: ignore[no-any-return]
                                self.law)

    def clean_within(self) -> tuple[np.ndarray, float]:
        """(D, D) within-class covariance of the clean means m = E[u | x] (method of moments) and the standard
        error of its trace.

        Cap mechanisms (structured law): Sigma = E[m m^T] - sum_k pi_k mu_k mu_k^T with E[m m^T] from the noise law
        (`NoiseLaw.input_second`, trace r2 exactly) and mu_k mu_k^T = mean_k mean_k^T - S_w / n_k (unbiased);
        the trace's error is that of the class means' squared norms, 2 sqrt(sum_k pi_k^2 mean_k S_w mean_k / n_k).
        Otherwise: Sigma = S_w - E[Cov(u | x)], the trace's error from the uploads' fourth moment
        (`ClassStats.trace_standard_error`). Each computed once per statistics object and law (`ClassStats._once`:
        a selection's centroid and lda fitted on the same fold share them)."""
        return self.clean_covariance(), self.stats._once("clean_se", self._clean_se, self.law)

    def clean_covariance(self) -> np.ndarray:
        """`clean_within`'s matrix alone, without the standard error (`fl_privtext.server.selection.HeldOutModel`
        reads none: its K x D x D sum was ~1.4 ms a held-out fold at MiniLM's 384)."""
        return self.stats._once("clean_within", self._clean_covariance, self.law)  # type: ignore[no-any-return]

    def _clean_covariance(self) -> np.ndarray:
        st = self.stats
        sw = st.within()
        n = max(st.n, 1.0)
        mm = self.law.input_second(self._second_moment(), self._directions())
        if mm is None:
            return sw - self.noise_covariance()
        m, counts = st.means, np.maximum(st.counts, 1.0)
        w = np.clip(st.counts, 0.0, None) / n
        # E[m m^T] - between + S_w sum_k w_k / n_k, symmetrised: the same operations, in place where they can be
        part = (m.T * w) @ m
        clean = np.subtract(mm, part)
        del mm
        np.multiply(sw, float((w / counts).sum()), out=part)
        clean += part
        del part
        sym = clean + clean.T
        sym /= 2
        return sym

    def _clean_se(self) -> float:
        st = self.stats
        if not self.law.structured:
            return st.trace_standard_error()
        sw, n = st.within(), max(st.n, 1.0)
        m, counts = st.means, np.maximum(st.counts, 1.0)
        w = np.clip(st.counts, 0.0, None) / n
        return 2.0 * float(np.sqrt(max(float((w * w / counts) @ np.einsum("kd,de,ke->k", m, sw, m)), 0.0)))

    def clean_scale(self, est: float, se: float, var_up: float) -> float:
        """The clean within-class variance per coordinate to use: the estimate ``est`` (tr Sigma / D) where it is
        at least its standard error ``se``, else ``se`` (flagged ``resolved: false`` in ``record``): what the
        data cannot tell from 0, never a clamped negative value. Over-estimating it costs more than
        under-estimating (a large variance hands the rule to the prior), hence one standard error, not two. With no
        standard error (aggregates without the fourth moment) the floor is 1e-3 var_up."""
        floor = se if se > 0 else 1e-3 * var_up
        used = max(est, floor, 1e-12)
        self.record = {"noise_law": self.law.record(),
                       "clean_variance": {"estimate": est, "standard_error": se, "used": used,
                                          "resolved": bool(est >= floor)}}
        return used

    def logits(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float64) @ self.w_noisy.T + self.b_noisy

    def export(self) -> dict[str, np.ndarray]:
        if self.noisy_only:
            raise ValueError(f"This {self.name} was built noisy_only (LearnerInputs): it has no clean head to export.")
        return linear_export(self.w_clean, self.b_clean)


class Centroid(_Moments):
    """Label-wise aggregation: nearest class mean (means of unbiased uploads are unbiased for the clean class
    means), scaled by the isotropic within-class variance: the uploads' for a noisy upload, the uploads' minus the
    noise law's for a clean point (errors-in-variables)."""

    name = "centroid"

    def _heads(self) -> None:
        st = self.stats
        ms, m, lp = st.shrunk_means(), st.means, np.log(st.priors)
        d = m.shape[1]
        tr_up = float(np.trace(st.within()))
        var_up = max(tr_up / d, 1e-12)
        clean, se = self.clean_within()
        var_clean = self.clean_scale(float(np.trace(clean)) / d, se / d, var_up)
        self.w_noisy, self.b_noisy = ms / var_up, -(ms * ms).sum(1) / (2 * var_up) + lp
        # the plug-in rule, ||mean_k||^2 left uncorrected (module docstring: why the clean heads are plug-in rules)
        self.w_clean, self.b_clean = m / var_clean, -(m * m).sum(1) / (2 * var_clean) + lp


class LDA(_Moments):
    """Linear discriminant analysis from the moments: class means of the uploads; the within-class covariance of
    the means = the uploads' minus diag(noise law) (method of moments), shrunk by the Ledoit-Wolf oracle weight
    (clean head); plus diag(noise law) for a noisy upload (noisy head). A wrong noise law therefore shows in the
    per-upload cross-validation too."""

    name = "lda"
    nesting = 1  # nests the centroid (`_Moments.nesting`)

    def _heads(self) -> None:
        st = self.stats
        lp = np.log(st.priors)
        sw = st.within()
        d = sw.shape[0]
        noise = self.noise_covariance()
        tr_up = float(np.trace(sw))
        raw, se = self.clean_within()
        floor = self.clean_scale(float(np.trace(raw)) / d, se / d, max(tr_up / d, 1e-12))
        n = max(st.n, 1.0)
        # the Frobenius error^2 the mechanism's noise adds to the estimate (Var S_ij = (U_ii U_jj + U_ij^2) / n for
        # the uploads' covariance U, less what clean data of covariance Sigma would have: the plain plug-in's
        # sampling error is left as it is, so without noise this is the plain LDA)
        if self.law.structured:  # clean = r2 (M - a I) / b - ...: the error of M, times r2 / b
            mo = self.law.moments
            err = (self.law.input_norm2 / mo.rank_one * float(np.trace(st.second)) / n) ** 2 / n
        else:
            err = max(tr_up ** 2 - float(np.trace(raw)) ** 2 + float((sw * sw).sum()) - float((raw * raw).sum()),
                      0.0) / n
        err += getattr(self, "cov_error", 0.0)
        vals, vecs = soft_eigen(raw, err, floor)  # the means' within-class covariance, vecs diag(vals) vecs^T
        # a noisy upload's covariance: the estimated signal part plus the known noise part (structured estimate)
        m = st.shrunk_means()
        cov = (vecs * vals) @ vecs.T
        cov += noise
        del noise
        self.w_noisy = np.linalg.solve(cov, m.T).T  # (K, D) Sigma^-1 mu_k
        del cov
        self.b_noisy = -0.5 * (self.w_noisy * m).sum(1) + lp
        if not self.noisy_only:  # the clean head: Sigma^-1 from the spectrum
            m = st.means
            self.w_clean = spectral_solve(vals, vecs, m.T).T
            self.b_clean = -0.5 * (self.w_clean * m).sum(1) + lp


class Constant:
    """Always the most frequent class (of the debiased label counts): the knowledge-only baseline."""

    name = "constant"

    def __init__(self, *, num_classes: int, label_rr: np.ndarray | None = None, **_: Any):
        self.k, self.label_rr = num_classes, label_rr

    @classmethod
    def build(cls, inputs: LearnerInputs) -> Constant:
        return cls(num_classes=inputs.num_classes, label_rr=inputs.label_rr)

    def fit(self, x: np.ndarray, y: np.ndarray) -> Constant:
        return self._fit_counts(bincount(y, self.k).astype(np.float64), x.shape[1])

    def fit_stats(self, raw: ClassStats) -> Constant:
        """Fit from raw sums (`ClassStats.raw`): their counts are `fit`'s (exact integers), so a cross-validation
        fold fits from the folds' sums without copying its uploads (`fl_privtext.server.selection`)."""
        return self._fit_counts(np.asarray(raw.counts, np.float64), raw.sums.shape[1])

    def _fit_counts(self, counts: np.ndarray, d: int) -> Constant:
        if self.label_rr is not None:
            counts = np.linalg.inv(self.label_rr.T) @ counts
        self.d = d
        c = np.clip(counts, 0.0, None) + 0.5
        self.b = np.log(c / c.sum())  # the log prior: argmax = the majority, and a calibrated log-loss
        return self

    def logits(self, x: np.ndarray) -> np.ndarray:
        return np.tile(self.b, (len(x), 1))

    def export(self) -> dict[str, np.ndarray]:
        return linear_export(np.zeros((self.k, self.d)), self.b)


_QUIET_LOCK = threading.Lock()
_QUIET: list[Any] = [0, None]  # [blocks inside `quiet_solver`, the catch_warnings the last one to leave exits]


@contextlib.contextmanager
def quiet_solver() -> Iterator[None]:
    """scikit-learn 1.8's notices of future defaults (we set scoring), and lbfgs stopping at max_iter at the
    weakest regularisation on noisy uploads: the cross-validation scores each fit as it is, so an unconverged C
    is judged by its held-out score, not trusted. Safe when a point's seeds run side by side
    (`fl_privtext.threads.parallel_map`): the filters are process-wide, so the first block in installs them and
    the last one out restores them (one ``warnings.catch_warnings`` per block could restore another
    thread's filters and leave them on for good)."""
    from sklearn.exceptions import ConvergenceWarning

    with _QUIET_LOCK:
        if _QUIET[0] == 0:
            _QUIET[1] = warnings.catch_warnings()
            _QUIET[1].__enter__()
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)
        _QUIET[0] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET[0] -= 1
            if _QUIET[0] == 0:
                _QUIET[1].__exit__(None, None, None)


class Linear:
    """Multinomial logistic regression on standardised uploads, L2 strength chosen by out-of-fold log-loss over
    C in ``LINEAR_CS`` (`choose_c`: sklearn's LogisticRegressionCV, 3 folds by user where users are known); at most ``MAX_LINEAR_ROWS`` uploads (a seeded
    subsample). The exported (clean) weights are corrected for the noise law (see ``fit``).

    Why C <= 1: scikit-learn's objective is the SUM of the per-upload losses plus ||w||^2 / (2C), so with the
    thousands of uploads the server fits on, C = 1 is already practically unregularised; the weaker values of
    sklearn's default grid (6.3 to 1e4) cost most of the solver's iterations (2.5x the time on blog's MiniLM
    uploads under PrivUnitG at true epsilon 4, where C = 1e-4 is chosen either way).

    Warm start (issue #38): `choose_c` keeps its folds' mean fit at the chosen C (``path_start``); the fits at that
    C in auto's cross-validation and the final fit (`fl_privtext.server.training.fit_learner`) start lbfgs there
    (``start``) instead of at 0. lbfgs stops at its tolerance, so the fit moves by that much, not more: on blog
    GloVe and 50k x 384 synthetic uploads the linear candidate's out-of-fold log-loss moved by < 1e-5 relative and
    no choice changed."""

    name = "linear"
    predicts_uploaded_labels = True  # fitted to the labels as uploaded (randomized ones included)

    def __init__(self, *, num_classes: int, seed: int = 0, noise: np.ndarray | None = None, C: float | None = None,
                 noisy_only: bool = False, **_: Any):
        if C is not None and not C > 0:
            raise ValueError(f"Linear's C must be > 0; got {C!r}.")
        self.k, self.seed, self.noise, self.C, self.noisy_only = num_classes, seed, noise, C, noisy_only
        # (K, D) and (K,) logits of the raw upload where lbfgs starts (None: at 0): what `choose_c` left in
        # ``path_start``, set by `fl_privtext.server.training.fit_learner` on the fits at that C
        self.start: tuple[np.ndarray, np.ndarray] | None = None
        self.path_start: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def build(cls, inputs: LearnerInputs) -> Linear:
        """The registry's factory: the noise law's per-coordinate variance corrects the exported weights."""
        noise = inputs.noise
        return cls(num_classes=inputs.num_classes, seed=inputs.seed,
                   noise=noise.variance if isinstance(noise, NoiseLaw) else noise, C=inputs.linear_c,
                   noisy_only=inputs.noisy_only)

    def _rows(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """At most ``MAX_LINEAR_ROWS`` uploads (a seeded subsample), as float64."""
        if len(x) > MAX_LINEAR_ROWS:
            keep = np.sort(rng.generator(self.seed, "server", "linear-rows").choice(len(x), MAX_LINEAR_ROWS,
                                                                                   replace=False))
            x, y, groups = take_rows(x, keep), y[keep], None if groups is None else groups[keep]
        # the labels in int64, as sklearn has always been given them (the server holds them narrow: int8)
        return (np.asarray(x, np.float64), np.asarray(y, np.int64)) + (() if groups is None else (groups,))

    def choose_c(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int = 3) -> float:
        """The L2 strength by out-of-fold log-loss over ``LINEAR_CS``, folds by user (GroupKFold on ``groups``; one
        warm-started regularisation path per fold), and fix it for later fits: `select` then scores this C on
        the same folds instead of re-running the search inside each of its folds (4x the fits). The choice of
        one of 5 values on the folds that then score it is the usual, small optimism of a tuned
        hyperparameter; the per-upload folds of LogisticRegressionCV's default would also have split users."""
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.model_selection import GroupKFold

        x, y, groups = self._rows(x, y, groups)
        z = (x - x.mean(0)) / (x.std(0) + 1e-6)
        splits = list(GroupKFold(n_splits=min(folds, len(np.unique(groups)))).split(z, y, groups))
        if len(np.unique(y)) < 2 or len(splits) < 2 or any(len(np.unique(y[tr])) < 2 for tr, _ in splits):
            self.C = 1.0
            return self.C
        clf = LogisticRegressionCV(Cs=list(LINEAR_CS), cv=splits, max_iter=200, scoring="neg_log_loss", refit=False)
        with quiet_solver():
            clf.fit(z, y)
        self.C = float(clf.C_[0])
        if clf.coef_.shape[0] == self.k == len(clf.classes_):  # every class present: a warm start (``start``)
            a = clf.coef_ / (x.std(0) + 1e-6)  # the folds' mean fit at C, as a linear function of the raw upload
            self.path_start = (a, clf.intercept_ - a @ x.mean(0))
        return self.C

    def fit(self, x: np.ndarray, y: np.ndarray) -> Linear:
        """Fit at ``C`` (None: `choose_c` first, each upload its own group, as no users are known here)."""
        from sklearn.linear_model import LogisticRegression

        x, y = self._rows(x, y)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        present = np.unique(y)
        if len(present) < 2:
            self.w, self.b = np.zeros((self.k, x.shape[1])), np.where(np.arange(self.k) == present[0], 0.0, -1.0)
            return self
        if self.C is None:
            self.choose_c(x, y, np.arange(len(y)))
        clf = LogisticRegression(C=self.C, max_iter=200)
        if self.start is not None and len(present) == self.k > 2:
            # warm start (lbfgs stops at its tolerance from wherever it starts: the same optimum, reached in fewer
            # iterations from the folds' fit at this C; not at 0, binary, or with a class missing)
            a, c = self.start
            clf.set_params(warm_start=True)
            clf.coef_, clf.intercept_ = a * self.std, c + a @ self.mean
        with quiet_solver():
            clf.fit((x - self.mean) / self.std, y)
        coef, icpt = clf.coef_, clf.intercept_
        if len(present) == 2 and coef.shape[0] == 1:
            coef, icpt = np.vstack([-coef / 2, coef / 2]), np.array([-icpt[0] / 2, icpt[0] / 2])
        self.w = np.zeros((self.k, x.shape[1]))
        self.b = np.full(self.k, -1e3)
        self.w[present], self.b[present] = coef, icpt
        self.w_clean = self.w
        if self.noise is not None and np.any(self.noise > 0) and not self.noisy_only:
            # errors-in-variables for the exported model: a linear discriminant fitted on noisy inputs is
            # W_noisy = S_w^-1 dmu; the clean rule is Sigma^-1 dmu = Sigma^-1 S_w W_noisy (exact for the Gaussian
            # model, regression calibration for the logistic fit), in the standardised space the fit used
            z = (x - self.mean) / self.std
            st = ClassStats.of(z, y, self.k, self.noise / self.std ** 2)
            sw = st.within()
            vals, vecs = shrunk_spectrum(sw - np.diag(st.noise), st.n, float(np.trace(sw)))
            self.w_clean = spectral_solve(vals, vecs, sw @ self.w.T).T
        return self

    def logits(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, np.float64) - self.mean) / self.std) @ self.w.T + self.b

    def export(self) -> dict[str, np.ndarray]:
        if self.noisy_only:
            raise ValueError("This linear was built noisy_only (LearnerInputs): it has no clean head to export.")
        out = linear_export(self.w_clean, self.b)
        out["mean"], out["std"] = self.mean.astype(np.float32), self.std.astype(np.float32)
        return out


class MLP:
    """The task MLP of `fl_privtext.learn` (the platform's original learner), fitted on the noisy uploads."""

    name = "mlp"
    predicts_uploaded_labels = True  # fitted to the labels as uploaded (randomized ones included)

    def __init__(self, *, num_classes: int, config: Any, generator: Any, progress: str | None = None, **_: Any):
        self.k, self.config, self.generator, self.progress = num_classes, config, generator, progress

    @classmethod
    def build(cls, inputs: LearnerInputs) -> MLP:
        """The registry's factory: needs its config and generator (``LearnerInputs.mlp``)."""
        if inputs.mlp is None:
            raise ValueError("Learner 'mlp' needs its config and generator (mlp={...}).")
        return cls(num_classes=inputs.num_classes, **inputs.mlp)

    def fit(self, x: np.ndarray, y: np.ndarray) -> MLP:
        from fl_privtext.learn import train_mlp  # torch

        # the labels in int64, as torch's loss takes them (the server holds them narrow: int8)
        self.model = train_mlp(x, np.asarray(y, np.int64), num_classes=self.k, config=self.config,
                               generator=self.generator,
                               progress=self.progress)
        return self

    def logits(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.logits(np.asarray(x, np.float32)), np.float64)

    def export(self) -> dict[str, np.ndarray]:
        return self.model.export()


def make_learner(name: str, *, num_classes: int, noise: np.ndarray | NoiseLaw | None = None,
                 label_rr: np.ndarray | None = None, seed: int = 0, mlp: dict[str, Any] | None = None,
                 linear_c: float | None = None, noisy_only: bool = False) -> Learner:
    """A fresh learner by name (``constant`` or one of `LEARNERS`, the registry); ``noise``: the mechanism's noise
    law (`fl_privtext.server.noise.NoiseLaw`, or its per-coordinate variance); ``mlp``: MLP keyword arguments
    (config, generator, progress); ``linear_c``: Linear's L2 strength, fixed (None: its own cross-validation);
    ``noisy_only``: no clean head (`LearnerInputs`)."""
    inputs = LearnerInputs(num_classes=num_classes, noise=noise, label_rr=label_rr, seed=seed, mlp=mlp,
                           linear_c=linear_c, noisy_only=noisy_only)
    if name == "constant":
        return Constant.build(inputs)
    if name not in LEARNERS:
        raise ValueError(f"Unknown learner {name!r}; valid names: constant, {', '.join(LEARNERS)}.")
    learner: Learner = LEARNERS[name](inputs)
    return learner
