"""Shared helper of the paper reproductions: resumable sweeps through ONE Flower simulation, plus table/plot bits.

A *point* is one ``ExperimentConfig`` (all its seeds). Its result (``fl_privtext.report.aggregate``) is saved as
``<store>/<key>.json`` where ``key`` is a hash of the point's flat config (keys that do not change results, such
as the data root, the cache folder or progress bars, are left out). ``run_sweep`` (`fl_privtext.sweep`, the
library behind ``fl-privtext sweep``) skips points whose JSON exists
and serves all the others through a single ``run_points`` call (Flower/Ray start-up paid once), saving each
point as soon as it finishes, so an interrupted sweep resumes where it stopped.

Summaries look results up by config (``Store.get(cfg)``), never by file name, so tables that share a point share
its result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from fl_privtext.config import ExperimentConfig

# The point key, the store and the resumable runner are the library's (`fl-privtext sweep` uses the same), so
# saved points keep their keys: keys that never change numbers (paths, console output, trackers) are left out.
from fl_privtext.sweep import (  # noqa: F401
    IGNORED_KEYS,
    LATER_KEYS,
    Store,
    compact,
    headline,
    point_key,
    saved_point_key,
    slim,
)
from fl_privtext.sweep import run_stored as _run_sweep

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
CONFIGS = REPO / "configs"

def run_sweep(points: Sequence[ExperimentConfig], store: Store, *, log: Callable[[str], None] = print,
              runner: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Run every point not yet in ``store`` (one ``run_points`` call per federation group: usually one), each
    saved as soon as it finishes; returns counts and timings (`fl_privtext.sweep.run_stored`).

    ``runner`` defaults to ``fl_privtext.pipeline.runner.run_points`` (tests may pass a fake)."""
    return _run_sweep(points, store, log=log, runner=runner, describe=describe)


def describe(cfg: ExperimentConfig) -> str:
    p = cfg.privacy
    s = f"{cfg.data.name}/{cfg.extractor.name} {p.mechanism}"
    if p.mechanism != "none":
        s += f" eps={p.epsilon:g}"
    if p.mechanism == "ome":
        s += f" lam={p.lam:g}"
    if p.mu:
        s += f" mu={p.mu:g}"
    if p.mechanism in ("sue", "oue"):
        s += f" ({p.calibration})"
    if cfg.run.seed:
        s += f" split={cfg.run.seed}"
    if cfg.server.epochs != 50:
        s += f" epochs={cfg.server.epochs}"
    return s + f" seeds={cfg.run.seeds}"


# ---- configs ------------------------------------------------------------------------------------------------------


def base_config(toml_name: str, sets: dict[str, Any] | None = None) -> ExperimentConfig:
    """An experiment file under configs/ plus overrides."""
    return ExperimentConfig.load(CONFIGS / toml_name, sets or {})


def derive(base: ExperimentConfig, **sets: Any) -> ExperimentConfig:
    """``derive(cfg, **{"privacy.epsilon": 1})``: a point from a base config and dotted overrides."""
    return ExperimentConfig.from_flat(sets, base)


def default_data_root() -> str:
    env = os.environ.get("FL_PRIVTEXT_DATA", "")
    if env:
        return env
    for cand in (Path.cwd().parent / "shared" / "data", REPO.parent / "shared" / "data"):
        if (cand / "README.md").is_file():
            return str(cand)
    return ""


