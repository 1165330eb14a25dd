"""Distributed discrete Gaussian (`fl_privtext.privacy.distributed`): the grid-rounded clip bound, the share's
noise law, KLS's accounting against its closed forms, and the noisy sum's scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_privtext.privacy.distributed import (
    epsilon_of,
    kls_tau,
    noisy_share,
    round_rho,
    round_to_grid,
    share_sigma,
    sum_rho,
)
from fl_privtext.privacy.exact import SecureBits


def test_rounded_update_stays_in_the_clip_ball(gen):
    step = 2.0**-8
    for d in (1, 10, 1000):
        for _ in range(50):
            u = gen.normal(0, 5.0, d)
            z = round_to_grid(u, 1.0, step)
            assert np.linalg.norm(z) <= 1.0 / step + 1e-9
    # known-bad variant: clipping to C itself and then rounding can leave the ball
    u = np.full(900, 1.0 / 30.0)  # norm 1; each coordinate 8.53 steps rounds up to 9
    assert np.linalg.norm(np.rint(u / step)) > 1.0 / step
    with pytest.raises(ValueError, match="too coarse"):
        round_to_grid(np.zeros(10**4), 1.0, 0.1)


def test_the_share_is_the_rounded_update_plus_discrete_gaussian_noise(gen):
    step, clip, z, m = 2.0**-10, 1.0, 2.0, 4
    u = gen.normal(0, 0.01, 20000)
    bits = SecureBits(bytes(range(32)))
    share = noisy_share(u, clip=clip, noise_multiplier=z, min_clients=m, step=step, bits=bits)
    noise = share / step - round_to_grid(u, clip, step)
    assert np.allclose(noise, np.rint(noise))  # integers on the grid: the encoding is exact
    sigma = share_sigma(noise_multiplier=z, clip=clip, min_clients=m, step=step)
    assert sigma == z * clip / (math.sqrt(m) * step)
    # N_Z(0, sigma^2) at sigma = 1024: variance sigma^2 (to 1e-300), mean 0; 20000 draws: se(var)/var ~ 1%
    assert abs(noise.mean()) < 4 * sigma / math.sqrt(noise.size)
    assert noise.var() / sigma**2 == pytest.approx(1.0, abs=0.04)


def test_kls_accounting_closed_forms():
    # tau is negligible at sigma >> 1 and the sum of n shares is the Gaussian of variance n sigma^2
    assert kls_tau(100.0, 10) == 0.0 or kls_tau(100.0, 10) < 1e-300
    rho = sum_rho(sigma=1000.0, n=5, l2_sensitivity=2000.0, dim=100)
    assert rho == pytest.approx(0.5 * 2000.0**2 / (5 * 1000.0**2))
    # tau by hand at small sigma: 10 * sum_k exp(-2 pi^2 sigma^2 k/(k+1))
    s, n = 0.5, 3
    assert kls_tau(s, n) == pytest.approx(10 * (math.exp(-math.pi**2 * s * s) + math.exp(-2 * math.pi**2 * s * s
                                                                                         * 2 / 3)))
    assert sum_rho(sigma=0.4, n=3, l2_sensitivity=1.0, dim=1) == math.inf  # outside Proposition 14
    # the coarse-grid penalty is charged: the same float noise on a coarse grid costs more
    fine = round_rho(noise_multiplier=1.0, clip=1.0, min_clients=3, contributors=3, step=1e-4, dim=10**4)
    coarse = round_rho(noise_multiplier=1.0, clip=1.0, min_clients=3, contributors=3, step=0.6, dim=10**4)
    assert fine == pytest.approx(2.0) and coarse > 1.1 * fine
    # rho-zCDP through dp-accounting equals the Gaussian of noise multiplier 1/sqrt(2 rho); composes additively
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    acct = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acct.compose(dp_accounting.GaussianDpEvent(2.0), 3)
    assert epsilon_of([1 / 8] * 3, 1e-5) == pytest.approx(acct.get_epsilon(1e-5))
    assert epsilon_of([3 / 8], 1e-5) == pytest.approx(epsilon_of([1 / 8] * 3, 1e-5))
    assert epsilon_of([math.inf], 1e-5) == math.inf


def test_declared_shares_are_accounted_by_their_best_equal_group():
    from fl_privtext.privacy.distributed import declared_rho

    step, dim = 2.0**-16, 1000
    same = declared_rho([(4.0, 0.5, 3)] * 4, step=step, dim=dim)
    assert same == pytest.approx(round_rho(noise_multiplier=4.0, clip=0.5, min_clients=3, contributors=4, step=step,
                                           dim=dim))
    assert same == pytest.approx(2 * 3 / (4.0**2 * 4))  # 2 m / (z^2 n)
    # one client declares less noise: the three equal shares bound the round (the fourth is extra noise), with the
    # largest clip as sensitivity
    mixed = declared_rho([(4.0, 0.5, 3)] * 3 + [(1.0, 1.0, 3)], step=step, dim=dim)
    sigma = 4.0 * 0.5 / math.sqrt(3)
    assert mixed == pytest.approx(0.5 * (2 * 1.0 / (math.sqrt(3) * sigma)) ** 2)
    assert declared_rho([(0.0, 0.5, 3)] * 4, step=step, dim=dim) == math.inf  # no noise declared


def test_with_exactly_m_contributors_it_is_dp_fedavg_without_sampling():
    # m shares of sigma = zC/sqrt(m) sum to DP-FedAvg's noise zC: the same epsilon as the server-noise accountant
    # with every client in every round (tau ~ 0 at these grid scales)
    from fl_privtext.federation.training import dp_fedavg_guarantee
    from fl_privtext.privacy.distributed import distributed_guarantee

    g = distributed_guarantee(noise_multiplier=2.0, clip=0.5, min_clients=4, contributors=[4, 4, 4], step=2.0**-16,
                              dim=2306, delta=1e-5)
    ref = dp_fedavg_guarantee(noise_multiplier=2.0, num_clients=4, clients_per_round=4, rounds=3, delta=1e-5)
    assert g["epsilon"] == pytest.approx(ref["epsilon"], rel=1e-6)
    assert g["client_charge_per_round"] == pytest.approx(g["per_round_epsilon"][0])
