"""The server's learners from securely aggregated class statistics (``server.aggregate = secagg``).

The server receives one vector: the SecAgg+ sum over contributing clients of `fl_privtext.client.aggregate`'s
noisy statistics (per-class user-weighted counts, sums of unit-normalised representations, optionally the second
moment) followed by the public tail [contributors, sum of the clients' noise variances, seeded clients]. It never sees a user's
representation or label.

Learners (errors-in-variables: the sum's noise variance is known exactly from the tail):
- ``centroid``: class means sums_k / counts_k; the isotropic within-class variance from the trace. Without the
  second moment, the trace of the second moment is known without asking: every record is a unit vector, so
  tr(sum_u sum_r x_r x_r^T / n_u) = sum_k counts_k; the noise's contribution to sum_k counts_k ||m_k||^2
  (d sigma^2 / counts_k per class) is subtracted.
- ``lda``: needs the second moment; the within-class covariance from it, its eigenvalues' deviations from
  their mean shrunk by the noise edge (`fl_privtext.server.learners.soft_spectrum`) whose error term includes
  the added noise's ||E||_F^2 / (n - K)^2 (E: symmetric, sigma^2 per diagonal entry, sigma^2 / 2 per
  off-diagonal). At full shrinkage the rule IS the centroid's.
- ``lda`` from PUBLIC data (``privacy.projection = pca``: the server holds the public rows the projection was fitted
  on, `public_within`): the second moment is not asked for; the covariance is the public rows' total covariance in
  the statistics' space (projected, unit-normalised; no public label is read), shrunk halfway to its mean eigenvalue
  (`PUBLIC_SHRINK`). The total covariance (within + between) gives the same discriminant directions as the within-class
  one up to a scale along the class-mean span (Fisher 1936; Hastie, Tibshirani & Friedman, ESL 4.3.3), and the
  shrinkage bounds the amplification of the class means' added noise in the public data's weak directions.
- ``auto``: the server asks for two folds of users (a public rule on the user id) and the second moment, and picks
  among constant, centroid and lda by two-fold cross-validation on the aggregates
  (`fl_privtext.server.aggregate_selection`: the shrunk head estimated best unless it is significantly worse than
  the constant). With one fold (a sum requested without folds) `learner_for` keeps the analytic rule: lda when the second moment is in the sum, which
  `wants_second` asks for when the covariance noise's expected spectral norm 2 sigma sqrt(d) / n is below 1/d (an
  upper bound on the mean within-class eigenvalue of unit vectors), else centroid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_privtext.client.aggregate import (
    PUBLIC_TAIL,
    StatsLayout,
    central_epsilon,
    share_noise_std,
    stats_input,
    stats_projection,
)
from fl_privtext.config import ClientConfig, PrivacyConfig
from fl_privtext.public import PublicSpec, public_features
from fl_privtext.server.learners import LDA, Centroid, ClassStats, soft_spectrum

__all__ = ["PUBLIC_SHRINK", "Aggregate", "fit_from_aggregate", "learner_for", "public_within", "wants_second"]

# lda from public data: the public covariance C is used as (1 - a) C + a tr(C) / D I. Measured on blog 10k (MiniLM,
# in-domain public rows 'blog:other-users', pca 32, central epsilon 1, docs/results/secagg_selection.md)
PUBLIC_SHRINK = 0.5


@dataclass(frozen=True)
class Aggregate:
    """The server's reading of one SecAgg+ sum: the class statistics, how many clients contributed, and the
    sum's noise variance per coordinate (the sum of the contributors' share variances). ``stats`` are every user's
    (the folds summed; their noise variance per coordinate is ``stats_var`` = folds x ``noise_var``) or, from
    ``Aggregate.of(total, layout, fold=f)``, one fold's (``stats_var`` = ``noise_var``)."""

    stats: ClassStats
    contributors: int
    noise_var: float
    layout: StatsLayout
    seeded: int = 0  # contributors that ran the reproducible mode (their own statement)
    stats_var: float = -1.0  # noise variance per coordinate of ``stats`` (-1: noise_var, one block)

    def __post_init__(self) -> None:
        if self.stats_var < 0:
            object.__setattr__(self, "stats_var", self.noise_var)

    @classmethod
    def of(cls, total: np.ndarray, layout: StatsLayout, fold: int | None = None) -> Aggregate:
        """The sum as the server reads it: every user's statistics (``fold`` None) or one fold's."""
        total = np.asarray(total, np.float64)
        if total.shape != (layout.size + PUBLIC_TAIL,):
            raise ValueError(f"a secure sum of this layout has {layout.size + PUBLIC_TAIL} entries; got "
                             f"{total.shape}.")
        contributors = round(float(total[layout.size]))
        noise_var = max(float(total[layout.size + 1]), 0.0)
        counts, sums, second = layout.split(total) if fold is None else layout.split_fold(total, fold)
        stats_var = noise_var * (layout.folds if fold is None else 1)
        counts = np.clip(counts, 1e-9, None)  # noisy counts of a rare class can fall below 0
        d = layout.dim
        if second is None:  # tr(second) = sum of counts (unit vectors); only the trace is read (centroid)
            second = np.eye(d) * (float(counts.sum()) / d)
        # errors-in-variables: E[sum_k counts_k ||m_k||^2] carries d sigma^2 / counts_k per class; put it back
        # into the second moment so that within() estimates the records' within-class covariance
        second = second + np.eye(d) * (stats_var * float((1.0 / counts).sum()))
        seeded = round(float(total[layout.size + 2]))
        return cls(ClassStats(counts, sums, second, np.zeros(d)), contributors, noise_var, layout, seeded,
                   stats_var)

    @property
    def randomness(self) -> str:
        """"reproducible" when every contributor says it ran a client seed, "secret" when none did."""
        if 0 < self.seeded < self.contributors:
            raise RuntimeError(f"{self.seeded} of {self.contributors} clients ran with a client seed: the seed did not "
                               "reach every worker.")
        return "reproducible" if self.seeded and self.seeded == self.contributors else "secret"

    def epsilon(self, delta: float) -> float:
        """Central epsilon of this sum against the server at ``delta`` (its actual noise, dropouts included)."""
        return central_epsilon(math.sqrt(self.noise_var), delta, self.layout.sensitivity)


