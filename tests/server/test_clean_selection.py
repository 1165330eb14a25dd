"""Issue #37 item 3: the server's view of what it ships (the clean head on device) against what it scores (the
per-upload log-loss), and the class-mean shrinkage of the upload path. Closed forms on Gaussian data, no Ray."""

from __future__ import annotations

import numpy as np

from fl_privtext.server import make_learner, select
from fl_privtext.server.learners import ClassStats
from fl_privtext.server.noise import NoiseLaw


def test_the_deviation_error_is_that_of_mean_minus_grand_not_of_the_mean():
    """`ClassStats.deviation_error`: E||(m_k - grand) - (mu_k - mu_bar)||^2 = v_k tr S_w, checked by Monte Carlo
    (two classes, 300 / 100 uploads, identity covariance, D = 20, 1,000 draws: within 8%); known-bad: the old
    factor's 1 / n_k overstates it for both classes, 4x for the larger one (0.067 against 0.017 per coordinate)."""
    g = np.random.default_rng(0)
    d, counts = 20, np.array([300, 100])
    y = np.repeat([0, 1], counts)
    errs = np.zeros(2)
    draws = 1000
    for _ in range(draws):
        x = g.standard_normal((len(y), d))  # mu = 0: every deviation is error
        st = ClassStats.of(x, y, 2, np.zeros(d))
        dev = st.means - (st.counts @ st.means) / st.n
        errs += (dev * dev).sum(1)
    errs /= draws
    v = ClassStats.of(g.standard_normal((len(y), d)), y, 2, np.zeros(d)).deviation_error()
    assert np.allclose(errs, v * d, rtol=0.08), (errs, v * d)
    assert np.all(d / counts > 1.2 * errs) and d / counts[0] > 3.5 * errs[0], "the old factor should overstate it"


def test_shrunk_means_keep_a_resolved_deviation_the_old_factor_erased():
    """Two balanced classes whose mean deviation is 1.5x the deviation's error (v tr S_w) but below the class
    mean's own error (tr S_w / n_k = 2 v tr S_w): the positive-part factor keeps a third of it; the old factor set
    it to 0 (every noisy head then became the constant's)."""
    d, n_k = 10, 500
    y = np.repeat([0, 1], n_k)
    x = np.random.default_rng(1).standard_normal((2 * n_k, d))
    x -= np.array([x[y == c].mean(0) for c in (0, 1)])[y]  # exact class means 0, within-class covariance ~ I
    st0 = ClassStats.of(x, y, 2, np.zeros(d))
    err = float(np.trace(st0.within())) * st0.deviation_error()[0]
    shift = np.zeros(d)
    shift[0] = np.sqrt(1.5 * err)  # each deviation from the grand mean: +-shift
    st = ClassStats.of(x + np.where(y[:, None] == 1, shift, -shift), y, 2, np.zeros(d))
    kept = (st.shrunk_means() - st.means.mean(0))[1, 0] / shift[0]
    assert abs(kept - (1 - 1 / 1.5)) < 0.01, kept
    old = 1.0 - float(np.trace(st.within())) / n_k / (shift @ shift)
    assert old <= 0.0, "the old factor should have erased this deviation"


def _weak_signal(seed: int, n: int = 6000):
    """Two classes (60/40), clean means 0 and 1.6 s on the first axis, clean within-class sd s = 0.5, additive
    Gaussian noise of variance 50 per coordinate (200x the clean variance): each upload carries little, and the
    clean spread is below what 6,000 uploads resolve (the standard error of a projected variance of the uploads,
    sqrt(2 / n) of it, is about 3x the clean part)."""
    g = np.random.default_rng(seed)
    d, s, v = 3, 0.5, 50.0
    y = (g.random(n) < 0.4).astype(np.int64)
    clean = g.normal(scale=s, size=(n, d))
    clean[:, 0] += 1.6 * s * y
    x = clean + g.normal(scale=np.sqrt(v), size=(n, d))
    return x, y, np.arange(n) // 3, NoiseLaw.diagonal(np.full(d, v), "closed form"), (d, s)


