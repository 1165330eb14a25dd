"""`fl-privtext sweep FILE`: a grid of experiment points through one federation, resumable; `fl-privtext compare`.

A sweep file is TOML::

    [sweep]                       # optional
    base = "configs/default.toml" # an experiment file the points start from (relative to the sweep file)
    output = "sweeps/eps"         # default: sweeps/<file stem>

    [fixed]                       # keys every point shares (dotted keys or nested tables)
    "server.epochs" = 20

    [grid]                        # key -> list of values; the points are the Cartesian product
    "privacy.mechanism" = ["laplace-l1", "gaussian"]
    "privacy.epsilon" = [0.5, 1, 2, 4]

Other top-level tables ([privacy], [run], ...) are fixed keys too, as in an experiment file.

A *point* is one ``ExperimentConfig`` (all its seeds). Its result (`fl_privtext.report.aggregate`) is written
atomically to ``OUT/points/<key>.json`` as soon as it finishes, where ``key`` hashes every config key that can
change the numbers (`point_key`); a rerun skips the points whose file exists, so an interrupted sweep resumes where
it stopped. All points that share the federation size, resources and ``run.client-seed`` run inside ONE Flower
simulation (`fl_privtext.pipeline.runner.run_points`); a grid over those keys gets one simulation per group, and
the no-privacy points (each grid's reference, `baseline_of`) are the referee's, never beside a private point.
Inside a simulation, points that differ only in ``attack.*`` are collected once (`by_traffic`).
Then ``OUT/table.csv``, ``OUT/table.md`` and the frontier plots (``frontier_task.png``, ``frontier_attack.png``:
accuracy vs the TRUE worst-case epsilon) are written from all points.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import math
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_privtext.bootstrap import seeds_interval
from fl_privtext.client import published
from fl_privtext.client.policy import user_keys
from fl_privtext.client.upload import SEED_FINGERPRINT_KEY
from fl_privtext.config import MACHINE_KEYS, ExperimentConfig, flatten, keyed_flat
from fl_privtext.display import fmt_epsilon
from fl_privtext.metrics import clip_interval
from fl_privtext.pipeline.preflight import check_point
from fl_privtext.progress import tqdm
from fl_privtext.report import aggregate, plots, prior_baseline
from fl_privtext.rundir import keep_going, make_dir, report_unwritten, write_atomic
from fl_privtext.threads import driver_threads, fork_safe
from fl_privtext.traffic import traffic_key

# Flat keys that never change a point's numbers: where files live, console output, trackers.
IGNORED_KEYS = MACHINE_KEYS

# Keys added to the config after points were saved: left out of the key while they hold the value every saved point
# was computed with, so existing points keep their keys (and a run with another value gets a new key).
# (The points saved under docs/results predate federation.round-timeout and privacy.sampler: with these entries
# all 178 of them keep their keys, as `python simulations/ome_table1.py --list` shows.)
LATER_KEYS: dict[str, Any] = {"server.standardize": True, "attack.standardize": True,
                              "federation.round-timeout": 600.0, "privacy.sampler": "float", "data.split": "random",
                              "server.center": False}
# Phase A (issue #12): saved points were computed without it, i.e. with these defaults.
LATER_KEYS.update({
    "train.rounds": 0, "train.encoder": "trunk", "train.defense": "none", "train.strategy": "fedavg",
    "train.clients-per-round": 0, "train.local-epochs": 1, "train.optimizer": "adam", "train.lr": 0.001,
    "train.batch-size": 32, "train.hidden": 256, "train.dropout": 0.2, "train.lambda-adv": 1.0,
    "train.decluster-alpha": 0.1, "train.proximal-mu": 0.01, "train.server-lr": 0.01,
    "train.val-frac": 0.1, "train.dp-noise-multiplier": 0.0, "train.dp-clip": 0.0, "train.dp-delta": 1e-05,
    "train.vocab-size": 5000, "train.glove-init": True, "train.max-tokens": 64, "train.minilm-layers": 2,
    "train.gen-chars": 64,
})
# The clients' policy (issue #22): saved points predate it (no ledger, noise-free on-device counts, the worst
# repetition's composition); keyed as these defaults so they are still found, their numbers being the old protocol's.
LATER_KEYS.update({"client.max-epsilon": math.inf, "client.on-device": True, "client.count-epsilon": 1.0,
                   "client.min-count": 5})
LATER_KEYS["train.adv-attributes"] = ""  # issue #13 (CAPE: one attribute's adversary at a time)
# Issue #14's training budgets: at these defaults they bind on no staged dataset (config.py says where each binds),
# so every saved point was computed as if they were set.
LATER_KEYS.update({"server.max-steps": 100_000, "attack.max-steps": 15_000, "attack.max-aux-users": 20_000})
LATER_KEYS["attack.inversion-target-users"] = 20_000  # issue #38: binds on no staged dataset either
# Thread counts (issue #14): points saved before were computed with torch's default threads; "auto" is the new default.
LATER_KEYS.update({"run.threads": 0, "federation.client-threads": 0})
# On-device inference (issue #11 item 5, server.on-device, default true): the points of the paper reproductions
# (ome, dpnr, cape, coavoux) predate it, i.e. were computed without it; their configs set it false (the papers
# evaluate on the server only). The frontier points were computed with it on and keep their keys.
LATER_KEYS["server.on-device"] = False
# The shuffler (issue #24, federation.shuffle): every saved point was computed without it.
LATER_KEYS["federation.shuffle"] = False
# Phase A through SecAgg+ (issue #24): every saved point was computed without it.
LATER_KEYS.update({"train.secagg": False, "train.dp-mode": "server", "client.secagg-min-clients": 2})
# Secure aggregation of Phase B (issue #24, server.aggregate): every saved point sent per-user uploads.
LATER_KEYS.update({"server.aggregate": "uploads", "server.secagg-threshold": 0, "client.secagg-epsilon": 1.0,
                   "client.secagg-delta": 1e-5})
# Extraction precision (issue #14): every saved point was extracted in float32.
LATER_KEYS["extractor.precision"] = "float32"
# Keys whose default became "auto" after points were saved: the auto value is keyed as the value saved points used.
# extractor.batch-size 0 (auto) = 64 on CPU, where every saved point was extracted; batch size is not part of the
# feature cache identity (like extractor.device, which the key ignores), so auto and 64 read the same features.
AUTO_KEYS: dict[str, tuple[Any, Any]] = {"extractor.batch-size": (0, 64)}
# Server learners (issue #23): every saved point's server trained the MLP (server.learner = mlp reproduces it
# exactly). Its attacker predates attack.learner: saved attack figures are those of the weaker attacker before
# issue #23 (no moment learners, the prior answered when not significant); docs/results/README.md says so until
# the points are regenerated (issue #23 item 4).
LATER_KEYS.update({"server.learner": "mlp", "attack.learner": "auto"})
# The clients' choice of the on-device model (server.select-on): every saved point was chosen on uploads.
LATER_KEYS["server.select-on"] = "uploads"
# auto's candidates (issue #38, server.auto-candidates): every saved point's auto cross-validated the MLP too. A point
# whose server does not run auto is keyed without it (`_keyed`): the list cannot change its result.
LATER_KEYS["server.auto-candidates"] = "centroid,lda,linear,mlp"
AUTO_ONLY_KEYS = ("server.auto-candidates",)
# The new attacker (issue #10: attack.families, folds, extra, ...) and the projection keys (issue #11) are NOT listed:
# the points saved under docs/results were attacked by the old attacker, so they no longer match and rerun.

# What the points of one Flower simulation must share (run_points' rule).
SIMULATION_KEYS = ("federation.num-clients", "federation.client-cpus", "federation.client-gpus",
                   "federation.ray-address", "federation.client-threads", "run.client-seed")


def point_key(cfg: ExperimentConfig) -> str:
    """A stable 16-hex-digit key of everything in the config that can change the result."""
    # the client seed enters as its fingerprint (issue #22), so a saved point's config (which holds only the
    # fingerprint) gives back its key (`saved_point_key`)
    return _hash(published(_keyed(cfg)))


def _keyed(cfg: ExperimentConfig) -> dict[str, Any]:
    """`keyed_flat` with the project's key lists; auto's settings only where the server runs auto."""
    drop = IGNORED_KEYS + (AUTO_ONLY_KEYS if cfg.server.learner != "auto" else ())
    return keyed_flat(cfg, drop=drop, later=LATER_KEYS, auto=AUTO_KEYS)


def saved_point_key(saved: dict[str, Any]) -> str:
    """The key of a saved point from its saved (published) config: keys added since at their LATER_KEYS values,
    the client seed's fingerprint in place of the seed."""
    fp = saved.get(SEED_FINGERPRINT_KEY)
    cfg = ExperimentConfig.from_flat({**LATER_KEYS, **{k: v for k, v in saved.items() if k != SEED_FINGERPRINT_KEY}})
    flat = _keyed(cfg)
    return _hash({**flat, **({SEED_FINGERPRINT_KEY: fp} if fp is not None else {})})


