"""Privatization throughput of the privacy mechanisms (target: each case under 1 second on a 2-core CPU).

Run: python benchmarks/bench_privacy.py [--repeats 5] [--json FILE]

Mechanisms with a secure sampler run twice, ``sampler=float`` and ``sampler=secure`` (exact discrete noise), in the
same run; ``--json FILE`` writes every case and ``secure_over_float`` = {mechanism: secure median / float median}
(null where the mechanism has no secure sampler).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from fl_privtext.privacy import make_mechanism, mechanism_params

CASES = (
    ("ome", {"epsilon": 1.0, "lam": 100.0, "dim": 50, "int_bits": 4, "frac_bits": 5}, (100_000, 50)),
    ("laplace-l1", {"epsilon": 1.0, "dim": 384}, (100_000, 384)),
    ("bitrr", {"epsilon": 1.0, "dim": 50}, (100_000, 50)),
    ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 384}, (100_000, 384)),
    ("privunitg", {"epsilon": 1.0, "dim": 384}, (100_000, 384)),
)


RATIO_CASES = ("laplace-l1", "gaussian", "privunitg")


def _time(mech, x: np.ndarray, repeats: int) -> tuple[float, float, float, tuple[int, ...]]:
    rng = np.random.default_rng(1)
    mech.privatize(x[:1000], rng)  # warm-up
    times, cpu = [], []
    y = x
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        y = mech.privatize(x, rng)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(times), statistics.median(times), statistics.median(cpu), y.shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="write the cases and secure_over_float to FILE")
    args = parser.parse_args()
    data_rng = np.random.default_rng(0)
    # cpu s: median process CPU time, close to the quiet-machine wall time when other jobs share the cores
    print(f"{'mechanism':<12} {'sampler':>7} {'input':>14} {'output':>14} {'best s':>8} {'median s':>9} {'cpu s':>7} "
          f"{'values/s':>12}")
    cases: list[dict[str, object]] = []
    medians: dict[tuple[str, str], float] = {}
    for name, params, shape in CASES:
        x = data_rng.standard_normal(shape, dtype=np.float32)
        samplers = ("float", "secure") if "sampler" in mechanism_params(name) else ("float",)
        for sampler in samplers:
            extra = {"sampler": sampler} if "sampler" in mechanism_params(name) else {}
            mech = make_mechanism(name, **params, **extra)
            best, med, cpu, out_shape = _time(mech, x, args.repeats)
            medians[(name, sampler)] = med
            cases.append({"mechanism": name, "sampler": sampler, "shape": list(shape), "best_s": best,
                          "median_s": med, "cpu_s": cpu, "float_safe": mech.report().float_safe})
            print(f"{name:<12} {sampler:>7} {shape!s:>14} {out_shape!s:>14} {best:8.3f} {med:9.3f} {cpu:7.3f} "
                  f"{x.size / med:12.3e}")
    ratios = {name: (medians[(name, "secure")] / medians[(name, "float")] if (name, "secure") in medians else None)
              for name in RATIO_CASES}
    print("secure_over_float:", {k: (None if v is None else round(v, 2)) for k, v in ratios.items()})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cases": cases, "secure_over_float": ratios, "repeats": args.repeats,
                       "loadavg": list(os.getloadavg())}, f, indent=2)


if __name__ == "__main__":
    main()
