"""Per-round metrics of a run (``metrics.jsonl``) and optional experiment tracking, all local files.

``metrics.jsonl`` (always, in the run directory): one JSON object per line, written as the run goes:
- ``{"event": "round", "point", "seed", "round", "uploads", "failures", "failed_nodes", "round_s", "elapsed_s"}``
  once per round and seed of every point served (``point`` is "main" or "baseline", the no-privacy comparison);
- after the run: ``{"event": "utility", "seed", "accuracy", "macro_f1"}`` and
  ``{"event": "attack", "attribute", "seed", "accuracy", "majority_baseline"}`` per seed, then one
  ``{"event": "final", ...}`` line with the means, the epsilons and the total time.

Tracking, each off by default and enabled by one key: ``run.tensorboard = true`` writes TensorBoard event files
to ``<run>/tensorboard`` (tensorboardX, else torch.utils.tensorboard); ``run.mlflow = true`` logs params,
metrics and the run's files to an MLflow SQLite store ``<run>/mlflow.db`` with the artifacts in
``<run>/mlartifacts`` (view with ``mlflow ui --backend-store-uri sqlite:///<run>/mlflow.db``; MLflow 3's own
default store is SQLite, its file store is in maintenance mode and refused without an environment variable).
Nothing touches the network. A missing package is a one-line error before any work starts. Both packages come
with the ``tracking`` extra, which ``dev`` includes.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Self

from fl_privtext.config import ExperimentConfig, RunConfig

METRICS_FILE = "metrics.jsonl"
MLFLOW_DB = "mlflow.db"
MLFLOW_ARTIFACTS = "mlartifacts"


def mlflow_uri(run_dir: str | Path) -> str:
    """The MLflow tracking URI of a run directory: its SQLite store (``sqlite:///<run>/mlflow.db``)."""
    return f"sqlite:///{(Path(run_dir) / MLFLOW_DB).resolve()}"


def _tensorboard_writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter  # type: ignore[import-not-found]

        return SummaryWriter
    except ImportError:
        pass
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        return SummaryWriter
    except ImportError:
        raise ValueError("run.tensorboard = true needs tensorboardX or tensorboard, and neither is installed: "
                         "pip install tensorboardX (or set run.tensorboard = false).") from None


def _mlflow_client_class() -> Any:
    try:
        from mlflow.tracking import MlflowClient  # type: ignore[import-not-found]
    except ImportError:
        raise ValueError("run.mlflow = true needs mlflow, which is not installed: pip install mlflow-skinny "
                         "(or set run.mlflow = false).") from None
    return MlflowClient


def check(run: RunConfig) -> None:
    """Fail before any work when an enabled tracker's package is missing (one-line ValueError)."""
    if run.tensorboard:
        _tensorboard_writer_class()
    if run.mlflow:
        _mlflow_client_class()


def _num(x: Any) -> float | None:
    if x == "inf":
        return math.inf
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


class Tracker:
    """Writes ``metrics.jsonl`` in ``out`` and feeds the enabled trackers. Thread-safe: rounds arrive from the
    ServerApp's thread, the results from the driver. ``points`` names the served points in order."""

    def __init__(self, cfg: ExperimentConfig, out: str | Path, *, points: tuple[str, ...] = ("main",)) -> None:
        check(cfg.run)  # a missing package fails now, before any work
        self.cfg, self.out, self.points = cfg, Path(out), points
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._fh: Any = None
        self._tb: Any = None
        self._ml: Any = None
        self._ml_run = ""

    def _start(self) -> None:
        """Open the files at the first event: a run that fails its checks leaves no output directory behind."""
        if self._fh is not None:
            return
        cfg = self.cfg
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"The output directory {self.out} cannot be created ({exc.strerror}); pass a writable "
                             "--output or run.output.") from None
        self._fh = (self.out / METRICS_FILE).open("w")
        if cfg.run.tensorboard:
            self._tb = _tensorboard_writer_class()(str(self.out / "tensorboard"))
            self._tb.add_text("config", "\n".join(f"    {k} = {v}" for k, v in cfg.to_flat().items()))
        if cfg.run.mlflow:
            client = _mlflow_client_class()(tracking_uri=mlflow_uri(self.out))
            exp = client.get_experiment_by_name("fl_privtext")
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(
                "fl_privtext", artifact_location=(self.out / MLFLOW_ARTIFACTS).resolve().as_uri())
            run = client.create_run(exp_id, run_name=self.out.name, tags={"randomness": cfg.run.randomness})
            self._ml, self._ml_run = client, run.info.run_id
            for key, value in cfg.to_flat().items():
                client.log_param(self._ml_run, key, str(value)[:500])

    # ---- events ------------------------------------------------------------------------------------------------
    def _write(self, record: dict[str, Any]) -> None:
        self._start()
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def _scalar(self, tag: str, value: Any, step: int) -> None:
        v = _num(value)
        if v is None or not math.isfinite(v):
            return
        if self._tb is not None:
            self._tb.add_scalar(tag, v, step)
        if self._ml is not None:
            self._ml.log_metric(self._ml_run, tag, v, step=step)

    def on_round(self, point: int, seed: int, rnd: int, arrived: Any, seconds: float) -> None:
        """`fl_privtext.pipeline.runner.run_points`' ``on_round``: one line per round and seed."""
        name = self.points[point] if point < len(self.points) else f"point{point}"
        failures = list(getattr(arrived, "failures", []))
        uploads = len(arrived.uploads["rows"])
        record = {"event": "round", "point": name, "seed": seed, "round": rnd, "uploads": uploads,
                  "failures": len(failures), "failed_nodes": [f.get("node") for f in failures],
                  "round_s": round(seconds, 4), "elapsed_s": round(time.perf_counter() - self._t0, 3)}
        step = (seed - self.cfg.run.seed) * self.cfg.federation.rounds + rnd
        with self._lock:
            self._write(record)
            self._scalar(f"{name}/round/uploads", uploads, step)
            self._scalar(f"{name}/round/failures", len(failures), step)
            self._scalar(f"{name}/round/seconds", seconds, step)

    def on_results(self, results: dict[str, Any]) -> None:
        """The final utility and attack lines (per seed, then the means) from the results.json structure."""
        u, p = results.get("utility", {}), results.get("privacy", {})
        with self._lock:
            for s in u.get("per_seed", []):
                self._write({"event": "utility", "point": "main", **s})
                self._scalar("utility/accuracy", s["accuracy"], s["seed"])
                self._scalar("utility/macro_f1", s["macro_f1"], s["seed"])
            for name, a in results.get("attacks", {}).items():
                for s in a.get("per_seed", []):
                    self._write({"event": "attack", "point": "main", "attribute": name, **s,
                                 "majority_baseline": a.get("majority_baseline")})
                    self._scalar(f"attack/{name}/accuracy", s["accuracy"], s["seed"])
            final = {"event": "final", "accuracy": u.get("accuracy"), "accuracy_std": u.get("accuracy_std"),
                     "macro_f1": u.get("macro_f1"), "majority_baseline": u.get("majority_baseline"),
                     "mechanism": p.get("mechanism"), "epsilon_nominal": p.get("epsilon_nominal"),
                     "epsilon_worst_case": p.get("epsilon_worst_case"),
                     "attacks": {k: {"accuracy": v.get("accuracy"), "majority_baseline": v.get("majority_baseline")}
                                 for k, v in results.get("attacks", {}).items()},
                     "total_s": results.get("timing", {}).get("total_s")}
            self._write(final)
            if self._ml is not None:
                for key in ("accuracy", "macro_f1", "epsilon_nominal", "epsilon_worst_case", "total_s"):
                    self._scalar(f"final/{key}", final[key], 0)
                for k, v in final["attacks"].items():
                    self._scalar(f"final/attack/{k}/accuracy", v["accuracy"], 0)

    def close(self, *, artifacts: bool = True, failed: bool = False) -> None:
        """Flush and close; with MLflow, attach the run's files (results.json, summary.md, plots) as artifacts."""
        with self._lock:
            if self._fh is not None and not self._fh.closed:
                self._fh.close()
            if self._tb is not None:
                self._tb.close()
                self._tb = None
            if self._ml is not None:
                if artifacts:
                    for path in sorted(self.out.iterdir()):
                        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".toml", ".png"):
                            self._ml.log_artifact(self._ml_run, str(path))
                self._ml.set_terminated(self._ml_run, status="FAILED" if failed else "FINISHED")
                self._ml = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(artifacts=exc_type is None, failed=exc_type is not None)