def _hash(flat: dict[str, Any]) -> str:
    blob = json.dumps(sorted((k, repr(v)) for k, v in flat.items()), separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _write_atomic(path: Path, text: str) -> None:
    """Atomic (a killed sweep never leaves half a file behind); a failure is one line naming the file
    (`fl_privtext.rundir.write_atomic`)."""
    make_dir(path.parent, "directory")
    write_atomic(path, text)


class Store:
    """Per-point JSON results in one folder, named by `point_key`."""

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
        p = self.path(cfg)
        _write_atomic(p, json.dumps(result, indent=1, sort_keys=False) + "\n")
        return p


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """Drop the accountant's per-user table (one entry per user: ~1 MB for AG news); its maxima stay."""
    per_user = result.get("privacy", {}).get("composition", {}).get("per_user")
    if isinstance(per_user, dict) and isinstance(per_user.get("per_user"), dict):
        per_user["per_user"] = f"dropped ({len(per_user['per_user'])} users); see max_epsilon*"
    return result


def slim(result: dict[str, Any], cfg: ExperimentConfig) -> dict[str, Any]:
    """The saved form of a point: aggregate() output minus machine-specific paths, plus its key."""
    out = dict(result)
    out["config"] = {k: ("" if k in ("data.root", "extractor.cache-dir") else v)
                     for k, v in published(result["config"]).items()}  # no client seed (issue #22)
    out["point_key"] = point_key(cfg)
    return compact(out)


def baseline_of(cfg: ExperimentConfig) -> ExperimentConfig | None:
    """The no-privacy counterpart of a point (what ``fl-privtext run`` computes as ``baseline_no_privacy``):
    mechanism ``none``, no projection, an uncapped client ledger and the default epsilon, so that every epsilon of a
    grid shares ONE baseline point. None for a point that is itself ``none`` or has ``run.baseline = false``.
    It runs in a simulation of its own (`simulation_group`): its clients never serve a private point."""
    if not cfg.run.baseline or cfg.privacy.mechanism == "none":
        return None
    clear = dataclasses.replace(cfg.privacy, mechanism="none", epsilon=type(cfg.privacy)().epsilon, mu=0.0,
                                label_epsilon=0.0, projection="none", proj_dim=0)
    return dataclasses.replace(cfg, privacy=clear, client=dataclasses.replace(cfg.client, max_epsilon=math.inf))


def with_baselines(points: Sequence[ExperimentConfig]) -> list[ExperimentConfig]:
    """The grid's points followed by their distinct no-privacy points (`baseline_of`)."""
    keys = {point_key(c) for c in points}
    extra: dict[str, ExperimentConfig] = {}
    for cfg in points:
        base = baseline_of(cfg)
        if base is not None and point_key(base) not in keys:
            extra.setdefault(point_key(base), base)
    return [*points, *extra.values()]


def simulation_group(cfg: ExperimentConfig) -> tuple[Any, ...]:
    """Points that can share one Flower simulation: same federation settings and the same clients' [client]
    policy. The policy is the clients' own (fl_privtext.client.policy): two points whose requests look the same to
    a client (same privacy and rounds) but whose [client] sections differ could not be told apart by it, so each
    [client] section gets its own simulation. Each [server] section too, though that does not keep its on-device
    answers apart: a client answers on-device evaluation once per (point, seed, stage) whatever model it is sent
    (fl_privtext.client.guard), and its state (the ledger and stored answers) is shared by the sweep's simulations,
    so a point that differs only in the server's settings gets the first model's answer back; the answer names the
    model it is about and the server leaves it out of its estimate (`fl_privtext.ondevice.stale_replies`: the
    private on-device figure of such a point is unavailable, the referee's exact figure stands). And each
    shard: a client holds one set of users (fl_privtext.client.policy.user_keys: the data, the partition into
    clients, run.seed), so points over other data or another partition run in their own simulation.
    And a no-privacy point (clean uploads, `fl_privtext.pipeline.runner.releases_in_clear`) never shares its
    clients with a private point: the private points' server could ask them for the clean data."""
    from fl_privtext.pipeline.runner import releases_in_clear  # torch, flwr, ray (the simulation)

    flat = cfg.to_flat()
    return (*(flat.get(k) for k in SIMULATION_KEYS), ("releases-in-clear", releases_in_clear(cfg)),
            *sorted((k, v) for k, v in flat.items() if k.startswith(("client.", "server."))),
            *sorted(user_keys(flat).items()))


def by_traffic(points: Sequence[ExperimentConfig]) -> list[ExperimentConfig]:
    """The points in their order, those that share one traffic (`fl_privtext.traffic.traffic_key`: they differ only
    in ``attack.*``) moved next to the first of them: the simulation collects such a traffic once and holds it
    until its last point is computed (`fl_privtext.pipeline.federated.SharedTraffic`), so that it holds one at a
    time."""
    first: dict[str, int] = {}
    keys = [first.setdefault(traffic_key(c.to_flat()), i) for i, c in enumerate(points)]
    return [points[i] for i in sorted(range(len(points)), key=lambda i: (keys[i], i))]


def headline(res: dict[str, Any]) -> str:
    """A point's progress line: the per-upload accuracy (the server classifying noisy uploads) and beside it the
    on-device EXACT accuracy with its 95% interval (the referee's figure the research questions use, issue #36:
    the per-upload one alone sat at the majority at every private point of the quickstart), then each attack."""
    u = res["utility"]
    s = f"per-upload acc {u['accuracy']:.4f}+-{u['accuracy_std']:.4f}" if u.get("available") else "no task"
    ex = ((u.get("on_device") or {}).get("exact") or {}) if u.get("available") else {}
    if ex.get("available"):
        band = (f" [{ex['ci_low']:.4f}, {ex['ci_high']:.4f}]"
                if isinstance(ex.get("ci_low"), float) and isinstance(ex.get("ci_high"), float) else "")
        s += f" | on-device exact {ex['accuracy']:.4f}{band}"
    for name, a in res.get("attacks", {}).items():
        s += f" | {name} {a.get('f1', a['accuracy']):.3f}"
    return s


def run_stored(points: Sequence[ExperimentConfig], store: Store, *, log: Callable[[str], None] = print,
              runner: Callable[..., Any] | None = None, progress: bool = False,
              describe: Callable[[ExperimentConfig], str] = point_key,
              state_dir: str | Path | None = None,
              beside: Callable[[Sequence[ExperimentConfig]], bool] | None = None) -> dict[str, Any]:
    """Run every point not yet in ``store``: one ``run_points`` call per simulation group (usually one), each
    point saved as soon as it finishes. Returns ``{"points", "ran", "wall_s"}``.

    ``runner`` defaults to `fl_privtext.pipeline.runner.run_points` (tests may pass a fake with the same
    ``(points, on_result=...)`` signature); ``progress`` shows a bar over all points; ``state_dir`` is the clients'
    state (per-user ledgers) every group's simulation shares. ``beside(group)``: whether a group runs in a thread
    beside the others rather than in turn (default: with the default runner, the no-privacy references that the
    referee computes without clients, see below; with a caller's runner, none)."""
    unique: dict[str, ExperimentConfig] = {}
    for cfg in points:
        unique.setdefault(point_key(cfg), cfg)
    todo = [cfg for cfg in unique.values() if not store.has(cfg)]
    log(f"[sweep] {len(unique)} points, {len(unique) - len(todo)} already done, {len(todo)} to run")
    t_start = time.perf_counter()
    if not todo:
        return {"points": len(unique), "ran": 0, "wall_s": 0.0}
    if runner is None:
        for cfg in todo:  # the points to run, before torch, Flower and Ray are imported
            check_point(cfg)
        # torch, flwr, ray (the simulation)
        from fl_privtext.pipeline.runner import plain_blocker, releases_in_clear, run_points

        runner = functools.partial(referee_or_federation, federated=functools.partial(run_points,
                                                                                       state_dir=state_dir))

        def referee_beside(group: Sequence[ExperimentConfig]) -> bool:
            # A group of no-privacy references that the referee computes without clients (`referee_or_federation`)
            # runs in a thread beside the federation's groups, not after them (issue #38: ~17 s of the quickstart's
            # ~130 s, alone, while the federation's driver mostly waits for its actors' uploads), when every point
            # computes with one driver thread (`driver_threads`; the usual case on a machine the actors fill).
            # Why one only: torch's counts are per thread but the BLAS pools one per process
            # (`fl_privtext.threads.limited`), so blocks of other counts side by side would run each other's BLAS
            # calls at another count than alone; at one thread the results are those of the serial order.
            return all(releases_in_clear(c) and not plain_blocker(c) and driver_threads(c.run, c.federation) == 1
                       for c in group)

        beside = beside or referee_beside
    groups: dict[tuple[Any, ...], list[ExperimentConfig]] = {}
    for cfg in todo:
        groups.setdefault(simulation_group(cfg), []).append(cfg)
    groups = {k: by_traffic(g) for k, g in groups.items()}
    side = [g for g in groups.values() if beside is not None and beside(g)]
    if len(groups) > 1:
        log(f"[sweep] {len(groups)} groups of points that share no clients, one Flower simulation each, except a "
            "group of no-privacy references, which the referee's plain loop computes without clients (points differ "
            f"in {', '.join(SIMULATION_KEYS)}, [client] / [server], the shard (data, partition, run.seed), or are "
            "no-privacy points, which never share clients with private ones)")
    bar = tqdm(total=len(unique), initial=len(unique) - len(todo), desc="sweep points", unit="point",
               disable=None if progress else True,  # None: no bar when stderr is not a terminal (a log file)
               dynamic_ncols=True, file=sys.stderr)
    done = [0]
    last = [time.perf_counter()]
    saving = threading.Lock()  # results come from the federation's worker thread and the side thread

    def on_result_of(group: list[ExperimentConfig]) -> Callable[[int, dict[str, Any]], None]:
        def on_result(i: int, point: dict[str, Any]) -> None:
            with saving:
                now = time.perf_counter()
                cfg = group[i]
                res = slim(aggregate(point, total_s=now - last[0]), cfg)
                if "computed_by" in point:  # a no-privacy point the referee computed (`referee_or_federation`)
                    res["computed_by"] = point["computed_by"]
                last[0] = now
                store.put(cfg, res)
                done[0] += 1
                bar.update()
                msg = f"[sweep] {done[0]}/{len(todo)} {describe(cfg)} -> {headline(res)} " \
                      f"({res['timing']['total_s']:.1f} s)"
                if not bar.disable:
                    bar.write(msg, file=sys.stderr)
                else:
                    log(msg)

        return on_result

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fl-privtext-reference")
    try:
        # the references run beside the federations' Ray starts: BLAS single-threaded (threads.limited, fork hazard)
        running = [pool.submit(fork_safe(runner), g, on_result=on_result_of(g)) for g in side]
        for group in groups.values():
            if not any(group is g for g in side):
                runner(group, on_result=on_result_of(group))
        for f in running:
            f.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C: the references not yet started never start
        bar.close()
    wall = time.perf_counter() - t_start
    log(f"[sweep] ran {len(todo)} points in {wall:.0f} s")
    return {"points": len(unique), "ran": len(todo), "wall_s": wall}


def referee_or_federation(group: Sequence[ExperimentConfig], *, federated: Callable[..., Any],
                          on_result: Callable[[int, dict[str, Any]], None]) -> None:
    """Run one simulation group. A group of no-privacy points (the grid's references, `baseline_of`) that the
    referee's plain loop computes exactly (`fl_privtext.pipeline.runner.plain_blocker` empty: the Flower path
    equals it, tests/federation/test_simulation.py) is computed there, once per point, without clients, Ray or a
    federation: no client ever serves it, and no simulation is started for it (issue #38: it was the slowest point
    of the quickstart, a federation of its own). Every other group runs through ``federated`` (`run_points`)."""
    # torch, flwr, ray (the simulation)
    from fl_privtext.pipeline.runner import no_privacy_reference, plain_blocker, releases_in_clear

    if not all(releases_in_clear(c) and not plain_blocker(c) for c in group):
        federated(group, on_result=on_result)
        return
    for i, cfg in enumerate(group):
        point, source = no_privacy_reference(cfg)  # the plain loop: plain_blocker is empty
        on_result(i, {**point, "computed_by": source})


# ---- sweep files --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file: fixed keys, a grid (key -> values, in file order), an optional base file and output."""

    fixed: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    base: str = ""
    output: str = ""
    source: str = ""

    @classmethod
    def load(cls, path: str | Path) -> SweepSpec:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"Sweep file {p} does not exist.")
        try:
            tree = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"Sweep file {p} is not valid TOML: {exc}.") from None
        return cls.from_dict(tree, root=p.parent, source=str(p))

    @classmethod
    def from_dict(cls, tree: dict[str, Any], *, root: Path = Path("."), source: str = "") -> SweepSpec:
        tree = dict(tree)
        meta = tree.pop("sweep", {}) or {}
        unknown = set(meta) - {"base", "output"}
        if unknown:
            raise ValueError(f"Unknown key(s) {', '.join(sorted(unknown))} in [sweep]; valid: base, output.")
        grid = flatten(tree.pop("grid", {}) or {})
        fixed = flatten(tree.pop("fixed", {}) or {})
        fixed = {**flatten(tree), **fixed}  # top-level experiment tables are fixed keys too
        if not grid:
            raise ValueError("A sweep file needs a [grid] table of keys -> lists of values, e.g. "
                             "[grid] \"privacy.epsilon\" = [0.5, 1, 2].")
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"[grid] {key} must be a non-empty list of values; got {values!r}.")
            if key in fixed:
                raise ValueError(f"{key} is both a fixed key and a grid key of the sweep.")
        base = str(meta.get("base", ""))
        if base and not Path(base).is_absolute():
            base = str(root / base)
        return cls(fixed=fixed, grid=grid, base=base, output=str(meta.get("output", "")), source=source)

    def points(self, sets: dict[str, Any] | None = None) -> list[ExperimentConfig]:
        """Every point of the grid (Cartesian product, last key fastest), validated before anything runs;
        ``sets`` (the command line's --set) override the fixed keys."""
        start = ExperimentConfig.load(self.base or None, {**self.fixed, **(sets or {})})
        out = []
        for combo in itertools.product(*self.grid.values()):
            values = dict(zip(self.grid, combo))
            try:
                out.append(ExperimentConfig.from_flat(values, start))
            except ValueError as exc:
                raise ValueError(f"Grid point {values}: {exc}") from None
        return out

    def label(self, cfg: ExperimentConfig, *, skip: Iterable[str] = ()) -> str:
        """The point's grid values (``epsilon=2 mechanism=duchi``), as the progress lines and ``--list`` print them.
        A no-privacy point (mechanism ``none``) shows ``epsilon=inf``: it carries the default epsilon, which its
        mechanism ignores, and ``epsilon=1`` would read as a private point."""
        flat = cfg.to_flat()
        if cfg.privacy.mechanism == "none":
            flat["privacy.epsilon"] = math.inf
        return " ".join(f"{k.split('.')[-1]}={_short(flat.get(k))}" for k in self.grid if k not in set(skip))


