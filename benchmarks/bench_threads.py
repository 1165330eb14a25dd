"""Thread hygiene on a run with 2 actors: every process sized to all cores (``oversubscribed``: 2 torch/BLAS threads
per actor and for the driver on a 2-core machine) against the platform's shares (``auto``: each actor its CPU share
floor(client-cpus) = 1, the driver the cores the actors leave free, at least 1; `fl_privtext.threads`).

    python benchmarks/bench_threads.py --repeats 3

The job keeps torch busy on both sides: Phase A (``train.rounds`` FedAvg rounds of the trunk encoder, trained by the
2 actors) then the upload round, the server's training and the attacks on the driver, plus the no-privacy baseline
point, whose rounds overlap the first point's training. Each timing runs in a fresh process; settings alternate;
medians are reported with the load average at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

SETTINGS = {"oversubscribed": {"federation.client-threads": 2, "run.threads": 2},
            "auto": {"federation.client-threads": 0, "run.threads": 0}}


def _worker(setting: str, rounds: int) -> None:
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline.runner import run_experiment

    flat: dict[str, Any] = {"federation.num-clients": 2, "train.rounds": rounds, "train.encoder": "trunk",
                            "run.progress": False, **SETTINGS[setting]}
    cfg = ExperimentConfig.from_flat(flat)
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        res = run_experiment(cfg, output=out, echo=False)
        seconds = time.perf_counter() - t
    print(json.dumps({"setting": setting, "seconds": seconds, "phase_a_s": res["training"]["train_s"],
                      "timing": {k: v for k, v in res["timing"].items() if isinstance(v, float)}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="Phase A rounds (torch training in the actors)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--worker", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.rounds)
        return
    load_start = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SETTINGS}
    for r in range(args.repeats):
        for s in (list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))):
            proc = subprocess.run([sys.executable, __file__, "--worker", s, "--rounds", str(args.rounds)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{s} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[s].append(out)
            stages = ", ".join(f"{k} {v:.1f}" for k, v in out["timing"].items())
            print(f"  {s:14s} {out['seconds']:7.2f} s  (phase A {out['phase_a_s']:.2f} s; {stages}; "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
    summary: dict[str, Any] = {s: {"seconds": [o["seconds"] for o in v], "median_s": statistics.median(o["seconds"] for o in v),
                   "phase_a_median_s": statistics.median(o["phase_a_s"] for o in v)} for s, v in runs.items()}
    summary["speedup"] = summary["oversubscribed"]["median_s"] / summary["auto"]["median_s"]
    summary["load_average_start_end"] = [load_start[0], os.getloadavg()[0]]
    summary["runs"] = runs  # every timing with its stages (results.json timing: federation, training, attacks)
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)


if __name__ == "__main__":
    main()
