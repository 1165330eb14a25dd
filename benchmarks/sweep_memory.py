"""The driver's memory across the points of ONE Flower simulation (a sweep): RSS and live numpy bytes per point.

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/sweep_memory.py --users 3000 --points 6

A sweep of OME points on the synthetic population (GloVe-50d, OME 50 x 10 = 500-bit uploads, 3 seeds, 10 server
epochs, attack and on-device evaluation off: the OME Intent sweep's shape at a smaller width). At each point's first
round it prints how many earlier points the server has computed and the driver's RSS; after each point's result is
handed to ``on_result``, the RSS (from /proc/self/status, after gc and malloc_trim) and the bytes of the numpy
arrays still reachable from Python objects. Without a leak both stay flat from point 2 on; a sweep that keeps each
point's uploads alive grows by about (copies per seed) x seeds x records x width x 4 bytes per point.
``--json`` writes the measurements and every point's headline numbers (to check that a fix changes no result).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fl_privtext.config import ExperimentConfig


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def live_array_mb() -> float:
    """Bytes of the memory-owning numpy arrays that Python objects still reference. Arrays are not tracked by gc
    and neither are dicts / tuples holding only untracked values, so untracked containers are walked too."""
    seen: dict[int, int] = {}
    visited: set[int] = set()
    stack = list(gc.get_objects())
    while stack:
        obj = stack.pop()
        for ref in gc.get_referents(obj):
            if isinstance(ref, np.ndarray):
                base = ref
                while isinstance(base.base, np.ndarray):
                    base = base.base
                if base.base is None:  # owns its buffer (memmaps and views of bytes are not counted)
                    seen[id(base)] = base.nbytes
            elif isinstance(ref, dict | list | tuple) and not gc.is_tracked(ref) and id(ref) not in visited:
                visited.add(id(ref))
                stack.append(ref)
    return sum(seen.values()) / 2**20


def settle() -> None:
    gc.collect()
    try:  # give freed heap pages back so that RSS shows what is really held (glibc only)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=3000, help="synthetic users (about 4.5 records each)")
    ap.add_argument("--points", type=int, default=4, help="sweep points (epsilon values)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10, help="server.epochs (the OME Intent config's 10: the server's "
                    "computation of a point then outlasts the next point's uploads)")
    ap.add_argument("--json", default="", help="write the measurements and the points' results here")
    args = ap.parse_args()

    from fl_privtext.pipeline.runner import run_points

    base = ExperimentConfig.from_flat({
        "data.name": "synthetic", "data.options.users": args.users, "extractor.name": "glove",
        "privacy.mechanism": "ome", "privacy.lam": 100.0, "federation.num-clients": 2, "server.epochs": args.epochs,
        "server.on-device": False, "attack.enabled": False, "run.seeds": args.seeds, "run.progress": False,
        "run.baseline": False, "run.client-seed": 12345, "run.threads": 1,
    })
    epsilons = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0][:args.points]
    points = [ExperimentConfig.from_flat({"privacy.epsilon": e}, base) for e in epsilons]
    rows: list[dict[str, Any]] = []
    starts: list[dict[str, Any]] = []

    def on_round(i: int, seed: int, rnd: int, arrived: Any, seconds: float) -> None:
        if seed == base.run.seed and rnd == 0:  # a point's first round is in: how many earlier points are computed
            starts.append({"point_started": i, "points_computed": len(rows), "rss_mb": round(rss_mb(), 1)})
            print(json.dumps(starts[-1]), flush=True)

    def on_result(i: int, res: dict[str, Any]) -> None:
        settle()
        row = {"point": i, "epsilon": epsilons[i], "rss_mb": round(rss_mb(), 1),
               "live_arrays_mb": round(live_array_mb(), 1), "uploads": res["per_seed"][0]["uploads_received"],
               "width": res["per_seed"][0]["output_dim"],
               "accuracy": [s["utility"]["accuracy"] for s in res["per_seed"]]}
        rows.append(row)
        print(json.dumps(row), flush=True)

    settle()
    print(json.dumps({"before": True, "rss_mb": round(rss_mb(), 1)}), flush=True)
    run_points(points, on_result=on_result, on_round=on_round)
    settle()
    after = {"after_run_points": True, "rss_mb": round(rss_mb(), 1), "live_arrays_mb": round(live_array_mb(), 1)}
    print(json.dumps(after), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"points": rows, "starts": starts, "after": after, "pid": os.getpid()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