def _short(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# ---- tables ------------------------------------------------------------------------------------------------------


def _eps(x: Any) -> Any:
    return "inf" if x == "inf" or (isinstance(x, float) and math.isinf(x)) else x


def row_of(res: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table row (flat, CSV-ready) from a results.json-shaped dict."""
    u, p = res["utility"], res["privacy"]
    per_user = p.get("composition", {}).get("per_user", {}) if isinstance(p.get("composition"), dict) else {}
    row: dict[str, Any] = dict(extra or {})
    if "privacy.mechanism" not in row:  # a grid over mechanisms has the column already
        row["mechanism"] = p["mechanism"]
    row.update({
        "epsilon_nominal": _eps(p["epsilon_nominal"]),
        "epsilon_worst_case": _eps(p["epsilon_worst_case"]),
        "epsilon_user_total": _eps(per_user.get("max_epsilon_total")) if per_user else None,
        "accuracy": u.get("accuracy"), "accuracy_std": u.get("accuracy_std"), "macro_f1": u.get("macro_f1"),
        "majority_baseline": u.get("majority_baseline"),
    })
    row["accuracy_ci_low"], row["accuracy_ci_high"] = seed_band(u.get("per_seed") or [])
    od = u.get("on_device") or {}
    row["on_device_accuracy"] = od.get("accuracy") if od.get("available") else None
    row["on_device_ci_low"], row["on_device_ci_high"] = seed_band(od.get("per_seed") or []) if od.get("available") \
        else (None, None)
    # issue #37: the referee's exact figure (simulation only) and its interval over test users (and seeds)
    ex = od.get("exact") or {}
    row["on_device_exact"] = ex.get("accuracy") if ex.get("available") else None
    row["on_device_exact_ci_low"] = ex.get("ci_low") if ex.get("available") else None
    row["on_device_exact_ci_high"] = ex.get("ci_high") if ex.get("available") else None
    for name, a in res.get("attacks", {}).items():
        row[f"attack.{name}.accuracy"] = a.get("accuracy")
        # issue #37: its 95% interval over target users (and seeds), and the advantage over the prior with its own
        row[f"attack.{name}.ci_low"], row[f"attack.{name}.ci_high"] = a.get("ci_low"), a.get("ci_high")
        row[f"attack.{name}.advantage"] = a.get("advantage")
        row[f"attack.{name}.advantage_ci_low"] = a.get("advantage_ci_low")
        row[f"attack.{name}.advantage_ci_high"] = a.get("advantage_ci_high")
        row[f"attack.{name}.majority"] = a.get("majority_baseline")
        # the attacker's prior on the targets, the one baseline its accuracy is read against (issue #36)
        row[f"attack.{name}.prior"] = prior_baseline(a)
        if "f1" in a:
            row[f"attack.{name}.f1"] = a["f1"]
        row[f"attack.{name}.empirical_privacy"] = a.get("empirical_privacy")
    row["total_s"] = res.get("timing", {}).get("total_s")
    return row


def seed_band(per_seed: Sequence[dict[str, Any]], level: float = 0.95) -> tuple[float | None, float | None]:
    """A ``level`` confidence band of the mean accuracy over seeds: mean +- t_{n-1} * sd / sqrt(n) (Student t,
    sd with ddof 1) for n >= 2 seeds; with one seed, that seed's own ``ci95`` when it has one (the randomized-
    response noise of on-device counts), else (None, None). Clipped to [0, 1]."""
    accs = [float(s["accuracy"]) for s in per_seed if s.get("accuracy") is not None]
    if len(accs) >= 2:  # the seeds' part of fl_privtext.bootstrap's rule, with no users' part
        return seeds_interval(accs, accs, accs, level)
    if len(accs) == 1 and isinstance(per_seed[0].get("ci95"), (list, tuple)) and level == 0.95:
        return clip_interval(*per_seed[0]["ci95"])  # saved points may predate the clip at the source
    return None, None


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def _acc(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def short_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The figures a reader compares, one row per point, formatted for display (issue #36; the full table, 26+
    columns, stays in ``rows`` and table.csv): the mechanism and any other grid key, the TRUE worst-case epsilon
    (3 significant digits), the on-device EXACT accuracy with its 95% interval, the per-upload accuracy, the
    majority, and each attack's accuracy with its prior (the attacker's baseline) in brackets."""
    out = []
    for r in rows:
        keys = list(r)
        stop = next((i for i, k in enumerate(keys) if k in ("mechanism", "epsilon_nominal")), 0)
        grid = [k for k in keys[:stop] if k not in ("point", "privacy.mechanism", "privacy.epsilon")]
        s: dict[str, str] = {"mechanism": str(r.get("privacy.mechanism", r.get("mechanism")))}
        s.update({k.split(".")[-1]: _cell(r[k]) for k in grid})
        s["epsilon (true worst case)"] = fmt_epsilon(r.get("epsilon_worst_case"))
        ex = r.get("on_device_exact")
        band = (f" [{r['on_device_exact_ci_low']:.3f}, {r['on_device_exact_ci_high']:.3f}]"
                if isinstance(r.get("on_device_exact_ci_low"), float)
                and isinstance(r.get("on_device_exact_ci_high"), float) else "")
        s["on-device exact [95% CI]"] = _acc(ex) + (band if ex is not None else "")
        s["per-upload accuracy"] = _acc(r.get("accuracy"))
        s["majority"] = _acc(r.get("majority_baseline"))
        for key in keys:
            if key.startswith("attack.") and key.endswith(".accuracy"):
                name = key[len("attack."):-len(".accuracy")]
                s[f"attack {name} (prior)"] = f"{_acc(r[key])} ({_acc(r.get(f'attack.{name}.prior'))})"
        out.append(s)
    return out


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{c: ("" if r.get(c) is None else r.get(c)) for c in cols} for r in rows])
    return buf.getvalue()


