"""Secure aggregation of Phase B statistics on blog (10k posts, MiniLM; or AG news): on-device accuracy against
central epsilon.

    PYTHONPATH=. HF_HUB_OFFLINE=1 FL_PRIVTEXT_CACHE=/tmp/secstats_cache python simulations/secagg_blog.py \
        [--data-root /work/shared/data] [--epsilons 1,2,4,8] [--learner auto] [--proj-dim 64] [--second-weight 0.5]

The plain in-process loop (`fl_privtext.pipeline.secure.run_plain_secagg`): every client releases its noisy class
statistics under its own policy (client.secagg-epsilon, client.secagg-min-clients = 10 = every client) and the sum
is the exact one SecAgg+ reveals (the Flower path, `fl-privtext run --set server.aggregate=secagg`, gives the same
sum up to SecAgg+'s rounding). Blog as in simulations/frontier.py: 10 clients, 3 seeds, reproducible client streams.
Prints, per epsilon (issue #37): the on-device accuracy EXACT (the referee's exact accuracy of the shipped model on
the test users' clean features, a simulation-only figure; mean over seeds with its 95% bootstrap interval over test
users and seeds; per seed), beside what the server can estimate from the clients' randomized-response answers at
client.count-epsilon 1 (debiased; ± its noise std), and the learner; "no noise" is epsilon 1e6.
"""

from __future__ import annotations

import argparse
import json

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline import secure
from fl_privtext.pipeline.secure import results, run_plain_secagg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-root", default="/work/shared/data")
    ap.add_argument("--epsilons", default="1,2,4,8,1e6")
    ap.add_argument("--learner", default="auto")
    ap.add_argument("--proj-dim", type=int, default=0, help="> 0: privacy.projection = pca on the public data set "
                    "(ag_news for blog, imdb for ag_news)")
    ap.add_argument("--dataset", default="blog", choices=("blog", "ag_news"), help="ag_news: all 14,571 articles")
    ap.add_argument("--one-record", action="store_true", help="data.options.records_per_user = 1 (the trust page)")
    ap.add_argument("--seeds", type=int, default=3, help="repetitions (run.seeds; the role split stays fixed)")
    ap.add_argument("--second-weight", type=float, default=secure.SELECTION_SECOND_WEIGHT,
                    help="the selection layout's public second-moment weight beta (a study of the protocol's "
                    "constant `fl_privtext.pipeline.secure.SELECTION_SECOND_WEIGHT`; the clients' sensitivity "
                    "sqrt(4 + 4 beta^2) follows it)")
    args = ap.parse_args()
    if not 0 < args.second_weight <= 1:
        ap.error(f"--second-weight must be in (0, 1], got {args.second_weight}")
    secure.SELECTION_SECOND_WEIGHT = args.second_weight  # read by layout_for at each call
    data = ({"data.name": "blog", "data.options.max_rows": 10000} if args.dataset == "blog" else
            {"data.name": "ag_news"}) | ({"data.options.records_per_user": 1} if args.one_record else {})
    base = {**data, "data.root": args.data_root,
            "extractor.name": "minilm", "federation.num-clients": 10, "client.secagg-min-clients": 10,
            "run.seeds": args.seeds, "run.client-seed": 7, "run.progress": False, "server.aggregate": "secagg",
            "server.learner": args.learner}
    if args.proj_dim:
        base |= {"privacy.projection": "pca", "privacy.proj-dim": args.proj_dim,
                 "privacy.public-data": "ag_news" if args.dataset == "blog" else "imdb"}
    prep = pipeline.prepare(ExperimentConfig.from_flat(base), features="extract")
    for eps in (float(e) for e in args.epsilons.split(",")):
        cfg = ExperimentConfig.from_flat({**base, "client.secagg-epsilon": eps})
        r = results(run_plain_secagg(cfg, prep))
        od = r["utility"]["on_device"]
        ex, private = od["exact"], od["private"]
        print(json.dumps({"epsilon": eps, "central": r["privacy"]["central"]["epsilon"],
                          "exact": round(ex["accuracy"], 4), "exact_ci": [round(ex["ci_low"], 4),
                                                                         round(ex["ci_high"], 4)],
                          "exact_per_seed": [round(s["accuracy"], 4) for s in ex["per_seed"]],
                          "private": round(private["accuracy"], 4), "private_noise_std": round(private["noise_std"], 4),
                          "learner": r["utility"]["learner"], "per_seed_learner": [s["learner"] for s in
                                                                                   r["utility"]["per_seed"]],
                          "candidates": {n: {m: round(v, 4) for m, v in c.items()}
                                         for n, c in r["utility"].get("candidates", {}).items()},
                          "proj_dim": args.proj_dim, "second_weight": args.second_weight,
                          "majority": round(r["utility"]["majority_baseline"], 4)}),
              flush=True)


if __name__ == "__main__":
    main()
