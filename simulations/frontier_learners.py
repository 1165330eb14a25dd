"""Which learner the frontier's goal points allow (issue #23): PrivUnitG at true epsilon 4 (with and without the
public PCA), each of the server's learners forced (``server.learner = centroid | lda | linear | mlp``) beside
``auto``'s choice, on the same uploads (same client stream: the learner is not part of the client's key).

    PYTHONPATH=. HF_HUB_OFFLINE=1 python simulations/frontier_learners.py   # resumable; prints the table

Forcing a learner uses the TEST users' accuracy to compare learners, which the server cannot see: this table says
how much the selection rule leaves on the table, it is not a server the platform could run as is.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import frontier
from sweep import Store, common_args, derive, md_table, run_sweep, setup_threads

LEARNERS = ("auto", "centroid", "lda", "linear", "mlp")
GOAL_POINTS = (("blog", "privunitg", 4.0), ("blog", "privunitg + pca 32", 4.0), ("ag_news", "privunitg", 4.0),
               ("ag_news", "privunitg + pca 32", 4.0))


def main() -> None:
    ap = common_args(__doc__ or "")
    args = ap.parse_args()
    pts = frontier.points(args.data_root)
    store = Store(frontier.STORE)
    cfgs = {(ds, line, eps, lr): derive(pts[(ds, line, eps)], **{"server.learner": lr})
            for ds, line, eps in GOAL_POINTS for lr in LEARNERS}
    if not args.summary_only:
        setup_threads(args.threads)
        run_sweep([c for c in cfgs.values() if not store.has(c)], store)
    rows = []
    for ds, line, eps in GOAL_POINTS:
        row = [ds, line, frontier.eps_str(eps)]
        for lr in LEARNERS:
            r = store.get(cfgs[(ds, line, eps, lr)])
            row.append("todo" if r is None else
                       f"{frontier._cell(*frontier.task(r, 'per_upload'))} / "
                       f"{frontier._cell(*frontier.task(r, 'on_device'))}" + (frontier.chosen(r) if lr == "auto" else ""))
        rows.append(row)
    print(md_table(["data", "mechanism", "true ε", *(f"{lr} (per upload / on device)" for lr in LEARNERS)], rows))


if __name__ == "__main__":
    main()
