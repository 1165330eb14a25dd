"""DPNR paper Tables 2, 4, 5, 6, 7 and Figure 3: NON-PRIV and eps in {0.05, 0.1, 0.5, 1, 5} (mu = 0) on AG news and
our blog subset, the published laplace-dpnr (true eps = 384 eps) beside the correct laplace-l1 (true eps = eps).

    nice -n 10 python simulations/dpnr_eps.py --data-root ../shared/data

MiniLM features, 3 seeds per point (configs/dpnr_ag.toml: the file's own split, data.split = source;
configs/dpnr_blog.toml: one random split by blogger). Every point carries the task accuracy (Table 2), the
eavesdropper's attack (Table 4, Table 5, Figure 3) and the per-group accuracies (Tables 6, 7), so one sweep serves all
those tables; it also runs the centring demonstration (`laplace-dpnr-code` with `server.center = true` at every eps)
and the ADV rows (Phase A, `train.defense = adversarial`, 1 seed). Reproducible simulation mode (`run.client-seed`
in the configs): the tables regenerate exactly. All points run inside ONE Flower simulation; finished points are
saved under docs/results/dpnr/points/ and skipped on a rerun. Writes docs/results/dpnr.md and the plots at the end.
`--datasets ag_news` or `--datasets blog` restricts the run.
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
    args = ap.parse_args()
    datasets = tuple(d for d in args.datasets.split(",") if d)
    if any(d not in dpnr.DATASETS for d in datasets):
        raise SystemExit(f"--datasets: choose from {', '.join(dpnr.DATASETS)}")
    points = dpnr.eps_points(args.data_root, datasets)
    sweep.run_command(args, points, dpnr.STORE, name="eps", folder=dpnr.OUT, summarize=dpnr.write_summary)


if __name__ == "__main__":
    main()
