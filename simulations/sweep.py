"""Shared helper of the paper reproductions: resumable sweeps through ONE Flower simulation, plus table/plot bits.

A *point* is one ``ExperimentConfig`` (all its seeds). Its result (``fl_privtext.report.aggregate``) is saved as
``<store>/<key>.json`` where ``key`` is a hash of the point's flat config (keys that do not change results, such
as the data root, the cache folder or progress bars, are left out). ``run_sweep`` skips points whose JSON exists
and serves all the others through a single ``run_points`` call (Flower/Ray start-up paid once), saving each
point as soon as it finishes, so an interrupted sweep resumes where it stopped.

Summaries look results up by config (``Store.get(cfg)``), never by file name, so tables that share a point share
its result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from fl_privtext.config import ExperimentConfig

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
CONFIGS = REPO / "configs"

# Flat keys that never change a point's numbers: where files live, console output.
IGNORED_KEYS = ("data.root", "extractor.cache-dir", "extractor.device", "run.output", "run.progress",
                "federation.ray-address", "train.device")


# Keys added to the config after points were saved: left out of the key while they hold the value every saved point
# was computed with, so existing points keep their keys (and a run with another value gets a new key).
LATER_KEYS = {"server.standardize": True, "attack.standardize": True}
# Phase A (issue #12): saved points were computed without it, with these defaults.
LATER_KEYS.update({
    "train.rounds": 0, "train.encoder": 'trunk', "train.defense": 'none', "train.strategy": 'fedavg',
    "train.clients-per-round": 0, "train.local-epochs": 1, "train.optimizer": 'adam', "train.lr": 0.001,
    "train.batch-size": 32, "train.hidden": 256, "train.dropout": 0.2, "train.lambda-adv": 1.0,
    "train.decluster-alpha": 0.1, "train.proximal-mu": 0.01, "train.server-lr": 0.01,
    "train.val-frac": 0.1, "train.dp-noise-multiplier": 0.0, "train.dp-clip": 0.0, "train.dp-delta": 1e-05,
    "train.vocab-size": 5000, "train.glove-init": True, "train.max-tokens": 64, "train.minilm-layers": 2,
    "train.gen-chars": 64,
})


def point_key(cfg: ExperimentConfig) -> str:
    """A stable 16-hex-digit key of everything in the config that can change the result."""
    flat = {k: v for k, v in cfg.to_flat().items()
            if k not in IGNORED_KEYS and not (k in LATER_KEYS and v == LATER_KEYS[k])}
    blob = json.dumps(sorted((k, repr(v)) for k, v in flat.items()), separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Store:
    """Per-point JSON results in one folder (``docs/results/<paper>/points``)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, cfg: ExperimentConfig) -> Path:
        return self.folder / f"{point_key(cfg)}.json"

    def has(self, cfg: ExperimentConfig) -> bool:
        return self.path(cfg).is_file()

    def get(self, cfg: ExperimentConfig) -> dict[str, Any] | None:
        p = self.path(cfg)
        return json.loads(p.read_text()) if p.is_file() else None

    def put(self, cfg: ExperimentConfig, result: dict[str, Any]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        p = self.path(cfg)
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
        os.replace(tmp, p)  # atomic: a killed sweep never leaves half a point behind
        return p


def slim(result: dict[str, Any], cfg: ExperimentConfig) -> dict[str, Any]:
    """The saved form of a point: aggregate() output minus machine-specific paths, plus its key."""
    out = dict(result)
    out["config"] = {k: ("" if k in ("data.root", "extractor.cache-dir") else v) for k, v in result["config"].items()}
    out["point_key"] = point_key(cfg)
    return compact(out)


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """Drop the accountant's per-user table (one entry per user: ~1 MB for AG news); its maxima stay."""
    per_user = result.get("privacy", {}).get("composition", {}).get("per_user")
    if isinstance(per_user, dict) and isinstance(per_user.get("per_user"), dict):
        per_user["per_user"] = f"dropped ({len(per_user['per_user'])} users); see max_epsilon*"
    return result


def run_sweep(points: Sequence[ExperimentConfig], store: Store, *, log: Callable[[str], None] = print,
              runner: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Run every point not yet in ``store`` inside ONE ``run_points`` call; returns counts and timings.

    ``runner`` defaults to ``fl_privtext.federation.runner.run_points`` (tests may pass a fake)."""
    from fl_privtext.report import aggregate

    unique: dict[str, ExperimentConfig] = {}
    for cfg in points:
        unique.setdefault(point_key(cfg), cfg)
    todo = [cfg for cfg in unique.values() if not store.has(cfg)]
    log(f"[sweep] {len(unique)} points, {len(unique) - len(todo)} already done, {len(todo)} to run")
    t_start = time.perf_counter()
    if not todo:
        return {"points": len(unique), "ran": 0, "wall_s": 0.0}
    if runner is None:
        from fl_privtext.federation.runner import run_points as runner
    last = [time.perf_counter()]

    def on_result(i: int, point: dict[str, Any]) -> None:
        now = time.perf_counter()
        cfg = todo[i]
        res = slim(aggregate(point, total_s=now - last[0]), cfg)
        last[0] = now
        store.put(cfg, res)
        log(f"[sweep] {i + 1}/{len(todo)} {describe(cfg)} -> {headline(res)} ({res['timing']['total_s']:.1f} s)")

    runner(todo, on_result=on_result)
    wall = time.perf_counter() - t_start
    log(f"[sweep] ran {len(todo)} points in {wall:.0f} s")
    return {"points": len(unique), "ran": len(todo), "wall_s": wall}


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


def headline(res: dict[str, Any]) -> str:
    u = res["utility"]
    s = f"acc {u['accuracy']:.4f}+-{u['accuracy_std']:.4f}" if u.get("available") else "no task"
    for name, a in res.get("attacks", {}).items():
        s += f" | {name} {a.get('f1', a['accuracy']):.3f}"
    return s


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
    ap.add_argument("--data-root", default=default_data_root(),
                    help="staged data folder (default: $FL_PRIVTEXT_DATA or ../shared/data)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the driver (server + attacker training); 1 is fastest on a shared 2-core box")
    ap.add_argument("--summary-only", action="store_true", help="do not run anything; rewrite the summary and plots")
    ap.add_argument("--list", action="store_true", help="print the points and whether each is done, then exit")
    return ap


def setup_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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
