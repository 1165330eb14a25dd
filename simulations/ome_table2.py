"""OME paper Table 2: SUE, OUE and OME (lambda = 100) at eps = 1 on IMDb, Amazon, Yelp (GloVe-50d, the paper's
classifier, 5 user splits x 1 seed, reproducible simulation mode).

    nice -n 10 python simulations/ome_table2.py --data-root ../shared/data

Also SUE/OUE with the textbook calibration, bitrr and laplace-l1 at eps = 1, and NPNN (shared with Table 1: points
already saved by ome_table1.py are skipped). One Flower simulation; results in docs/results/ome/points/;
writes docs/results/ome.md and the plots.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ome
import sweep


def main() -> None:
    args = sweep.common_args(__doc__).parse_args()
    points = ome.table2_points(args.data_root)
    sweep.run_command(args, points, ome.STORE, name="table2", folder=ome.OUT, summarize=ome.write_summary)


if __name__ == "__main__":
    main()
