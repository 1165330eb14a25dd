"""privacy.central under federation.shuffle (issue #24): the bound is applied to a user's composed local epsilon."""

from __future__ import annotations

import numpy as np
import pytest


def test_accounting_reports_the_central_epsilon_of_a_users_composed_local_epsilon() -> None:
    import dataclasses

    from fl_privtext.accounting import shuffle_central
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.privacy import Accountant, PrivacyReport

    cfg = ExperimentConfig()
    cfg = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, shuffle=True, rounds=3))
    users = np.arange(10**5)
    acc = Accountant()
    rep = PrivacyReport(mechanism="rr", epsilon_nominal=1.0, epsilon_worst_case=1.0)
    for _ in range(3):  # each user: 2 records per round at 1 each -> local epsilon 2 per round, 3 rounds
        acc.charge(np.repeat(users, 2), rep)
    central = shuffle_central(acc, len(users), cfg)
    assert central["local_epsilon_per_user_round"] == pytest.approx(2.0)
    assert central["against"] == "server" and central["via"] == "shuffle" and central["rounds"] == 3
    assert 0 < central["epsilon_per_round"] < 0.2  # Wang'24 at eps0 2, n 1e5 (about 0.1), far below local 2
    assert central["epsilon_per_round"] <= central["epsilon"] <= 3 * central["epsilon_per_round"] + 1e-12
