"""What a reader sees (issue #36 item 2), checked on results dicts shaped like a real run's results.json (the default
run's figures: `fl-privtext run`, laplace-l1 at epsilon 1, where the console printed majority 0.350 in one table and
"best base" 0.318 in the next): the sweep's progress line, one attack baseline everywhere with its verdict, the
legend line, clipped intervals, the on-device warning, rounded epsilons, and the run plot's two task figures."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from fl_privtext import ondevice, report, sweep
from fl_privtext.display import fmt_epsilon
from fl_privtext.report import plots


def _attack(acc: float, majority: float, given_label: float, prior: str, *, leak: bool = False) -> dict[str, Any]:
    """One attribute's results.json entry: ``prior`` names what the attacker answers without a leak."""
    prior_value = given_label if prior == "majority_given_label" else majority
    return {"kind": "categorical", "attacker": prior if not leak else "centroid", "accuracy": acc, "macro_f1": 0.17,
            "majority_baseline": majority, "majority_given_label_baseline": given_label, "prior": prior,
            "prior_baseline": prior_value, "empirical_privacy": 1 - acc, "ceiling": 0.576, "ceiling_vacuous": False,
            "accuracy_ci95": [acc - 0.02, acc + 0.02], "violation": False, "floor_logistic": 0.339,
            "leak_test": {"leak_detected": leak, "verdict": "no leak detected at this power" if not leak else "leak"},
            "per_seed": [{"seed": 0, "accuracy": acc, "prior_baseline": prior_value, "leak_detected": leak,
                          "per_user_leak_detected": leak}],
            "per_user": {"accuracy": 0.358, "majority_baseline": 0.358, "majority_given_label_baseline": 0.330,
                         "prior": "majority", "prior_baseline": 0.358, "ceiling": 0.855, "ceiling_vacuous": False,
                         "ci95": [0.321, 0.396], "floor_logistic": 0.338, "violation": False,
                         "test": {"leak_detected": leak}}}


def _results(*, exact: tuple[float, float, float] = (0.610, 0.558, 0.659), majority: float = 0.610,
             epsilon: Any = 0.9999999999904077) -> dict[str, Any]:
    acc, lo, hi = exact
    return {
        "dataset": {"name": "default", "synthetic": True},
        "federation": {"num_users": 800, "num_records": 2960, "num_clients": 4, "rounds": 1, "seeds": 1,
                       "uploads_observed": 2960, "messages_observed": 4, "bytes_observed": 640000},
        "privacy": {"mechanism": "laplace-l1", "epsilon_nominal": 1.0, "epsilon_worst_case": epsilon, "delta": 0.0,
                    "composition": {"per_user": {"max_epsilon_worst_case": 7.999999999923261,
                                                 "max_epsilon_labels": "inf", "max_epsilon_on_device": 8.0,
                                                 "max_epsilon_phase_a": 0.0, "max_epsilon_total": "inf",
                                                 "max_epsilon_tight": "inf", "delta_tight": 1e-05},
                                    "labels": {"epsilon_per_upload": "inf"}}},
        "utility": {"available": True, "accuracy": 0.610, "accuracy_std": 0.0, "ci_low": 0.560, "ci_high": 0.660,
                    "macro_f1": 0.379, "macro_f1_std": 0.0, "majority_baseline": majority, "learner": "constant",
                    "on_device": {"available": True, "accuracy": 0.267, "accuracy_std": 0.0,
                                  "majority_baseline": majority, "accuracy_noise_std": 0.141,
                                  "per_seed": [{"seed": 0, "accuracy": 0.267, "ci95": [-0.009, 0.545]}],
                                  "private": {"available": True, "accuracy": 0.267, "noise_std": 0.141,
                                              "ci_low": -0.009, "ci_high": 0.545},
                                  "exact": {"available": True, "accuracy": acc, "macro_f1": 0.379, "ci_low": lo,
                                            "ci_high": hi, "majority_baseline": majority, "seeds": 1}}},
        "attacks": {"gender": _attack(0.489, 0.489, 0.494, "majority"),
                    "age_group": _attack(0.350, 0.350, 0.318, "majority")},
        "attacks_extra": {}, "fairness": {"gender": {"gap": 0.022}, "age_group": {"gap": 0.110}},
        "timing": {"total_s": 62.8},
    }


# ---- 1. the sweep's progress line -----------------------------------------------------------------------------------
def test_the_sweep_progress_line_prints_the_on_device_exact_figure_beside_the_per_upload_one():
    line = sweep.headline(_results())
    assert line.startswith("per-upload acc 0.6100+-0.0000 | on-device exact 0.6100 [0.5580, 0.6590]"), line
    without = _results()
    without["utility"]["on_device"]["exact"] = {"available": False, "reason": "not computed on this path"}
    assert "on-device" not in sweep.headline(without)  # nothing invented where the referee has no figure


# ---- 2 and 6. one baseline per attribute; the verdict agrees with the figures beside it -----------------------------
def _rows_of(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(name + " ")]


