"""DPNR paper Table 3: main-task accuracy vs word dropout mu in {0.1, 0.3, 0.5, 0.8} at eps = 1, on AG news and our
blog subset, laplace-dpnr beside laplace-l1, with the GloVe-50d extractor (3 seeds) and its own NON-PRIV and mu = 0
references.

    nice -n 10 python simulations/dpnr_mu.py --data-root ../shared/data
    nice -n 10 python simulations/dpnr_mu.py --data-root ../shared/data --minilm-mu 0.5   # + MiniLM, 1 seed

Why GloVe: word dropout is applied to the texts on the client, so every point and seed re-extracts every text
(no cache). With MiniLM on 2 shared CPU cores one AG pass takes ~10 min (the full MiniLM sweep: ~2 h); with GloVe
it takes seconds. `--minilm-mu` adds MiniLM laplace-dpnr points at the given mu values (`--minilm-seeds`, default
1), clearly labelled in the summary. One Flower simulation; results under docs/results/dpnr/points/ (resumable).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dpnr
import sweep


def main() -> None:
    ap = sweep.common_args(__doc__)
    ap.add_argument("--datasets", default=",".join(dpnr.DATASETS))
    ap.add_argument("--minilm-mu", default="", help="comma-separated mu values to also run with MiniLM")
    ap.add_argument("--minilm-seeds", type=int, default=1)
    args = ap.parse_args()
    datasets = tuple(d for d in args.datasets.split(",") if d)
    minilm = tuple(float(m) for m in args.minilm_mu.split(",") if m)
    points = dpnr.mu_points(args.data_root, datasets, minilm, args.minilm_seeds)
    sweep.run_command(args, points, dpnr.STORE, name="mu", folder=dpnr.OUT, summarize=dpnr.write_summary)


if __name__ == "__main__":
    main()
