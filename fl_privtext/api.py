"""The Python API for notebooks: ``fl_privtext.run(config) -> Result`` (docs/api.md).

It runs exactly what ``fl-privtext run`` runs (the Flower simulation, the no-privacy baseline, results.json,
config.toml, summary.md, metrics.jsonl and the privacy-utility plot in the output directory) and hands the results
back as Python objects, with the uploads the eavesdropper observed when asked for.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.config import ExperimentConfig, flatten
from fl_privtext.display import fmt_epsilon
from fl_privtext.pipeline.preflight import check_run
from fl_privtext.progress import tqdm as _tqdm  # noqa: F401  (imported first: notebook-fit progress bars)
from fl_privtext.report import prior_baseline
from fl_privtext.report.plots import FRONTIER_ATTACK, FRONTIER_TASK, RUN_PLOT


@dataclass(frozen=True)
class Result:
    """One finished experiment.

    ``results``: the results.json content (``result["utility"]["accuracy"]`` works too); ``output_dir``: where the
    files are; ``plots``: the PNGs written there; ``config``: the resolved configuration; ``uploads``: with
    ``uploads=True``, what the eavesdropper observed from the private point, every seed and round in arrival order:
    ``features`` (M, D) float32, ``labels`` (M,), ``rows`` (M,) record ids and ``node`` (M,) the sending node (uint64 Flower node id)."""

    results: dict[str, Any]
    output_dir: Path
    config: ExperimentConfig
    plots: tuple[Path, ...] = ()
    uploads: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def _rows(self) -> list[tuple[str, str]]:
        """(quantity, value) rows of the summary table shown in a terminal and in Jupyter."""
        r = self.results

        def num(x: Any) -> str:
            return f"{x:.3f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)

        util, priv = r.get("utility", {}), r.get("privacy", {})
        rows = [("mechanism", str(priv.get("mechanism", "?"))),
                ("epsilon (true worst case)", fmt_epsilon(priv.get("epsilon_worst_case", "?"))),
                ("accuracy (per upload)", num(util.get("accuracy", "-"))),
                ("majority baseline", num(util.get("majority_baseline", "-")))]
        on_device = util.get("on_device") or {}
        if on_device.get("available"):
            rows.append(("accuracy (on device)", num(on_device.get("accuracy"))))
            exact = on_device.get("exact") or {}
            if exact.get("available"):  # simulation only: the referee's exact figure of the shipped model
                rows.append(("accuracy (on device, exact, simulation)", num(exact.get("accuracy"))))
        for name, att in sorted((r.get("attacks") or {}).items()):
            if isinstance(att, dict) and "accuracy" in att:
                rows.append((f"attack {name} (prior {num(prior_baseline(att) or '-')})", num(att["accuracy"])))
        failed = (r.get("faults") or {}).get("failed_clients") or []
        rows.append(("failed clients", str(len(failed))))
        return rows

    def __str__(self) -> str:
        rows = self._rows()
        width = max(len(k) for k, _ in rows)
        lines = [f"fl_privtext Result: {self.output_dir}"] + [f"  {k:<{width}}  {v}" for k, v in rows]
        lines += [f"  warning: {w}" for w in self.results.get("warnings") or []]
        return "\n".join(lines)

    def __repr__(self) -> str:
        priv = self.results.get("privacy", {})
        return (f"Result(mechanism={priv.get('mechanism')!r}, epsilon_worst_case={priv.get('epsilon_worst_case')!r}, "
                f"accuracy={self.accuracy!r}, output_dir={str(self.output_dir)!r})")

    def _repr_markdown_(self) -> str:
        """Jupyter's display: the summary table, the warnings and the plot (linked from the run directory)."""
        lines = [f"**fl_privtext result** in `{self.output_dir}`", "", "| quantity | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self._rows()]
        warnings = self.results.get("warnings") or []
        if warnings:
            lines += ["", "**Warnings**", ""] + [f"- {w}" for w in warnings]
        for p in self.plots:  # relative to the working directory (the notebook's): Jupyter serves it from there
            rel = os.path.relpath(p.resolve(), Path.cwd().resolve())
            lines += ["", f"![{p.name}]({rel})"]
        return "\n".join(lines)

    @property
    def accuracy(self) -> float | None:
        return self.results["utility"].get("accuracy")

    @property
    def summary(self) -> str:
        """summary.md as written next to the results."""
        return (self.output_dir / "summary.md").read_text()

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The lines of metrics.jsonl (per round and seed, then the final utility/attack lines)."""
        path = self.output_dir / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def resolve(config: dict[str, Any] | str | Path | ExperimentConfig | None = None,
            sets: dict[str, Any] | None = None) -> ExperimentConfig:
    """An ExperimentConfig from a dict (dotted keys ``{"privacy.epsilon": 2}`` or nested sections
    ``{"privacy": {"epsilon": 2}}``), a TOML file path, an ExperimentConfig, or None (the defaults); ``sets``
    override on top."""
    if config is None:
        cfg = ExperimentConfig()
    elif isinstance(config, ExperimentConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = ExperimentConfig.from_flat(flatten(config))
    elif isinstance(config, (str, Path)):
        cfg = ExperimentConfig.load(config)
    else:
        raise ValueError(f"config must be a dict, a TOML file path or an ExperimentConfig; got {type(config).__name__}.")
    return ExperimentConfig.from_flat(sets or {}, cfg) if sets else cfg


def _uploads(observations: list[Any]) -> dict[str, np.ndarray] | None:
    parts = [(o.src_node_id, o.arrays["upload"]) for o in observations
             if "upload" in getattr(o, "arrays", {}) and len(o.arrays["upload"]["rows"])]
    if not parts:
        return None
    out = {k: np.concatenate([p[k] for _, p in parts]) for k in parts[0][1]}
    out["node"] = np.concatenate([np.full(len(p["rows"]), node, dtype=np.uint64) for node, p in parts])
    return out


def run(config: dict[str, Any] | str | Path | ExperimentConfig | None = None, *, output: str | Path | None = None,
        uploads: bool = False, echo: bool = False, sets: dict[str, Any] | None = None,
        overwrite: bool = False) -> Result:
    """Run one federated experiment (as ``fl-privtext run``) and return its `Result`.

    ``config``: see `resolve`; ``output``: the run directory (default: ``run.output``, else runs/<timestamp>);
    ``uploads``: keep what the eavesdropper observed (``Result.uploads``); ``echo``: print the summary table;
    ``overwrite``: replace a finished run's results in ``output`` (refused otherwise). Bad configuration raises ValueError before anything starts."""
    cfg = resolve(config, sets)
    check_run(cfg, output=output, overwrite=overwrite)  # before torch, Flower and Ray are imported
    from fl_privtext.pipeline.runner import run_experiment  # torch, flwr, ray (the simulation)

    results = run_experiment(cfg, output=output, echo=echo, keep_observations=uploads, overwrite=overwrite)
    observations = results.pop("observations", [])
    out = Path(results.pop("output_dir"))
    plots = tuple(p for p in (out / n for n in (RUN_PLOT, FRONTIER_TASK, FRONTIER_ATTACK)) if p.is_file())
    return Result(results=results, output_dir=out, config=cfg, plots=plots,
                  uploads=_uploads(observations) if uploads else None)
