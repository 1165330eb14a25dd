"""Secure aggregation with public data (blog, MiniLM): the exact accuracy of the server's heads from a noisy secure
sum whose covariance comes from public rows, by projection width and shrinkage.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python simulations/secagg_public.py [--data-root ../shared/data] \
        [--public blog:other-users] [--dims 16,32,64] [--shrinks 0.2,0.5,0.8] [--epsilons 1,1e6]

The trust page's blog setting (10,000 posts, one record per user, role splits run.seed 0, 1, 2). The sum is drawn
here in one piece (its law: the clean statistics of the non-test users, `user_statistics`, plus the analytic Gaussian
noise of the whole sum at central epsilon, delta 1e-5, `share_noise_std`; no SecAgg+, no clients: the Flower path
reveals the same sum up to rounding), 3 noise draws per split, and each head (`fit_from_aggregate`: centroid, or lda
with the public covariance shrunk by `PUBLIC_SHRINK`) is scored EXACTLY on the test users' clean projected features
(no randomized-response answers: the trust page's on-device numbers add that noise). Prints the mean over the 9
draws (3 for epsilon 1e6, i.e. no noise). How `fl_privtext.server.aggregate.PUBLIC_SHRINK` and the trust page's 32
dimensions were chosen (docs/results/secagg_selection.md).
"""

from __future__ import annotations

import argparse

import numpy as np

import fl_privtext.server.aggregate as server_aggregate
from fl_privtext import pipeline
from fl_privtext.client.aggregate import (
    StatsLayout,
    share_noise_std,
    stats_input,
    stats_projection,
    user_statistics,
)
from fl_privtext.config import ExperimentConfig
from fl_privtext.ondevice import mlp_logits
from fl_privtext.public import PublicSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--public", default="blog:other-users", help="privacy.public-data (e.g. ag_news: out of domain)")
    ap.add_argument("--dims", default="16,32,64")
    ap.add_argument("--shrinks", default="0.2,0.5,0.8")
    ap.add_argument("--epsilons", default="1,1e6")
    args = ap.parse_args()
    sets = {"data.name": "blog", "data.root": args.data_root, "data.options.max_rows": 10000,
            "data.options.records_per_user": 1, "extractor.name": "minilm", "run.progress": False,
            "privacy.projection": "pca", "privacy.public-data": args.public}
    results: dict[tuple[float, int, str], list[float]] = {}
    for split in (0, 1, 2):
        for k in (int(v) for v in args.dims.split(",")):
            cfg = ExperimentConfig.from_flat({**sets, "run.seed": split, "privacy.proj-dim": k})
            prep = pipeline.prepare(cfg, features="extract")
            x, y = np.asarray(prep.features, np.float64), np.asarray(prep.ds.labels)
            public = server_aggregate.public_within(PublicSpec.of(cfg), x.shape[1])
            train, test = prep.roles != "test", prep.roles == "test"
            layout = StatsLayout(len(prep.ds.label_names), k, False)
            proj = stats_projection(PublicSpec.of(cfg), x.shape[1])
            clean = user_statistics(x[train], y[train], prep.ds.user_index[train], layout, proj)
            xt = stats_input(x[test], proj).astype(np.float32)
            for eps in (float(e) for e in args.epsilons.split(",")):
                for draw in range(1 if eps >= 1e5 else 3):
                    sigma = share_noise_std(eps, 1e-5, layout.sensitivity, 1)
                    g = np.random.default_rng([split, draw])
                    agg = server_aggregate.Aggregate.of(
                        np.concatenate([clean + sigma * g.normal(size=clean.shape), [1, sigma * sigma, 0]]), layout)
                    heads = [("centroid", None)] + [(f"lda, shrink {a}", float(a)) for a in args.shrinks.split(",")]
                    for name, shrink in heads:
                        if shrink is not None:
                            server_aggregate.PUBLIC_SHRINK = shrink
                        model, _ = server_aggregate.fit_from_aggregate(name.split(",")[0], agg,
                                                                       public if shrink is not None else None)
                        acc = float((mlp_logits(model.export(), xt).argmax(1) == y[test]).mean())
                        results.setdefault((eps, k, name), []).append(acc)
        print(f"split {split} done", flush=True)
    print(f"public rows {args.public!r}; accuracy (%) on the test users' clean features, mean over splits and draws")
    for (eps, k, name), v in sorted(results.items()):
        print(f"central epsilon {eps:g}  pca {k:3d}  {name:16s} {100 * np.mean(v):.1f}  ({len(v)} draws)")


if __name__ == "__main__":
    main()
