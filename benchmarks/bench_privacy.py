"""Privatization throughput of the privacy mechanisms (target: each case under 1 second on a 2-core CPU).

Run: python benchmarks/bench_privacy.py [--repeats 5] [--json FILE]

Mechanisms with a secure sampler run twice, ``sampler=float`` and ``sampler=secure`` (exact discrete noise), in the
same run and interleaved (float, secure, float, secure, ...: both see the same load from other jobs); ``--json
FILE`` writes every case, ``secure_over_float`` = {mechanism: median over the repeats of secure wall time / float
wall time of the same repeat} (null where the mechanism has no secure sampler) and ``secure_over_float_cpu`` (the
same with process CPU time). Both samplers do the same work: same input, same normalisation, float32 output.
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
    ("duchi", {"epsilon": 1.0, "dim": 384}, (100_000, 384)),
)


RATIO_CASES = ("laplace-l1", "gaussian", "privunitg", "duchi")


def _time(mechs: list, x: np.ndarray, repeats: int) -> list[tuple[list[float], list[float], tuple[int, ...]]]:
    """Wall and CPU times of ``repeats`` privatizations of x by each mechanism, the mechanisms interleaved."""
    rngs = [np.random.default_rng(1) for _ in mechs]
    for mech, rng in zip(mechs, rngs):
        mech.privatize(x[:1000], rng)  # warm-up
    walls: list[list[float]] = [[] for _ in mechs]
    cpus: list[list[float]] = [[] for _ in mechs]
    shapes: list[tuple[int, ...]] = [x.shape for _ in mechs]
    for _ in range(repeats):
        for i, (mech, rng) in enumerate(zip(mechs, rngs)):
            t0, c0 = time.perf_counter(), time.process_time()
            y = mech.privatize(x, rng)
            walls[i].append(time.perf_counter() - t0)
            cpus[i].append(time.process_time() - c0)
            shapes[i] = y.shape
    return [(walls[i], cpus[i], shapes[i]) for i in range(len(mechs))]


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
    ratios: dict[str, float | None] = {name: None for name in RATIO_CASES}
    ratios_cpu: dict[str, float | None] = {name: None for name in RATIO_CASES}
    for name, params, shape in CASES:
        x = data_rng.standard_normal(shape, dtype=np.float32)
        samplers = ("float", "secure") if "sampler" in mechanism_params(name) else ("float",)
        mechs = [make_mechanism(name, **params, **({"sampler": s} if len(samplers) > 1 else {})) for s in samplers]
        timed = _time(mechs, x, args.repeats)
        for sampler, mech, (walls, cpus, out_shape) in zip(samplers, mechs, timed):
            best, med, cpu = min(walls), statistics.median(walls), statistics.median(cpus)
            cases.append({"mechanism": name, "sampler": sampler, "shape": list(shape), "best_s": best,
                          "median_s": med, "cpu_s": cpu, "float_safe": mech.report().float_safe})
            print(f"{name:<12} {sampler:>7} {shape!s:>14} {out_shape!s:>14} {best:8.3f} {med:9.3f} {cpu:7.3f} "
                  f"{x.size / med:12.3e}")
        if len(timed) == 2 and name in ratios:
            (fw, fc, _), (sw, sc, _) = timed
            ratios[name] = statistics.median(s / f for s, f in zip(sw, fw))
            ratios_cpu[name] = statistics.median(s / f for s, f in zip(sc, fc))
    print("secure_over_float:", {k: (None if v is None else round(v, 2)) for k, v in ratios.items()})
    print("secure_over_float_cpu:", {k: (None if v is None else round(v, 2)) for k, v in ratios_cpu.items()})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cases": cases, "secure_over_float": ratios, "secure_over_float_cpu": ratios_cpu,
                       "repeats": args.repeats, "loadavg": list(os.getloadavg())}, f, indent=2)


if __name__ == "__main__":
    main()
