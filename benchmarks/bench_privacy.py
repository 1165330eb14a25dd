"""Privatization throughput of the privacy mechanisms (target: each case under 1 second on a 2-core CPU).

Run: python benchmarks/bench_privacy.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fl_privtext.privacy import make_mechanism

CASES = (
    ("ome", {"epsilon": 1.0, "lam": 100.0, "dim": 50, "int_bits": 4, "frac_bits": 5}, (100_000, 50)),
    ("laplace-l1", {"epsilon": 1.0, "dim": 384}, (100_000, 384)),
    ("bitrr", {"epsilon": 1.0, "dim": 50}, (100_000, 50)),
    ("gaussian", {"epsilon": 1.0, "delta": 1e-5, "dim": 384}, (100_000, 384)),
    ("privunitg", {"epsilon": 1.0, "dim": 384}, (100_000, 384)),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data_rng = np.random.default_rng(0)
    # cpu s: median process CPU time, close to the quiet-machine wall time when other jobs share the cores
    print(f"{'mechanism':<12} {'input':>14} {'output':>14} {'best s':>8} {'median s':>9} {'cpu s':>7} {'values/s':>12}")
    for name, params, shape in CASES:
        mech = make_mechanism(name, **params)
        x = data_rng.standard_normal(shape, dtype=np.float32)
        rng = np.random.default_rng(1)
        mech.privatize(x[:1000], rng)  # warm-up
        times, cpu = [], []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            y = mech.privatize(x, rng)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        best, med = min(times), statistics.median(times)
        print(f"{name:<12} {shape!s:>14} {y.shape!s:>14} {best:8.3f} {med:9.3f} {statistics.median(cpu):7.3f} "
              f"{x.size / med:12.3e}")


if __name__ == "__main__":
    main()
