"""Flower simulation vs a plain in-process loop doing the same job (same users, cached features, mechanism,
classifier, attacker). Prints both wall times, their ratio, and seconds per 1,000 users.

    python benchmarks/bench_federation.py --data-root ../shared/data --users 20000 --clients 100
    python benchmarks/bench_federation.py --data-root ../shared/data --users 20000 --clients 1000 --skip-plain
    python benchmarks/bench_federation.py --users 20000 --clients 100 --repeats 1 --naive-users 10000 --json FILE

The job is `fl-privtext run`'s default point (server MLP 50 epochs, attacker 30 epochs; ``--epochs`` overrides
both) with ``--mechanism``. Users: the blog corpus's posts taken as users (one record each,
``data.options.max_rows``), so 20,000 users fit in the 60,000 staged posts.

Fairness of the comparison: every timing runs in a fresh Python process that has already imported fl_privtext,
loaded the dataset and mapped the cached features (untimed, identical for both paths); the timed part is the
whole job: for Flower, `run_points` (Ray start, actors, rounds, training, attacks, shutdown); for the plain loop,
`pipeline.run_plain` (the same clients, training and attacks, called in-process). Paths alternate over
``--repeats`` runs; medians are reported, and the results of both paths must be identical.

Fixed costs of the Flower path (from `run_points`' clock, `fl_privtext.federation.simulation.fixed_costs`) are printed
separately: Ray start (overlapping the driver's preparation), Flower's start, the first round (which includes the
actors' start-up) and the shutdown (overlapping the server's training). ``startup_s`` is everything before the first
round's replies: until the first round is done, less the plain loop's round. ``ratio_after_startup`` =
(Flower - startup) / plain: what the Flower path costs once Ray and the actors are up (the plain loop still pays
torch's first-optimizer import, ~1.4 s, inside its training; the Flower driver pays it while Ray starts).

``--naive-users N`` adds the naive design (`naive_federation.py`: one SuperNode per user, each uploading one 384-d
L1-Laplace vector) against ours doing the same uploads (SuperNodes holding shards of users, bounded in-flight
queries; ``--ours-clients`` of them, default ``--clients``), each in a fresh process, whole simulations timed
(Ray start to shutdown): ``naive_s``, ``ours_s``, ``naive_speedup`` = naive_s / ours_s, the upload rounds alone
(``naive_round_speedup``, after a warm-up of one ping per actor in both designs, so that neither round holds the
actors' start-up) and each side's phases (``naive_phases_s`` / ``ours_phases_s``: Ray start, Flower start, warm-up,
round, shutdown). The fixed costs (everything but the round) are the same work in both designs; ``naive_fixed_s`` /
``ours_fixed_s`` give them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any


def _config(args: argparse.Namespace) -> Any:
    from fl_privtext.config import ExperimentConfig

    flat: dict[str, Any] = {
        "data.name": "blog", "data.root": args.data_root, "data.options.max_rows": args.users,
        "data.options.user_per_record": True, "federation.num-clients": args.clients,
        "privacy.mechanism": args.mechanism, "run.progress": False, "run.baseline": False,
        # the reproducible simulation mode, so that both paths draw the same noise and their results can be compared
        "run.client-seed": 2_718_281_828,
    }
    if args.ray_address:
        flat["federation.ray-address"] = args.ray_address
    if args.max_in_flight:
        flat["federation.max-in-flight"] = args.max_in_flight
    if args.epochs:
        flat.update({"server.epochs": args.epochs, "attack.epochs": args.epochs})
    return ExperimentConfig.from_flat(flat)


def _worker(args: argparse.Namespace) -> None:
    """One timing in this (fresh) process; prints a JSON line."""
    from fl_privtext import pipeline

    if args.worker in ("naive", "ours"):
        from naive_federation import run

        users = args.naive_users
        nodes = users if args.worker == "naive" else (args.ours_clients or args.clients)
        out = run(args.worker, users, nodes, args.max_in_flight or 64)
        print(json.dumps({"path": args.worker, "seconds": out.pop("total_s"), **out}))
        return
    cfg = _config(args)
    prep = pipeline.prepare(cfg, features="extract")  # untimed and identical for both paths
    t = time.perf_counter()
    if args.worker == "flower":
        from fl_privtext.pipeline.runner import run_points

        (res,) = run_points([cfg])
    else:
        res = pipeline.run_plain(cfg, prep)
    seconds = time.perf_counter() - t
    seed = res["per_seed"][0]
    fixed = {k: v for k, v in res.get("simulation", {}).items() if k.endswith("_s")}
    print(json.dumps({"path": args.worker, "seconds": seconds, "users": len(prep.ds), "fixed": fixed,
                      "federation_s": seed["timing"]["federation_s"], "train_s": seed["timing"]["train_s"],
                      "attack_s": seed["timing"]["attack_s"],
                      "results": json.dumps([seed["utility"], seed["attacks"]], sort_keys=True, default=str)}))


def _run(args: argparse.Namespace, path: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", path, "--data-root", args.data_root, "--users", str(args.users),
           "--clients", str(args.clients), "--mechanism", args.mechanism, "--epochs", str(args.epochs),
           "--ray-address", args.ray_address, "--max-in-flight", str(args.max_in_flight),
           "--naive-users", str(args.naive_users), "--ours-clients", str(args.ours_clients)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{path} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if path in ("naive", "ours"):
        print(f"  {path:6s} {out['seconds']:7.2f} s  (Ray start {out['ray_start_s']:.2f} s, Flower start "
              f"{out['flower_start_s']:.2f} s, warm-up {out['warmup_s']:.2f} s, round {out['round_s']:.2f} s, shutdown {out['shutdown_s']:.2f} s; "
              f"{out['uploads']} uploads, complete {out['complete']})", flush=True)
        return out
    fixed = "".join(f", {k} {v:.2f}" for k, v in out.get("fixed", {}).items())
    print(f"  {path:6s} {out['seconds']:7.2f} s  (rounds {out['federation_s']:.2f} s, train {out['train_s']:.2f} s, "
          f"attack {out['attack_s']:.2f} s{fixed})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", default=os.environ.get("FL_PRIVTEXT_DATA", ""))
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--mechanism", default="laplace-l1")
    ap.add_argument("--epochs", type=int, default=0,
                    help="server and attacker epochs (same in both paths); 0 = the platform defaults (50 / 30)")
    ap.add_argument("--ray-address", default="", help="attach to this running Ray cluster (federation.ray-address)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per path, alternating the order")
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--max-in-flight", type=int, default=0,
                    help="federation.max-in-flight (queries pending at once); 0 = the platform default")
    ap.add_argument("--naive-users", type=int, default=0,
                    help="also time the naive design (one SuperNode per user) against ours at this many users")
    ap.add_argument("--ours-clients", type=int, default=0,
                    help="SuperNodes of our design in the naive comparison (each holds a shard); 0 = --clients")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--worker", choices=["flower", "plain", "naive", "ours"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return

    from fl_privtext import pipeline

    t = time.perf_counter()
    prep = pipeline.prepare(_config(args), features="extract", progress=True)  # fill the cache once
    print(f"prepare (load + cached features): {time.perf_counter() - t:.1f} s; {len(prep.ds)} users, "
          f"{args.clients} clients, {args.mechanism}, epochs {args.epochs or 'default (50 / 30)'}")
    runs: dict[str, list[dict[str, Any]]] = {"flower": [], "plain": []}
    for r in range(args.repeats):
        order = ["flower"] if args.skip_plain else (["flower", "plain"] if r % 2 == 0 else ["plain", "flower"])
        for path in order:
            runs[path].append(_run(args, path))

    users = len(prep.ds)
    fl = statistics.median(o["seconds"] for o in runs["flower"])
    out: dict[str, Any] = {
        "users": users, "clients": args.clients, "mechanism": args.mechanism, "epochs": args.epochs or "default",
        "repeats": args.repeats, "ray_address": args.ray_address or None, "flower_s": [o["seconds"] for o in runs["flower"]], "flower_s_median": fl,
        "flower_rounds_s_per_1000_users": statistics.median(o["federation_s"] for o in runs["flower"]) / users * 1e3,
    }
    if runs["plain"]:
        pl = statistics.median(o["seconds"] for o in runs["plain"])
        out.update({
            "plain_s": [o["seconds"] for o in runs["plain"]], "plain_s_median": pl, "ratio": fl / pl,
            "plain_rounds_s_per_1000_users": statistics.median(o["federation_s"] for o in runs["plain"]) / users * 1e3,
            "identical_results": len({o["results"] for o in runs["flower"] + runs["plain"]}) == 1,
        })
        # fixed costs of the Flower path, medians over its runs
        fixed = {k: statistics.median(o["fixed"][k] for o in runs["flower"]) for k in runs["flower"][0]["fixed"]}
        startup = statistics.median(
            o["fixed"]["until_first_round_s"] - statistics.median(p["federation_s"] for p in runs["plain"])
            for o in runs["flower"])
        out.update({"fixed_costs_s": fixed, "startup_s": startup, "ratio_after_startup": (fl - startup) / pl})
    if args.naive_users:
        naive = [_run(args, "naive")]
        ours = [_run(args, "ours")]
        out.update({
            "naive_users": args.naive_users, "naive_s": naive[0]["seconds"], "naive_round_s": naive[0]["round_s"],
            "ours_s": ours[0]["seconds"], "ours_round_s": ours[0]["round_s"],
            "ours_clients": args.ours_clients or args.clients,
            "naive_phases_s": {k: v for k, v in naive[0].items() if k.endswith("_s")},
            "ours_phases_s": {k: v for k, v in ours[0].items() if k.endswith("_s")},
            "naive_speedup": naive[0]["seconds"] / ours[0]["seconds"],
            "naive_round_speedup": naive[0]["round_s"] / ours[0]["round_s"],
            "naive_fixed_s": naive[0]["seconds"] - naive[0]["round_s"],
            "ours_fixed_s": ours[0]["seconds"] - ours[0]["round_s"],
            "naive_complete": naive[0]["complete"] and ours[0]["complete"],
        })
        print(f"{args.naive_users} users, one 384-d laplace-l1 upload each: naive (one SuperNode per user) "
              f"{out['naive_s']:.1f} s vs ours ({out['ours_clients']} SuperNodes) {out['ours_s']:.1f} s -> "
              f"{out['naive_speedup']:.0f}x (rounds alone: {out['naive_round_s']:.1f} s vs "
              f"{out['ours_round_s']:.2f} s, {out['naive_round_speedup']:.0f}x; fixed costs, the same work on both "
              f"sides: {out['naive_fixed_s']:.1f} s vs {out['ours_fixed_s']:.1f} s)", flush=True)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
