"""Model selection on the server's own uploads: cross-validation grouped by user (sklearn's GroupKFold).

A user's uploads are never split between fitting and scoring. The score is the out-of-fold log-loss (cross-
entropy, a proper scoring rule) of the learner's noisy-upload head against the uploaded labels, what the server
can check; its accuracy is reported beside it. Why log-loss and not accuracy: under strong local noise a single
upload's Bayes accuracy is capped near the majority (the argmax rarely moves) while the evidence each upload
carries about its class is still there; the log-loss sees it, accuracy does not, and the model the server ships
to the clients (on-device) is chosen on it. The constant predictor (the log prior) is always a candidate.

Which head ships (issue #37 item 3): what ships is the CLEAN head, and at the noise levels that matter the
per-upload log-losses of the heads and the constant differ by noise (paired |z| <= 2.4 on every cell but blog epsilon 16 of
`simulations/select_by_clean.py`), so a gate "beat the constant significantly" threw away resolved heads: on blog
GloVe (PrivUnitG epsilon 4) it shipped the constant, 26.8% exact on device, where the centroid's clean head reached
45.8%. The moment heads (centroid, lda: ``shrinks_to_prior``) already carry their own gate: their class-mean
deviations are James-Stein shrunk (`ClassStats.shrunk_means`), so where the class means are unresolved the head
falls back to the prior, i.e. answers as the constant does (tests/server/test_server_learners.py: > 99% of clean
points on data without signal). So a moment head ships unless its log-loss is significantly WORSE than the
constant's (``worse_than_constant``: one-sided 95%, Bonferroni over the heads, paired on the per-user mean loss
differences; users are the independent units), e.g. a head whose noisy spread is badly off. Which moment head: the
LDA, the one of highest ``nesting`` (until 2026-11-29: unless its log-loss was significantly worse than the lower
of the two, ``worse_than_moment_head``, still recorded). Why: the LDA's clean covariance reverts to the centroid's
isotropic one where its spectrum is not resolved (`fl_privtext.server.learners.soft_spectrum`; ``nesting``), and in
their noisy heads the clean covariance is swamped by the mechanism's noise, so their per-upload log-losses say
little about their clean heads: on AG news (MiniLM, PrivUnitG true epsilon 4) 1e-5 nats apart, the LDA's clean head
1.8-2.2 points above the centroid's; at epsilon 8 the LDA's per-upload log-loss was SIGNIFICANTLY worse on all three
seeds, and the centroid that shipped was 58.0-59.1% on device where the LDA reached 64.9-67.9%. A law that
overstates the noise 4x (the planted case that guard was for) makes the LDA's noisy head worse per upload, but its
clean head then answers as the centroid's does (both at the constant), so the guard cost up to 8.8 points and saved
none (20 frontier cells in `simulations/select_by_clean.py`: the LDA within 0.5 points of the better moment head in
every one).
Any other head (linear, mlp) is considered only where no moment head qualifies, and then by the earlier rule (the
lowest log-loss among the heads that beat the constant significantly, ``beats_constant``, the same test): a better
per-upload log-loss does not make a better clean head for them (no prior fallback, and the linear clean head maps
the noisy fit through the unresolved clean covariance): on blog GloVe at epsilon 4 the linear head beat the
centroid per upload (paired z -2.7) and shipped 36.3% against its 45.1% on device; on the default data its clean
head was up to 21 points below the constant; on the GloVe and default cells it was never above the moment head,
on MiniLM by 1.2 (blog epsilon 4) and 4.3 points (blog epsilon 1, one seed of two: the other 5 points below).
Measured (`simulations/select_by_clean.py`, default data, blog GloVe 10k, and the frontier's MiniLM cells, blog 10k
and AG news, PrivUnitG epsilon 1 / 4 / 16, 2 seeds, exact on-device accuracy of the shipped head): within 2 points
of the best candidate in 21 of 24 cells (20 with the lower-log-loss moment head); the table is in its docstring.
``utility.candidates`` names every candidate: its scores, or ``{"scored": false, "why": ...}`` where the choice did
not need them (the lazy selection below; ``scored`` averaged over seeds is the share of seeds that scored it).

What per-upload evidence cannot see: a noise law that UNDERSTATES the mechanism's noise. The moment learners' noisy
head uses the uploads' own covariance whatever the law says (clean estimate + law = uploads'), so only the clean
head, the one shipped on device, is broken by it (tests/server/test_ondevice_selection.py: 0.54 against 0.80 on clean
data, per-upload log-losses within 0.002). An overstated law does show (its noisy head's covariance exceeds the
uploads') and is not chosen. The law comes from the mechanism's public definition (`fl_privtext.server.noise`), and
the test clients' choice (``server.select-on = clients``) measures the clean heads themselves.

Randomized labels (``privacy.label-epsilon`` > 0, k-ary RR with known R[j, k] = Pr[uploaded k | true j]): the
uploaded labels are noisy, so a learner that predicts the NOISE (near-uniform) would win a plain log-loss against
them while being useless for the true label. The score is therefore forward-corrected (Patrini et al., CVPR 2017):
the learner's predicted true-label distribution p is pushed through the known channel, q = p R, and scored by
-log q[uploaded label], a proper score for p whenever R is invertible (learners fitted to the uploaded labels,
linear and mlp, already predict q and are scored on it; under k-ary RR their argmax is the true label's); the accuracy is debiased by the backward
correction (Natarajan et al., NeurIPS 2013): an upload predicted k with uploaded label l counts R^-1[l, k], whose
expectation is the true-label correctness.

Cost (issue #38): the folds are drawn once for every candidate, and one pass over the uploads gives each held-out
fold's raw sums (`FoldStats`); the moment learners (centroid, lda: ``fit_stats``) fit each fold in closed form from
the totals minus the fold's sums, and `clean_accuracy` reads the held-out sums, so their k folds cost about one pass
(the same numbers as a refit on each fold's rows up to float rounding: tests/server/test_closed_form_cv.py).
The candidates are ``server.auto-candidates`` (`fl_privtext.server.training.fit_learner`): the MLP is out by default
(its three fold fits were ~95% of auto's time, 25-35x fitting the winner, and it won 6 of ~1,500 saved selections).
Lazy (issue #38 item 3, 2026-11-29): where a moment head qualifies (not significantly worse than the constant), no
score of linear or the MLP can change the choice, so `select` scores the constant and the moment heads first and
cross-validates the others (and `fit_learner` runs linear's C search) only where none qualifies. The choice is
bit-identical to scoring every candidate (the Bonferroni count is the candidates named: tests/server/
test_lazy_selection.py, with a known-bad count over the scored that ships the constant where the LDA should ship);
the reported ``clean_choice`` then ranges over the scored candidates only. Before, with linear in, auto cost its C
search and three fold fits whatever won: 15-200x a closed-form winner's own fit (benchmarks/README.md, the lazy
selection section, for the figures after).
One pass (issue #38 item 3, 2026-11-29, seventeenth session): where the selection reads every upload (at most
``CV_MAX_UPLOADS``, `fl_privtext.server.training`), auto's moment winner (and the constant) is fitted from the folds'
total (``select(totals=...)``, `FoldStats.totals`) instead of a second pass over the same uploads, so auto sums each
upload once (tests/server/test_selection_cost.py counts the rows summed). The total adds the same uploads fold by
fold, so the shipped model is the explicit learner's up to float rounding, not bit for bit: float64 heads within
1e-14 relative on the benchmark's points, their float32 exports (what the clients receive) equal there, and in the
default run's results.json only the recorded clean variance moved (``clean_head.clean_variance``, 9e-15
relative). Where the selection reads a sample of users the winner still makes its own pass: the explicit learner's
model bit for bit. The rest is the same numbers at less cost: the folds by user without GroupKFold's per-user loop
(`group_folds`, its index pairs), the candidates scored fold by fold (`_oof_all`: a fold's uploads converted to
float64 once, kept for small samples; one `HeldOutModel` per fold with its classes batched; the constant fitted
from the folds' counts), the paired tests' user index computed once, and what a fit derives from its sums computed
once per statistics object (`fl_privtext.server.learners.ClassStats`: a fold's centroid and lda share it). Every
candidate's scores and clean estimates are the ones scoring them one by one gave (the same tests).
Per-call overhead (issue #38 item 3, 2026-11-29, nineteenth session): a linear head's clean estimate writes its
scores as (K, K, draws) (one product of the stacked roots with the shared draws, into one buffer for the selection)
and counts each class's first-argmax draws by comparisons over the contiguous draws (`_first_argmax_hits`), not
argmax over a short axis (a call per draw); each row's largest logit is taken a column at a time and the constant's
log-softmax on its one row. The same numbers bit for bit (tests/server/test_selection_cost.py); on blog GloVe auto
went from 8.1-8.7x to 5.0-5.5x the LDA's own fit (CPU; benchmarks/bench_selection.py). What is left there: the
fold fits (three LDA eigendecompositions and solves), the held-out logits and the six heads' 2,000 x K x K score
draws are elementwise work, not overhead, and alone exceed the LDA's single pass (the commit message's profile).
Profiled again (twenty-third session, benchmarks/README.md "Where auto's selection stops, profiled"): at width 50
the fold eigendecompositions are 5-13% of auto, at MiniLM's 384 about a fifth; a warm-started fold fit (the total's
eigenbasis) would leave auto at 2.3-2.7x the LDA on MiniLM and unchanged on GloVe, so none was made: 2x on the
small points needs the reported-only work (the clean estimates, the centroid's scores) off the default path too.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fl_privtext.ondevice import mlp_logits
from fl_privtext.rng import generator
from fl_privtext.server.learners import LDA, MEMO_BYTES, ClassStats, Constant, Learner
from fl_privtext.server.noise import NoiseLaw

__all__ = ["CLEAN_MARGIN", "LEARNER_RULE", "FoldStats", "clean_accuracy", "cross_validate", "select"]

FOLDS = 3
CLEAN_MARGIN = 0.01  # a head replaces the constant only when its estimated clean accuracy is this much higher
CLEAN_UNRESOLVED = 0.5  # a head whose held-out means' noise exceeds this share of its clean score spread is unresolved
FOLD_ROWS_BYTES = 160 << 20  # FoldStats keeps the held-out folds in float64 up to this (FoldStats.held_rows)
SAME_LOSS = 1e-9  # nats per upload: log-losses closer than this on every upload are the same model's (rounding)
CLEAN_DRAWS = 2000  # Monte-Carlo draws per class of the Gaussian model (fixed seed: common numbers across heads)
LEARNER_RULE = ("auto: the shrunk moment head of highest nesting (lda; centroid where lda is not a candidate) unless "
                "its "
                "log-loss is significantly WORSE than the constant's; only where none qualifies another learner "
                "(linear, mlp), the lowest log-loss among those that beat the constant significantly (paired over "
                "users, one-sided 95%, Bonferroni; fl_privtext.server.selection), the candidates those of server.auto-candidates (default centroid, "
                "lda, linear: the MLP is out by default as it won 6 of ~1,500 saved selections while its fold fits "
                "were ~95% of auto's time; add it to the list to score it); the other heads are scored only where no moment head "
                "qualifies (lazy: the same choice); beside each scored candidate its estimated ON-DEVICE (clean-head) accuracy "
                "(clean_accuracy_estimate, clean_unresolved, clean_choice), reported but not the criterion: at "
                "the measured sizes its error exceeds the differences it should rank (issue #37)")


def clean_accuracy(export: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, num_classes: int, law: NoiseLaw,
                   label_rr: np.ndarray | None = None, seed: int = 0, draws: int = CLEAN_DRAWS,
                   stats: ClassStats | None = None) -> tuple[float, float]:
    """Estimated on-device accuracy of the exported head ``export`` (applied to clean features E[u | x]) from
    held-out noisy uploads ``x`` with labels ``y`` and the mechanism's noise ``law``, under a Gaussian
    class-conditional model: class k's clean features ~ N(mu_k, Sigma), mu_k estimated by the held-out class mean
    m_k (independent of the head: no in-sample optimism), Sigma by the method of moments (the uploads' within-class
    covariance minus the law's noise covariance, `LDA.clean_within`). Linear heads (one layer): in the K-dimensional
    score space the scores are N(W mu_k + b, W Sigma W^T); m_k carries noise of covariance C_k = S_up / n_k
    (S_up: the uploads' within-class covariance), which is deconvolved: scores drawn around W m_k with covariance
    W (Sigma - C_k) W^T (eigenvalues floored at 0), whose expectation over m_k is the accuracy at mu_k where the
    difference is positive semi-definite. Deeper heads: clean points drawn in D dimensions from N(m_k, Sigma_+)
    (no deconvolution: optimistic where the held-out means are noisy). Accuracy = sum_k pi_k Pr(argmax = k), pi the
    held-out class shares (debiased through ``label_rr``). Returns (accuracy, unresolved): the largest share over
    classes of the score spread the deconvolution could not remove (the negative part of W (Sigma - C_k) W^T over
    the trace of W Sigma_+ W^T; deeper heads: tr C_k / tr Sigma_+): near 0 the estimate is the accuracy at the
    true means, at 1 and above the held-out means' noise dominates and the estimate mostly reflects it.

    Measured against the referee's exact figure (issue #37, `simulations/select_by_clean.py`: default data and blog
    GloVe 10k, PrivUnitG epsilon 1 / 4 / 16, 2 seeds, 48 candidate-points): mean absolute error 0.106, max 0.288,
    the moment heads understated by 0.10-0.27 on blog; as a rule it would have shipped 42.7% on average where the
    log-loss rule ships 48.4% (the best candidate: 53.1%). On the frontier's MiniLM cells (blog 10k and AG news,
    true epsilon 1 / 4 / 16, 2 seeds, 36 head-points): mean absolute error 0.077, worst 0.281 (the linear head), the
    moment heads understated by 0.06-0.07 on average; its rule ships the constant in every cell at epsilon 1 and 4. The Gaussian model itself is not the cause: with the
    referee's own class means and covariance it is within 0.03 of the exact figure on the same heads. The cause is
    the clean within-class spread in the heads' directions, W Sigma W^T: under these mechanisms the uploads' spread
    is 70x (blog, epsilon 16) to 17,000x (default, epsilon 1) the clean one (traces), so its standard error
    (sqrt(2 / n) of it, 0.016 at 8,000 uploads) exceeds the clean part at the server's n
    (``clean_unresolved`` 3.8-81 for blog's moment heads; the flag misses the linear head's errors, up to +0.29 on
    the default data at ``clean_unresolved`` 0). A James-Stein denoising of the held-out means with the posterior variance
    added (the same table, ``post_cv``) did no better (mean error 0.115).

    ``stats``: the raw sums of ``x`` and ``y`` (`ClassStats.raw`) when the caller has them (`select` computes each
    held-out fold's once for all its candidates). `HeldOutModel` is this model built once for
    every head scored against the same held-out uploads (`select`: one per fold)."""
    raw = stats if stats is not None else ClassStats.raw(np.asarray(x, np.float64), np.asarray(y, np.int64),
                                                         num_classes)
    return HeldOutModel(raw, num_classes, law, label_rr, seed, draws).accuracy(export)


class HeldOutModel:
    """`clean_accuracy`'s Gaussian model of held-out uploads (their raw sums ``raw``), built once and shared by
    every head scored against them: the class means m_k, the clean covariance Sigma, the uploads' within-class
    covariance S_up, the class shares and the standard-normal draws (common numbers: every head of one held-out
    set sees the same draws, as each call of `clean_accuracy` drew them from the same seed). A linear head's K
    per-class eigendecompositions and score draws are batched (one stacked call each): the same numbers as one
    class at a time (tests/server/test_clean_selection.py checks them against that loop)."""

    def __init__(self, raw: ClassStats, num_classes: int, law: NoiseLaw, label_rr: np.ndarray | None = None,
                 seed: int = 0, draws: int = CLEAN_DRAWS, scratch: dict[str, np.ndarray] | None = None):
        self.k, self.seed, self.draws = num_classes, int(seed), draws
        # where the linear heads' (K, K, draws) scores are written: ``scratch["scores"]``, kept there for the next
        # head and the next fold's model (`_oof_all`: one buffer for the selection, not a fresh one per fold)
        self.scratch = {} if scratch is None else scratch
        lda = LDA(num_classes=num_classes, noise=law, label_rr=label_rr)
        # a fresh object: what is derived here is not kept on ``raw`` (the folds' sums live through the selection)
        lda.stats = st = dataclasses.replace(raw).prepared(law.variance, label_rr)
        self.sigma = lda.clean_covariance()
        self.s_up = st.within()
        self.counts = np.maximum(st.counts, 1.0)
        self.pi = np.clip(st.counts, 0.0, None) / max(float(np.clip(st.counts, 0.0, None).sum()), 1e-12)
        self.m = st.means
        self._z: np.ndarray | None = None  # (K, draws): the linear heads' draws, the generator's first, transposed

    def accuracy(self, export: dict[str, np.ndarray]) -> tuple[float, float]:
        """(accuracy, unresolved) of the head ``export`` (`clean_accuracy`)."""
        k, sigma, s_up, counts, pi, m = self.k, self.sigma, self.s_up, self.counts, self.pi, self.m
        layers = [key for key in export if key.startswith("weight_")]
        acc, unresolved = 0.0, 0.0
        if len(layers) == 1 and not np.any(export.get("center", 0)):  # linear: in the K-dimensional score space
            std = np.asarray(export["std"], np.float64)
            w = np.asarray(export["weight_0"], np.float64) / std
            b = np.asarray(export["bias_0"], np.float64) - w @ np.asarray(export["mean"], np.float64)
            if not np.any(w):  # the constant: every draw scores b, the first largest bias wins for every class
                return float(pi[int(np.argmax(b))]), unresolved
            if self._z is None:
                self._z = _score_draws(self.seed, k, self.draws)
            a = w @ sigma @ w.T
            spread = float(np.clip(np.linalg.eigvalsh((a + a.T) / 2), 0.0, None).sum())
            cov = a - (w @ s_up @ w.T)[None] / counts[:, None, None]  # (K, K, K): class c's score covariance
            lam, vec = np.linalg.eigh((cov + cov.transpose(0, 2, 1)) / 2)
            root = vec * np.sqrt(np.clip(lam, 0.0, None))[:, None, :]
            centre = np.stack([w @ m[c] + b for c in range(k)])  # (K, K): each class's mean scores
            # (K, K, draws): class c's draws, score j along the middle axis (contiguous rows for the comparisons
            # below), one product for every class into a buffer kept for the next head: entry [c, j, d] is entry
            # [c, d, j] of the earlier z @ root[c]^T (the same K-term dot product, bit for bit: test_clean_selection)
            scores = self.scratch.get("scores")
            if scores is None or scores.shape != (k, k, self.draws):
                scores = self.scratch["scores"] = np.empty((k, k, self.draws))
            np.matmul(root.reshape(k * k, k), self._z, out=scores.reshape(k * k, self.draws))
            scores += centre[:, :, None]
            hits = _first_argmax_hits(scores)
            negative = np.clip(lam, None, 0.0)
            for c in range(k):
                acc += pi[c] * (int(hits[c]) / self.draws)  # = np.mean(pred[c] == c): an exact count over draws
                if spread > 1e-300:
                    unresolved = max(unresolved, float(-negative[c].sum()) / spread)
            return acc, unresolved
        g = generator(self.seed, "clean-accuracy", k)  # deeper heads: clean points drawn in D dimensions
        lam, vec = np.linalg.eigh((sigma + sigma.T) / 2)
        root = vec * np.sqrt(np.clip(lam, 0.0, None))
        spread = max(float(np.clip(lam, 0.0, None).sum()), 1e-300)
        for c in range(k):
            pts = m[c] + g.standard_normal((self.draws, len(lam))) @ root.T
            acc += pi[c] * float(np.mean(mlp_logits(export, pts).argmax(axis=1) == c))
            unresolved = max(unresolved, float(np.trace(s_up)) / counts[c] / spread)
        return acc, unresolved


@functools.lru_cache(maxsize=8)
def _score_draws(seed: int, k: int, draws: int) -> np.ndarray:
    """(K, draws) the linear heads' standard-normal draws (`HeldOutModel`: the generator's first (draws, K)),
    transposed and contiguous, the same for every held-out fold of a selection (the same seed and K): drawn once,
    read-only."""
    z = np.ascontiguousarray(generator(seed, "clean-accuracy", k).standard_normal((draws, k)).T)
    z.flags.writeable = False
    return z


def _first_argmax_hits(scores: np.ndarray) -> np.ndarray:
    """(K,) for scores (K, K, draws) (class c's draws, score j along axis 1): how many of class c's draws have c
    as their FIRST largest score, ``np.count_nonzero(scores.argmax(axis=1)[c] == c)`` exactly: c is argmax's
    answer iff its score exceeds every earlier one and is at least every later one. By comparisons over the
    contiguous draws (argmax over a short middle axis was most of the estimate's time). A NaN own score (argmax
    takes the first NaN) is left to argmax itself."""
    k = scores.shape[0]
    own = scores[np.arange(k), np.arange(k)]  # (K, draws): class c's own score
    if np.isnan(own).any():
        return np.count_nonzero(scores.argmax(axis=1) == np.arange(k)[:, None], axis=1)
    win = np.ones(own.shape, bool)
    for j in range(k):
        col = scores[:, j]  # (K, draws): every class's score j
        win[j + 1:] &= own[j + 1:] > col[j + 1:]  # an earlier maximum wins the tie
        win[:j] &= own[:j] >= col[:j]
    return np.count_nonzero(win, axis=1)


Splits = list[tuple[np.ndarray, np.ndarray]]


class Users:
    """Each upload's user: ``inverse`` (N,) its position among the distinct ``groups`` (`numpy.unique`'s inverse)
    and ``sizes`` (U,) each user's uploads, computed once for a selection's folds and every one of its paired
    tests."""

    def __init__(self, groups: np.ndarray):
        _, inverse = np.unique(np.asarray(groups), return_inverse=True)
        self.inverse = inverse.reshape(-1)
        self.sizes = np.bincount(self.inverse)

    @classmethod
    def of(cls, groups: np.ndarray | Users) -> Users:
        return groups if isinstance(groups, Users) else cls(groups)


def group_folds(groups: np.ndarray | Users, folds: int) -> Splits:
    """scikit-learn's ``GroupKFold(n_splits=folds).split(x, y, groups)`` (no shuffle), the same (train, held-out)
    index pairs in the same order (tests/server/test_lazy_selection.py checks them on random cases), without its
    Python loop over users (30-60 ms of auto's time on 5-10k users). GroupKFold gives the users, largest first
    (equal sizes: the later user first, a stable ascending sort reversed), each to the fold with the fewest uploads
    so far (equal: the first fold). Over a run of r users of the same size s that greedy is a merge: fold j's
    t-th user of the run would arrive at load L_j + t s and the least (load, fold) is taken each time, so the run's
    users go, in order, to the r least pairs (L_j + t s, j), t < r. One sort per distinct size."""
    users = Users.of(groups)
    if folds > len(users.sizes):
        raise ValueError(f"Cannot have {folds} folds over {len(users.sizes)} users.")
    order = np.argsort(users.sizes, kind="stable")[::-1]  # largest first, ties the later user first
    sizes = users.sizes[order]
    fold_of = np.zeros(len(sizes), np.int64)
    load = np.zeros(folds)
    cut = [0, *(np.flatnonzero(np.diff(sizes)) + 1).tolist(), len(sizes)]
    for a, b in itertools.pairwise(cut):  # a run of users of equal size
        r = b - a
        keys = (load[:, None] + float(sizes[a]) * np.arange(r)).ravel()  # (folds * r,) fold-major
        fold = np.repeat(np.arange(folds), r)
        took = fold[np.lexsort((fold, keys))[:r]]
        fold_of[order[a:b]] = took
        load += float(sizes[a]) * np.bincount(took, minlength=folds)
    upload_fold = fold_of[users.inverse]
    return [(np.flatnonzero(upload_fold != f), np.flatnonzero(upload_fold == f)) for f in range(folds)]


def _splits(groups: Users, folds: int) -> Splits:
    """The folds by user (`group_folds`, GroupKFold's): computed once, shared by every candidate."""
    n_groups = len(groups.sizes)
    if n_groups < 2:
        raise ValueError(f"Cross-validation by user needs uploads of at least 2 users; got {n_groups}.")
    return group_folds(groups, min(folds, n_groups))


class FoldStats:
    """Each held-out fold's raw sums (`ClassStats.raw`) and their total, one pass over the uploads for every fold,
    candidate and number of classes asked (cached): a moment learner's fold fit is ``total - held[f]`` (closed-form
    cross-validation: the same statistics as a pass over the fold's training rows, up to float rounding), and the
    held-out sums are those `clean_accuracy` reads. ``total``: the sums over every upload, the same statistics as
    `ClassStats.raw` over them up to float rounding (summed fold by fold): what `fit_learner` fits auto's winner
    from where the selection read every upload (no second pass)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, splits: Splits):
        self.x, self.y, self.splits = x, y, splits
        self._by_k: dict[int, tuple[list[ClassStats], ClassStats]] = {}
        self.keeps_rows = int(np.prod(x.shape, dtype=np.int64)) * 8 <= FOLD_ROWS_BYTES  # (held_rows)
        self._rows: dict[int, np.ndarray] = {}
        self._training: dict[tuple[int, int], ClassStats] = {}

    def held_rows(self, fold: int) -> np.ndarray:
        """(n_fold, D) the held-out uploads of ``fold`` as float64 (what the learners' logits and `ClassStats.raw`
        compute with: the same numbers from either), converted once and kept where all folds' together are at most
        ``FOLD_ROWS_BYTES``, else converted again each call. The bound covers the selection's sample at MiniLM's
        width (50,000 x 384: 154 MB, no more than the float64 chunk the winner's own pass held, `ClassStats.raw`;
        auto's peak fell from 264 to 178 MiB there, benchmarks/README.md), not the published OME's 3,840 bits
        (8,000 x 3,840: 246 MB, which the scoring would hold beside its D x D matrices)."""
        if fold in self._rows:
            return self._rows[fold]
        rows = np.asarray(self.x[self.splits[fold][1]], np.float64)
        if self.keeps_rows:
            self._rows[fold] = rows
        return rows

    def _of(self, k: int) -> tuple[list[ClassStats], ClassStats]:
        if k not in self._by_k:
            held = [ClassStats.raw(self.held_rows(f) if self.keeps_rows else self.x[te], self.y[te], k)
                    for f, (_, te) in enumerate(self.splits)]
            total = held[0]
            for h in held[1:]:
                total = total + h
            self._by_k[k] = (held, total)
        return self._by_k[k]

    def held_out(self, fold: int, k: int) -> ClassStats:
        return self._of(k)[0][fold]

    def training(self, fold: int, k: int) -> ClassStats:
        """The training sums of ``fold``: the same object while the same fold is asked (its candidates, scored one
        after the other, share what they derive from it, `ClassStats._once`); one fold's at a time is kept."""
        if (fold, k) not in self._training:
            held, total = self._of(k)
            self._training = {(fold, k): total - held[fold]}
        return self._training[fold, k]

    def totals(self) -> dict[int, ClassStats]:
        """The totals over every upload summed so far, by number of classes (none before a fit asked for them)."""
        return {k: total for k, (_, total) in self._by_k.items()}


def _oof_all(makers: Mapping[str, Callable[[], Learner]], x: np.ndarray, y: np.ndarray, splits: Splits,
             stats: FoldStats, label_rr: np.ndarray | None = None, law: NoiseLaw | None = None,
             num_classes: int = 0, cleans: dict[str, list[tuple[float, float]]] | None = None,
             closed_form: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per candidate of ``makers`` (in their order), per upload: out-of-fold correctness (N,) and log-loss (N,) over
    ``splits`` (folds by user); with ``label_rr`` both against the true label (forward-corrected loss,
    backward-corrected correctness: module docstring). ``law`` given: each fold's estimated clean-head accuracy
    (`clean_accuracy`) appended to ``cleans[name]``. ``stats``: the folds' sums. A learner that fits from
    sufficient statistics (``fit_stats``: the constant, centroid, lda) is fitted in closed form from them unless
    ``closed_form`` is False (a refit on each fold's rows: the same numbers up to float rounding,
    tests/server/test_closed_form_cv.py). Fold by fold, every candidate in turn: a fold's held-out uploads are
    converted to float64 once (`HeldOutModel` built once) for all of them, where small (`FoldStats.held_rows`,
    ``MEMO_BYTES``: on wide uploads each candidate converts and builds its own, as before, so that no D x D matrix
    or float64 fold waits beside the next candidate's fit). Each candidate's fits happen in fold
    order as when it was scored alone (the MLP's generator: the same draws)."""
    n = len(y)
    out = {name: (np.zeros(n), np.zeros(n)) for name in makers}
    if cleans is not None:
        cleans.update({name: [] for name in makers})
    inv = None if label_rr is None else np.linalg.inv(label_rr)
    scratch: dict[str, np.ndarray] = {}  # the clean estimates' score buffer, every fold's (HeldOutModel)
    for f, (tr, te) in enumerate(splits):
        x_te: np.ndarray | None = None  # (n_te, D) float64, what every learner's logits read
        held: HeldOutModel | None = None
        for name, make in makers.items():
            model = make()
            fit_stats = getattr(model, "fit_stats", None)
            if closed_form and fit_stats is not None:
                model = fit_stats(stats.training(f, model.k))  # type: ignore[attr-defined]
            else:
                model = model.fit(x[tr], y[tr])
            if law is not None and cleans is not None:
                if held is None:
                    held = HeldOutModel(stats.held_out(f, num_classes), num_classes, law, label_rr, scratch=scratch)
                cleans[name].append(held.accuracy(model.export()))
                if held.sigma.nbytes > MEMO_BYTES:  # wide uploads: its D x D matrices not kept beside the next fit
                    held = None
            if isinstance(model, Constant):  # every upload's logits are its log prior: one row, the same numbers
                s = model.b[None, :]
            else:
                if x_te is None:
                    x_te = stats.held_rows(f)
                s = model.logits(x_te)
                if not stats.keeps_rows:  # (n_fold, D) float64 beyond FOLD_ROWS_BYTES: not kept beside the next fit
                    x_te = None
            s = s - _row_max(s)
            logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
            pred = s.argmax(axis=1)
            if len(s) != len(te):  # the constant's one row, as every upload's
                logp, pred = np.broadcast_to(logp, (len(te), logp.shape[1])), np.repeat(pred, len(te))
            hits, loss = out[name]
            if inv is None:
                hits[te] = pred == y[te]
                loss[te] = -logp[np.arange(len(te)), y[te]]
            else:
                # the predicted law of the UPLOADED label: a learner fitted to the uploaded labels predicts it
                # already (its argmax is the true label's under k-ary RR); a debiasing one predicts the true label's
                p = np.exp(logp)
                q = p if getattr(model, "predicts_uploaded_labels", False) else p @ label_rr
                loss[te] = -np.log(np.maximum(q[np.arange(len(te)), y[te]], 1e-300))
                hits[te] = inv[y[te], pred]
    return out


def _row_max(s: np.ndarray) -> np.ndarray:
    """(N, 1) ``s.max(axis=1, keepdims=True)`` of logits (N, K), a column at a time (the same numbers: a maximum is
    exact, NaN included; a reduction over a short last axis costs a call per row)."""
    top = s[:, 0].copy()
    for j in range(1, s.shape[1]):
        np.maximum(top, s[:, j], out=top)
    return top[:, None]


def cross_validate(make: Callable[[], Learner], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
                   folds: int = FOLDS, label_rr: np.ndarray | None = None, closed_form: bool = True
                   ) -> dict[str, float]:
    """Out-of-fold accuracy and log-loss (nats per upload) of the learner ``make()`` over ``folds`` GroupKFold
    folds (by ``groups``); ``label_rr``: the labels' RR matrix (scores against the true label). ``closed_form``
    False: refit a moment learner on each fold's rows instead of from the folds' sums (the reference)."""
    splits = _splits(Users(groups), folds)
    hits, loss = _oof_all({"learner": make}, x, y, splits, FoldStats(x, y, splits), label_rr,
                          closed_form=closed_form)["learner"]
    return {"accuracy": float(hits.mean()), "log_loss": float(loss.mean())}


def _paired_z(loss: np.ndarray, other: np.ndarray, groups: np.ndarray | Users) -> float:
    """The paired z statistic of mean(loss - other) over users (per-user means: users are the independent units);
    0 with fewer than 2 users or where the two agree to rounding (``SAME_LOSS`` nats on every upload: a moment
    head shrunk all the way to the prior IS the constant, and the z of its rounding differences was arbitrary:
    the default run flagged such a head "significantly worse"), +-inf for a constant nonzero difference.
    ``groups``: each upload's user, or `Users` of them."""
    diff = np.asarray(loss, np.float64) - np.asarray(other, np.float64)
    if len(diff) == 0 or float(np.abs(diff).max()) <= SAME_LOSS:
        return 0.0
    users = Users.of(groups)
    d = np.bincount(users.inverse, weights=diff) / users.sizes
    if len(d) < 2:
        return 0.0
    se = float(d.std(ddof=1)) / np.sqrt(len(d))
    mean = float(d.mean())
    return mean / se if se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))


@functools.lru_cache(maxsize=64)
def _critical_z(tried: int) -> float:
    """The one-sided 95% normal quantile, Bonferroni over ``tried`` candidates (both of `select`'s tests)."""
    from scipy import stats

    return float(stats.norm.ppf(1 - 0.05 / max(tried, 1)))


def _beats(loss: np.ndarray, null: np.ndarray, groups: np.ndarray | Users, tried: int) -> bool:
    """One-sided paired test, per user: is the mean of (loss - null) below 0 at 95% (Bonferroni over ``tried``)?"""
    return _paired_z(loss, null, groups) < -_critical_z(tried)


def select(makers: dict[str, Callable[[], Learner]], x: np.ndarray, y: np.ndarray, groups: np.ndarray,
           folds: int = FOLDS, order: Sequence[str] | None = None, label_rr: np.ndarray | None = None,
           law: NoiseLaw | None = None, num_classes: int = 0, score_all: bool = False,
           prepare: Mapping[str, Callable[[], object]] | None = None, totals: dict[int, ClassStats] | None = None
           ) -> tuple[str, dict[str, Any]]:
    """The shrunk moment head (a learner with ``shrinks_to_prior``) of highest ``nesting`` (lda; whether its
    out-of-fold log-loss is significantly worse than the lowest one's is recorded, ``worse_than_moment_head``, not
    used), unless it is significantly worse than the constant (``worse_than_constant``: paired, per user, one-sided 95%, Bonferroni);
    where none qualifies, the lowest log-loss among the other heads that beat the constant (``beats_constant``, the
    same test); the constant when none does (module docstring). With the noise ``law`` (what
    `fl_privtext.server.training.fit_learner` passes) each candidate also gets its out-of-fold estimated clean-head
    accuracy (`clean_accuracy`: ``clean_accuracy_estimate``, ``clean_unresolved``) and ``clean_beats_constant``
    (estimated ``CLEAN_MARGIN`` above the constant's, resolved); the scores' "constant" entry names
    ``clean_choice``, the head that rule would pick among the scored candidates. Reported, not used to decide (`LEARNER_RULE`). Returns (name, {name: {"scored", "accuracy", "log_loss",
    "beats_constant", ...}}). ``makers`` must hold "constant". ``label_rr``: the uploaded labels' RR matrix.

    Lazy (issue #38: selection at most 2x its winner's fit): the constant and the moment heads are scored first
    (their folds in closed form, `FoldStats`) and decide; the other heads (linear, mlp) are cross-validated only
    where no moment head qualifies, since otherwise their scores cannot change the choice. The choice is the one
    scoring every candidate gives: the Bonferroni count is the number of candidates NAMED (``len(makers) - 1``),
    not of those scored, and where a moment head qualifies the other heads are never looked at
    (tests/server/test_lazy_selection.py). An unscored candidate's entry says so, ``{"scored": False, "why": ...}``,
    and ``clean_choice`` then ranges over the scored ones only. ``score_all``: score every candidate all the same
    (what `simulations/select_by_clean.py` reads). ``prepare[name]``: called once before ``name`` is first scored
    (`fit_learner`: linear's C search), so that an unscored candidate costs nothing. ``totals``: filled with the
    folds' total sums over every upload of ``x`` (`FoldStats.totals`, by number of classes), from which
    `fit_learner` fits a moment winner without a second pass over the same uploads."""
    if "constant" not in makers:
        raise ValueError("select needs the constant predictor among the candidates.")
    if law is not None and num_classes < 1:
        raise ValueError("select with a noise law needs num_classes >= 1.")
    cleans: dict[str, list[tuple[float, float]]] = {}
    users = Users(groups)  # once for the folds and every paired test
    splits = _splits(users, folds)
    stats = FoldStats(x, y, splits)  # one pass over the uploads for every candidate's folds (FoldStats)
    runs: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def score(names: Sequence[str]) -> None:  # in the makers' order, each candidate once
        batch = {name: make for name, make in makers.items() if name in names and name not in runs}
        for name in batch:
            if prepare is not None and name in prepare:
                prepare[name]()
        runs.update(_oof_all(batch, x, y, splits, stats, label_rr, law, num_classes, cleans))

    tried = len(makers) - 1  # every candidate named, scored or not: the choice is the eager rule's
    z = _critical_z(tried)
    built = {n: makers[n]() for n in order or makers if n != "constant"}  # unfitted: their kind and nesting
    shrunk = [n for n, b in built.items() if getattr(b, "shrinks_to_prior", False)]
    score(list(makers) if score_all else ["constant", *shrunk])
    null = runs["constant"][1]
    best = "constant"
    recorded: dict[str, dict[str, Any]] = {n: {} for n in shrunk}
    if shrunk:  # the most nesting moment head, unless it is significantly worse than the constant; both tests
        # recorded for every moment head (every seed: the same keys)
        low = min(shrunk, key=lambda n: float(runs[n][1].mean()))
        for n in shrunk:
            recorded[n]["worse_than_constant"] = bool(_paired_z(runs[n][1], null, users) > z)
            recorded[n]["worse_than_moment_head"] = bool(_paired_z(runs[n][1], runs[low][1], users) > z)
        m = max(shrunk, key=lambda n: (getattr(built[n], "nesting", 0), -float(runs[n][1].mean())))
        if not recorded[m]["worse_than_constant"]:
            best = m
    if best == "constant":  # no moment head qualified: the earlier rule among the other heads, every one scored
        score(list(makers))
        for name in order or makers:
            if name != "constant" and name not in shrunk and _beats(runs[name][1], null, users, tried) and (
                    best == "constant" or runs[name][1].mean() < runs[best][1].mean()):
                best = name
    if totals is not None:
        totals.update(stats.totals())
    return best, _scores(makers, runs, cleans, recorded, null, users, tried, law is not None,
                         f"not needed: {best} qualified (a moment head not significantly worse than the constant; "
                         f"the other heads are scored only where none does: selection.select)")


def _scores(makers: dict[str, Callable[[], Learner]], runs: dict[str, tuple[np.ndarray, np.ndarray]],
            cleans: dict[str, list[tuple[float, float]]], recorded: dict[str, dict[str, Any]], null: np.ndarray,
            groups: Users, tried: int, clean: bool, why: str) -> dict[str, Any]:
    """`select`'s report: per candidate (in the makers' order) its out-of-fold scores, or ``{"scored": False,
    "why": why}`` where it was not scored; with ``clean`` the clean-head estimates and the constant's
    ``clean_choice`` (among the scored candidates); ``recorded``: the moment heads' tests (`select`)."""
    scores: dict[str, Any] = {}
    for name in makers:
        if name not in runs:
            scores[name] = {"scored": False, "why": why}
            continue
        hits, loss = runs[name]
        scores[name] = {"scored": True, "accuracy": float(hits.mean()), "log_loss": float(loss.mean()),
                        "beats_constant": bool(name != "constant" and _beats(loss, null, groups, tried))}
    if clean:
        est = {name: float(np.mean([a for a, _ in c])) if c else math.nan for name, c in cleans.items()}
        clean_best = "constant"
        for name in (n for n in makers if n in runs):
            sc = scores[name]
            sc["clean_accuracy_estimate"] = est[name]
            sc["clean_unresolved"] = max((u for _, u in cleans[name]), default=math.inf)
            sc["clean_beats_constant"] = bool(name != "constant" and est[name] > est["constant"] + CLEAN_MARGIN
                                              and sc["clean_unresolved"] <= CLEAN_UNRESOLVED)
            if sc["clean_beats_constant"] and (clean_best == "constant" or est[name] > est[clean_best]):
                clean_best = name
        scores["constant"]["clean_choice"] = clean_best
    for name, tests in recorded.items():  # the moment heads' two tests, after the scores (their order until now)
        scores[name].update(tests)
    return scores
