"""The population view's closed form (simulations/population.py): the error of a class-mean difference estimated
from n noisy uploads equals (T_a + T_b + 2 N) K / n, so at n* uploads it equals the squared separation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "simulations"))

from population import class_stats, uploads_needed


def test_uploads_needed_is_where_the_difference_error_meets_the_separation():
    rng = np.random.default_rng(0)
    d, k, noise_sd = 8, 2, 3.0
    mu = np.zeros((k, d))
    mu[1, 0] = 1.0  # separation^2 = 1
    x = np.concatenate([rng.normal(mu[c], 0.5, (20_000, d)) for c in range(k)])
    y = np.repeat(np.arange(k), 20_000)
    m, spread = class_stats(x, y, k)
    np.testing.assert_allclose(spread, 0.25 * d, rtol=0.02)
    n_star, pair = uploads_needed(m, spread, noise_sd ** 2 * d)
    assert pair == (0, 1)
    per_class = round(n_star / k)
    errors = []
    for _ in range(400):  # the class-mean difference from n* balanced noisy uploads
        means = [(rng.normal(mu[c], 0.5, (per_class, d)) + rng.normal(0, noise_sd, (per_class, d))).mean(0)
                 for c in range(k)]
        errors.append((((means[1] - means[0]) - (mu[1] - mu[0])) ** 2).sum())
    assert abs(np.mean(errors) - 1.0) < 0.1  # the separation^2, within the Monte Carlo error (~0.05)
    # without noise far fewer uploads are needed; with a wrong (smaller) noise law the error at n* exceeds it
    assert uploads_needed(m, spread, 0.0)[0] < n_star / 10
    assert uploads_needed(m, spread, noise_sd ** 2 * d / 4)[0] < n_star / 2
