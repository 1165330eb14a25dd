"""The attack stage's memory in the number of targets, without the rest of a run (issue #38).

    python benchmarks/bench_attack_memory.py --uploads 300000 1200000

A synthetic view of N uploads (3 a user on average, two categorical attributes of 5 and 2 classes, task labels in
the clear, ~2,000 aux users, the logistic attacker, no whole-traffic attacks) through `observe` and
`run_attacks` (both attributes side by side, as in a run): the peak of the memory traced by `tracemalloc` (numpy
arrays and Python objects) above the level at the start, and what is still held after, per size; the slope
between two sizes is the stage's growth per upload (constants such as imported modules cancel). Prints a digest
of the attacks' results.json entries, which must not change when only memory changes.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
import tracemalloc

import numpy as np


def measure(n: int) -> tuple[float, float, str, float]:
    """(peak above start, held after, results digest, seconds) for a view of ``n`` uploads."""
    from fl_privtext.attacks import evaluate
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.data import AttributeSpec
    from fl_privtext.privacy import make_mechanism

    g = np.random.default_rng(0)
    num_users = n // 3
    user = g.permutation(np.arange(n) % num_users).astype(np.int64)
    x = g.normal(size=(n, 6)).astype(np.float32)
    age, gender = g.integers(0, 5, num_users)[user], g.integers(0, 2, num_users)[user]
    x[:, 0] += 0.3 * age
    x[:, 1] += 0.3 * gender
    specs = {AttributeSpec("age_group", "categorical", tuple(f"a{j}" for j in range(5))): age,
             AttributeSpec("gender", "categorical", ("f", "m")): gender}
    labels = g.integers(0, 2, n).astype(np.int64)
    aux = np.isin(user, g.permutation(num_users)[:2000])
    cfg = ExperimentConfig.from_flat({"attack.families": "logistic", "attack.extra": False, "run.progress": False})
    tracemalloc.start()
    start, t0 = tracemalloc.get_traced_memory()[0], time.perf_counter()
    view, truth = evaluate.observe(
        uploads=x, labels=labels, users=user, senders=user % 100, texts=[""] * n, attributes=specs, aux=aux,
        clean=None, mechanism=make_mechanism("none"), epsilon=2.0, delta=0.0, num_labels=2, label_epsilon=0.0,
        seed=1, attack=cfg.attack)
    attacks, _ = evaluate.run_attacks(view, truth)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    entries = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in attacks.items()}
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True, default=repr).encode()).hexdigest()[:16]
    return peak - start, held - start, digest, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uploads", type=int, nargs="+", default=[300_000, 1_200_000])
    args = ap.parse_args()
    rows = []
    for n in args.uploads:
        peak, held, digest, seconds = measure(n)
        rows.append((n, peak))
        print(f"{n:>10,} uploads: peak {peak / 1e6:7.1f} MB above start ({peak / n:6.1f} B an upload), held after "
              f"{held / 1e6:6.1f} MB, results {digest}, {seconds:.0f} s")
    for (n0, p0), (n1, p1) in itertools.pairwise(rows):
        print(f"slope {n0:,} -> {n1:,}: {(p1 - p0) / (n1 - n0):.1f} B an upload")


if __name__ == "__main__":
    main()