def write_outputs(spec: SweepSpec, points: Sequence[ExperimentConfig], store: Store, out: Path) -> dict[str, Any]:
    """table.csv, table.md and the frontier plots from every finished point (in grid order)."""
    rows, plot_rows, missing = [], [], 0
    grid_keys = {point_key(c) for c in points}
    for cfg in with_baselines(points):
        res = store.get(cfg)
        if res is None:
            missing += 1
            continue
        flat = cfg.to_flat()
        extra = {"point": point_key(cfg), **{k: flat.get(k) for k in spec.grid}}
        if point_key(cfg) not in grid_keys:  # an added no-privacy point: its epsilon is infinite, not the default's
            extra.update({k: "none" if k == "privacy.mechanism" else "inf" for k in extra
                          if k in ("privacy.mechanism", "privacy.epsilon")})
        rows.append(row_of(res, extra))
        base = baseline_of(cfg)
        base_res = store.get(base) if base is not None else (res if cfg.privacy.mechanism == "none" else None)
        base_od = ((base_res or {}).get("utility") or {}).get("on_device") or {}
        rows[-1]["no_privacy_accuracy"] = ((base_res or {}).get("utility") or {}).get("accuracy")
        rows[-1]["no_privacy_on_device_accuracy"] = base_od.get("accuracy") if base_od.get("available") else None
        base_ex = base_od.get("exact") or {}  # public contract (issue #36): the referee's figure without privacy
        rows[-1]["no_privacy_on_device_exact"] = base_ex.get("accuracy") if base_ex.get("available") else None
        single = tuple(k for k, v in spec.grid.items() if len(v) == 1)  # one value: names no series
        plot_rows.append({**rows[-1], "series": spec.label(cfg, skip=("privacy.epsilon", *single)),
                          # the attack's dashed line: its prior (report.prior_baseline), the one baseline it is read against
                          "attacks": {n: {"accuracy": a.get("accuracy"), "majority_baseline": prior_baseline(a)}
                                      for n, a in res.get("attacks", {}).items()}})
    _write_atomic(out / "table.csv", to_csv(rows))
    md = markdown(rows)
    total = len(with_baselines(points))
    keep_going(out / "table.md", lambda: _write_atomic(
        out / "table.md", f"# sweep {spec.source}\n\n{len(rows)} of {total} points finished.\n\n{md}\n\n"
                          "epsilon_worst_case is the TRUE worst-case epsilon per upload; the frontier plots use it on "
                          "their x axis.\n"))
    figures: list[str] = []
    note = ""
    if rows and plots.available():
        try:
            figures = [str(p) for p in plots.frontier(plot_rows, out)]
        except Exception as exc:  # noqa: BLE001 - the table is written; a plot must not lose it
            note = "no frontier plots: " + report_unwritten(getattr(exc, "filename", None) or out / plots.FRONTIER_TASK,
                                                            exc)
    elif rows:
        note = f"no frontier plots: {plots.MISSING}"
    return {"rows": rows, "markdown": md, "missing": missing, "plots": figures, "note": note}


