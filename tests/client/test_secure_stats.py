"""Secure aggregation of Phase B statistics (server.aggregate = secagg): the client's statistics and noise
(`fl_privtext.client.aggregate`), the central accountant, the server's learners from the sum
(`fl_privtext.server.aggregate`) and the client's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fl_privtext.client import ClientData, ClientPolicy
from fl_privtext.client.aggregate import (
    PUBLIC_TAIL,
    StatsLayout,
    central_epsilon,
    release_statistics,
    share_noise_std,
    user_statistics,
)
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy.calibration import analytic_gaussian_sigma
from fl_privtext.server.aggregate import Aggregate, fit_from_aggregate, plain_sum
from fl_privtext.server.learners import LDA, Centroid
from tests.refusals import refused

K, D = 3, 6


def _records(g: np.random.Generator, n: int, users: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = g.integers(0, K, n)
    x = g.normal(0, 1, (n, D)) + 2.0 * np.eye(K, D)[y]
    return x, y, g.integers(0, users, n)


def test_statistics_equal_the_plain_per_class_sums(gen):
    x, y, u = _records(gen, 200, 40)
    lay = StatsLayout(K, D, second=True)
    vec = user_statistics(x, y, u, lay)
    counts, sums, second = lay.split(vec)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    want_c, want_s, want_m = np.zeros(K), np.zeros((K, D)), np.zeros((D, D))
    for i in range(len(x)):  # the definition, record by record: weight 1 / (records of its user)
        w = 1.0 / np.sum(u == u[i])
        want_c[y[i]] += w
        want_s[y[i]] += w * xn[i]
        want_m += w * np.outer(xn[i], xn[i])
    np.testing.assert_allclose(counts, want_c, atol=1e-12)
    np.testing.assert_allclose(sums, want_s, atol=1e-12)
    np.testing.assert_allclose(second, want_m, atol=1e-12)
    assert counts.sum() == pytest.approx(len(np.unique(u)))  # every user weighs 1
    # the vector's norm is the statistics' (counts, sums, Frobenius of the second moment)
    assert np.linalg.norm(vec) == pytest.approx(math.sqrt((want_c ** 2).sum() + (want_s ** 2).sum()
                                                          + (want_m ** 2).sum()))


@pytest.mark.parametrize("second", [False, True])
def test_one_users_replacement_moves_the_vector_by_at_most_the_sensitivity(gen, second):
    lay = StatsLayout(K, D, second)
    x, y, u = _records(gen, 60, 10)
    base = user_statistics(x, y, u, lay)
    worst = 0.0
    for trial in range(300):
        keep = u != 0  # user 0's records replaced by arbitrary ones (any number, any labels)
        m = int(gen.integers(1, 6))
        x2 = np.vstack([x[keep], gen.normal(0, 1, (m, D)) * (10.0 if trial % 2 else 1.0)])
        y2 = np.concatenate([y[keep], gen.integers(0, K, m)])
        u2 = np.concatenate([u[keep], np.zeros(m, np.int64)])
        worst = max(worst, float(np.linalg.norm(user_statistics(x2, y2, u2, lay) - base)))
    assert worst <= lay.sensitivity + 1e-9
    # the bound is attained: one user with one record, replaced by its opposite in the same class
    a = np.eye(1, D)
    one = user_statistics(a, np.array([0]), np.array([0]), lay)
    opp = user_statistics(-a, np.array([0]), np.array([0]), lay)
    assert np.linalg.norm(one - opp) == pytest.approx(2.0)
    # known-bad: without the 1 / n_u weight a user with 5 records moves the vector 5 times further
    five = np.repeat(a, 5, axis=0)
    unweighted = user_statistics(five, np.zeros(5, np.int64), np.arange(5), lay)
    flipped = user_statistics(-five, np.zeros(5, np.int64), np.arange(5), lay)
    assert np.linalg.norm(unweighted - flipped) > lay.sensitivity


def test_accountant_closed_forms():
    # the sum over t clients' shares is the analytic Gaussian mechanism at the policy's (eps, delta)
    for eps, delta, t in ((1.0, 1e-5, 10), (0.5, 1e-6, 3), (4.0, 1e-5, 1)):
        share = share_noise_std(eps, delta, 2.0, t)
        assert share * math.sqrt(t) == pytest.approx(analytic_gaussian_sigma(eps, delta, 2.0))
        assert central_epsilon(share * math.sqrt(t), delta, 2.0) == pytest.approx(eps, rel=1e-6)
        # more contributors: more noise, a smaller epsilon; fewer (dropouts past t): larger
        assert central_epsilon(share * math.sqrt(t + 2), delta, 2.0) < eps
        if t > 1:
            assert central_epsilon(share * math.sqrt(t - 1), delta, 2.0) > eps
    assert central_epsilon(0.0, 1e-5, 2.0) == math.inf


def _client_data(g: np.random.Generator, clients: int = 4, per_client: int = 400, dim: int = D) -> ClientData:
    n = clients * per_client
    y = g.integers(0, K, n)
    x = (g.normal(0, 1, (n, dim)) + 3.0 * np.eye(K, dim)[y]).astype(np.float32)
    users = np.arange(n) // 2  # two records per user
    test = (users % 5) == 0
    shards = [np.arange(c * per_client, (c + 1) * per_client) for c in range(clients)]
    return ClientData(shards=shards, labels=y, num_classes=K, features=x, users=users, test=test)


def _cfg(**client: object) -> ExperimentConfig:
    flat = {"client.secagg-epsilon": 1.0, "client.secagg-delta": 1e-5, "client.secagg-min-clients": 4,
            "server.aggregate": "secagg", "run.seeds": 3, **{f"client.{k}": v for k, v in client.items()}}
    return ExperimentConfig.from_flat(flat)


def test_noise_scale_matches_the_accountant(gen, tmp_path):
    """Seeded statistical check: the released vector minus the clean statistics is N(0, share^2) per coordinate
    (KS at alpha 1e-6), share from the policy; a variant at share / 1.3 is rejected by the same test."""
    data = _client_data(gen, dim=48)
    cfg = _cfg()
    lay = StatsLayout(K, 48, second=True)  # 1,323 noisy coordinates per release
    from fl_privtext.client.aggregate import client_statistics

    clean, _ = client_statistics(data, 0, lay)
    resid = []
    for seed in range(3):
        vec, charged = release_statistics(data, 0, cfg, seed, layout=lay, min_contributors=4, epsilon=1.0,
                                          policy=ClientPolicy.from_points([cfg]), state_dir=str(tmp_path),
                                          client_seed=99)
        assert charged["charged"] == pytest.approx(1.0)
        assert vec[-PUBLIC_TAIL] == 1.0
        resid.append(vec[:lay.size] - clean)
    r = np.concatenate(resid)
    share = share_noise_std(1.0, 1e-5, lay.sensitivity, 4)
    assert vec[-2] == pytest.approx(share ** 2) and vec[-1] == 1.0  # the variance; seeded (client_seed=99)
    assert stats.kstest(r / share, "norm").pvalue > 1e-6
    assert stats.kstest(r / (share / 1.3), "norm").pvalue < 1e-6
    # four such clients: the central epsilon of the sum is the policy's
    assert central_epsilon(math.sqrt(4 * vec[-2]), 1e-5, lay.sensitivity) == pytest.approx(1.0, rel=1e-6)


def test_requests_the_policy_does_not_allow_are_refused(gen, tmp_path):
    data = _client_data(gen)
    cfg = _cfg(**{"max-epsilon": 1.5})
    policy = ClientPolicy.from_points([cfg])
    lay = StatsLayout(K, D)
    kw = {"layout": lay, "policy": policy, "state_dir": str(tmp_path), "client_seed": None}
    with refused("policy mismatch", "promises 3 contributing clients"):
        release_statistics(data, 0, cfg, 0, min_contributors=3, epsilon=1.0, **kw)
    with refused("policy mismatch", "less noise"):
        release_statistics(data, 0, cfg, 0, min_contributors=4, epsilon=2.0, **kw)
    # a server request that names another policy (here: a larger epsilon in the config it sends) matches no entry
    greedy = ExperimentConfig.from_flat({"privacy.epsilon": 8.0}, cfg)
    with refused("policy mismatch", "matches none"):
        release_statistics(data, 0, greedy, 0, min_contributors=4, epsilon=1.0, **kw)
    first, _ = release_statistics(data, 0, cfg, 0, min_contributors=4, epsilon=1.0, **kw)
    again, st = release_statistics(data, 0, cfg, 0, min_contributors=4, epsilon=1.0, **kw)
    assert st["replayed"] == 1 and np.array_equal(first, again)  # a repeat gets the same noise, free
    with refused("budget exhausted", "past this client's client.max-epsilon"):  # 1 + 1 > 1.5
        release_statistics(data, 0, cfg, 1, min_contributors=4, epsilon=1.0, **kw)


def test_a_request_differing_only_in_the_servers_settings_replays_the_stored_vector(gen, tmp_path):
    """Issue #34 item 7 on the secure path: what the server varies outside what changes the vector (its learner,
    epochs, the eavesdropper's settings, the batch size) gets the stored vector back, charged nothing; a vector of
    another repetition is a new release. Known-bad: keyed by the whole point (the old point_key), each would be
    fresh noise, charged again."""
    data = _client_data(gen)
    cfg = _cfg()
    kw = {"layout": StatsLayout(K, D), "policy": ClientPolicy.from_points([cfg]), "state_dir": str(tmp_path),
          "client_seed": None, "min_contributors": 4, "epsilon": 1.0}
    first, st = release_statistics(data, 0, cfg, 0, **kw)
    assert st["replayed"] == 0 and st["charged"] == pytest.approx(1.0)
    for change in ({"server.epochs": 7}, {"server.learner": "lda"}, {"attack.epochs": 3},
                   {"federation.batch-size": 17}):
        again, st = release_statistics(data, 0, ExperimentConfig.from_flat(change, cfg), 0, **kw)
        assert st["replayed"] == 1 and st["charged"] == 0.0 and np.array_equal(first, again), change
    other, st = release_statistics(data, 0, cfg, 1, **kw)
    assert st["replayed"] == 0 and not np.array_equal(first, other)


def _one_record_per_user(g: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = 3000
    y = g.integers(0, K, n)
    cov = np.diag(np.linspace(0.2, 2.0, D))
    x = g.multivariate_normal(np.zeros(D), cov, n) + 1.5 * np.eye(K, D)[y]
    return x, y, np.arange(n)


@pytest.mark.parametrize("name", ["centroid", "lda"])
def test_learner_from_the_sum_matches_the_learner_from_clean_uploads(gen, name):
    x, y, u = _one_record_per_user(gen)
    lay = StatsLayout(K, D, second=name == "lda")
    parts = [user_statistics(x[s], y[s], u[s], lay) for s in np.array_split(np.arange(len(y)), 4)]
    total = plain_sum([np.concatenate([p, [1.0, 0.0, 0.0]]) for p in parts])  # no noise
    model, chosen = fit_from_aggregate(name, Aggregate.of(total, lay))
    assert chosen == name
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    ref = (LDA if name == "lda" else Centroid)(num_classes=K, noise=np.zeros(D)).fit(xn, y)
    for key, arr in ref.export().items():
        np.testing.assert_allclose(model.export()[key], arr, rtol=1e-4, atol=1e-4)


def test_noisy_sum_learner_is_close_to_the_clean_one_and_unresolved_classes_fall_back(gen):
    x, y, u = _one_record_per_user(gen)
    lay = StatsLayout(K, D)
    clean = user_statistics(x, y, u, lay)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    clean_model, _ = fit_from_aggregate("centroid", Aggregate.of(np.concatenate([clean, [1, 0, 0]]), lay))
    sigma = share_noise_std(1.0, 1e-5, lay.sensitivity, 1)
    accs = []
    for _ in range(5):
        noisy = np.concatenate([clean + gen.normal(0, sigma, clean.shape), [1, sigma ** 2, 0]])
        model, _ = fit_from_aggregate("centroid", Aggregate.of(noisy, lay))
        accs.append(np.mean((xn @ model.export()["weight_0"].T + model.export()["bias_0"]).argmax(1) == y))
    ref = np.mean((xn @ clean_model.export()["weight_0"].T + clean_model.export()["bias_0"]).argmax(1) == y)
    assert ref > 0.6 and np.mean(accs) > ref - 0.03
    # a sum whose noise swamps the class means: the denoised means fall back to the grand mean (the prior rule)
    huge = np.concatenate([clean + gen.normal(0, 1e4, clean.shape), [1, 1e8, 0]])
    model, _ = fit_from_aggregate("centroid", Aggregate.of(huge, lay))
    w = model.export()["weight_0"]
    assert np.allclose(w - w[0], 0.0, atol=1e-9)


def test_a_secure_sum_point_warns_below_the_majority_only_when_its_interval_is():
    from fl_privtext.report import warnings_for

    def res(acc: float, hi: float) -> dict:
        od = {"accuracy": acc, "per_seed": [{"accuracy": acc, "ci95": [acc - 0.05, hi]}]}
        return {"utility": {"available": True, "accuracy": acc, "majority_baseline": 0.61, "on_device": od},
                "privacy": {"mechanism": "secagg-gaussian-sum", "epsilon_worst_case": 1.0}, "attacks": {}}

    assert not [w for w in warnings_for(res(0.59, 0.64)) if "majority" in w]  # RR noise around the majority
    below = [w for w in warnings_for(res(0.50, 0.56)) if "majority" in w]
    assert len(below) == 1 and "secure sum" in below[0] and "per upload" not in below[0]
