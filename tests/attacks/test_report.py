"""results.json and summary.md carry every attack with its baseline, ceiling and CI, and shout on a violation."""

from __future__ import annotations

import json

import numpy as np

from fl_privtext import pipeline, report
from fl_privtext.privacy import make_mechanism

from .conftest import config
from .test_attack_ends import ClaimsOneUploadsInput


def _point(world, mech, cfg):
    prep, x = world
    seeds = []
    for seed in (0, 1):
        up = mech.privatize(x, np.random.default_rng(seed))
        attacks, extra = pipeline.attack(prep, up, np.arange(len(x)), seed, cfg, mechanism=mech)
        seeds.append({"seed": seed, "utility": {"available": False, "reason": "attacks only"}, "attacks": attacks,
                      "attacks_extra": extra, "uploads_received": len(x), "uploads_observed": len(x),
                      "messages_observed": 2, "bytes_observed": up.nbytes, "output_dim": up.shape[1],
                      "timing": {"attack_s": 0.0}})
    rep = mech.report().to_json()
    return {"config": cfg, "per_seed": seeds, "num_users": 240, "num_records": len(x), "privacy": rep,
            "dataset": {"name": "synthetic"}, "server_s": 0.0}


def test_results_carry_the_public_attack_contract(world, tmp_path):
    cfg = config()
    res = report.finalize(_point(world, make_mechanism("laplace-l1", epsilon=2.0, sampler="float"), cfg), cfg, total_s=1.0,
                          output=tmp_path, echo=False)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    g = on_disk["attacks"]["gender"]
    for key in ("accuracy", "majority_baseline", "ceiling", "violation"):
        assert key in g
    for key in ("accuracy", "majority_baseline", "ceiling", "ci_low", "ci_high", "floor_logistic"):
        assert isinstance(g["per_user"][key], float)
    assert isinstance(g["floor_logistic"], float)  # issue #37: the plain attacker beside the answer
    assert g["per_user"]["ci_low"] <= g["per_user"]["accuracy"] <= g["per_user"]["ci_high"]
    ex = on_disk["attacks_extra"]
    for key in ("top1", "chance", "ceiling"):
        assert isinstance(ex["reidentification"][key], float)
    assert isinstance(ex["membership"]["auc"], float)
    assert isinstance(ex["inversion"]["f1"], float) and isinstance(ex["inversion"]["f1_baseline"], float)
    assert g["violation"] is False and ex["violation"] is False
    assert "VIOLATION" not in (tmp_path / "summary.md").read_text()
    assert res["attacks"]["gender"]["ceiling"] < 1


def test_a_violation_is_flagged_in_results_and_summary(world, tmp_path):
    cfg = config(**{"attack.families": "logistic"})
    mech = ClaimsOneUploadsInput()
    report.finalize(_point(world, mech, cfg), cfg, total_s=1.0, output=tmp_path, echo=False)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["attacks_extra"]["violation"] is True
    assert on_disk["attacks_extra"]["reidentification"]["violation"] is True
    summary = (tmp_path / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**PRIVACY VIOLATION")
