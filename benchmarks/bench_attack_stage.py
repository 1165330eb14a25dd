"""The whole attack stage in-process, where its memory goes phase by phase (issue #38).

    python benchmarks/bench_attack_stage.py --users 1000000 [--max-steps 2000] [--serial] [--prelude]

Unlike `bench_attack_memory.py` (the attribute attacks on a synthetic view), this runs the real
`fl_privtext.attacks.eavesdropper.attack` of a run: a synthetic population prepared as `bench_scale.py` prepares
it (its config; data and features cached under ``--dir``), every record uploaded once (its clean features plus
Laplace noise, a mapped file as the round's spill; record ids and labels mapped int64 columns), the families of
``attack.families``, the server's learners and the whole-traffic attacks. It prints, for the stage and for each
phase (attack()'s gathering, `observe`, the view's shared targets, each attribute's attack and referee pieces, the
inversion, the linkage game): the peak traced by `tracemalloc` (numpy's buffers, not torch's) above the level at
attack()'s start while that phase ran, its own peak above its entry level, the RSS sampled while it ran (every
20 ms: its highest above attack()'s start, and its rise above the phase's entry) and its seconds; then the RSS
high-water mark above the start and a digest of (attacks, attacks_extra), which must not change when only memory changes.
The slope between two populations is the stage's bytes an upload. The attacks run side by side as in a run
(``--serial``: one after the other, so that each phase's own peak is its own); ``--prelude`` stops after `observe`.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import threading
import time
import tracemalloc
from typing import Any

import numpy as np


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


class Phases:
    """Traced peaks per phase: every wrapped call ticks (reads the peak since the last tick, resets it) on entry
    and exit, and the interval's peak counts for every phase running in it (several, side by side)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start = 0
        self.entries: dict[str, list[int]] = {}
        self.peak: dict[str, int] = {}
        self.own: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.order: list[str] = []
        self.rss_entries: dict[str, list[int]] = {}  # RSS (KiB) at each running call's entry
        self.rss_peak: dict[str, int] = {}  # the highest RSS sampled while the phase ran (KiB)
        self.rss_own: dict[str, int] = {}  # its rise above the entry of the call it was sampled in (KiB)

    def sample(self, rss: int) -> None:
        """One RSS sample (KiB): it counts for every phase running now."""
        with self.lock:
            for name, levels in self.rss_entries.items():
                if levels:
                    self.rss_peak[name] = max(self.rss_peak.get(name, 0), rss)
                    self.rss_own[name] = max([self.rss_own.get(name, 0)] + [rss - e for e in levels])

    def tick(self) -> int:
        current, peak = tracemalloc.get_traced_memory()
        for name, levels in self.entries.items():
            if levels:
                self.peak[name] = max(self.peak.get(name, 0), peak - self.start)
                self.own[name] = max([self.own.get(name, 0)] + [peak - e for e in levels])
        tracemalloc.reset_peak()
        return current

    def wrap(self, fn: Any, name: str) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.entries.setdefault(name, []).append(self.tick())
                self.rss_entries.setdefault(name, []).append(_rss_kib())
                if name not in self.order:
                    self.order.append(name)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.tick()
                    self.entries[name].pop()
                    self.rss_entries[name].pop()
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=1_000_000)
    ap.add_argument("--max-steps", type=int, default=0, help="attack.max-steps (0: the config's default)")
    ap.add_argument("--serial", action="store_true", help="the attacks one after the other (one core)")
    ap.add_argument("--prelude", action="store_true", help="stop after observe (no attack runs)")
    ap.add_argument("--dir", default="", help="population, features and uploads cache (default: a temp dir)")
    args = ap.parse_args()
    base = args.dir or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_attack_stage-{args.users}")
    os.environ["FL_PRIVTEXT_CACHE"] = os.path.join(base, "cache")  # the synthetic data file lives there too
    from fl_privtext.attacks import attribute, eavesdropper, evaluate, inversion
    from fl_privtext.attacks.view import AttackView
    from fl_privtext.client import mechanism_for
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline import prepare
    from fl_privtext.public import PublicSpec
    from fl_privtext.threads import limited

    flat: dict[str, Any] = {
        "data.name": "synthetic", "data.options.users": args.users, "data.options.seed": 0, "extractor.name": "glove",
        "extractor.cache-dir": os.path.join(base, "cache"), "extractor.chunk-rows": 65536,
        "federation.num-clients": 100, "run.progress": False, "run.client-seed": 2_718_281_828}
    if args.max_steps:
        flat["attack.max-steps"] = args.max_steps
    cfg = ExperimentConfig.from_flat(flat)
    t0 = time.perf_counter()
    prep = prepare(cfg, features="extract")
    n, d = prep.features.shape
    paths = {k: os.path.join(base, f"{k}.bin") for k in ("uploads", "rows", "labels")}
    if not all(os.path.exists(p) for p in paths.values()):
        out = np.memmap(paths["uploads"], np.float32, "w+", shape=(n, d))
        g = np.random.default_rng(5)
        for a in range(0, n, 1 << 20):
            b = min(n, a + (1 << 20))
            out[a:b] = np.asarray(prep.features[a:b], np.float32) + g.laplace(scale=0.5, size=(b - a, d))
        out.flush()
        del out
        np.arange(n, dtype=np.int64).tofile(paths["rows"])
        np.asarray(prep.ds.label_codes, np.int64).tofile(paths["labels"])
    features = np.memmap(paths["uploads"], np.float32, "r", shape=(n, d))
    rows = np.memmap(paths["rows"], np.int64, "r", shape=(n,))
    labels = np.memmap(paths["labels"], np.int64, "r", shape=(n,))
    mech = mechanism_for(PublicSpec.of(cfg), d)
    print(f"{args.users:,} users, {n:,} uploads prepared in {time.perf_counter() - t0:.0f} s; load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    phases = Phases()
    for name in ("attacked_uploads", "attacked_rows", "take_narrow", "clean_features", "observe", "run_attacks"):
        setattr(eavesdropper, name, phases.wrap(getattr(eavesdropper, name), name))
    for prop in ("targets", "target_counts"):
        cached = functools.cached_property(phases.wrap(getattr(AttackView, prop).func, f"view.{prop}"))
        cached.__set_name__(AttackView, prop)
        setattr(AttackView, prop, cached)
    for name in ("score_attribute", "linkage_attacks", "_attribute_ceilings", "_upload_intervals", "_target_words",
                 "_score_inversion"):
        setattr(evaluate, name, phases.wrap(getattr(evaluate, name), name))
    for name in ("infer_attribute", "plain_logistic"):
        setattr(evaluate, name, phases.wrap(getattr(attribute, name), name))
    inversion.prepare = phases.wrap(inversion.prepare, "inversion.prepare")
    if args.serial:
        def serial(view: Any, truth: Any) -> Any:
            with limited(1):
                return evaluate._run_attacks(view, truth, cores=1)
        eavesdropper.run_attacks = phases.wrap(serial, "run_attacks")
    if args.prelude:
        eavesdropper.run_attacks = lambda view, truth: ({}, {})

    tracemalloc.start()
    phases.start = tracemalloc.get_traced_memory()[0]
    rss0, hwm, done = _rss_kib(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss = _rss_kib()
            hwm[0] = max(hwm[0], rss)
            phases.sample(rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    run = phases.wrap(eavesdropper.attack, "attack")
    attacks, extra = run(prep, features, rows, 1, cfg, labels=labels, mechanism=mech, report=mech.report())
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    tracemalloc.stop()
    public = [{k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} if isinstance(v, dict) else v
               for k, v in part.items()} for part in (attacks, extra)]
    digest = hashlib.sha256(json.dumps(public, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    top = phases.peak.get("attack", 0)
    print(f"stage: traced peak {top / 1e6:.1f} MB above attack()'s start ({top / n:.1f} B an upload), RSS high-water "
          f"{(max(hwm[0], _rss_kib()) - rss0) / 1e3:.0f} MB above {rss0 / 1e3:.0f} MB, results {digest}, {seconds:.0f} s")
    print(f"  {'phase':20s} {'traced peak':>26s} {'own traced':>20s} {'RSS peak above start':>22s} "
          f"{'own RSS rise':>20s} {'seconds':>7s}")
    for name in phases.order:
        p, o = phases.peak.get(name, 0), phases.own.get(name, 0)
        r, ro = (phases.rss_peak.get(name, rss0) - rss0) * 1024, phases.rss_own.get(name, 0) * 1024
        print(f"  {name:20s} {p / 1e6:8.1f} MB ({p / n:5.1f} B/up) {o / 1e6:8.1f} MB ({o / n:5.1f} B) "
              f"{r / 1e6:8.1f} MB ({r / n:5.1f} B) {ro / 1e6:8.1f} MB ({ro / n:5.1f} B) "
              f"{phases.seconds.get(name, 0.0):7.1f}")


if __name__ == "__main__":
    main()