def test_a_resolved_moment_head_the_log_loss_gate_threw_away_is_shipped():
    """Issue #37 item 3, the planted case: on these uploads the LDA's clean head reaches more than 70% on fresh clean
    points against the constant's 60%, while its per-upload log-loss does NOT beat the constant's significantly
    (``beats_constant`` False: the old rule, the lowest log-loss among the heads that beat the constant, kept the
    constant). The rule now ships the shrunk moment head unless it is significantly WORSE than the constant: here
    the LDA. The held-out clean estimate cannot rank them (the clean within-class spread is not resolved by the
    uploads), and says so: ``clean_unresolved`` above ``CLEAN_UNRESOLVED``, ``clean_choice`` the constant."""
    from fl_privtext.server.selection import CLEAN_UNRESOLVED

    x, y, groups, law, (d, s) = _weak_signal(1)
    makers = {n: (lambda n=n: make_learner(n, num_classes=2, noise=law, seed=0)) for n in ("constant", "lda")}
    best, scores = select(makers, x, y, groups, law=law, num_classes=2)
    g = np.random.default_rng(99)
    yt = (g.random(20000) < 0.4).astype(np.int64)
    clean = g.normal(scale=s, size=(len(yt), d))
    clean[:, 0] += 1.6 * s * yt
    e = make_learner("lda", num_classes=2, noise=law, seed=0).fit(x, y).export()
    truth = float(np.mean((clean @ e["weight_0"].T.astype(np.float64) + e["bias_0"]).argmax(1) == yt))
    assert truth > 0.70 > np.mean(yt == 0) + 0.08, truth
    assert not scores["lda"]["beats_constant"], scores  # the old rule's gate: the constant would have shipped
    assert best == "lda" and not scores["lda"]["worse_than_constant"], scores
    assert scores["lda"]["clean_unresolved"] > CLEAN_UNRESOLVED
    assert scores["constant"]["clean_choice"] == "constant"


