"""The server's learners on synthetic data with known class means and a known mechanism (numpy, no Flower)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext.privacy import make_mechanism
from fl_privtext.server import ClassStats, make_learner, noise_variance, select
from fl_privtext.server.learners import label_rr_matrix

D, K = 8, 3


def _data(n: int, g: np.random.Generator, sep: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clean points: class means mu_k (K, D), within-class covariance Sigma (D, D) anisotropic; x, y."""
    mu = sep * np.eye(K, D)
    a = np.diag(np.linspace(0.5, 1.0, D))
    sigma = a @ a
    y = g.integers(0, K, n)
    x = mu[y] + g.standard_normal((n, D)) @ a
    return x, y, mu, sigma


def _bayes(mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The clean Bayes rule (equal priors): w_k = Sigma^-1 mu_k, b_k = -mu_k Sigma^-1 mu_k / 2."""
    w = np.linalg.solve(sigma, mu.T).T
    return w, -0.5 * (w * mu).sum(1)


def _rel_err(model: dict[str, np.ndarray], w: np.ndarray) -> float:
    """Distance of the exported discriminant to the Bayes one, both centred over classes (logit shifts shared by
    every class do not change the decision)."""
    got = model["weight_0"] - model["weight_0"].mean(0)
    ref = w - w.mean(0)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def test_lda_converges_to_the_clean_bayes_rule_under_gaussian_noise(gen):
    """The exported (clean) discriminant -> Sigma^-1 mu_k as n grows; the uncorrected one (the uploads' covariance,
    no errors-in-variables correction) and one with a wrong noise variance stay away from it."""
    sigma_noise = 0.8
    errs, uncorrected, broken = [], [], []
    for n in (2_000, 20_000, 200_000):
        x, y, mu, sigma = _data(n, gen)
        u = x + sigma_noise * gen.standard_normal(x.shape)
        w = _bayes(mu, sigma)[0]
        model = make_learner("lda", num_classes=K, noise=np.full(D, sigma_noise ** 2)).fit(u, y)
        errs.append(_rel_err(model.export(), w))
        uncorrected.append(_rel_err(make_learner("lda", num_classes=K, noise=np.zeros(D)).fit(u, y).export(), w))
        broken.append(_rel_err(make_learner("lda", num_classes=K, noise=np.full(D, 0.25 * sigma_noise ** 2))
                               .fit(u, y).export(), w))
    assert errs[2] < errs[1] < errs[0] and errs[2] < 0.05
    assert min(uncorrected) > 0.4 and broken[2] > 4 * errs[2]


def test_the_noise_law_of_the_mechanism_object():
    """Monte Carlo of the mechanism's own privatize/expected: Gaussian sigma^2 (within 10%); PrivUnitG's trace
    equals its closed-form MSE at the clipping norm (within 5%)."""
    mech = make_mechanism("gaussian", epsilon=1.0, delta=1e-5, clip_norm=1.0)
    var = noise_variance(mech, D, np.zeros(D), np.random.default_rng(1))
    np.testing.assert_allclose(var, mech.noise_std ** 2, rtol=0.1)
    pug = make_mechanism("privunitg", epsilon=2.0, dim=32)
    var = noise_variance(pug, 32, np.zeros(32), np.random.default_rng(2))
    assert var.sum() == pytest.approx(pug.mse(), rel=0.05)


def test_without_noise_the_moment_learners_match_a_plain_fit(gen):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    x, y, _, _ = _data(5_000, gen)
    ours = make_learner("lda", num_classes=K, noise=np.zeros(D)).fit(x, y)
    ref = LinearDiscriminantAnalysis(solver="lsqr").fit(x, y)
    agree = (ours.logits(x).argmax(1) == ref.predict(x)).mean()
    assert agree > 0.99
    # the exported (clean) head decides as the plain fit too when the noise law is zero
    e = ours.export()
    assert ((x @ e["weight_0"].T + e["bias_0"]).argmax(1) == ref.predict(x)).mean() > 0.99
    assert (make_learner("linear", num_classes=K).fit(x, y).logits(x).argmax(1) == y).mean() > 0.8


def test_the_constant_wins_when_the_data_carry_no_signal(gen):
    n = 6_000
    y = np.where(gen.random(n) < 0.5, 0, gen.integers(1, K, n))  # class 0 is the majority (~0.67)
    u = gen.standard_normal((n, D))  # independent of y
    groups = np.arange(n) // 4
    makers = {name: (lambda name=name: make_learner(name, num_classes=K, noise=np.full(D, 0.5)))
              for name in ("constant", "centroid", "lda", "linear")}
    best, scores = select(makers, u, y, groups)
    assert best == "constant"
    assert scores["constant"]["accuracy"] == pytest.approx((y == 0).mean())
    # the constant's log-loss is the labels' entropy (up to the fold-wise priors)
    p = np.bincount(y) / n
    assert scores["constant"]["log_loss"] == pytest.approx(-(p * np.log(p)).sum(), abs=0.01)


def test_label_rr_debiasing_recovers_the_class_means(gen):
    x, y, mu, _ = _data(60_000, gen, sep=2.0)
    r = label_rr_matrix(K, 1.0)
    flipped = np.array([gen.choice(K, p=r[c]) for c in y])
    st = ClassStats.of(x, flipped, K, np.zeros(D), r)
    np.testing.assert_allclose(st.means, mu, atol=0.08)
    naive = ClassStats.of(x, flipped, K, np.zeros(D))
    assert np.abs(naive.means - mu).max() > 0.3  # without the correction the means shrink towards each other


def test_bit_noise_law_is_exact():
    mech = make_mechanism("bitrr", epsilon=2.0, dim=2, int_bits=1, frac_bits=2)
    p, q = (np.asarray(a) for a in mech.bit_probabilities())
    b = np.random.default_rng(0).integers(0, 2, (20_000, p.size))
    u = (np.random.default_rng(1).random(b.shape) < q + (p - q) * b).astype(float)
    m = q + (p - q) * b
    var = noise_variance(mech, 2, u.mean(0), np.random.default_rng(2))
    np.testing.assert_allclose(var, (m * (1 - m)).mean(0), atol=0.01)


@pytest.mark.parametrize("name", ["constant", "centroid", "lda", "linear"])
def test_every_learner_exports_a_model_the_clients_can_apply(gen, name):
    """The exported format is the MLP's dict of arrays (a linear learner: one layer); the client's code applies it."""
    from fl_privtext.ondevice import check_model, mlp_logits

    x, y, _, _ = _data(3_000, gen, sep=2.0)
    model = make_learner(name, num_classes=K, noise=np.full(D, 0.1)).fit(x, y).export()
    assert check_model(model) == 1
    pred = mlp_logits(model, x.astype(np.float32)).argmax(1)
    if name == "constant":
        assert (pred == np.bincount(y).argmax()).all()
    else:
        assert (pred == y).mean() > 0.8