def test_one_attack_baseline_the_attackers_prior_in_both_tables_with_a_verdict_on_the_same_evidence():
    text = report.table(_results())
    rows = _rows_of(text, "age_group")
    assert len(rows) == 2
    # the attacker answered its prior (the majority: no leak on the aux users): both tables show 0.350 as its
    # baseline, never the label-conditional 0.318 that it did not use (the old "best base")
    assert all("0.350" in r and "0.318" not in r for r in rows), rows
    assert "no leak detected = prior" in rows[1] and rows[1].count("0.350") == 2  # accuracy = prior, said so
    heads = [ln for ln in text.splitlines() if ln.startswith("attribute")]
    assert all(" prior " in h and "majority" not in h and "best base" not in h for h in heads), heads
    # where the label-conditional prior is the one that answered, it is the baseline in both tables
    res = _results()
    res["attacks"]["age_group"] = _attack(0.318, 0.350, 0.318, "majority_given_label")
    rows = _rows_of(report.table(res), "age_group")
    assert all("0.318" in r and "0.350" not in r for r in rows), rows


def test_the_verdict_says_leak_beside_the_models_answer_and_counts_seeds_that_disagree():
    res = _results()
    res["attacks"]["gender"] = _attack(0.595, 0.478, 0.470, "majority", leak=True)
    row = _rows_of(report.table(res), "gender")[1]
    assert "0.595" in row and "0.478" in row and "leak detected" in row and "no leak" not in row, row
    two = res["attacks"]["gender"]
    two["per_seed"] = [dict(two["per_seed"][0], seed=0), dict(two["per_seed"][0], seed=1, leak_detected=False)]
    assert "leak in 1 of 2 seeds" in _rows_of(report.table(res), "gender")[1]
    # results written before issue #36 (no prior_baseline): the prior that answered is read from `attacker`
    old = {k: v for k, v in _attack(0.318, 0.350, 0.318, "majority_given_label").items()
           if k not in ("prior", "prior_baseline")}
    assert report.prior_baseline(old) == 0.318
    assert report.prior_baseline({**old, "attacker": "majority"}) == 0.350


def test_a_legend_line_explains_the_columns_under_the_tables():
    lines = report.table(_results()).splitlines()
    legend = [ln for ln in lines if ln.startswith("legend:")]
    assert len(legend) == 1
    for term in ("prior", "1-X / 1-F", "fair gap", "ceiling", "tight"):
        assert term in legend[0], term
    assert lines.index(legend[0]) > max(i for i, ln in enumerate(lines) if ln.startswith("age_group"))


# ---- 3. intervals clipped to [0, 1] --------------------------------------------------------------------------------
def test_accuracy_intervals_are_clipped_where_they_are_computed_and_where_they_are_shown():
    # the server's estimate from randomized-response answers near zero: the normal band passes 0
    answers = [{"node": 1, "answer": {"n": [40], "noisy-correct": [9], "count-epsilon": [1.0]}}]
    est = ondevice.summarize_private(answers)
    lo, hi = est["ci95"]
    half = 1.96 * math.hypot(est["accuracy_noise_std"], math.sqrt(max(est["accuracy"], 0) * (1 - est["accuracy"]) / 40))
    assert est["accuracy"] - half < 0  # known-bad: the unclipped band reaches below 0
    assert lo == 0.0 and 0 < hi <= 1
    # saved points from before the clip: the table's band and the console are clipped all the same
    assert sweep.seed_band([{"accuracy": 0.267, "ci95": [-0.009, 0.545]}]) == (0.0, 0.545)
    text = report.table(_results())
    assert "-0.009" not in text and "[0.000, 0.545]" in text


# ---- 4. the on-device model below the majority --------------------------------------------------------------------
def test_a_warning_when_the_on_device_exact_interval_lies_below_the_majority():
    below = report.warnings_for(_results(exact=(0.392, 0.340, 0.445), majority=0.500))
    hits = [w for w in below if "on-device model's exact accuracy" in w]
    assert len(hits) == 1 and "0.392" in hits[0] and "too few users for this epsilon" in hits[0]
    assert report.POPULATION_DOC in hits[0] and "whole 95% interval" in hits[0]
    # the rule is the interval: a point below whose interval reaches the majority is within the users' noise
    assert not [w for w in report.warnings_for(_results(exact=(0.480, 0.430, 0.530), majority=0.500))
                if "on-device model" in w]
    # without privacy the same figure is a training failure, not a population size
    clear = [w for w in report.warnings_for(_results(exact=(0.392, 0.340, 0.445), majority=0.5, epsilon="inf"))
             if "on-device model" in w]
    assert len(clear) == 1 and "training failure" in clear[0]


# ---- 5. epsilons rounded for display; the run plot shows both task figures -----------------------------------------
@pytest.mark.parametrize("value,shown", [(0.9999999999904077, "1"), (8.000000000000316, "8"), (0.12345, "0.123"),
                                         (0.25, "0.25"), (32.0, "32"), (math.inf, "inf"), ("inf", "inf"),
                                         (None, "-")])
def test_epsilons_are_shown_with_three_significant_digits(value, shown):
    assert fmt_epsilon(value) == shown


def test_the_console_and_the_plot_round_epsilons_and_the_plot_shows_the_on_device_exact_point():
    pytest.importorskip("matplotlib")
    res = _results()
    text = report.table(res)
    assert "TRUE worst-case 1," in text and "0.9999" not in text and "tight inf at delta 1e-05" in text
    fig = plots.run_figure(res)
    try:
        assert fig._suptitle.get_text().endswith("nominal epsilon 1, true worst-case 1")
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert any("per upload" in t for t in labels) and any("on device, exact" in t for t in labels), labels
        no_exact = copy.deepcopy(res)
        no_exact["utility"]["on_device"]["exact"] = {"available": False}
        fig2 = plots.run_figure(no_exact)
        assert not any("exact" in t.get_text() for t in fig2.axes[0].get_legend().get_texts())
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
