"""OME paper Figure 3: randomization probabilities p1, p2, q vs eps (lambda = 100) and vs lambda (eps = 1), r = 50,
l = 10, computed from the privacy package (make_mechanism("ome", ...).probabilities()), with SUE/OUE for reference
and the true worst-case epsilon vs lambda. No simulation; seconds.

    python simulations/ome_figure3.py

Writes docs/results/ome_figure3_probabilities.png and docs/results/ome/figure3.md (the values as a table).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ome
import sweep


def main() -> None:
    args = sweep.common_args(__doc__).parse_args()
    if args.list:  # no simulation points: --list must not rewrite the page
        print("ome_figure3.py has no simulation points (Figure 3 is computed from the mechanism's probabilities)")
        return
    ome.OUT.mkdir(parents=True, exist_ok=True)
    (ome.OUT / "figure3.md").write_text("# OME randomization probabilities (r = 50, l = 10)\n\n"
                                        + ome.probabilities_table() + "\n")
    print(ome.write_summary(args.data_root))  # also redraws every OME plot, Figure 3 included


if __name__ == "__main__":
    main()
