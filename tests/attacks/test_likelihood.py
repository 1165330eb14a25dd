"""The mechanism-aware log-likelihoods are the exact densities, and later mechanisms plug in through the hook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from scipy import stats

from fl_privtext.attacks import likelihood
from fl_privtext.privacy import make_mechanism
from fl_privtext.privacy.mechanisms import LaplaceL1
from tests.samplers import float_mechanism


def _brute(mech, y, codes):
    """log density of y under each code, written from the mechanism's calibration (not from likelihood.py)."""
    name = mech.name
    out = np.empty((len(y), len(codes)))
    for j, c in enumerate(codes):
        if name.startswith("laplace"):
            out[:, j] = stats.laplace.logpdf(y, loc=c, scale=mech.noise_scale).sum(axis=1)
        elif name == "gaussian":
            out[:, j] = stats.norm.logpdf(y, loc=c, scale=mech.noise_std).sum(axis=1)
        else:
            p, q = mech.bit_probabilities()
            rate = np.where(c == 1, p, q)
            out[:, j] = stats.bernoulli.logpmf(y, rate).sum(axis=1)
    return out


@pytest.mark.parametrize("name,params", [
    ("laplace-l1", {"epsilon": 2.0}), ("laplace-box", {"epsilon": 5.0, "dim": 6}),
    ("gaussian", {"epsilon": 2.0, "delta": 1e-5}), ("ome", {"epsilon": 1.0, "lam": 10.0, "dim": 6}),
    ("bitrr", {"epsilon": 30.0, "dim": 6}), ("sue", {"epsilon": 5.0, "dim": 6}),
    ("oue", {"epsilon": 5.0, "dim": 6})])
def test_log_likelihood_differences_equal_the_exact_density(name, params):
    g = np.random.default_rng(0)
    mech = float_mechanism(name, **params)
    x = g.normal(size=(5, 6)).astype(np.float32)
    y = mech.privatize(x, g).astype(np.float64)
    codes = likelihood.encode_candidates(mech, x)
    ours = likelihood.log_likelihood(mech, y, codes)
    ref = _brute(mech, y, codes)
    # equal up to a constant per upload
    np.testing.assert_allclose(ours - ours[:, :1], ref - ref[:, :1], rtol=1e-6, atol=1e-6)
    assert likelihood.lookup(mech)[1]


def test_fractional_codes_give_the_mixture_bit_likelihood():
    mech = make_mechanism("ome", epsilon=1.0, lam=10.0, dim=2)
    g = np.random.default_rng(1)
    y = mech.privatize(g.normal(size=(4, 2)), g).astype(np.float64)
    c = g.random((3, y.shape[1]))
    p, q = mech.bit_probabilities()
    rate = c * p + (1 - c) * q
    ref = np.stack([stats.bernoulli.logpmf(y, r).sum(axis=1) for r in rate], axis=1)
    np.testing.assert_allclose(likelihood.log_likelihood(mech, y, c), ref, rtol=1e-9)


@dataclass(frozen=True, kw_only=True)
class HalfNoiseLaplace(LaplaceL1):
    name: ClassVar[str] = "half-noise"


def test_a_new_mechanism_declares_a_likelihood_or_falls_back_to_nearest_neighbour():
    mech = HalfNoiseLaplace(epsilon=1.0, sampler="float")
    assert likelihood.lookup(mech)[1]  # inherits the Laplace likelihood through the class hierarchy

    class Opaque:
        dim = None

    assert likelihood.lookup(Opaque())[1] is False
    assert "nearest-neighbour" in likelihood.note(Opaque())

    @dataclass(frozen=True, kw_only=True)
    class Declared(LaplaceL1):
        name: ClassVar[str] = "declared"

        def log_likelihood(self, uploads, codes):
            return -np.abs(uploads[:, None, :] - codes[None]).sum(axis=2)

    fn, exact = likelihood.lookup(Declared(epsilon=1.0, sampler="float"))
    assert exact and fn is Declared.log_likelihood


# ---- the mechanisms whose law is on the sphere or radial (cap family, mvlaplace, purkayastha) ----------------
_SPHERE = [("privunit", {"epsilon": 4.0}), ("privunitg", {"epsilon": 4.0}), ("duchi", {"epsilon": 2.0}),
           ("privunit", {"epsilon": 4.0, "sphere_map": "normalise"}), ("mvlaplace", {"epsilon": 6.0}),
           ("purkayastha", {"epsilon": 3.0})]


