"""Per-user accounting of everything a user sends: closed forms, labels in the clear, and the summary table."""

import math

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import make_mechanism
from fl_privtext.report import table
from fl_privtext.report.accounting import charge, privacy_summary, tight_epsilon


def _cfg(**sets):
    return ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.epsilon": 0.5,
                                       "federation.rounds": 3, **sets})


def _sections(cfg):
    return cfg.privacy, cfg.federation, cfg.train


def test_eight_records_three_rounds_with_label_rr_cost_sixty():
    users = np.array([0] * 8 + [1] * 2)
    released = np.tile(np.arange(10), 3)  # every record uploaded in each of 3 rounds
    cfg = _cfg(**{"privacy.label-epsilon": 2.0})
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    reps, total = charge(users, released, rep, cfg.privacy, num_classes=4)
    assert reps.epsilon_of(0) == pytest.approx(8 * 3 * 0.5)  # 12: the representations alone
    assert total.epsilon_of(0) == pytest.approx(8 * 3 * (0.5 + 2))  # 60: labels charged too
    assert total.epsilon_of(1) == pytest.approx(2 * 3 * 2.5)
    out = privacy_summary(rep, *_sections(cfg), users, 4, [released], releases_per_record=3)
    per_user = out["composition"]["per_user"]
    assert per_user["max_epsilon_worst_case"] == pytest.approx(12) and per_user["max_epsilon_total"] == pytest.approx(60)
    assert out["composition"]["labels"]["epsilon_per_upload"] == pytest.approx(2.0)


def test_labels_in_the_clear_make_the_total_infinite_and_the_table_says_so():
    users = np.array([0, 0, 1])
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    out = privacy_summary(rep, *_sections(_cfg()), users, 2, [np.arange(3)], releases_per_record=1)
    assert out["composition"]["per_user"]["max_epsilon_total"] == "inf"
    assert out["composition"]["per_user"]["max_epsilon_worst_case"] == pytest.approx(1.0)
    assert any("client (node)" in s for s in out["composition"]["also_released"])
    results = {"privacy": {**out, "randomness": "secret"}, "utility": {"available": False, "reason": "x"},
               "federation": {"num_users": 2, "num_records": 3, "num_clients": 1, "rounds": 1, "seeds": 1,
                              "uploads_observed": 3, "messages_observed": 1, "bytes_observed": 10},
               "dataset": {"name": "d"}, "attacks": {}, "fairness": {}, "timing": {"total_s": 1.0}}
    text = table(results)
    assert "labels IN THE CLEAR (label epsilon inf)" in text and "TOTAL inf" in text
    assert "secret (OS entropy" in text and "low bits leak" in text
    # a dataset without labels: only the representations count
    none = privacy_summary(rep, *_sections(_cfg()), users, 0, [np.arange(3)], releases_per_record=1)
    assert none["composition"]["per_user"]["max_epsilon_total"] == pytest.approx(1.0)


def test_only_released_rows_are_charged_and_every_repetition_composes():
    users = np.array([0, 1, 2, 3])
    rep = make_mechanism("laplace-l1", epsilon=1.0, sampler="float").report()
    cfg = _cfg(**{"privacy.label-epsilon": 1.0})
    out = privacy_summary(rep, *_sections(cfg), users, 2, [np.array([0, 1]), np.array([0, 0, 1, 2])],
                          releases_per_record=1)
    assert out["composition"]["per_user"]["users"] == 3  # user 3 sent nothing in either repetition
    # issue #22: the repetitions compose (user 0: 3 releases of 1 + 1), not the worst repetition alone (4)
    assert out["composition"]["per_user"]["max_epsilon_total"] == pytest.approx(6.0)
    assert math.isfinite(out["composition"]["per_user"]["max_epsilon_total"])


def test_closed_form_8_records_3_rounds_2_seeds():
    # issue #22: 8 records x 3 rounds x 2 seeds x (0.5 + 2) = 120, basic; the tight figure is below it
    users = np.zeros(8, np.int64)
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    cfg = _cfg(**{"privacy.label-epsilon": 2.0, "privacy.epsilon": 0.5})
    rows = np.tile(np.arange(8), 3)
    per_user = privacy_summary(rep, *_sections(cfg), users, 2, [rows, rows],
                               releases_per_record=3)["composition"]["per_user"]
    assert per_user["max_epsilon_total"] == pytest.approx(120.0)
    assert per_user["max_epsilon_tight"] <= 120.0 + 1e-9


def test_tight_composition_of_gaussian_uploads_is_far_below_basic():
    rep = make_mechanism("gaussian", epsilon=1.0, delta=1e-5, dim=8, sampler="float").report()
    tight = tight_epsilon(rep, None, {"rep": 10}, 0.0, 1e-5)
    assert 2.0 < tight < 5.0  # basic composition says 10 (at delta 1e-4)
    assert tight_epsilon(rep, None, {"rep": 1}, 0.0, 1e-5) == pytest.approx(1.0, rel=0.05)  # one upload: its eps


