"""Flower simulation vs a plain in-process loop doing the same job (same users, cached features, mechanism,
classifier, attacker). Prints both wall times and their ratio, and seconds per 1,000 users.

    python benchmarks/bench_federation.py --data-root ../shared/data --users 20000 --clients 100
    python benchmarks/bench_federation.py --data-root ../shared/data --users 20000 --clients 1000 --skip-plain

Users: the blog corpus's posts taken as users (one record each, `data.options.max_rows`), so 20,000 users fit
in the 60,000 staged posts. Features are extracted once into the cache before either timing starts.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.runner import run_points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", default=os.environ.get("FL_PRIVTEXT_DATA", ""))
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--mechanism", default="laplace-l1")
    ap.add_argument("--epochs", type=int, default=5, help="server and attacker epochs (same in both paths)")
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    cfg = ExperimentConfig.from_flat({
        "data.name": "blog", "data.root": args.data_root, "data.options.max_rows": args.users,
        "data.options.user_per_record": True,
        "federation.num-clients": args.clients, "privacy.mechanism": args.mechanism,
        "server.epochs": args.epochs, "attack.epochs": args.epochs, "run.progress": False,
    })
    t = time.perf_counter()
    prep = pipeline.prepare(cfg, features="extract", progress=True)
    print(f"prepare (load + cached features): {time.perf_counter() - t:.1f} s; {len(prep.ds)} users")

    t = time.perf_counter()
    (fl,) = run_points([cfg])
    fl_s = time.perf_counter() - t
    out = {"users": len(prep.ds), "clients": args.clients, "mechanism": args.mechanism, "flower_s": fl_s,
           "flower_federation_s": fl["per_seed"][0]["timing"]["federation_s"]}
    out["flower_s_per_1000_users_federation"] = out["flower_federation_s"] / (len(prep.ds) / 1000)
    if not args.skip_plain:
        t = time.perf_counter()
        plain = pipeline.run_plain(cfg, prep)
        out["plain_s"] = time.perf_counter() - t
        out["plain_federation_s"] = plain["per_seed"][0]["timing"]["federation_s"]
        out["ratio_total"] = fl_s / out["plain_s"]
        out["ratio_federation_phase"] = out["flower_federation_s"] / out["plain_federation_s"]
        same = fl["per_seed"][0]["utility"] == plain["per_seed"][0]["utility"]
        out["identical_results"] = bool(same)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