def public_within(public: PublicSpec, in_dim: int) -> np.ndarray | None:
    """(D, D) covariance of the public rows as the statistics hold them (`stats_input` of the public projection:
    projected, then unit-normalised), the server's covariance for lda without a second moment; None unless
    ``privacy.projection = pca`` (the only projection fitted on public rows). The public rows are extracted
    (`fl_privtext.public.public_features`) and projected (`stats_projection`) as `PublicSpec` names them."""
    if public.privacy.projection != "pca":
        return None
    x = stats_input(public_features(public), stats_projection(public, in_dim))
    return np.atleast_2d(np.cov(x, rowvar=False))


def _shrunk_public(cov: np.ndarray) -> np.ndarray:
    d = cov.shape[0]
    return (1.0 - PUBLIC_SHRINK) * cov + PUBLIC_SHRINK * float(np.trace(cov)) / d * np.eye(d)


def wants_second(learner: str, num_users: int, dim: int, privacy: PrivacyConfig,
                 client: ClientConfig) -> bool:
    """Whether the server asks for the second moment: never with public data (``privacy.projection = pca``: lda
    takes the public covariance) nor for centroid, else always for lda; for auto, when its noise is resolvable
    (module docstring) at the clients' announced noise (``client``, the driver's view; the clients use their
    own policy)."""
    if privacy.projection == "pca":
        return False
    if learner in ("lda", "centroid"):
        return learner == "lda"
    c = client
    sigma = share_noise_std(c.secagg_epsilon, c.secagg_delta, StatsLayout(1, dim, True).sensitivity, 1)
    return 2.0 * sigma * math.sqrt(dim) / max(num_users, 1) < 1.0 / dim


def learner_for(learner: str, layout: StatsLayout, public: bool = False) -> str:
    """The learner trained from a sum of ``layout`` (``public``: the server holds a public covariance)."""
    if learner == "lda" and not (layout.second or public):
        raise ValueError("server.learner = lda needs the second moment in the secure sum (StatsLayout.second) or "
                         "public data (privacy.projection = pca).")
    if learner not in ("auto", "centroid", "lda"):
        raise ValueError(f"from aggregates the server can train auto, centroid or lda; got {learner!r}.")
    return learner if learner != "auto" else ("lda" if layout.second or public else "centroid")