def execute(spec: SweepSpec, *, sets: dict[str, Any] | None = None, output: str | Path | None = None,
            log: Callable[[str], None] = print, progress: bool = False,
            client_state: str | Path | None = None) -> dict[str, Any]:
    """Run the sweep's missing points (and their no-privacy points), then write table.csv, table.md and the plots
    to the output directory (``output``, else the file's ``[sweep] output``, else sweeps/<file stem>). Returns
    `write_outputs`' summary plus ``out`` (the directory). Shared by ``fl-privtext sweep`` and
    ``fl_privtext.run_sweep``. ``client_state``: the clients' state directory (per-user ledgers over every point),
    kept across sweeps; default ``<output>/clients``."""
    stem = Path(spec.source).stem if spec.source else "sweep"
    out = Path(output or spec.output or Path("sweeps") / stem)
    points = spec.points({**(sets or {}), "run.progress": "false"})  # one bar over points; no nested bars
    store = Store(out / "points")

    make_dir(out, "sweep output directory")
    if spec.source:
        _write_atomic(out / "sweep.toml", Path(spec.source).read_text())
    try:
        run_stored(with_baselines(points), store, log=log, progress=progress, describe=spec.label,
                  state_dir=client_state if client_state is not None else out / "clients")
    except KeyboardInterrupt:
        done = sum(store.has(c) for c in points)
        raise KeyboardInterrupt(f"{done} of {len(points)} points are finished and kept in {store.folder}; "
                                "rerun the same command to run the others.") from None
    return {**write_outputs(spec, points, store, out), "out": out}


