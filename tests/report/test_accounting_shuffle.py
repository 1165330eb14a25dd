"""privacy.central under federation.shuffle (issue #24): the bound is applied to a user's composed local epsilon."""

from __future__ import annotations

import numpy as np
import pytest


def test_accounting_reports_the_central_epsilon_of_a_users_composed_local_epsilon() -> None:
    import dataclasses

    from fl_privtext.config import ExperimentConfig
    from fl_privtext.privacy import Accountant, PrivacyReport
    from fl_privtext.report.accounting import shuffle_central

    cfg = ExperimentConfig()
    cfg = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, shuffle=True, rounds=3))
    users = np.arange(10**5)
    acc = Accountant()
    rep = PrivacyReport(mechanism="rr", epsilon_nominal=1.0, epsilon_worst_case=1.0)
    for _ in range(3):  # each user: 2 records per round at 1 each -> local epsilon 2 per round, 3 rounds
        acc.charge(np.repeat(users, 2), rep)
    central = shuffle_central(acc, len(users), cfg.federation, cfg.privacy)
    assert central["local_epsilon_per_user_round"] == pytest.approx(2.0)
    assert central["against"] == "server" and central["via"] == "shuffle" and central["rounds"] == 3
    assert 0 < central["epsilon_per_round"] < 0.2  # Wang'24 at eps0 2, n 1e5 (about 0.1), far below local 2
    assert central["epsilon_per_round"] <= central["epsilon"] <= 3 * central["epsilon_per_round"] + 1e-12


def _cfg(**fed):
    import dataclasses

    from fl_privtext.config import ExperimentConfig

    cfg = ExperimentConfig()
    return dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, shuffle=True, **fed))


def _sections(**fed):
    cfg = _cfg(**fed)
    return cfg.federation, cfg.privacy


def test_synthetic_population_local_eps8_million_users_is_below_0_31_per_round() -> None:
    """Issue #24's goal: PrivUnitG at local epsilon 8 (a pure-LDP report, delta 0), one report per user and round,
    10^6 users shuffled together -> <= 0.31 per round."""
    import dataclasses

    from fl_privtext.client import mechanism_for
    from fl_privtext.privacy import Accountant
    from fl_privtext.public import PublicSpec
    from fl_privtext.report.accounting import shuffle_central

    cfg = _cfg(rounds=1)
    cfg = dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, mechanism="privunitg", epsilon=8.0))
    rep = mechanism_for(PublicSpec.of(cfg), 50).report()
    assert rep.epsilon_worst_case == pytest.approx(8.0) and not rep.delta  # pure: the pure-LDP bound applies
    acc = Accountant()
    acc.charge(np.arange(10**6), rep)
    central = shuffle_central(acc, 10**6, cfg.federation, cfg.privacy, local_delta=acc.max_delta())
    assert central["local_epsilon_per_user_round"] == pytest.approx(8.0)
    assert central["epsilon_per_round"] <= 0.31 and central["epsilon"] == central["epsilon_per_round"]


def test_bound_is_applied_to_a_users_release_not_per_record() -> None:
    """A user with 4 records at eps0 1 releases 4 per round: the bound at 4 is far weaker than at 1 (per record)."""
    from fl_privtext.privacy import Accountant, PrivacyReport
    from fl_privtext.privacy.amplification import shuffle_epsilon
    from fl_privtext.report.accounting import shuffle_central

    acc = Accountant()
    users = np.arange(10**5)
    acc.charge(np.repeat(users, 4), PrivacyReport(mechanism="rr", epsilon_nominal=1.0, epsilon_worst_case=1.0))
    central = shuffle_central(acc, len(users), *_sections(rounds=1))
    assert central["epsilon_per_round"] == pytest.approx(shuffle_epsilon(4.0, 10**5, 1e-5), rel=1e-9)
    assert central["epsilon_per_round"] > 5 * shuffle_epsilon(1.0, 10**5, 1e-5)


def test_approximate_ldp_reports_fmt21_theorem_3_8_extra_delta() -> None:
    from fl_privtext.privacy import Accountant, PrivacyReport
    from fl_privtext.privacy.amplification import gaussian_shuffle_delta
    from fl_privtext.report.accounting import shuffle_central

    acc = Accountant()
    rep = PrivacyReport(mechanism="gaussian", epsilon_nominal=2.0, epsilon_worst_case=2.0, delta=1e-12)
    acc.charge(np.arange(10**5), rep)
    central = shuffle_central(acc, 10**5, *_sections(rounds=1), local_delta=acc.max_delta())
    extra = central["approximate_ldp"]["extra_delta_per_round"]
    assert extra == pytest.approx(gaussian_shuffle_delta(central["epsilon_per_round"], 2.0, 1e-12, 10**5))
    assert central["delta"] == pytest.approx(central["delta_per_round"]) and central["delta"] > extra > 0
    assert not central["approximate_ldp"]["vacuous"]
    # a local delta that is not << delta / n makes the bound vacuous, and the report says so
    acc2 = Accountant()
    acc2.charge(np.arange(10**5), PrivacyReport(mechanism="gaussian", epsilon_nominal=2.0, epsilon_worst_case=2.0,
                                               delta=1e-5))
    out = shuffle_central(acc2, 10**5, *_sections(rounds=1), local_delta=acc2.max_delta())
    assert out["approximate_ldp"]["vacuous"]


def test_privacy_summary_uses_the_central_guarantee_and_says_which() -> None:
    import dataclasses

    from fl_privtext.privacy import PrivacyReport
    from fl_privtext.report.accounting import privacy_summary

    cfg = _cfg(rounds=2)
    cfg = dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, label_epsilon=1.0))
    users = np.repeat(np.arange(5000), 2)  # 2 records per user
    rep = PrivacyReport(mechanism="rr", epsilon_nominal=1.0, epsilon_worst_case=1.0)
    rows = np.arange(len(users))
    out = privacy_summary(rep, cfg.privacy, cfg.federation, cfg.train, users, 3,
                          [np.concatenate([rows, rows])], 2,
                          on_device_rows=[(rows[:10], 0.5)], shuffled_users=1000)
    central, per_user = out["central"], out["composition"]["per_user"]
    assert set(central) >= {"epsilon", "delta", "against", "via", "epsilon_per_round", "rounds"}
    assert central["local_epsilon_per_user_round"] == pytest.approx(2 * (1.0 + 1.0))  # 2 records x (rep + label)
    assert central["users_shuffled"] == 1000 and central["rounds"] == 2
    assert per_user["max_epsilon_total"] == pytest.approx(central["epsilon"] + 1.0)  # + on-device (2 x 0.5)
    assert per_user["max_epsilon_total_local"] == pytest.approx(9.0)
    assert "privacy.central" in per_user["max_epsilon_total_guarantee"]
