"""Analytic Gaussian mechanism (Balle & Wang 2018): calibration meets the exact condition and beats the classic sigma."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from fl_privtext.privacy import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    make_mechanism,
)

GRID = [(eps, delta) for eps in (0.05, 0.3, 1.0, 2.0, 8.0) for delta in (1e-9, 1e-5, 1e-2)]


def numeric_delta(sigma: float, eps: float, sens: float) -> float:
    """delta(eps) = integral of max(0, p0(y) - e^eps p1(y)) dy, p0 = N(0, s^2), p1 = N(sens, s^2), by quadrature."""
    cross = sens / 2 - eps * sigma**2 / sens  # p0 >= e^eps p1 exactly for y <= cross
    f = lambda y: stats.norm.pdf(y, 0, sigma) - math.exp(eps) * stats.norm.pdf(y, sens, sigma)
    val, _ = integrate.quad(f, -np.inf, cross, epsabs=1e-14, epsrel=1e-10, limit=200)
    return val


@pytest.mark.parametrize(("eps", "delta"), GRID)
def test_sigma_satisfies_the_exact_condition_tightly(eps, delta):
    sens = 2.0
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert gaussian_delta(sigma, eps, sens) <= delta
    assert gaussian_delta(sigma * (1 - 1e-9), eps, sens) > delta * (1 - 1e-6)  # smallest such sigma
    assert gaussian_delta(sigma, eps, sens) == pytest.approx(delta, rel=1e-6)
    assert gaussian_delta(sigma * 0.99, eps, sens) > delta


@pytest.mark.parametrize(("eps", "delta"), [(0.3, 1e-5), (1.0, 1e-5), (1.0, 1e-2), (4.0, 1e-6)])
def test_condition_matches_direct_integration(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)
    assert numeric_delta(sigma, eps, 1.0) == pytest.approx(delta, rel=1e-5)


@pytest.mark.parametrize("eps", (0.05, 0.3, 0.7, 1.0))
@pytest.mark.parametrize("delta", (1e-9, 1e-5, 1e-2))
def test_analytic_is_smaller_than_classic_for_eps_at_most_one(eps, delta):
    assert analytic_gaussian_sigma(eps, delta, 1.0) < classic_gaussian_sigma(eps, delta, 1.0)


def test_mechanism_uses_delta_2_equal_2c():
    mech = make_mechanism("gaussian", epsilon=1.0, delta=1e-5, clip_norm=3.0, sampler="float")
    rep = mech.report()
    assert rep.calibration["l2_sensitivity"] == 6.0 and rep.delta == 1e-5
    assert rep.calibration["noise_std"] == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, 6.0))
    assert rep.calibration["noise_std"] == pytest.approx(3 * analytic_gaussian_sigma(1.0, 1e-5, 2.0), rel=1e-9)
    assert rep.calibration["delta_at_noise_std"] <= 1e-5
    assert rep.epsilon_worst_case == 1.0 and rep.published_claim_note is None


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"delta must be in the open interval \(0, 1\)"):
        analytic_gaussian_sigma(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        analytic_gaussian_sigma(0.0, 1e-5, 1.0)
