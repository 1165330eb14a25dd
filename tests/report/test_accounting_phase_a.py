"""Phase A's charge per user (`fl_privtext.report.accounting`): inf whenever the server sees updates or metrics in the
clear (no secagg, or secagg with server-side noise), the composed central epsilon of the noisy secure sums under
train.secagg with train.dp-mode = client (issue #24), composed with the uploads by basic composition."""

import math

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import make_mechanism
from fl_privtext.privacy.distributed import distributed_guarantee
from fl_privtext.report.accounting import phase_a_report, privacy_summary

USERS = np.array([0, 0, 1, 2])  # user 2 is a test user: no Phase A
PHASE_A_ROWS = np.array([0, 1, 2])
SECAGG = {"train.rounds": 3, "train.secagg": True, "train.dp-clip": 0.5, "train.dp-noise-multiplier": 4.0}


def _cfg(**sets):
    return ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.epsilon": 0.5,
                                       "privacy.label-epsilon": 1.0, "federation.rounds": 1, **sets})


def _central(contributors=(4, 3, 4)):
    g = distributed_guarantee(noise_multiplier=4.0, clip=0.5, min_clients=3, contributors=list(contributors),
                              step=2.0**-15, dim=500, delta=1e-5)
    return {"epsilon": g["epsilon"], "delta": g["delta"], "against": "server", "via": "secagg"}


def _summary(cfg, central=None, **kw):
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    return privacy_summary(rep, cfg.privacy, cfg.federation, cfg.train, USERS, 2, [np.arange(4)], 1,
                           phase_a_rows=PHASE_A_ROWS,
                           phase_a_central=central, **kw)


@pytest.mark.parametrize("sets", [{"train.rounds": 3},  # plain Phase A (FedAvg / server-side DP-FedAvg)
                                  {**SECAGG, "train.dp-mode": "server"}])  # SecAgg+, the server adds the noise
def test_phase_a_without_client_noise_is_charged_inf(sets):
    per_user = _summary(_cfg(**sets))["composition"]["per_user"]  # the Phase A summary then has no "central"
    assert per_user["max_epsilon_phase_a"] == "inf" and per_user["max_epsilon_total"] == "inf"
    assert per_user["max_epsilon_tight"] == "inf" and "in the clear" in per_user["phase_a_guarantee"]


def test_client_mode_charges_the_composed_central_epsilon():
    cfg = _cfg(**{**SECAGG, "train.dp-mode": "client"})
    central = _central()
    eps = central["epsilon"]
    assert 0 < eps < math.inf
    out = _summary(cfg, central)
    per_user = out["composition"]["per_user"]
    assert per_user["max_epsilon_phase_a"] == pytest.approx(eps) and per_user["max_delta_phase_a"] == 1e-5
    # basic composition: user 0 uploads 2 records (rep 0.5 + label 1.0 each) and takes part in Phase A
    assert per_user["max_epsilon_total"] == pytest.approx(2 * 1.5 + eps)
    assert per_user["max_delta_total"] == pytest.approx(1e-5)
    assert "via secagg" in per_user["phase_a_guarantee"] and "secagg" in per_user["max_epsilon_total_guarantee"]
    # the tight figure: the uploads' tight composition plus Phase A's, deltas added
    without = _summary(cfg)["composition"]["per_user"]  # (inf Phase A) vs no Phase A at all:
    no_a = privacy_summary(make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report(), cfg.privacy,
                           cfg.federation, cfg.train, USERS, 2, [np.arange(4)], 1)
    assert without["max_epsilon_tight"] == "inf"
    tight_uploads = no_a["composition"]["per_user"]["max_epsilon_tight"]
    assert per_user["max_epsilon_tight"] == pytest.approx(tight_uploads + eps)
    assert per_user["delta_tight"] == pytest.approx(cfg.privacy.delta + 1e-5)


def test_the_tight_figure_never_exceeds_the_basic_total():
    """On-device answers (test users) and Phase A (train users) concern different users: the tight figure must not
    add Phase A to the test users' releases (caught on a real run: tight 34.2 above basic 32.0)."""
    cfg = _cfg(**{**SECAGG, "train.dp-mode": "client"})
    central = _central()
    on_device = [(np.array([3]), 20.0)]  # user 2's (test) record: 0.5 + 1.0 uploaded, 20 on-device
    per_user = _summary(cfg, central, on_device_rows=on_device)["composition"]["per_user"]
    assert per_user["max_epsilon_total"] == pytest.approx(21.5)  # user 2, who took no part in Phase A
    assert per_user["max_epsilon_tight"] <= per_user["max_epsilon_total"]


def test_dropouts_raise_the_charge():
    cfg = _cfg(**{**SECAGG, "train.dp-mode": "client"})
    full = _summary(cfg, _central((4, 4, 4)))["composition"]["per_user"]["max_epsilon_phase_a"]
    dropped = _summary(cfg, _central((4, 3, 3)))["composition"]["per_user"]["max_epsilon_phase_a"]
    assert full < dropped


def test_shuffled_uploads_compose_with_phase_a_central():
    cfg = _cfg(**{**SECAGG, "train.dp-mode": "client", "federation.shuffle": True})
    central = _central()
    out = _summary(cfg, central, shuffled_users=1000)
    per_user = out["composition"]["per_user"]
    shuffle_eps = out["central"]["epsilon"]
    assert per_user["max_epsilon_total"] == pytest.approx(shuffle_eps + central["epsilon"])
    assert "central_phase_a" in per_user["max_epsilon_total_guarantee"]


def test_a_central_figure_is_refused_outside_client_mode():
    with pytest.raises(ValueError, match="dp-mode = client"):
        _summary(_cfg(**{**SECAGG, "train.dp-mode": "server"}), _central())


def test_phase_a_report_accepts_only_the_secure_sums_guarantee():
    assert phase_a_report(None).epsilon_worst_case == math.inf
    with pytest.raises(ValueError, match="via secagg"):
        phase_a_report({"epsilon": 1.0, "delta": 1e-6, "against": "server", "via": "shuffle"})
    r = phase_a_report({"epsilon": 2.0, "delta": 1e-5, "against": "server", "via": "secagg"})
    assert (r.epsilon_worst_case, r.delta) == (2.0, 1e-5)


def test_the_summary_table_names_phase_a_central_guarantee():
    from fl_privtext.report import table

    central = {**_central(), "rounds": 3, "contributors": [4, 3, 4], "client_ledger_max_epsilon": 9.9}
    out = _summary(_cfg(**{**SECAGG, "train.dp-mode": "client"}), central)
    results = {"privacy": {**out, "randomness": "secret", "central": central},
               "utility": {"available": False, "reason": "x"},
               "federation": {"num_users": 3, "num_records": 4, "num_clients": 1, "rounds": 1, "seeds": 1,
                              "uploads_observed": 4, "messages_observed": 1, "bytes_observed": 10},
               "dataset": {"name": "d"}, "attacks": {}, "fairness": {}, "timing": {"total_s": 1.0}}
    text = table(results)
    assert "Phase A central against the server via secagg" in text and "[4, 3, 4]" in text
    assert "uploads' local epsilon + Phase A's central epsilon" in text and "users shuffled" not in text
