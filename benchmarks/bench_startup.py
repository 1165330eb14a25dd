"""Fixed start-up of a fresh local Ray for the Flower simulation: how the workers' variables travel.

    python benchmarks/bench_startup.py --repeats 5

``inherited`` (what `fl_privtext.federation.simulation.init_ray` does): the variables (threads, client seed,
PYTHONPATH) are in the driver's environment while ``ray.init`` starts Ray's processes, which inherit them.
``runtime_env``: the same variables as a job-level ``runtime_env`` (what `_init_ray` did before, and Flower's own
Ray backend does). Each timing runs in a fresh process: ``ray.init``, then as many of Flower's ``ClientAppActor`` as
the cores hold (as Flower's actor pool creates them) each answering one call that loads our ClientApp module, then
``ray.shutdown``. Settings alternate; medians with the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

SETTINGS = ("inherited", "runtime_env")


def _first_call(actor: Any) -> tuple[int, str]:
    import fl_privtext.federation.client_app  # noqa: F401  what a virtual client's first message loads

    return os.getpid(), os.environ.get("OMP_NUM_THREADS", "")


def _worker(setting: str) -> None:
    t0 = time.perf_counter()
    import ray
    from flwr.simulation.ray_transport.ray_actor import ClientAppActor

    from fl_privtext.federation.simulation import init_ray as _init_ray
    from fl_privtext.federation.simulation import quiet_env as _quiet_env
    from fl_privtext.threads import worker_env

    _quiet_env()
    cores = os.cpu_count() or 1
    init_args: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
                                 "num_cpus": cores}
    t1 = time.perf_counter()
    if setting == "inherited":
        _init_ray(init_args, threads=1)
    else:
        pythonpath = os.pathsep.join(sys.path)
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath, **worker_env(1)}}, **init_args)
    t2 = time.perf_counter()
    actors = [ClientAppActor.options(num_cpus=1).remote() for _ in range(cores)]  # type: ignore[attr-defined]
    answers = ray.get([a.__ray_call__.remote(_first_call) for a in actors])
    t3 = time.perf_counter()
    ray.shutdown()
    t4 = time.perf_counter()
    if any(threads != "1" for _, threads in answers):
        raise SystemExit(f"{setting}: an actor did not get OMP_NUM_THREADS=1: {answers}")
    print(json.dumps({"setting": setting, "imports_s": t1 - t0, "ray_init_s": t2 - t1, "actors_s": t3 - t2,
                      "shutdown_s": t4 - t3, "until_actors_s": t3 - t1}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--worker", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for r in range(args.repeats):
        for s in (SETTINGS if r % 2 == 0 else tuple(reversed(SETTINGS))):
            proc = subprocess.run([sys.executable, __file__, "--worker", s], capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{s} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[s].append(out)
            print(f"  {s:12s} ray.init {out['ray_init_s']:5.2f} s, actors up and answering {out['actors_s']:5.2f} s,"
                  f" shutdown {out['shutdown_s']:4.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    keys = ("ray_init_s", "actors_s", "until_actors_s", "shutdown_s")
    summary: dict[str, Any] = {s: {f"{k}_median": statistics.median(o[k] for o in v) for k in keys}
                               | {"until_actors_s": [o["until_actors_s"] for o in v]} for s, v in runs.items()}
    summary["saved_s"] = (summary["runtime_env"]["until_actors_s_median"]
                          - summary["inherited"]["until_actors_s_median"])
    summary["load_average_start_end"] = [load_start, os.getloadavg()[0]]
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)


if __name__ == "__main__":
    main()