def sweep_from_cli(path: str, *, sets: dict[str, str], output: str | None, quiet: bool, list_only: bool,
                   client_state: str | None = None) -> None:
    spec = SweepSpec.load(path)
    if list_only:
        out = Path(output or spec.output or Path("sweeps") / Path(path).stem)
        store = Store(out / "points")
        for cfg in with_baselines(spec.points({**sets, "run.progress": "false"})):
            print(f"{'done' if store.has(cfg) else 'todo'} {point_key(cfg)} {spec.label(cfg)}")
        return
    log = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    summary = execute(spec, sets=sets, output=output, log=log, progress=not quiet, client_state=client_state)
    out = summary["out"]
    print(summary["markdown"])
    extra = f"; {summary['note']}" if summary["note"] else ""
    figs = ", ".join(Path(f).name for f in summary["plots"])
    print(f"\nwrote {out}/table.csv, table.md{', ' + figs if figs else ''}{extra}", file=sys.stderr)


# ---- compare -----------------------------------------------------------------------------------------------------


def load_run(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    file = p / "results.json" if p.is_dir() else p
    if not file.is_file():
        raise FileNotFoundError(f"{p} has no results.json (not a finished run directory).")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not valid JSON ({exc}).") from None


def compare(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """One column per finished run: the metrics of `row_of`, the no-privacy baseline, the federation, and every
    config key whose value differs between the runs. Returns the rows (metric -> value per run)."""
    runs = [load_run(p) for p in paths]
    names = [Path(p).name if Path(p).is_dir() else Path(p).parent.name for p in paths]
    if len(set(names)) < len(names):
        names = [str(p) for p in paths]
    cols = []
    for res in runs:
        col = row_of(res, {"dataset": res.get("dataset", {}).get("name")})
        base = res.get("baseline_no_privacy") or {}
        col["no_privacy_accuracy"] = (base.get("utility") or {}).get("accuracy")
        fed = res.get("federation", {})
        for k in ("num_clients", "num_users", "rounds", "seeds", "uploads_observed"):
            col[f"federation.{k}"] = fed.get(k)
        col["randomness"] = res.get("privacy", {}).get("randomness")
        cols.append(col)
    configs = [r.get("config", {}) for r in runs]
    keys = sorted({k for c in configs for k in c} - set(IGNORED_KEYS))
    differ = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    metrics = list(dict.fromkeys(k for c in cols for k in c))
    rows = [{"": m, **{n: c.get(m) for n, c in zip(names, cols)}} for m in metrics]
    rows += [{"": f"config {k}", **{n: c.get(k) for n, c in zip(names, configs)}} for k in differ]
    return rows


def compare_from_cli(paths: Sequence[str], *, csv_path: str | None) -> None:
    rows = compare(paths)
    print(markdown(rows))
    if csv_path:
        _write_atomic(Path(csv_path), to_csv(rows))
        print(f"\nwrote {csv_path}", file=sys.stderr)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: ``rows`` is the table (one dict per point, flat dotted keys such as ``privacy.mechanism``
    and ``attack.gender.accuracy``; the no-privacy point last), as written to ``output_dir/table.csv``; ``plots``: the
    frontier PNGs. ``to_pandas()`` gives the same table as a DataFrame when pandas is installed."""

    rows: list[dict[str, Any]]
    output_dir: Path
    plots: tuple[Path, ...] = ()
    missing: int = 0

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame (one row per point, the columns of table.csv)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("SweepResult.to_pandas() needs pandas (pip install pandas); "
                              "SweepResult.rows holds the same table as a list of dicts.") from None
        cols = list(dict.fromkeys(k for r in self.rows for k in r))  # table.csv's order: first appearance
        return pd.DataFrame([{c: r.get(c) for c in cols} for r in self.rows], columns=cols)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        return f"fl_privtext SweepResult: {self.output_dir} ({len(self.rows)} points)\n" + markdown(self.rows)

    def _repr_markdown_(self) -> str:
        """Jupyter's display: the figures that matter (`fl_privtext.sweep.short_rows`), not the whole table, and the
        plots by name (a relative link breaks when the notebook is read from another folder; show them with
        ``IPython.display.Image(filename=...)``, which embeds them in the saved notebook)."""
        cols = len(dict.fromkeys(k for r in self.rows for k in r))
        lines = [f"**fl_privtext sweep** in `{self.output_dir}` ({len(self.rows)} points)", "",
                 markdown(short_rows(self.rows)), "",
                 f"All {cols} columns: `.rows`, `.to_pandas()`, `{self.output_dir / 'table.csv'}`."
                 + (f" Plots: {', '.join(f'`{p.name}`' for p in self.plots)} (`.plots`)." if self.plots else "")]
        return "\n".join(lines)


def run_sweep(spec: dict[str, Any] | str | Path, *, output: str | Path | None = None,
              sets: dict[str, Any] | None = None, progress: bool = False, echo: bool = False) -> SweepResult:
    """Run a sweep (as ``fl-privtext sweep``; resumable: finished points are read back) and return its table.

    ``spec``: a sweep TOML path or the same content as a dict (``{"fixed": {...}, "grid": {"privacy.epsilon":
    [1, 2]}}``); ``output``: the sweep directory (default: ``[sweep] output``, else sweeps/<file stem>);
    ``sets``: overrides of fixed keys; ``echo``: print the per-point lines."""
    if isinstance(spec, dict):
        parsed = SweepSpec.from_dict(spec)
    elif isinstance(spec, (str, Path)):
        parsed = SweepSpec.load(spec)
    else:
        raise ValueError(f"spec must be a dict or a sweep TOML file path; got {type(spec).__name__}.")  # noqa: TRY004
    summary = execute(parsed, sets=sets, output=output, progress=progress,
                      log=(lambda s: print(s, flush=True)) if echo else (lambda s: None))
    return SweepResult(rows=summary["rows"], output_dir=Path(summary["out"]),
                       plots=tuple(Path(p) for p in summary["plots"]), missing=summary["missing"])
