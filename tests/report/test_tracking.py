"""Experiment tracking: the keys write local files (TensorBoard event files, an MLflow SQLite store), read back
with the real packages (the `tracking` extra, part of `dev`), and a missing package is a one-line error before any
work."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline import Round
from fl_privtext.report import tracking

ROOT = Path(__file__).resolve().parents[2]

RESULTS = {
    "utility": {"accuracy": 0.7, "accuracy_std": 0.01, "macro_f1": 0.6, "majority_baseline": 0.6,
                "per_seed": [{"seed": 0, "accuracy": 0.69, "macro_f1": 0.6}, {"seed": 1, "accuracy": 0.71,
                                                                               "macro_f1": 0.6}]},
    "privacy": {"mechanism": "laplace-l1", "epsilon_nominal": 1.0, "epsilon_worst_case": 1.0},
    "attacks": {"gender": {"accuracy": 0.52, "majority_baseline": 0.5,
                           "per_seed": [{"seed": 0, "accuracy": 0.5}, {"seed": 1, "accuracy": 0.54}]}},
    "timing": {"total_s": 3.0},
}


def _round(n: int, failures: int = 0) -> Round:
    return Round({"rows": np.arange(n), "features": np.zeros((n, 2), np.float32), "labels": np.zeros(n)}, 2,
                 failures=[{"node": 7, "kind": "timeout", "reason": "late"}] * failures)


def _drive(cfg: ExperimentConfig, out: Path) -> list[dict]:
    with tracking.Tracker(cfg, out, points=("main", "baseline")) as t:
        for seed in (0, 1):
            for rnd in range(cfg.federation.rounds):
                t.on_round(0, seed, rnd, _round(10, failures=rnd), 0.25)
        t.on_round(1, 0, 0, _round(10), 0.1)
        t.on_results(RESULTS)
    return [json.loads(x) for x in (out / tracking.METRICS_FILE).read_text().splitlines()]


def test_metrics_jsonl_has_one_line_per_round_and_seed_then_the_final_lines(tmp_path):
    cfg = ExperimentConfig.from_flat({"federation.rounds": 3, "run.seeds": 2})
    lines = _drive(cfg, tmp_path)
    main = [(m["seed"], m["round"], m["failures"]) for m in lines if m["event"] == "round" and m["point"] == "main"]
    assert main == [(s, r, r) for s in (0, 1) for r in range(3)]
    assert [m["failed_nodes"] for m in lines if m["event"] == "round"][2] == [7, 7]
    assert [m["event"] for m in lines[7:]] == ["utility", "utility", "attack", "attack", "final"]
    assert lines[-1]["epsilon_worst_case"] == 1.0 and lines[-1]["attacks"]["gender"]["accuracy"] == 0.52
    assert not (tmp_path / "tensorboard").exists() and not (tmp_path / "mlflow.db").exists()  # off by default


def test_missing_tracker_package_is_a_one_line_error(monkeypatch):
    real_import = builtins.__import__

    def no_trackers(name, *args, **kwargs):
        if name.split(".")[0] in ("tensorboardX", "mlflow") or name == "torch.utils.tensorboard":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_trackers)
    for key, needle in (("run.tensorboard", "pip install tensorboardX"), ("run.mlflow", "pip install mlflow")):
        with pytest.raises(ValueError) as exc:
            tracking.check(ExperimentConfig.from_flat({key: "true"}).run)
        assert needle in str(exc.value) and key in str(exc.value) and "\n" not in str(exc.value)


NO_TRACKERS = """
import builtins, sys
real = builtins.__import__
def blocked(name, *args, **kwargs):  # this process has neither tracker installed
    if name.split(".")[0] in ("tensorboardX", "tensorboard") or name == "torch.utils.tensorboard":
        raise ImportError(name)
    return real(name, *args, **kwargs)
builtins.__import__ = blocked
from fl_privtext.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_cli_run_with_tensorboard_but_no_package_exits_2_before_any_work(tmp_path):
    proc = subprocess.run([sys.executable, "-c", NO_TRACKERS, "run", "--set", "run.tensorboard=true",
                           "--output", str(tmp_path / "r")], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "run.tensorboard = true needs tensorboardX" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r" / "results.json").exists()


def test_tensorboard_key_writes_event_files_read_back_by_tensorboard(tmp_path):
    _drive(ExperimentConfig.from_flat({"run.tensorboard": "true", "federation.rounds": 2}), tmp_path)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("main/round/uploads")] == [10.0] * 4
    assert [e.value for e in acc.Scalars("utility/accuracy")] == pytest.approx([0.69, 0.71])


def test_mlflow_key_writes_a_sqlite_store_read_back_without_any_environment(tmp_path, monkeypatch):
    for var in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory (MLflow's default ./mlruns)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(RESULTS))
    _drive(ExperimentConfig.from_flat({"run.mlflow": "true", "federation.rounds": 2}), tmp_path / "run")
    assert (tmp_path / "run" / "mlflow.db").is_file() and not (tmp_path / "mlruns").exists()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'run' / 'mlflow.db'}")  # as docs/api.md says
    (run,) = client.search_runs([client.get_experiment_by_name("fl_privtext").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["privacy.epsilon"] == "1.0"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "main/round/uploads")] == [10.0] * 4
    assert run.data.metrics["final/accuracy"] == 0.7
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"metrics.jsonl", "results.json"}