def test_radial_and_angular_likelihoods_equal_their_densities():
    g = np.random.default_rng(2)
    d = 6
    x = g.normal(size=(5, d)) * 0.4
    for name, params in (("mvlaplace", {"epsilon": 3.0}), ("purkayastha", {"epsilon": 2.0})):
        mech = float_mechanism(name, dim=d, **params)
        y = mech.privatize(x.astype(np.float32), g).astype(np.float64)
        codes = likelihood.encode_candidates(mech, x)
        ours = likelihood.log_likelihood(mech, y, codes)
        if name == "mvlaplace":  # exp(-eps ||y - clip(x)||), written from the clip rule
            clipped = x * np.minimum(1.0, 1.0 / np.linalg.norm(x, axis=1))[:, None]
            ref = -3.0 * np.linalg.norm(y[:, None, :] - clipped[None], axis=2)
        else:  # the angle's density over the sphere's surface element sin^(d-2)
            from fl_privtext.privacy.mechanisms.metric_dp import purkayastha_log_density

            cos = (y / np.linalg.norm(y, axis=1)[:, None]) @ (x / np.linalg.norm(x, axis=1)[:, None]).T
            theta = np.arccos(np.clip(cos, -1, 1))
            ref = purkayastha_log_density(theta, d, 2.0) - (d - 2) * np.log(np.sin(theta))
        np.testing.assert_allclose(ours - ours[:, :1], ref - ref[:, :1], rtol=1e-5, atol=1e-5)
        assert likelihood.lookup(mech)[1]


@pytest.mark.parametrize("name,params", [(n, p) for n, p in _SPHERE if n not in ("mvlaplace", "purkayastha")])
def test_cap_likelihood_is_a_density_ratio_that_integrates_to_one(name, params):
    # E over the base law (uniform sphere, N(0, I) for privunitg) of exp(log-likelihood) = 1 for every code,
    # and the upload's own code has the larger mean log-likelihood than an unrelated one
    g = np.random.default_rng(3)
    d = 5
    mech = float_mechanism(name, dim=d, **params)
    cal = mech.calibration
    v = g.normal(size=(200_000, d))
    if name != "privunitg":
        v /= np.linalg.norm(v, axis=1)[:, None]
    y = v * mech.clip_norm / cal.m
    codes = np.array([[0.3, 0, 0, 0, 0], [0.0, 1, 0, 0, 0], [0.0, 0, 0, 0, 0]])
    mass = np.exp(likelihood.log_likelihood(mech, y, codes)).mean(axis=0)
    np.testing.assert_allclose(mass, 1.0, atol=0.02)
    assert likelihood.lookup(mech)[1]
    own = mech.privatize(np.tile(codes[1], (4000, 1)).astype(np.float32), g).astype(np.float64)
    ll = likelihood.log_likelihood(mech, own, codes[:2])
    assert ll[:, 1].mean() > ll[:, 0].mean() + 0.1


@pytest.mark.parametrize("name,params", _SPHERE)
def test_likelihood_attacker_beats_majority_and_matches_logistic_regression(name, params):
    from sklearn.linear_model import LogisticRegression

    g = np.random.default_rng(4)
    d, n = 8, 6000
    mu = np.zeros(d)
    mu[0], mu[1] = 0.6, 0.3
    z = (g.random(n) < 0.35).astype(int)  # majority 0.65
    x = (np.where(z[:, None] == 1, mu, -mu) + 0.03 * g.normal(size=(n, d))).astype(np.float32)
    mech = float_mechanism(name, dim=d, **params)
    y = mech.privatize(x, g).astype(np.float64)
    tr, te = np.arange(n // 2), np.arange(n // 2, n)
    codes = likelihood.encode_candidates(mech, x[tr])
    centroids = np.stack([codes[z[tr] == c].mean(axis=0) for c in (0, 1)])
    prior = np.log(np.bincount(z[tr], minlength=2) / len(tr))
    ll_acc = float(((likelihood.log_likelihood(mech, y[te], centroids) + prior).argmax(1) == z[te]).mean())
    lr_acc = float((LogisticRegression(C=1.0).fit(y[tr], z[tr]).predict(y[te]) == z[te]).mean())
    majority = max(z[te].mean(), 1 - z[te].mean())
    assert ll_acc > majority + 0.05, (ll_acc, majority)
    assert ll_acc >= lr_acc - 0.015, (ll_acc, lr_acc)
