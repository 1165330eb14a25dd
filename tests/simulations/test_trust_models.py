"""The trust-models page's figures over role splits (issue #37), from hand-made results: no simulation runs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

SIM = Path(__file__).resolve().parents[2] / "simulations"
sys.path.insert(0, str(SIM))

import sweep
import trust_models

from fl_privtext.config import ExperimentConfig


def _result(exact: float, low: float, high: float, private: float = 0.5, noise: float = 0.02) -> dict:
    return {"utility": {"on_device": {"exact": {"accuracy": exact, "ci_low": low, "ci_high": high},
                                      "private": {"accuracy": private, "noise_std": noise}}}}


def test_over_splits_adds_the_splits_spread_to_each_splits_interval_over_its_users():
    # three identical splits: their own interval (the splits add nothing)
    same = trust_models.over_splits([(0.6, 0.55, 0.66)] * 3)
    assert same == pytest.approx((0.6, 0.55, 0.66))
    # splits apart: wider on each side than the widest split's own and than the t interval alone
    m, lo, hi = trust_models.over_splits([(0.5, 0.45, 0.55), (0.6, 0.55, 0.65), (0.7, 0.65, 0.75)])
    t_half = 4.302653 * 0.1 / np.sqrt(3)
    assert m == pytest.approx(0.6) and 0.6 - lo == pytest.approx(np.hypot(0.05, t_half), rel=1e-5)
    assert hi - 0.6 == pytest.approx(np.hypot(0.05, t_half), rel=1e-5)
    # a split without the figure is left out; none: NaN
    assert trust_models.over_splits([(math.nan,) * 3, (0.6, 0.55, 0.66)]) == pytest.approx((0.6, 0.55, 0.66))
    assert all(math.isnan(v) for v in trust_models.over_splits([(math.nan,) * 3]))
    # an advantage below its prior keeps its negative interval
    assert trust_models.over_splits([(-0.03, -0.05, -0.01)] * 3, bounds=(-1.0, 1.0))[1] == pytest.approx(-0.05)


def test_the_servers_estimate_over_splits_is_the_mean_with_the_std_of_a_mean_of_independent_estimates():
    m, sd = trust_models.private_over_splits([_result(0.6, 0.5, 0.7, p, 0.03) for p in (0.55, 0.60, 0.65)])
    assert m == pytest.approx(0.6) and sd == pytest.approx(0.03 / np.sqrt(3))


def test_a_stored_point_without_the_exact_figure_is_recomputed_and_one_with_it_is_kept(tmp_path):
    store = sweep.Store(tmp_path)
    old, new = (ExperimentConfig.from_flat({"privacy.epsilon": e}) for e in (1.0, 2.0))
    stale = {"utility": {"on_device": {"accuracy": 0.6, "accuracy_noise_std": 0.02}}}  # RR-counted only
    store.put(old, stale)
    store.put(new, _result(0.6, 0.55, 0.66))
    assert not sweep.has_exact(stale) and sweep.has_exact(store.get(new))
    assert not sweep.has_exact({"utility": {"on_device": {"exact": {"accuracy": 0.6}}}})  # no interval
    assert sweep.drop_stale([old, new], store) == [store.path(old)]
    assert not store.has(old) and json.loads(store.path(new).read_text())["utility"]["on_device"]["exact"]
