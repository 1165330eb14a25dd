"""`fl-privtext sweep` and `fl-privtext compare`.

The end-to-end test runs the real CLI in a subprocess (one Flower simulation for all points), kills it with SIGKILL
(the harshest interruption: no handler runs) as soon as the first point file appears, reruns the same command and
checks that only the missing points ran, that the finished points were not touched, and that the table and the
frontier plots cover every point."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fl_privtext import sweep
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline import runner

ROOT = Path(__file__).resolve().parents[1]
SWEEP_TOML = """
[sweep]
output = "out"

[fixed]
"server.epochs" = 1
"attack.epochs" = 1
"server.learner" = "centroid"

[federation]
num-clients = 2

[grid]
"privacy.mechanism" = ["laplace-l1"]
"privacy.epsilon" = [0.5, 2.0, 8.0, 32.0]
"""


def test_sweep_file_gives_the_grid_product_with_fixed_and_top_level_keys(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SWEEP_TOML)
    spec = sweep.SweepSpec.load(path)
    points = spec.points({"run.seeds": "2"})
    assert [p.privacy.epsilon for p in points] == [0.5, 2.0, 8.0, 32.0]
    assert all(p.server.epochs == 1 and p.federation.num_clients == 2 and p.run.seeds == 2 for p in points)
    assert len({sweep.point_key(p) for p in points}) == 4
    assert spec.label(points[1]) == "mechanism=laplace-l1 epsilon=2"


def test_the_no_privacy_point_is_labelled_epsilon_inf_not_the_default_epsilon(tmp_path):
    # the added reference point carries the default epsilon (1), which mechanism `none` ignores: the progress line
    # and --list must not print it as "epsilon=1", a private point's label
    path = tmp_path / "s.toml"
    path.write_text(SWEEP_TOML)
    spec = sweep.SweepSpec.load(path)
    points = spec.points()
    (base,) = sweep.with_baselines(points)[len(points):]
    assert base.privacy.mechanism == "none" and base.privacy.epsilon == 1.0  # what the label used to print
    assert spec.label(base) == "mechanism=none epsilon=inf"
    assert spec.label(points[0]) == "mechanism=laplace-l1 epsilon=0.5"  # private points keep their epsilon
    assert spec.label(base, skip=("privacy.epsilon",)) == "mechanism=none"


@pytest.mark.parametrize("text,needle", [
    ("[fixed]\n\"privacy.epsilon\" = 1.0\n", "needs a [grid] table"),
    ("[grid]\n\"privacy.epsilon\" = 1.0\n", "must be a non-empty list"),
    ("[fixed]\n\"privacy.epsilon\" = 1.0\n[grid]\n\"privacy.epsilon\" = [1.0]\n", "both a fixed key and a grid key"),
    ("[grid]\n\"privacy.epsilon\" = [1.0, -1.0]\n", "Grid point {'privacy.epsilon': -1.0}: privacy.epsilon must be"),
    ("[grid]\n\"privacy.epsilonn\" = [1.0]\n", "valid keys of [privacy]"),
    ("[sweep]\noutptu = \"x\"\n[grid]\n\"privacy.epsilon\" = [1.0]\n", "Unknown key(s) outptu in [sweep]"),
])
def test_bad_sweep_files_fail_before_anything_runs(tmp_path, text, needle):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as exc:
        sweep.SweepSpec.load(path).points()
    assert needle in str(exc.value)


def test_points_run_in_one_simulation_per_federation_group():
    spec = sweep.SweepSpec.from_dict({"grid": {"federation.num-clients": [2, 3], "privacy.epsilon": [1.0, 2.0],
                                               "run.client-seed": [7]}})
    calls: list[list[ExperimentConfig]] = []
    stats = sweep.run_stored(spec.points(), sweep.Store("/nonexistent/points"), log=lambda s: None,
                            runner=lambda group, on_result: calls.append(list(group)))
    assert stats["ran"] == 4 and len(calls) == 2
    for group in calls:  # run_points' rule: one federation size and one client seed per simulation
        assert len({(p.federation.num_clients, p.run.client_seed) for p in group}) == 1 and len(group) == 2


def test_points_that_differ_only_in_the_attacker_are_served_next_to_each_other():
    # the simulation collects their traffic once and holds it until its last point is computed
    # (fl_privtext.pipeline.federated.SharedTraffic): the sweep hands it those points together, one traffic at a time
    spec = sweep.SweepSpec.from_dict({"fixed": {"run.baseline": False},
                                      "grid": {"attack.families": ["logistic", "likelihood"],
                                               "privacy.epsilon": [1.0, 2.0], "run.client-seed": [7]}})
    calls: list[list[ExperimentConfig]] = []
    sweep.run_stored(spec.points(), sweep.Store("/nonexistent/points"), log=lambda s: None,
                    runner=lambda group, on_result: calls.append(list(group)))
    (group,) = calls
    assert [(p.privacy.epsilon, p.attack.families) for p in group] == [
        (1.0, "logistic"), (1.0, "likelihood"), (2.0, "logistic"), (2.0, "likelihood")]


def _cli(*args: str, cwd: Path, cache_dir: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "FL_PRIVTEXT_CACHE": str(cache_dir), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "fl_privtext.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, cache_dir):
    work = tmp_path_factory.mktemp("sweep")
    (work / "s.toml").write_text(SWEEP_TOML)
    points_dir = work / "out" / "points"
    proc = _cli("sweep", "s.toml", cwd=work, cache_dir=cache_dir, start_new_session=True)
    t0 = time.monotonic()
    try:
        while not list(points_dir.glob("*.json")):
            assert proc.poll() is None, f"sweep ended before its first point: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() - t0 < 300, "no point finished within 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep's own process group (its Ray processes included)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    kept = {p.name: (p.stat().st_mtime_ns, p.read_text()) for p in points_dir.glob("*.json")}
    rerun = _cli("sweep", "s.toml", cwd=work, cache_dir=cache_dir)
    out, err = rerun.communicate(timeout=400)
    assert rerun.returncode == 0, err[-3000:]
    return work, kept, out, err


@pytest.mark.slow
def test_killed_sweep_resumes_with_only_the_missing_points(resumed):
    work, kept, out, err = resumed
    assert 1 <= len(kept) < 5, "the kill must land mid-sweep"
    missing = 5 - len(kept)  # 4 grid points and their shared no-privacy point
    assert f"[sweep] 5 points, {len(kept)} already done, {missing} to run" in err
    # the no-privacy point is the referee's, computed beside the private points' simulation (it may well be the
    # first to finish): a rerun that still has it and private points to run says it runs two groups
    reference_kept = any(json.loads(text)["config"]["privacy.mechanism"] == "none" for _, text in kept.values())
    two_groups = not reference_kept and missing > 1
    assert err.count("[sweep] ") == 2 + missing + two_groups and f"[sweep] {missing}/{missing} " in err
    points = sorted((work / "out" / "points").glob("*.json"))
    assert len(points) == 5
    for p in points:  # the points finished before the kill were skipped, not recomputed
        if p.name in kept:
            assert (p.stat().st_mtime_ns, p.read_text()) == kept[p.name]
    by_mech = {json.loads(p.read_text())["config"]["privacy.mechanism"]: json.loads(p.read_text()) for p in points}
    # the no-privacy reference: the referee's plain loop, no client and no simulation of its own (issue #38)
    assert by_mech["none"]["computed_by"].startswith("the referee's plain loop")
    assert "computed_by" not in by_mech["laplace-l1"]
    rows = list(csv.DictReader((work / "out" / "table.csv").open()))
    spec = sweep.SweepSpec.load(work / "s.toml")
    assert [r["point"] for r in rows] == [sweep.point_key(c) for c in
                                          sweep.with_baselines(spec.points({"run.progress": "false"}))]
    # the true epsilon: the nominal one plus the secure sampler's grid rounding (privacy/exact.py)
    assert [float(r["epsilon_worst_case"]) for r in rows[:4]] == pytest.approx([0.5, 2.0, 8.0, 32.0], rel=1e-5)
    assert rows[4]["privacy.mechanism"] == "none" and rows[4]["epsilon_worst_case"] == "inf"
    assert len({r["no_privacy_on_device_accuracy"] for r in rows}) == 1 and rows[0]["no_privacy_on_device_accuracy"]
    assert all(0 <= float(r["accuracy"]) <= 1 and r["attack.gender.accuracy"] for r in rows)
    md = (work / "out" / "table.md").read_text()
    assert "5 of 5 points finished" in md and md.count("| laplace-l1 |") == 4
    assert "| point | privacy.mechanism | privacy.epsilon |" in out
    for png in ("frontier_task.png", "frontier_attack.png"):
        assert (work / "out" / png).stat().st_size > 5000
    assert (work / "out" / "sweep.toml").read_text() == SWEEP_TOML
    listed = _cli("sweep", "s.toml", "--list", cwd=work, cache_dir=Path(".")).communicate(timeout=120)[0]
    assert listed.count("done ") == 5 and "todo" not in listed


@pytest.mark.slow
def test_compare_tabulates_finished_runs_side_by_side(resumed, tmp_path, cache_dir):
    work, _, _, _ = resumed
    points = sorted((work / "out" / "points").glob("*.json"))
    for name, src in (("run_a", points[0]), ("run_b", points[1])):
        (tmp_path / name).mkdir()
        shutil.copy(src, tmp_path / name / "results.json")
    proc = _cli("compare", "run_a", "run_b", "--csv", "cmp.csv", cwd=tmp_path, cache_dir=cache_dir)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == "|  | run_a | run_b |"
    rows = {r[""]: r for r in csv.DictReader((tmp_path / "cmp.csv").open())}
    assert {"accuracy", "epsilon_worst_case", "attack.gender.accuracy", "config privacy.epsilon"} <= set(rows)
    assert rows["config privacy.epsilon"]["run_a"] != rows["config privacy.epsilon"]["run_b"]
    assert "config server.epochs" not in rows  # only the keys that differ
    bad = _cli("compare", "run_a", "nope", cwd=tmp_path, cache_dir=cache_dir)
    _, err = bad.communicate(timeout=120)
    assert bad.returncode == 2 and err.strip() == ("fl-privtext compare: error: nope has no results.json "
                                                   "(not a finished run directory).")


def test_committed_points_keep_their_keys():
    """Every result saved under docs/results/<paper>/points/ is found again by its scripts: its key, recomputed from
    its saved config with the keys added since at their LATER_KEYS values, is its file name. A config key added
    without a LATER_KEYS entry (its default then enters every key) orphans every saved point and fails here."""
    import json

    files = sorted((ROOT / "docs" / "results").glob("*/points/*.json"))
    assert files, "no saved points under docs/results/*/points/"
    moved = []
    for f in files:
        saved = json.loads(f.read_text())["config"]
        if sweep.saved_point_key(saved) != f.stem:
            moved.append(f.relative_to(ROOT).as_posix())
    assert not moved, f"{len(moved)} of {len(files)} saved points no longer match their keys, e.g. {moved[:3]}"


def test_seed_band_is_the_student_t_interval_and_covers_the_mean_at_its_level():
    import numpy as np
    from scipy import stats

    accs = [0.61, 0.64, 0.58]
    lo, hi = sweep.seed_band([{"accuracy": a} for a in accs])
    ref = stats.t.interval(0.95, 2, loc=np.mean(accs), scale=stats.sem(accs))
    assert (lo, hi) == pytest.approx(ref)
    # seeded coverage check: over 2000 draws of 3 seeds the 95% band covers the true mean 93.5-96.5% of the time
    rng = np.random.default_rng(0)
    draws = rng.normal(0.7, 0.02, size=(2000, 3))
    cover = np.mean([lo <= 0.7 <= hi for lo, hi in (sweep.seed_band([{"accuracy": a} for a in d]) for d in draws)])
    assert 0.935 <= cover <= 0.965
    assert sweep.seed_band([{"accuracy": 0.5, "ci95": [0.4, 0.6]}]) == (0.4, 0.6)  # one seed: its own RR band
    assert sweep.seed_band([{"accuracy": 0.5}]) == (None, None)


def test_grid_points_share_one_no_privacy_point():
    spec = sweep.SweepSpec.from_dict({"grid": {"privacy.mechanism": ["laplace-l1", "gaussian"],
                                               "privacy.epsilon": [1.0, 2.0]}})
    points = sweep.with_baselines(spec.points())
    assert len(points) == 5 and points[4].privacy.mechanism == "none" and points[4].client.max_epsilon == float("inf")
    off = sweep.SweepSpec.from_dict({"fixed": {"run.baseline": False}, "grid": {"privacy.epsilon": [1.0, 2.0]}})
    assert len(sweep.with_baselines(off.points())) == 2


def test_the_no_privacy_point_never_shares_a_simulation_with_a_private_point():
    # same federation and the same [client] section as the grid (the default cap is inf): before, the reference
    # joined the private points' simulation and its clients held an uncapped mechanism-none entry
    spec = sweep.SweepSpec.from_dict({"fixed": {"client.max-epsilon": "inf"},
                                      "grid": {"privacy.epsilon": [1.0, 2.0], "run.client-seed": [7]}})
    points = sweep.with_baselines(spec.points())
    base = points[-1]
    assert base.privacy.mechanism == "none" and base.client == points[0].client
    assert sweep.simulation_group(base) != sweep.simulation_group(points[0]) == sweep.simulation_group(points[1])
    calls: list[list[ExperimentConfig]] = []
    sweep.run_stored(points, sweep.Store("/nonexistent/points"), log=lambda s: None,
                    runner=lambda group, on_result: calls.append(list(group)))
    assert sorted(len(c) for c in calls) == [1, 2]
    for group in calls:  # the runner's guard (fl_privtext.pipeline.runner._client_policy) accepts each group
        assert len({p.privacy.mechanism == "none" for p in group}) == 1
        runner._client_policy(group)


def test_the_no_privacy_reference_runs_beside_the_federation():
    """A group that ``beside`` names (by default the referee's no-privacy references, when every point computes
    with one driver thread) runs in a thread while the federation's groups run in this one. Known-bad (the groups
    one after the other, as before): the federation's group would wait at the barrier for a reference that only
    starts after it, and time out."""
    import threading

    spec = sweep.SweepSpec.from_dict({"grid": {"privacy.epsilon": [1.0, 2.0], "run.client-seed": [7]}})
    points = sweep.with_baselines(spec.points())
    both = threading.Barrier(2, timeout=20)  # passes only if both groups run at the same time
    ran: dict[str, tuple[str, int]] = {}

    def runner(group, on_result):
        kind = "reference" if group[0].privacy.mechanism == "none" else "federation"
        ran[kind] = (threading.current_thread().name, len(group))
        both.wait()

    stats = sweep.run_stored(points, sweep.Store("/nonexistent/points"), log=lambda s: None, runner=runner,
                             beside=lambda group: all(c.privacy.mechanism == "none" for c in group))
    assert stats["ran"] == 3 and ran["federation"] == (threading.current_thread().name, 2)
    assert ran["reference"][0].startswith("fl-privtext-reference") and ran["reference"][1] == 1


def _result(acc: float, od: list[float], eps: float | str, mech: str) -> dict:
    return {"utility": {"available": True, "accuracy": sum(od) / len(od) - 0.01, "majority_baseline": 0.55,
                        "per_seed": [{"seed": i, "accuracy": a - 0.01} for i, a in enumerate(od)],
                        "on_device": {"available": True, "accuracy": sum(od) / len(od),
                                      "per_seed": [{"seed": i, "accuracy": a} for i, a in enumerate(od)],
                                      "exact": {"available": True, "accuracy": sum(od) / len(od) + 0.01,
                                                "ci_low": min(od), "ci_high": max(od) + 0.02}}},
            "privacy": {"mechanism": mech, "epsilon_nominal": eps, "epsilon_worst_case": eps}, "attacks": {}}


def test_table_has_the_frontier_columns_and_the_no_privacy_row(tmp_path):
    spec = sweep.SweepSpec.from_dict({"grid": {"privacy.mechanism": ["privunitg"], "privacy.epsilon": [1.0, 8.0]}})
    points = spec.points()
    store = sweep.Store(tmp_path / "points")
    store.put(points[0], _result(0.0, [0.55, 0.56, 0.57], 1.0, "privunitg"))
    store.put(points[1], _result(0.0, [0.80, 0.82, 0.81], 8.0, "privunitg"))
    summary = sweep.write_outputs(spec, points, store, tmp_path)
    assert summary["missing"] == 1  # the no-privacy point has not run
    store.put(sweep.baseline_of(points[0]), _result(0.0, [0.90, 0.91, 0.92], "inf", "none"))
    sweep.write_outputs(spec, points, store, tmp_path)
    rows = list(csv.DictReader((tmp_path / "table.csv").open()))
    need = ["privacy.mechanism", "epsilon_worst_case", "accuracy", "on_device_accuracy", "on_device_ci_low",
            "on_device_ci_high", "no_privacy_on_device_accuracy", "majority_baseline", "on_device_exact",
            "on_device_exact_ci_low", "on_device_exact_ci_high", "no_privacy_on_device_exact"]
    assert set(need) <= set(rows[0])
    assert all(float(r["no_privacy_on_device_exact"]) == pytest.approx(0.92) for r in rows)  # the exact figure
    assert float(rows[1]["on_device_exact"]) == pytest.approx(0.82)
    assert [r["privacy.mechanism"] for r in rows] == ["privunitg", "privunitg", "none"]
    assert rows[2]["epsilon_worst_case"] == "inf" and rows[2]["privacy.epsilon"] == "inf"
    assert all(float(r["no_privacy_on_device_accuracy"]) == pytest.approx(0.91) for r in rows)
    assert float(rows[1]["on_device_ci_low"]) < 0.81 < float(rows[1]["on_device_ci_high"])


def test_sweep_result_to_pandas_is_the_table_one_row_per_point(tmp_path):
    pd = pytest.importorskip("pandas")
    from fl_privtext.sweep import SweepResult

    spec = sweep.SweepSpec.from_dict({"grid": {"privacy.mechanism": ["privunitg"], "privacy.epsilon": [1.0, 8.0]}})
    points = spec.points()
    store = sweep.Store(tmp_path / "points")
    for cfg, od in zip(points, ([0.55, 0.56, 0.57], [0.80, 0.82, 0.81]), strict=True):
        store.put(cfg, _result(0.0, od, cfg.privacy.epsilon, "privunitg"))
    store.put(sweep.baseline_of(points[0]), _result(0.0, [0.90, 0.91, 0.92], "inf", "none"))
    summary = sweep.write_outputs(spec, points, store, tmp_path)
    res = SweepResult(rows=summary["rows"], output_dir=tmp_path)
    df = res.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == len(res) == 3
    assert list(df.columns) == list(pd.read_csv(tmp_path / "table.csv").columns)
    assert df["on_device_accuracy"].tolist() == pytest.approx([0.56, 0.81, 0.91])
    assert df.loc[2, "privacy.mechanism"] == "none"
    assert "| privunitg |" in res._repr_markdown_() and str(res).startswith("fl_privtext SweepResult")


def test_quickstart_frontier_file_is_a_valid_sweep_with_seeds_and_its_no_privacy_point():
    spec = sweep.SweepSpec.load(ROOT / "configs" / "quickstart_frontier.toml")
    points = spec.points({"run.progress": "false"})
    everything = sweep.with_baselines(points)
    assert len(everything) == len(points) + 1 and everything[-1].privacy.mechanism == "none"
    assert "privunitg" in spec.grid["privacy.mechanism"] and all(p.run.seeds >= 5 for p in points)
    eps = sorted({p.privacy.epsilon for p in points})
    assert eps[0] <= 0.5 and eps[-1] >= 16  # from the majority to near no privacy (README, "quickstart frontier")
    assert spec.output == "sweeps/quickstart_frontier"


def test_the_frontier_draws_the_exact_on_device_figure_where_the_table_has_it(tmp_path):
    from fl_privtext.report import plots

    est = {"on_device_accuracy": 0.61, "on_device_ci_low": 0.5, "on_device_ci_high": 0.7}
    assert plots.on_device_columns([est])[0] == "on_device_accuracy"  # older tables: the server's estimate, named so
    assert "estimate" in plots.on_device_columns([est])[3]
    exact = {**est, "on_device_exact": 0.66, "on_device_exact_ci_low": 0.64, "on_device_exact_ci_high": 0.68}
    assert plots.on_device_columns([est, exact])[:3] == ("on_device_exact", "on_device_exact_ci_low",
                                                          "on_device_exact_ci_high")
    if plots.available():
        rows = [{"series": "privunitg", "epsilon_worst_case": e, "accuracy": 0.6, "accuracy_std": 0.0,
                 "majority_baseline": 0.6, "attacks": {}, **exact} for e in (1.0, 4.0, "inf")]
        assert [p.name for p in plots.frontier(rows, tmp_path)] == ["frontier_task.png"]


def test_auto_candidates_key_only_auto_points_and_saved_auto_points_keep_the_mlp():
    # Saved points predate server.auto-candidates and their auto cross-validated the MLP: they keep their keys under
    # the old list; the new default (no MLP) is another point; a non-auto server is keyed without the list.
    from fl_privtext.client import published
    from fl_privtext.sweep import point_key, saved_point_key

    def key(**sets: object) -> str:
        return point_key(ExperimentConfig.from_flat({"run.progress": False, **sets}))

    old = "centroid,lda,linear,mlp"
    saved = published(ExperimentConfig.from_flat({"run.progress": False, "server.learner": "auto"}).to_flat())
    del saved["server.auto-candidates"]  # a point saved before the key existed
    assert key(**{"server.learner": "auto", "server.auto-candidates": old}) == saved_point_key(saved)
    assert key(**{"server.learner": "auto"}) != key(**{"server.learner": "auto", "server.auto-candidates": old})
    assert key(**{"server.learner": "centroid"}) == key(**{"server.learner": "centroid",
                                                           "server.auto-candidates": "lda"})