def test_a_moment_head_significantly_worse_than_the_constant_is_not_shipped():
    """The one gate left on the moment heads. The centroid assumes one within-class variance for every coordinate;
    here the only informative coordinate has 900x the variance of the others, so its noisy head is ~10x
    overconfident and its per-upload log-loss significantly worse than the constant's (0.86 against 0.67 nats):
    ``worse_than_constant``, and it is not shipped. Any other head (linear) ships only where it beats the constant
    significantly (``beats_constant``), as before."""
    g = np.random.default_rng(0)
    n, d = 6000, 10
    y = (g.random(n) < 0.4).astype(np.int64)
    x = 0.1 * g.normal(size=(n, d))
    x[:, 0] = 3.0 * g.normal(size=n) + 0.5 * y
    makers = {k: (lambda k=k: make_learner(k, num_classes=2, noise=np.zeros(d), seed=0))
              for k in ("constant", "centroid", "linear")}
    best, scores = select(makers, x, y, np.arange(n) // 3)
    assert scores["centroid"]["worse_than_constant"], scores
    assert best == ("linear" if scores["linear"]["beats_constant"] else "constant"), scores


def test_a_head_equal_to_the_constant_up_to_rounding_is_neither_better_nor_worse():
    """A moment head shrunk all the way to the prior answers as the constant does; its per-upload losses differ from
    the constant's by rounding only, whose paired z is arbitrary (the default run flagged such a head "worse").
    Known-bad: the same differences scaled to 1e-3 nats are a real, significant difference."""
    from fl_privtext.server.selection import _paired_z

    g = np.random.default_rng(0)
    null = g.uniform(0.5, 0.8, 3000)
    groups = np.repeat(np.arange(600), 5)
    rounding = null + g.normal(0, 1e-16, 3000) + 2e-16
    assert _paired_z(rounding, null, groups) == 0.0
    real = null + 1e-3 + g.normal(0, 1e-4, 3000)
    assert _paired_z(real, null, groups) > 10


def _two_axes(seed: int, n: int, noise_sd: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two classes (60/40) in D = 4, class means apart by 0.3 on a tight axis (clean sd 0.2) and 0.6 on a loose one
    (sd 1.5, as the other two): the tight axis is the better one, which an isotropic covariance (the centroid's)
    cannot see; plus additive Gaussian noise of sd ``noise_sd``. Returns (clean, uploads, labels)."""
    g = np.random.default_rng(seed)
    y = (g.random(n) < 0.4).astype(np.int64)
    clean = g.normal(size=(n, 4)) * np.array([0.2, 1.5, 1.5, 1.5])
    clean[:, 0] += 0.3 * y
    clean[:, 1] += 0.6 * y
    return clean, clean + np.random.default_rng(100 + seed).normal(scale=noise_sd, size=clean.shape), y


def _moment_select(x: np.ndarray, y: np.ndarray, law: NoiseLaw) -> tuple[str, dict]:
    makers = {n: (lambda n=n: make_learner(n, num_classes=2, noise=law, seed=0)) for n in ("constant", "centroid", "lda")}
    return select(makers, x, y, np.arange(len(y)) // 3)


def test_between_moment_heads_the_per_upload_log_loss_cannot_rank_the_lda_that_nests_the_centroid_ships():
    """Issue #37 item 3 (AG news MiniLM, PrivUnitG true epsilon 4: centroid and LDA 1e-5 nats apart per upload, the
    LDA's clean head 2.2 points above): noise of variance 15 per coordinate (75x the tight axis's clean variance)
    swamps the clean covariance in the noisy heads, so their per-upload log-losses differ by noise (here the LDA's
    is HIGHER by ~1e-5 nats: the lower-log-loss rule shipped the centroid), while the uploads resolve the clean
    covariance and the LDA's clean head is > 2 points above the centroid's on fresh clean points. The LDA (which
    reverts to the centroid's isotropic covariance where its spectrum is unresolved) ships."""
    law = NoiseLaw.diagonal(np.full(4, 15.0), "closed form")
    _, x, y = _two_axes(7, 6000, np.sqrt(15.0))
    best, scores = _moment_select(x, y, law)
    assert scores["centroid"]["log_loss"] < scores["lda"]["log_loss"], scores  # the old rule's pick: the centroid
    assert not scores["lda"]["worse_than_moment_head"] and best == "lda", scores
    clean, _, yt = _two_axes(1000, 20000, 0.0)
    acc = {}
    for name in ("centroid", "lda"):
        e = make_learner(name, num_classes=2, noise=law, seed=0).fit(x, y).export()
        acc[name] = float(np.mean((clean @ e["weight_0"].T.astype(np.float64) + e["bias_0"]).argmax(1) == yt))
    assert acc["lda"] > acc["centroid"] + 0.02, acc


def test_an_lda_significantly_worse_than_the_centroid_per_upload_still_ships_and_loses_nothing_on_device():
    """The old guard on the preference (until 2026-11-29): a noise law overstated 4x (variance 4 stated, 1 applied)
    leaves the LDA's noisy head underconfident, its per-upload log-loss significantly worse than the centroid's
    (recorded, ``worse_than_moment_head``), and the centroid shipped. On clean points the two heads then answer
    alike (both at the constant), so the guard saved nothing here, while on AG news at PrivUnitG epsilon 8 it shipped
    the centroid 7-9 points below the LDA on every seed. The LDA ships; its clean accuracy is the centroid's within
    0.01; with the law right it is > 10 points above the centroid's."""
    clean, _, yt = _two_axes(1000, 20000, 0.0)

    def clean_acc(name: str, x: np.ndarray, y: np.ndarray, law: NoiseLaw) -> float:
        e = make_learner(name, num_classes=2, noise=law, seed=0).fit(x, y).export()
        return float(np.mean((clean @ e["weight_0"].T.astype(np.float64) + e["bias_0"]).argmax(1) == yt))

    _, x, y = _two_axes(0, 6000, 1.0)
    over = NoiseLaw.diagonal(np.full(4, 4.0), "overstated 4x")
    best, scores = _moment_select(x, y, over)
    assert scores["lda"]["worse_than_moment_head"] and not scores["lda"]["worse_than_constant"], scores
    assert best == "lda", scores
    assert abs(clean_acc("lda", x, y, over) - clean_acc("centroid", x, y, over)) <= 0.01
    right = NoiseLaw.diagonal(np.full(4, 1.0), "closed form")
    assert _moment_select(x, y, right)[0] == "lda"
    assert clean_acc("lda", x, y, right) > clean_acc("centroid", x, y, right) + 0.10