def test_phase_a_in_the_clear_makes_the_total_infinite():
    users = np.array([0, 1])
    rep = make_mechanism("laplace-l1", epsilon=1.0, sampler="float").report()
    cfg = _cfg(**{"privacy.label-epsilon": 1.0})
    out = privacy_summary(rep, *_sections(cfg), users, 2, [np.array([0, 1])], 1, phase_a_rows=np.array([0]))
    assert out["composition"]["per_user"]["max_epsilon_total"] == "inf"
    assert out["composition"]["per_user"]["max_epsilon_phase_a"] == "inf"


def test_on_device_answers_are_charged_per_user_whether_grouped_or_one_by_one():
    """One answer per test client: answers of disjoint users are charged at once (linear in users, not clients x
    users); a user who answered twice keeps both charges. Closed forms: records x count-epsilon added per user."""
    from fl_privtext.report.accounting import _on_device_charges

    users = np.repeat(np.arange(6), 2)  # user u holds records 2u, 2u + 1
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    cfg = _cfg(**{"privacy.label-epsilon": 2.0})
    released = [np.arange(12)]
    disjoint = [(np.array([0, 1]), 1.0), (np.array([2, 3]), 0.5), (np.array([6, 7]), 1.0), (np.array([], int), 3.)]
    grouped = _on_device_charges(users, disjoint)
    assert [(sorted(users[r].tolist()), e) for r, e in grouped] == [([1, 1], 0.5), ([0, 0, 3, 3], 1.0)]  # last eps last
    out = privacy_summary(rep, *_sections(cfg), users, 4, released, 1, on_device_rows=disjoint)["composition"]
    assert out["per_user"]["max_epsilon_on_device"] == pytest.approx(2.0)  # user 0 or 3: 2 records x 1.0
    assert out["per_user"]["max_epsilon_total"] == pytest.approx(2 * 2.5 + 2.0)
    twice = [(np.array([0]), 1.0), (np.array([1, 2]), 1.0)]  # user 0 answers in two replies: charged 2 x 1.0
    assert len(_on_device_charges(users, twice)) == 2
    out = privacy_summary(rep, *_sections(cfg), users, 4, released, 1, on_device_rows=twice)["composition"]
    assert out["per_user"]["max_epsilon_on_device"] == pytest.approx(2.0)


def test_dense_totals_are_the_accountants_numbers_bit_for_bit(monkeypatch):
    """`Totals` (one small count per user and charge, summed a block of users at a time) gives the per-record
    `Accountant`'s maxima, median and charge log exactly, across block boundaries; summing a user's counts before
    multiplying (a known-bad shortcut) moves the last bits, so the comparison can tell."""
    from fl_privtext.privacy import Accountant, PrivacyReport
    from fl_privtext.report import accounting

    monkeypatch.setattr(accounting, "_SUM_USERS", 7)
    monkeypatch.setattr(accounting, "_COUNT_ROWS", 5)
    rng = np.random.default_rng(3)
    users = np.sort(rng.integers(0, 60, 400))
    reports = [PrivacyReport(mechanism=f"m{i}", epsilon_nominal=e / 3, epsilon_worst_case=e, delta=d)
               for i, (e, d) in enumerate([(0.1, 1e-7), (0.37, 0.0), (math.inf, 0.0), (0.1, 3e-6)])]
    acct, dense = Accountant(), accounting.Totals(60)
    for rep in reports[:2] + reports[3:] + reports[:1]:  # the same report twice: sums in order
        rows = rng.choice(400, 150)
        acct.charge(users[rows], rep)
        dense.charge(accounting.release_counts(users, rows, 60), rep)
    ref = acct.to_json(per_user=False)
    assert dense.to_json() == ref
    assert dense.median_epsilon() == float(np.median(acct.epsilons()[1]))
    inf_acct, inf_dense = Accountant(), accounting.Totals(60)
    inf_acct.charge(users[:30], reports[2])
    inf_dense.charge(accounting.release_counts(users, np.arange(30), 60), reports[2])
    assert inf_dense.max_epsilon() == math.inf and inf_dense.to_json() == inf_acct.to_json(per_user=False)
    # known-bad: one multiplication of a user's summed counts is not the accountant's sequence of additions
    counts = [accounting.release_counts(users, rng.choice(400, 150), 60) for _ in range(6)]
    seq = np.zeros(60)
    for c in counts:
        seq[c > 0] += c[c > 0].astype(np.int64) * 0.1
    assert (sum(c.astype(np.int64) for c in counts) * 0.1 != seq).any()


def test_tight_total_covers_a_user_who_answers_on_device_without_uploading():
    """The tight maximum composes the most releases of each kind over EVERY user: user 1 uploads nothing but
    answers for 10 records on device, so the point's max_epsilon_tight is at least that user's own tight epsilon
    (counting only uploaders' answers reported the uploads alone: 2.5 here, well under it)."""
    users = np.array([0] + [1] * 10)
    cfg = _cfg(**{"privacy.label-epsilon": 2.0, "federation.rounds": 1})
    rep = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    out = privacy_summary(rep, *_sections(cfg), users, 4, [np.array([0])], 1,
                          on_device_rows=[(np.arange(1, 11), 1.0)])["composition"]["per_user"]
    own = tight_epsilon(rep, None, {"on_device": 10}, 1.0, cfg.privacy.delta)
    assert own > 2.5 and out["max_epsilon_tight"] >= own
    assert out["max_epsilon_tight"] <= out["max_epsilon_total"] == pytest.approx(10.0)
