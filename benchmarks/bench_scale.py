"""A synthetic population end to end through Flower: wall time, peak memory, and both per stage.

    python benchmarks/bench_scale.py --users 1000000                 # the issue's target: <= 10 min, <= 8 GB
    python benchmarks/bench_scale.py --users 10000 --clients 100 --json scale_10k.json
    python benchmarks/bench_scale.py --users 1000000 --plain          # also the plain loop: Flower/plain ratio

``--json F`` writes ``{"users": N, "wall_s": x, "peak_rss_gb": y, "stages": {name: {"seconds", "cpu_s",
"peak_rss_gb", "peak_pss_gb", "us_per_user"}}, ...}`` (issue #38's contract; ``us_per_user``: microseconds per user);
``peak_at`` places the overall peak: seconds from the start, the stage running then (or the two it fell between)
and every process's RSS / PSS at that sample. ``--timeline F`` writes every sample (CSV) to plot it (the tree's, the driver's and the client actors' RSS).

The job: `data.name = synthetic` with `data.options.users = N` (several reviews per user), GloVe features, the
default mechanism (laplace-l1, epsilon 1), ``--clients`` Flower virtual clients (Ray backend), the default server
and the default attacks, through `fl_privtext.pipeline.runner.run_experiment` (results.json and summary.md are
written to ``--output``). Only ``run.baseline`` is off unless ``--baseline``: the no-privacy baseline would compute
every user a second time (the referee's plain loop, outside the federation).

Stages (in the order they run): generate (the synthetic users, written to the cache and mapped), extract (user
roles and client shards, then GloVe features into the cache), startup (Ray, actors, the clients' warm-up), upload
rounds, the eavesdropper's record (checked against what the server received), server training, the on-device
round (the model to the test clients, their answers, the referee's exact figure), attacks, and the rest (report,
Flower/Ray shutdown). The first two run in a fresh cache
directory (``--cache-dir``, default a new temporary one) so that they are measured, not read back.

``--plain`` then runs the same point as the plain in-process loop (`fl_privtext.pipeline.run_plain`: same clients,
server and attacks, no Flower, no Ray) on the same cached features, and prints the Flower/plain ratio of the two
timed jobs (Flower: ``run_experiment``, Ray start to shutdown; plain: ``run_plain``) and whether their results are
identical (both use the reproducible client seed, so they must be).

Memory: a sampler thread reads, every 0.2 s, the resident set size (VmRSS) of this process and of every process
below it (Ray's GCS, raylet and worker actors) and sums them; "peak RSS" is the largest sum seen, overall and per
stage. Pages shared between processes (the memory-mapped features and dataset, libraries) are counted once per
process, so the sum over-states the machine's use; PSS (shared pages split between their users) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

TICKS = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, utime + stime in clock ticks), from one read of its /proc stat."""
    procs: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        procs[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return procs


def _tree(root: int, procs: dict[int, tuple[int, int]]) -> list[int]:
    tree: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        tree.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


def _kib(pid: int, path: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _name(pid: int) -> str:
    """A process's command line, shortened (Ray names its workers ``ray::ClientAppActor...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in args if a)
    return text[:80]


def _where(t: float, spans: dict[str, list[tuple[float, float]]]) -> str:
    """The stage running at time ``t`` (the innermost, shortest span), or "between A and B"."""
    inside = [(b - a, name) for name, ss in spans.items() for a, b in ss if a <= t <= b]
    if inside:
        return min(inside)[1]
    before = max(((b, name) for name, ss in spans.items() for _, b in ss if b < t), default=None)
    after = min(((a, name) for name, ss in spans.items() for a, _ in ss if a > t), default=None)
    if before is None:
        return f"before {after[1]}" if after else "?"
    if after is None:
        return f"after {before[1]} (+{t - before[0]:.1f} s)"
    return f"between {before[1]} (+{t - before[0]:.1f} s) and {after[1]} ({after[0] - t:.1f} s later)"


class MemorySampler:
    """Sums RSS and PSS over this process tree every ``interval`` s, and the CPU time the tree has used so far
    (each process's last seen utime + stime, kept after it exits); ``samples`` holds (time, rss_kib, pss_kib,
    cpu_s)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval, self.samples = interval, []  # type: ignore[var-annotated]
        # RAM held by shared memory (Ray's object store lives in /dev/shm, tmpfs): the growth of /dev/shm's used
        # bytes since the sampler started, per sample (KiB). The store's pages count in a process's RSS only while
        # it maps them (the driver and actors drop theirs after each reply, `memory.drop_object_store_pages`), so
        # RSS alone can miss them; machine-wide: exact when nothing else uses /dev/shm meanwhile
        self.shm: list[int] = []
        self._shm0 = _shm_used_kib()
        self.per_process: list[dict[int, tuple[int, int]]] = []  # per sample: pid -> (rss_kib, pss_kib)
        self.names: dict[int, str] = {}  # pid -> what it is (its command line, shortened)
        self._ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            procs = _processes()
            pids = _tree(me, procs)
            each = {p: (_kib(p, "status", "VmRSS:"), _kib(p, "smaps_rollup", "Pss:")) for p in pids}
            for p in pids:
                self._ticks[p] = max(self._ticks.get(p, 0), procs.get(p, (0, 0))[1])
                if p not in self.names or self.names[p].startswith("ray::IDLE"):  # a prestarted worker becomes an actor
                    self.names[p] = "driver" if p == me else _name(p)
            self.per_process.append(each)
            self.shm.append(max(0, _shm_used_kib() - self._shm0))
            self.samples.append((time.perf_counter(), sum(r for r, _ in each.values()),
                                 sum(q for _, q in each.values()), sum(self._ticks.values()) / TICKS))
            self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, start: float = float("-inf"), stop: float = float("inf")) -> tuple[float, float]:
        """(peak RSS, peak PSS) in GB over samples taken in [start, stop]."""
        inside = [(r, p) for t, r, p, _ in self.samples if start <= t <= stop]
        if not inside:  # a stage shorter than the interval: the first sample after it started
            inside = [next(((r, p) for t, r, p, _ in self.samples if t >= start), (0, 0))]
        return max(r for r, _ in inside) / 1024**2, max(p for _, p in inside) / 1024**2

    def peak_shm(self, start: float = float("-inf"), stop: float = float("inf")) -> tuple[float, float]:
        """(peak shared memory, peak RSS + shared memory) in GB over samples in [start, stop]: the second is an upper
        bound on the RAM the tree held (pages of the store that a process still maps count twice)."""
        both = [(s[0], m, s[1] + m) for s, m in zip(self.samples, self.shm, strict=True)]
        inside = [(m, r) for t, m, r in both if start <= t <= stop]
        if not inside:  # a stage shorter than the interval: the first sample after it started (as `peak`)
            inside = [next(((m, r) for t, m, r in both if t >= start), (0, 0))]
        return (max((m for m, _ in inside), default=0) / 1024**2, max((b for _, b in inside), default=0) / 1024**2)

    def peak_sample(self) -> int:
        """The index of the sample with the largest RSS sum over the tree."""
        return max(range(len(self.samples)), key=lambda i: self.samples[i][1])

    def owners(self, i: int) -> list[dict[str, Any]]:
        """Sample ``i`` per process, largest RSS first: {"pid", "name", "rss_gb", "pss_gb"}."""
        return [{"pid": p, "name": self.names.get(p, "?"), "rss_gb": r / 1024**2, "pss_gb": q / 1024**2}
                for p, (r, q) in sorted(self.per_process[i].items(), key=lambda kv: -kv[1][0])]

    def cpu(self, start: float, stop: float) -> float:
        """CPU seconds the process tree used in [start, stop] (to the sampling interval)."""
        before = [c for t, _, _, c in self.samples if t <= start]
        after = [c for t, _, _, c in self.samples if t >= stop]
        last = self.samples[-1][3] if self.samples else 0.0
        return max(0.0, (after[0] if after else last) - (before[-1] if before else 0.0))


def _shm_used_kib() -> int:
    """/dev/shm's used KiB (0 where there is none)."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize // 1024


class Timeline:
    """Named intervals (stage -> [(start, stop), ...]) recorded by wrapping the functions that do each stage."""

    def __init__(self, trace: bool = False) -> None:
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.trace = trace
        self.t0 = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            self.spans.setdefault(name, []).append((t0, t1))
            if self.trace:  # a line per finished span: a run stopped early still says how far it got
                print(f"[bench_scale] {t1 - self.t0:8.1f} s: {name} took {t1 - t0:.1f} s", file=sys.stderr,
                      flush=True)

    def wrap(self, module: Any, attr: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(module, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return fn(*args, **kwargs)

        setattr(module, attr, timed)


def _same(results: dict[str, Any], plain_point: dict[str, Any]) -> bool:
    """Whether both paths computed the same utility and attacks (results.json's aggregates)."""
    from fl_privtext.report import aggregate

    plain = aggregate(plain_point, 0.0)
    return all(json.dumps(results[k], sort_keys=True, default=str) == json.dumps(plain[k], sort_keys=True, default=str)
               for k in ("utility", "attacks"))


def _config(args: argparse.Namespace, cache_dir: str, output: str) -> Any:
    from fl_privtext.config import ExperimentConfig

    return ExperimentConfig.from_flat({
        "data.name": "synthetic", "data.options.users": args.users, "data.options.seed": args.seed,
        "extractor.name": args.extractor, "extractor.cache-dir": cache_dir, "extractor.chunk-rows": args.chunk_rows,
        **({} if args.extractor == "glove" else {"extractor.model": args.model, "extractor.device": args.device,
                                                  "extractor.precision": args.precision,
                                                  "extractor.batch-size": args.batch_size}),
        "federation.num-clients": args.clients, "run.baseline": args.baseline, "run.progress": False,
        "run.output": output, "run.client-seed": 2_718_281_828,  # reproducible: Flower and plain must agree
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="data.options.seed of the synthetic population")
    ap.add_argument("--chunk-rows", type=int, default=65536, help="extractor.chunk-rows")
    ap.add_argument("--baseline", action="store_true", help="also compute the no-privacy baseline (run.baseline)")
    ap.add_argument("--cache-dir", default="", help="feature and synthetic-data cache (default: a fresh temp dir)")
    ap.add_argument("--output", default="", help="run directory for results.json / summary.md (default: temp)")
    ap.add_argument("--plain", action="store_true", help="also time the plain loop on the same point (ratio)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--extractor", default="glove", choices=("glove", "minilm", "hf"),
                    help="the features: GloVe averages (default), the packaged MiniLM, or hf (--model FOLDER; all three: --device, --precision)")
    ap.add_argument("--model", default="", help="hf: a local model folder")
    ap.add_argument("--device", default="", help="minilm: cuda or cpu (default: cuda when available)")
    ap.add_argument("--precision", default="float32", choices=("float32", "bf16", "fp16"), help="minilm's forward")
    ap.add_argument("--batch-size", type=int, default=0, help="minilm: texts per forward (0 = auto)")
    ap.add_argument("--trace", action="store_true", help="print each stage's time to stderr as it finishes")
    ap.add_argument("--timeline", help="also write every memory sample to this CSV file (seconds from the start, "
                                       "RSS and PSS GB of the tree and of the driver, the stage running)")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench_scale-")
    cache_dir = args.cache_dir or os.path.join(tmp, "cache")
    output = args.output or os.path.join(tmp, "run")
    os.environ["FL_PRIVTEXT_CACHE"] = cache_dir  # the synthetic data file lives there too
    load = os.getloadavg()
    t_start = time.perf_counter()
    timeline = Timeline(trace=args.trace)
    with MemorySampler() as mem:
        from fl_privtext import pipeline
        from fl_privtext.federation import server_app
        from fl_privtext.pipeline import federated, point, runner

        cfg = _config(args, cache_dir, output)
        with timeline.stage("generate"):
            ds = pipeline.load(cfg)
            runner.validate(cfg)  # the run's checks, its memory budget included, before the extraction (as the CLI)
        with timeline.stage("extract"):
            pipeline.prepare(cfg, features="extract")
        timeline.wrap(server_app, "collect", "upload rounds")  # each round: queries out, replies merged
        timeline.wrap(federated, "train_point", "server training")  # where the Flower path calls them
        timeline.wrap(point, "train_point", "server training")  # the plain loop's call (point.evaluate_point)
        timeline.wrap(point, "attack", "attacks")
        # finer marks, only to place the peak (`_where`): the whole collection, the eavesdropper's record of it,
        # the on-device round and the point's evaluation (training, attacks and summaries)
        timeline.wrap(federated, "collect_point", "collection")
        timeline.wrap(server_app.PointTransport, "eavesdrop", "eavesdropper's record")
        timeline.wrap(federated, "on_device", "on-device round")
        timeline.wrap(point, "on_device", "on-device round")  # the plain loop's call (point.run_point)
        timeline.wrap(federated, "evaluate_point", "evaluation")
        t_run = time.perf_counter()
        results = runner.run_experiment(cfg, output=output, echo=False)
        t_end = time.perf_counter()
        spans = {name: list(ss) for name, ss in timeline.spans.items()}  # the Flower run's stages only
        plain = None
        if args.plain:
            plain = pipeline.run_plain(cfg)
            t_plain = time.perf_counter() - t_end
    first_round = min(a for a, _ in spans["upload rounds"])
    spans["startup"] = [(t_run, first_round)]
    # the eavesdropper's record (after the rounds) and the on-device round (after training) ran between the stages
    # the issue names; at 200k users the run's peak fell in the latter (the actors' answers), so both are rows
    order = ["generate", "extract", "startup", "upload rounds", "eavesdropper's record", "server training",
             "on-device round", "attacks"]
    busy = sorted(s for name, ss in spans.items() if name in order[2:] for s in ss)  # the run's rows (not the marks)
    rows: list[dict[str, Any]] = []
    for name in order:
        ss = spans.get(name, [])
        seconds = sum(b - a for a, b in ss)
        peak = max((mem.peak(a, b) for a, b in ss), default=(0.0, 0.0))
        shm = max((mem.peak_shm(a, b) for a, b in ss), default=(0.0, 0.0))
        rows.append({"stage": name, "seconds": seconds, "cpu_s": sum(mem.cpu(a, b) for a, b in ss),
                     "peak_rss_gb": peak[0], "peak_pss_gb": peak[1], "peak_shm_gb": shm[0],
                     "peak_rss_shm_gb": shm[1]})
    rest = (t_end - t_run) - sum(r["seconds"] for r in rows if r["stage"] not in ("generate", "extract"))
    last = max(b for _, b in busy)
    # stages' CPU is read at the samples around their ends, so adjacent stages can share up to one interval
    rest_cpu = max(0.0, mem.cpu(t_run, t_end) - sum(r["cpu_s"] for r in rows if r["stage"] not in ("generate",
                                                                                                   "extract")))
    rows.append({"stage": "rest (report, shutdown)", "seconds": rest, "cpu_s": rest_cpu,
                 "peak_rss_gb": mem.peak(last, t_end)[0], "peak_pss_gb": mem.peak(last, t_end)[1],
                 "peak_shm_gb": mem.peak_shm(last, t_end)[0], "peak_rss_shm_gb": mem.peak_shm(last, t_end)[1]})
    plain_rows: list[dict[str, Any]] = []
    if plain is not None:  # the plain loop's own stages (the same wrapped functions, called after t_end)
        t_train = min(a for a, _ in timeline.spans["server training"] if a >= t_end)
        plain_rows.append({"stage": "upload rounds", "seconds": plain["per_seed"][0]["timing"]["federation_s"],
                           "cpu_s": None})  # the clients' loop, timed by run_plain itself
        for name in ("server training", "on-device round", "attacks"):
            ss = [(a, b) for a, b in timeline.spans.get(name, []) if a >= t_end]
            plain_rows.append({"stage": name, "seconds": sum(b - a for a, b in ss),
                               "cpu_s": sum(mem.cpu(a, b) for a, b in ss)})
        plain_rows.append({"stage": "until training", "seconds": t_train - t_end, "cpu_s": mem.cpu(t_end, t_train)})
    wall = t_end - t_start
    peak_rss, peak_pss = mem.peak()
    at = mem.peak_sample()
    t_peak = mem.samples[at][0]
    peak_at = {"t_s": t_peak - t_start, "where": _where(t_peak, timeline.spans), "processes": mem.owners(at)}
    if args.timeline:
        me = os.getpid()
        with open(args.timeline, "w") as f:
            f.write("t_s,rss_gb,pss_gb,driver_rss_gb,driver_pss_gb,actors_rss_gb,actor_max_rss_gb,shm_gb,where\n")
            for (t, r, q, _), each, shm_kib in zip(mem.samples, mem.per_process, mem.shm, strict=True):
                dr, dq = each.get(me, (0, 0))
                # the Ray actors that serve the virtual clients (their sum and the largest one)
                actors = [a for p, (a, _) in each.items() if "ClientAppActor" in mem.names.get(p, "")]
                f.write(f"{t - t_start:.2f},{r / 1024**2:.3f},{q / 1024**2:.3f},{dr / 1024**2:.3f},"
                        f"{dq / 1024**2:.3f},{sum(actors) / 1024**2:.3f},{max(actors, default=0) / 1024**2:.3f},"
                        f"{shm_kib / 1024**2:.3f},\"{_where(t, timeline.spans)}\"\n")
    out = {
        "users": ds.num_users, "records": len(ds), "clients": args.clients, "wall_s": wall, "peak_rss_gb": peak_rss,
        "peak_pss_gb": peak_pss, "peak_at": peak_at, "cpu_s": mem.cpu(t_start, t_end),
        # /dev/shm's growth (Ray's object store: RAM no process's RSS may count) and RSS + it (an upper bound);
        # the run's own peaks (``peak_rss_gb`` above also covers the plain loop where --plain ran it after)
        "peak_shm_gb": mem.peak_shm()[0], "peak_rss_shm_gb": mem.peak_shm()[1],
        "run_peak_rss_gb": mem.peak(t_start, t_end)[0], "run_peak_rss_shm_gb": mem.peak_shm(t_start, t_end)[1],
        # the public contract (issue #38): stage name -> {seconds, cpu_s, peak_rss_gb, peak_pss_gb, us_per_user}
        "stages": {r["stage"]: {k: v for k, v in r.items() if k != "stage"}
                   | {"us_per_user": 1e6 * r["seconds"] / max(1, ds.num_users)} for r in rows},
        "us_per_user": 1e6 * wall / max(1, ds.num_users), "plain_stages": plain_rows,
        "loadavg_start": load, "loadavg_end": os.getloadavg(),
        "dataset": results["dataset"]["name"], "synthetic": results["dataset"].get("synthetic"),
        "accuracy": results["utility"].get("accuracy"),
        "majority_baseline": results["utility"].get("majority_baseline"),
        "attacks": {k: {"accuracy": v.get("accuracy"), "majority_baseline": v.get("majority_baseline")}
                    for k, v in results["attacks"].items()},
        "timing": results.get("timing"), "output": output, "python": sys.version.split()[0],
        "extractor": {"name": args.extractor, **results.get("extractor", {})} if args.extractor != "glove"
        else {"name": "glove"},
        "extract_texts_per_s": len(ds) / max(1e-9, next(r["seconds"] for r in rows if r["stage"] == "extract")),
    }
    if args.extractor != "glove":
        import torch

        out["extractor"] |= {"device": args.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                             "precision": args.precision, "torch": torch.__version__,
                             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                             "gpu_peak_mem_gb": torch.cuda.max_memory_allocated() / 1024**3
                             if torch.cuda.is_available() else None}
    if plain is not None:
        flower_s = t_end - t_run
        same = _same(results, plain)
        out.update({"flower_s": flower_s, "plain_s": t_plain, "ratio": flower_s / t_plain, "identical_results": same})
    print(f"synthetic users {out['users']:,} ({out['records']:,} reviews), {args.clients} clients, "
          f"{'GloVe' if args.extractor == 'glove' else args.extractor + ' ' + out['extractor']['device'] + ' ' + args.precision}"
          f" ({out['extract_texts_per_s']:,.0f} texts/s extracted), "
          f"laplace-l1 eps 1; load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the start, "
          f"{out['loadavg_end'][0]:.2f} at the end")
    print(f"{'stage':26s} {'seconds':>9s} {'CPU s':>9s} {'peak RSS GB':>12s} {'peak PSS GB':>12s} "
          f"{'shm GB':>7s} {'RSS+shm GB':>11s}")
    for r in rows:
        print(f"{r['stage']:26s} {r['seconds']:9.1f} {r['cpu_s']:9.1f} {r['peak_rss_gb']:12.2f} "
              f"{r['peak_pss_gb']:12.2f} {r['peak_shm_gb']:7.2f} {r['peak_rss_shm_gb']:11.2f}")
    print(f"{'TOTAL wall':26s} {wall:9.1f} {out['cpu_s']:9.1f} {peak_rss:12.2f} {peak_pss:12.2f} "
          f"{out['peak_shm_gb']:7.2f} {out['peak_rss_shm_gb']:11.2f}")
    if plain is not None:
        print(f"the Flower run alone: peak {out['run_peak_rss_gb']:.2f} GB RSS, {out['run_peak_rss_shm_gb']:.2f} "
              "GB RSS + shm (the total above includes the plain loop run after it)")
    print(f"peak {peak_rss:.2f} GB RSS at {peak_at['t_s']:.1f} s, {peak_at['where']}: " + ", ".join(
        f"{o['name'][:40]} {o['rss_gb']:.2f}" for o in peak_at["processes"][:4]))
    print(f"task accuracy {out['accuracy']} (majority {out['majority_baseline']}); attacks "
          + ", ".join(f"{k} {v['accuracy']:.3f} (majority {v['majority_baseline']:.3f})"
                      for k, v in out["attacks"].items()))
    if plain is not None:
        print("plain loop: " + ", ".join(
            f"{r['stage']} {r['seconds']:.1f} s" + ("" if r["cpu_s"] is None else f" ({r['cpu_s']:.1f} CPU s)")
            for r in plain_rows))
        print(f"Flower {out['flower_s']:.1f} s, plain loop {out['plain_s']:.1f} s: ratio {out['ratio']:.3f}; "
              f"identical results: {out['identical_results']}")
    print(f"results: {output}/results.json")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
