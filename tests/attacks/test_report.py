"""results.json and summary.md carry every attack with its baseline, ceiling and CI, and shout on a violation."""

from __future__ import annotations

import json

import numpy as np
import pytest

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


def test_results_carry_the_public_attack_contract(world, tmp_path, capsys):
    cfg = config()
    point = _point(world, make_mechanism("laplace-l1", epsilon=2.0, sampler="float"), cfg)
    _point_seeds = list(point["per_seed"])
    res = report.finalize(point, cfg, total_s=1.0, output=tmp_path, echo=True)
    # the console's last line names summary.md, with its path, as the place to read (issue #36)
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(f"{tmp_path / 'summary.md'}")
    on_disk = json.loads((tmp_path / "results.json").read_text())
    g = on_disk["attacks"]["gender"]
    for key in ("accuracy", "majority_baseline", "ceiling", "violation", "prior", "prior_baseline"):
        assert key in g
    assert {g["prior"], g["per_user"]["prior"]} <= {"majority", "majority_given_label"}
    assert isinstance(g["prior_baseline"], float) and isinstance(g["per_user"]["prior_baseline"], float)
    for key in ("accuracy", "majority_baseline", "ceiling", "ci_low", "ci_high", "floor_logistic"):
        assert isinstance(g["per_user"][key], float)
    # two seeds: the per-user interval is over target users and seeds (bootstrap.seeds_interval), at least as wide
    # on each side as the mean of the seeds' own ends (the old figure, which dropped the seeds' spread)
    from fl_privtext.bootstrap import seeds_interval

    pus = [s["attacks"]["gender"]["per_user"] for s in _point_seeds]
    want = seeds_interval([p["accuracy"] for p in pus], [p["ci_low"] for p in pus], [p["ci_high"] for p in pus])
    assert (g["per_user"]["ci_low"], g["per_user"]["ci_high"]) == want
    assert want[0] <= np.mean([p["ci_low"] for p in pus]) and want[1] >= np.mean([p["ci_high"] for p in pus])
    assert isinstance(g["floor_logistic"], float)  # issue #37: the plain attacker beside the answer
    # issue #37: every per-upload figure with its interval over target users (all of a user's uploads together)
    # and, with two seeds, seeds: one bootstrap over the seeds' per-user sums, on the report's own stream
    from fl_privtext.bootstrap import sums_bootstrap
    from fl_privtext.rng import generator

    seeds_a = [s["attacks"]["gender"] for s in _point_seeds]
    want = sums_bootstrap([a["_sums"] for a in seeds_a], seeds_a[0]["_figures"],
                          generator(cfg.run.seed, "referee", "attack", "gender", "seeds"))
    for fig, value in (("accuracy", g["accuracy"]), ("advantage", g["advantage"]), ("macro_f1", g["macro_f1"])):
        lo, hi = (g["ci_low"], g["ci_high"]) if fig == "accuracy" else (g[f"{fig}_ci_low"], g[f"{fig}_ci_high"])
        assert (lo, hi) == pytest.approx(want[fig], rel=1e-12) and lo <= value <= hi, (fig, lo, value, hi)
    assert g["advantage"] == pytest.approx(g["accuracy"] - g["prior_baseline"])
    for a in seeds_a:  # each seed's own interval, over its target users
        assert a["ci_low"] <= a["accuracy"] <= a["ci_high"] and a["_sums"].users.size == a["per_user"]["num_users"]
        # the violation test reads the interval over target users, not the binomial one over uploads
        assert a["violation"] == ((not a["ceiling_vacuous"] and a["ci_low"] > a["ceiling"] + 1e-12)
                                  or a["per_user"]["violation"])
    assert not any(k.startswith("_") for k in g) and "over target users" in g["interval"]
    summary = (tmp_path / "summary.md").read_text()
    assert f"gender: per upload, advantage over the prior {g['advantage']:.3f}" in summary
    assert f"{g['accuracy']:.3f} [{g['ci_low']:.3f},{g['ci_high']:.3f}]" in summary
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


def test_a_plot_the_disk_has_no_room_for_is_reported_and_a_results_json_that_fails_is_one_line(world, tmp_path,
                                                                                              monkeypatch, capsys):
    import pytest

    from fl_privtext.rundir import RESULTS_FILE, WriteError, collect
    from tests.test_rundir import full_disk, no_room_for_plots

    pytest.importorskip("matplotlib")
    cfg = config()
    point = _point(world, make_mechanism("laplace-l1", epsilon=2.0, sampler="float"), cfg)
    no_room_for_plots(monkeypatch)
    with collect() as found:
        report.finalize(point, cfg, total_s=1.0, output=tmp_path / "a", echo=False)
    reason = f"no space left on device writing {tmp_path}/a/privacy_utility.png"
    assert f"warning: privacy_utility.png not written: {reason}" in capsys.readouterr().err
    on_disk = json.loads((tmp_path / "a" / RESULTS_FILE).read_text())
    assert on_disk["incomplete"] == found == [{"file": f"{tmp_path}/a/privacy_utility.png", "reason": reason}]
    assert reason in (tmp_path / "a" / "summary.md").read_text()
    full_disk(monkeypatch, f".{RESULTS_FILE}.")
    with pytest.raises(WriteError, match=f"^no space left on device writing {tmp_path}/b/{RESULTS_FILE}$"):
        report.finalize(point, cfg, total_s=1.0, output=tmp_path / "b", echo=False)
    assert not (tmp_path / "b" / RESULTS_FILE).exists()
