"""OME paper Table 1: NPNN vs OME for eps in {0.5, 1, 5, 10} (lambda = 100) and lambda in {1, 10, 50, 100} (eps = 1).

    nice -n 10 python simulations/ome_table1.py --data-root ../shared/data --datasets imdb,amazon,yelp

IMDb / Amazon / Yelp with GloVe-50d and the paper's server classifier (configs/ome_sentiment.toml: 128 hidden, raw
uploads), every cell on 5 user splits (run.seed 0, 10, 20, 30, 40) x 1 seed, the correct mechanisms (bitrr,
laplace-l1) at eps = 1. Intent (SNIPS) and MRPC (configs/ome_intent.toml, configs/ome_mrpc.toml: MiniLM, 10 server
epochs, 3 seeds) only with `--datasets snips,mrpc` (the default is the sentiment sets; the page shows the earlier
platform's Intent/MRPC points until they are rerun).
Reproducible simulation mode (`run.client-seed` in the configs): the tables regenerate exactly. All points run
inside ONE Flower simulation; finished points are saved under docs/results/ome/points/ and skipped on a rerun.
Writes docs/results/ome.md and the plots at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ome
import sweep


def main() -> None:
    ap = sweep.common_args(__doc__)
    ap.add_argument("--datasets", default=",".join(ome.SENTIMENT), help="comma-separated subset of "
                    + ", ".join(ome.DATASETS))
    args = ap.parse_args()
    datasets = tuple(d for d in args.datasets.split(",") if d)
    bad = [d for d in datasets if d not in ome.DATASETS]
    if bad:
        raise SystemExit(f"unknown dataset(s) {bad}; choose from {', '.join(ome.DATASETS)}")
    points = ome.table1_points(args.data_root, datasets)
    sweep.run_command(args, points, ome.STORE, name="table1", folder=ome.OUT, summarize=ome.write_summary)


if __name__ == "__main__":
    main()
