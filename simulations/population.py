"""The population view (issue #23 item 5): how many users a local-DP mechanism needs before the server's class-mean
estimate is better than the gap it has to resolve.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python simulations/population.py            # writes docs/results/population.md
    python simulations/population.py --dataset blog                          # one data set

For every line and true epsilon of the frontier (`simulations/frontier.py`: same data, MiniLM features, mechanisms
at checked TRUE epsilon, float sampler), the server's label-wise learner estimates each class mean by averaging
n_c unbiased uploads u = x + noise, E[u | x] = x (x: the mechanism's clipped/normalised, possibly projected input,
`Mechanism.expected`). The error of the estimated difference of two class means a, b has

    E || (mu_a - mu_b)^ - (mu_a - mu_b) ||^2 = (T_a + N) / n_a + (T_b + N) / n_b,

T_c = E || x - mu_c ||^2 the clean within-class spread, N = tr E[Cov(u | x)] the noise law's trace
(`fl_privtext.server.noise.noise_variance`, which the server legitimately knows). With balanced classes (n_a = n_b
= n / K uploads), it falls below the separation || mu_a - mu_b ||^2 at

    n* = K (T_a + T_b + 2 N) / || mu_a - mu_b ||^2        uploads,

and the page reports the worst (closest) pair, in uploads and in users (n* over the mean uploads per user). Below
n* the server's nearest-class-mean rule is dominated by estimation noise; well above it, the on-device accuracy
approaches the clean rule's. This is a planning figure: the clean statistics (mu_c, T_c) are those of the data set's
own users (the oracle view, standing in for an in-domain public set the server might hold), the noise trace is
exact in law for the additive mechanisms and the isotropic part for the sphere mechanisms (see server/noise.py).
The data sets themselves hold 10^4 (blog) and 1.5 x 10^4 (AG news) uploads; the column "x data" says how many
times larger than the data set the population must be.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frontier import DATASETS, LINES, TRUE_EPS, points
from sweep import RESULTS, default_data_root, eps_str, md_table

from fl_privtext import pipeline, rng
from fl_privtext.client import mechanism_for
from fl_privtext.public import PublicSpec
from fl_privtext.server.noise import noise_variance


def class_stats(z: np.ndarray, y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class means (K, D) and within-class spreads T_c = E||z - mu_c||^2 (K,), float64."""
    z = np.asarray(z, np.float64)
    mu = np.stack([z[y == c].mean(0) for c in range(k)])
    spread = np.array([((z[y == c] - mu[c]) ** 2).sum(1).mean() for c in range(k)])
    return mu, spread


def uploads_needed(mu: np.ndarray, spread: np.ndarray, noise_trace: float) -> tuple[float, tuple[int, int]]:
    """n* (uploads, balanced classes) at which the class-mean difference error equals the separation, for the
    worst pair; and that pair."""
    k = len(mu)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    need = [k * (spread[a] + spread[b] + 2 * noise_trace) / max(float(((mu[a] - mu[b]) ** 2).sum()), 1e-300)
            for a, b in pairs]
    i = int(np.argmax(need))
    return float(need[i]), pairs[i]


def _fmt(n: float) -> str:
    return "∞" if not math.isfinite(n) else (f"{n:,.0f}" if n < 1e6 else f"{n:.2g}")


def population_table(dataset: str, data_root: str) -> tuple[list[str], list[list[str]], str]:
    pts = points(data_root)
    clear_cfg = pts[(dataset, "no privacy", math.inf)]
    prep = pipeline.prepare(clear_cfg)
    if prep.features is None:
        raise RuntimeError(f"{dataset}: no cached features")
    keep = prep.roles == "train"
    x = np.asarray(prep.features[keep], np.float32)
    y = np.asarray(prep.ds.labels)[keep]
    k = len(prep.ds.label_names)
    users = np.asarray(prep.ds.user_index)[keep]
    per_user = len(y) / len(np.unique(users))
    n_data = len(prep.roles)
    header = ["mechanism", *[f"true ε {eps_str(e)}" for e in TRUE_EPS]]
    rows: list[list[str]] = []
    for label in LINES:
        row = [label]
        for eps in TRUE_EPS:
            cfg = pts[(dataset, label, eps)]
            mech = mechanism_for(PublicSpec.of(cfg), x.shape[1])
            z = mech.expected(x)
            mu, spread = class_stats(z, y, k)
            noise = noise_variance(mech, x.shape[1], z.mean(0), rng.generator(0, "population", "noise"))
            n, _ = uploads_needed(mu, spread, float(noise.sum()))
            row.append(f"{_fmt(n / per_user)} users ({n / n_data:.2g}x data)")
        rows.append(row)
    mu, spread = class_stats(x, y, k)
    n0, pair = uploads_needed(mu, spread, 0.0)
    note = (f"No privacy: {_fmt(n0 / per_user)} users; worst pair {prep.ds.label_names[pair[0]]!r} / "
            f"{prep.ds.label_names[pair[1]]!r}; {per_user:.2f} uploads per user; the data set has {n_data:,} "
            f"uploads ({len(np.unique(np.asarray(prep.ds.user_index))):,} users).")
    return header, rows, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", default=default_data_root())
    ap.add_argument("--dataset", choices=sorted(DATASETS), action="append")
    args = ap.parse_args()
    lines = ["# The population view (issue #23 item 5)\n", (__doc__ or "").split("\n\n", 2)[2], ""]
    for ds in args.dataset or list(DATASETS):
        header, rows, note = population_table(ds, str(Path(args.data_root).resolve()))
        lines += [f"## {ds}: users at which the class-mean error falls below the class separation\n", note + "\n",
                  md_table(header, rows), ""]
    extra = RESULTS / "population" / "synthetic.md"
    if extra.is_file():
        lines.append(extra.read_text())
    (RESULTS / "population.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
