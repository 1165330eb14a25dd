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
    mech = make_mechanism(name, **params)
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


def test_a_new_mechanism_plugs_in_a_likelihood_or_falls_back_to_nearest_neighbour():
    mech = HalfNoiseLaplace(epsilon=1.0)
    assert likelihood.lookup(mech)[1]  # inherits the Laplace likelihood through the class hierarchy

    class Opaque:
        dim = None

    assert likelihood.lookup(Opaque())[1] is False
    calls = []

    @likelihood.register_log_likelihood(Opaque)
    def _ll(m, y, c):
        calls.append(1)
        return -np.abs(y[:, None, :] - c[None]).sum(axis=2)

    try:
        fn, exact = likelihood.lookup(Opaque())
        assert exact and fn is _ll
    finally:
        likelihood._REGISTRY.pop(Opaque)