def fit_from_aggregate(learner: str, agg: Aggregate, public: np.ndarray | None = None) -> tuple[Any, str]:
    """The fitted learner (``logits`` on unit-normalised records, ``export`` for on-device inference) and its
    name. The exported (clean) head is the learner's rule on `denoised_means` (errors-in-variables: the class means
    carry the known added noise; a raw noisy mean inflates ||m_k||^2 by d s_k^2, the most for the smallest
    classes), with the within-class covariance (lda) or its trace (centroid) from the sum; lda without a second moment
    takes the ``public`` covariance (`public_within`), shrunk (`PUBLIC_SHRINK`)."""
    name = learner_for(learner, agg.layout, public is not None)
    if public is not None and public.shape != (agg.layout.dim,) * 2:
        raise ValueError(f"the public covariance is {public.shape}; the sum's records are {agg.layout.dim}-dimensional.")
    k, d = agg.layout.num_classes, agg.layout.dim
    st = agg.stats
    model: Any = (LDA if name == "lda" else Centroid)(num_classes=k, noise=np.zeros(d))
    model.stats = st
    from_second = name == "lda" and agg.layout.second
    cov_error = (agg.stats_var * agg.layout.second_var * d * (d + 1) / 2 / max(st.n - k, 1.0) ** 2
                 if from_second else 0.0)
    model.cov_error = cov_error
    model._heads()  # both heads as for uploads; the clean one is replaced below
    m, lp = st.means, np.log(st.priors)
    sw = st.within()
    if from_second:
        prec = np.linalg.inv(soft_spectrum(sw, cov_error))  # (D, D): regularised for the added noise's error
    elif name == "lda":
        assert public is not None
        prec = np.linalg.inv(_shrunk_public(public))
    else:
        prec = np.eye(d) * d / max(float(np.trace(sw)), 1e-12)
    m = denoised_means(agg)
    model.w_clean = m @ prec
    model.b_clean = -0.5 * (model.w_clean * m).sum(1) + lp
    return model, name


def denoised_means(agg: Aggregate) -> np.ndarray:
    """(K, D) class means with each deviation from the (count-weighted) grand mean shrunk by the positive-part
    James-Stein factor 1 - D t_k^2 / ||dev_k||^2 (Stein 1961 / James & Stein 1961), t_k^2 the known variance of a
    coordinate of the DEVIATION's added noise. With e_j the noise of class j's mean (variance v / c_j^2, v the
    stats' noise variance per coordinate, c_j the count) and w_j = c_j / n, dev_k's noise is
    e_k - sum_j w_j e_j, of variance t_k^2 = v ((1 - w_k)^2 / c_k^2 + (K - 1) / n^2) (w_j^2 v / c_j^2 = v / n^2):
    the grand mean shares the class's own noise. The factor once used s_k^2 = v / c_k^2 instead, which overstates
    the noise by 1 / (1 - w_k)^2 (4x for two balanced classes): on the default data (K = 2, D = 50) every deviation
    was set to 0 up to central epsilon 5.3, every head became the constant and the secure-aggregation selection
    scored all candidates alike. An unresolved class (its deviation's noise norm above its deviation) still falls
    back to the grand mean instead of pulling the rule towards noise."""
    st = agg.stats
    m = st.means
    n = max(float(st.counts.sum()), 1e-9)
    grand = (st.counts @ m) / n
    dev = m - grand
    k = len(st.counts)
    w = st.counts / n
    t2 = agg.stats_var * ((1.0 - w) ** 2 / st.counts ** 2 + (k - 1) / n ** 2)
    factor = np.clip(1.0 - agg.layout.dim * t2 / np.maximum((dev * dev).sum(1), 1e-300), 0.0, 1.0)
    return grand + factor[:, None] * dev


def plain_sum(vectors: list[np.ndarray]) -> np.ndarray:
    """The exact sum of the clients' vectors (what SecAgg+ reveals, up to its quantisation): the in-process
    transport of tests and of the plain loop."""
    return np.sum(np.stack([np.asarray(v, np.float64) for v in vectors]), axis=0)
