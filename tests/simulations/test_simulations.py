"""Smoke test of the paper-reproduction helpers (simulations/): a resumable sweep through ONE real Flower
simulation on the embedded default data (2 tiny points), then the OME/DPNR summaries and plots from those
results, written to a temporary folder. Well under a minute."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[2] / "simulations"
sys.path.insert(0, str(SIM))

import sweep

from fl_privtext.config import ExperimentConfig

TINY = {"server.epochs": 2, "attack.epochs": 2, "run.seeds": 1, "run.progress": False,
        "federation.num-clients": 2, "server.learner": "centroid"}


def _cfg(cache_dir, **sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat({**TINY, "extractor.cache-dir": str(cache_dir), **sets})


def test_point_key_ignores_paths_and_tracks_parameters(cache_dir):
    a = _cfg(cache_dir, **{"privacy.epsilon": 1.0})
    assert sweep.point_key(a) == sweep.point_key(_cfg("/elsewhere", **{"privacy.epsilon": 1.0, "data.root": "/x"}))
    assert sweep.point_key(a) != sweep.point_key(_cfg(cache_dir, **{"privacy.epsilon": 2.0}))
    assert sweep.point_key(a) != sweep.point_key(_cfg(cache_dir, **{"run.seed": 1}))


def test_saved_points_keep_their_keys_after_the_precision_and_auto_batch_keys():
    # Frontier points (MiniLM, extracted in float32 with batch size 64) were saved before extractor.precision
    # existed and while extractor.batch-size defaulted to 64, later ones with batch size "auto" = 0 in their
    # configs. The page was regenerated on 2026-11-28 (every point "auto"): two points of the earlier store are
    # kept beside this test (one of each spelling, as saved then), and every point of today's store keeps its key.
    current = [json.loads(p.read_text()) for p in sorted((sweep.RESULTS / "frontier" / "points").glob("*.json"))]
    assert current and all(sweep.saved_point_key(r["config"]) == r["point_key"] for r in current)
    saved = [json.loads(p.read_text()) for p in sorted((Path(__file__).parent / "saved_points").glob("*.json"))]
    assert all(sweep.saved_point_key(r["config"]) == r["point_key"] for r in saved)
    old = [r for r in saved if r["config"]["extractor.batch-size"] == 64 and "extractor.precision" not in r["config"]]
    new = [r for r in saved if r["config"]["extractor.batch-size"] == 0]
    assert old and new
    for r in (old[0], new[0]):  # either spelling of the CPU batch gives the saved key
        cfg = r["config"]
        auto = sweep.saved_point_key({**cfg, "extractor.batch-size": 0})
        assert auto == sweep.saved_point_key({**cfg, "extractor.batch-size": 64}) == r["point_key"]
        assert sweep.saved_point_key({**cfg, "extractor.precision": "bf16"}) != auto
        assert sweep.saved_point_key({**cfg, "extractor.batch-size": 32}) != auto


@pytest.fixture(scope="module")
def swept(tmp_path_factory, cache_dir):
    store = sweep.Store(tmp_path_factory.mktemp("points"))
    points = [_cfg(cache_dir, **{"privacy.mechanism": "none"}),
              _cfg(cache_dir, **{"privacy.mechanism": "laplace-l1", "privacy.epsilon": 0.5})]
    logs: list[str] = []
    stats = sweep.run_sweep(points + points[:1], store, log=logs.append)  # a duplicate point runs once
    return store, points, stats, logs


def test_sweep_runs_each_point_once_and_saves_small_json(swept):
    store, points, stats, logs = swept
    assert stats == {"points": 2, "ran": 2, "wall_s": pytest.approx(stats["wall_s"])}
    files = sorted(store.folder.glob("*.json"))
    assert len(files) == 2 and all(f.stat().st_size < 50_000 for f in files)
    res = store.get(points[1])
    assert res["point_key"] == sweep.point_key(points[1])
    assert res["privacy"]["mechanism"] == "laplace-l1" and res["privacy"]["epsilon_worst_case"] == pytest.approx(0.5, abs=1e-5)  # + secure grid
    assert 0 <= res["utility"]["accuracy"] <= 1 and res["attacks"]
    assert res["config"]["extractor.cache-dir"] == ""  # no machine paths in committed results
    assert res["federation"]["num_clients"] == 2
    assert any("2/2" in line for line in logs)


def test_rerun_skips_done_points_without_starting_a_simulation(swept):
    store, points, _, _ = swept

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished sweep must not start a simulation")

    assert sweep.run_sweep(points, store, runner=must_not_run, log=lambda s: None)["ran"] == 0
    # a new point runs alone: the runner receives only what is missing
    extra = points[1].__class__.from_flat({"privacy.epsilon": 5.0}, points[1])
    seen = []

    def fake(todo, on_result):
        seen.extend(todo)

    sweep.run_sweep(points + [extra], store, runner=fake, log=lambda s: None)
    assert [sweep.point_key(c) for c in seen] == [sweep.point_key(extra)]


def test_summaries_and_plots_from_saved_points(swept, tmp_path, monkeypatch):
    import dpnr
    import ome

    store, points, _, _ = swept
    res = store.get(points[0])
    monkeypatch.setattr(sweep, "RESULTS", tmp_path)
    for mod, name in ((ome, "ome"), (dpnr, "dpnr")):
        monkeypatch.setattr(mod, "OUT", tmp_path / name)
        monkeypatch.setattr(mod, "STORE", sweep.Store(tmp_path / name / "points"))
        monkeypatch.setattr(mod, "SUMMARY", tmp_path / f"{name}.md")
    # the default data's result stands in for two real points (it has gender and age_group, like BLOG)
    fake = json.loads(json.dumps(res))
    fake["utility"]["accuracy"] = 0.6789
    fake["utility"]["per_seed"] = [{"seed": 0, "accuracy": 0.6789, "macro_f1": 0.6}]  # the tables pool runs
    ome.STORE.put(ome.npnn("imdb", ""), fake)
    dpnr.STORE.put(dpnr.point("blog", "", "none"), fake)
    ome_md = ome.write_summary("").read_text()
    dpnr_md = dpnr.write_summary("").read_text()
    assert "67.9 (n=1)" in ome_md and "70.67" in ome_md and "not run" in ome_md
    assert "67.89" in dpnr_md and "78.75" in dpnr_md
    for png in ("ome_figure3_probabilities.png", "ome_privacy_utility.png", "dpnr_attacker.png",
                "dpnr_empirical_privacy.png", "dpnr_privacy_utility.png", "dpnr_mu.png"):
        assert (tmp_path / png).stat().st_size > 1000
    shutil.rmtree(tmp_path / "ome")


def test_dpnr_bound_tv_matches_the_closed_form_and_bounds_accuracy():
    import dpnr_bound

    for eps in (0.5, 2.0):  # k = 1: TV(Lap(0, b), Lap(1, b)) = 1 - exp(-1 / (2b))
        est, up = dpnr_bound.tv_upper(1, eps, samples=100_000, seed=1)
        exact = 1 - math.exp(-eps / 2)
        assert abs(est - exact) < 0.01 and up >= exact
    small, _ = dpnr_bound.tv_upper(64, 0.05, samples=20_000, seed=2)
    large, _ = dpnr_bound.tv_upper(64, 0.5, samples=20_000, seed=2)
    assert 0 < small < large < 1  # more budget, more distinguishable
    assert dpnr_bound.accuracy_ceiling(0.6, 0.0) == 0.6 and dpnr_bound.accuracy_ceiling(0.6, 1.0) == 1.0


# Each reproduction page's command lists its points; every one it shows must be found among the saved points, or
# `--summary-only` would print "todo" where the page holds numbers and a plain run would redo hours of work. A new
# config default (server.learner = auto, privacy.sampler = secure, attack.inversion-vocab = 2000) silently did that
# to these four pages until their configs pinned the values their points were drawn with.
PAGES = [("ome_table1.py",), ("ome_table2.py",), ("dpnr_eps.py",), ("dpnr_mu.py",), ("cape.py",),
         ("coavoux.py", "--datasets", "ag_news", "--seeds", "3"), ("coavoux.py", "--datasets", "blog", "--seeds", "5")]


@pytest.mark.parametrize("command", PAGES, ids=lambda c: " ".join(c))
def test_every_point_a_reproduction_page_shows_is_found(command, data_root):
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(repo / "simulations" / command[0]), "--data-root", str(data_root),
                          *command[1:], "--list"], capture_output=True, text=True, check=False, cwd=repo, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 0, out.stderr[-2000:]
    status = [line.split()[0] for line in out.stdout.splitlines() if line.startswith(("done ", "todo "))]
    assert status and status.count("todo") == 0, [ln for ln in out.stdout.splitlines() if ln.startswith("todo")][:5]