def common_args(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    # absolute: the clients' noise-stream key (reproducible mode) hashes the whole config, data.root included, so
    # `../shared/data` and `/work/shared/data` must be the same string for a table to regenerate exactly
    ap.add_argument("--data-root", default=default_data_root(), type=lambda p: str(Path(p).resolve()) if p else p,
                    help="staged data folder (default: $FL_PRIVTEXT_DATA or ../shared/data; made absolute)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the driver (server + attacker training); 1 is fastest on a shared 2-core box")
    ap.add_argument("--summary-only", action="store_true", help="do not run anything; rewrite the summary and plots")
    ap.add_argument("--list", action="store_true", help="print the points and whether each is done, then exit")
    return ap


def setup_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def has_exact(res: dict[str, Any] | None) -> bool:
    """Whether a stored result carries the referee's exact on-device figure with its interval (issue #37:
    ``utility.on_device.exact.accuracy`` / ``ci_low`` / ``ci_high``); points saved by earlier code do not."""
    ex = (((res or {}).get("utility") or {}).get("on_device") or {}).get("exact") or {}
    return all(isinstance(ex.get(k), (int, float)) for k in ("accuracy", "ci_low", "ci_high"))


def drop_stale(points: Iterable[ExperimentConfig], store: Store) -> list[Path]:
    """Remove the stored results of ``points`` that lack the exact on-device figure (`has_exact`), so that a sweep
    recomputes them and reuses the others; returns the removed files."""
    gone = []
    for cfg in points:
        res = store.get(cfg)
        if res is not None and not has_exact(res):
            store.path(cfg).unlink()
            gone.append(store.path(cfg))
    return gone


def list_points(points: Iterable[ExperimentConfig], store: Store) -> None:
    for cfg in points:
        print(f"{'done' if store.has(cfg) else 'todo'} {point_key(cfg)} {describe(cfg)}")


# ---- formatting ---------------------------------------------------------------------------------------------------


def pct(mean: float | None, std: float | None = None, digits: int = 2) -> str:
    """Percentages as the papers print them: 67.33, or 67.33 ± 1.20."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    s = f"{100 * mean:.{digits}f}"
    if std is not None:
        s += f" ± {100 * std:.{digits}f}"
    return s


def eps_str(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return "∞" if x == "inf" else x
    if math.isinf(x):
        return "∞"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def accuracy(res: dict[str, Any] | None) -> tuple[float | None, float | None]:
    if not res or not res["utility"].get("available"):
        return None, None
    return res["utility"]["accuracy"], res["utility"]["accuracy_std"]


def true_eps(res: dict[str, Any] | None) -> Any:
    return None if res is None else res["privacy"]["epsilon_worst_case"]


def nominal_eps(res: dict[str, Any] | None) -> Any:
    return None if res is None else res["privacy"]["epsilon_nominal"]


def as_float(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


def wall_time_note(name: str, stats: dict[str, Any], folder: Path) -> None:
    """Append the wall time of a command to docs/results/<paper>/timings.json (kept for the summary)."""
    path = folder / "timings.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault(name, []).append({"when": time.strftime("%Y-%m-%d %H:%M:%S"), **stats})
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def wall_time_table(timings: Path) -> str:
    """Markdown table of the runs `wall_time_note` recorded in ``timings`` (timings.json)."""
    rows = [[f"`{r.get('command', name)}`", r["when"], r["ran"], r["points"], f"{r['wall_s'] / 60:.1f} min"]
            for name, runs in json.loads(timings.read_text()).items() for r in runs]
    return md_table(["command", "finished", "points run", "points in table", "wall time"], rows)


def closing_sections(folder: Path, wall_time_prose: str) -> list[str]:
    """The summary's last lines: the wall-time table with ``wall_time_prose`` (when timings.json exists) and the
    hand-written discussion.md (when it exists)."""
    lines: list[str] = []
    timings = folder / "timings.json"
    if timings.is_file():
        lines += ["## Commands and wall times (this machine: 2 shared CPU cores, no GPU)\n", wall_time_table(timings),
                  "", wall_time_prose]
    disc = folder / "discussion.md"
    if disc.is_file():
        lines.append(disc.read_text())
    return lines


def command_line() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])


def run_command(args: argparse.Namespace, points: Sequence[ExperimentConfig], store: Store, *, name: str,
                folder: Path, summarize: Callable[[str], str]) -> None:
    """The shared body of every table command: --list, or run the missing points (one simulation), record the
    wall time under ``name``, then rewrite and print the summary (--summary-only skips the run)."""
    if args.list:
        list_points(points, store)
        return
    if not args.summary_only:
        setup_threads(args.threads)
        stats = run_sweep(points, store)
        if stats["ran"]:
            wall_time_note(name, {"command": command_line(), **stats}, folder)
    print(summarize(args.data_root))


# ---- statistics over runs (user splits x seeds) ----------------------------------------------------------------------


def per_run_accuracies(results: Iterable[dict[str, Any] | None]) -> list[float]:
    """Every run's test accuracy of the given points (each point: its seeds on one user split); missing points
    are skipped."""
    return [float(s["accuracy"]) for res in results if res and res["utility"].get("available")
            for s in res["utility"]["per_seed"]]


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, int] | None:
    """(mean, sample std with ddof=1, half-width of the Student-t ``level`` interval of the mean, n); None when
    fewer than 2 values."""
    import numpy as np
    from scipy import stats

    n = len(values)
    if n < 2:
        return None
    arr = np.asarray(values, float)
    sd = float(arr.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))
    return float(arr.mean()), sd, half, n


def ci_str(values: Sequence[float], digits: int = 1) -> str:
    """"72.3 [70.1, 74.5] (n=10)" in %: mean and 95% CI over runs; "not run" without runs."""
    st = mean_ci(values)
    if st is None:
        return "not run" if not values else f"{100 * values[0]:.{digits}f} (n=1)"
    m, _, h, n = st
    return f"{100 * m:.{digits}f} [{100 * (m - h):.{digits}f}, {100 * (m + h):.{digits}f}] (n={n})"
