"""OME paper Table 1: NPNN vs OME for eps in {0.5, 1, 5, 10} (lambda = 100) and lambda in {1, 10, 50, 100} (eps = 1).

    nice -n 10 python simulations/ome_table1.py --data-root ../shared/data

IMDb / Amazon / Yelp with GloVe-50d (configs/ome_sentiment.toml, 5 seeds), Intent (SNIPS) and MRPC with MiniLM
(configs/ome_intent.toml, configs/ome_mrpc.toml: 10 server epochs, 3 seeds - CPU budget). Also runs the correct
mechanisms at the same nominal eps (bitrr, laplace-l1), NPNN at 50 epochs for the MiniLM sets and 4 extra user
splits for the sentiment sets. All points run inside ONE Flower simulation; finished points are saved under
docs/results/ome/points/ and skipped on a rerun. Writes docs/results/ome.md and the plots at the end.
`--datasets imdb,amazon,yelp` restricts the run (the summary always shows everything saved).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ome
import sweep


def main() -> None:
    ap = sweep.common_args(__doc__)
    ap.add_argument("--datasets", default=",".join(ome.DATASETS), help="comma-separated subset of "
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
