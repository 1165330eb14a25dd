"""Trust models at equal epsilon against the server (issue #24 item 4): local DP, local DP + shuffler, and secure
aggregation with distributed noise, on blog and AG news.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python simulations/trust_models.py             # run what is missing, write the page
    python simulations/trust_models.py --summary-only | --list

Writes docs/results/trust_models.md. Data and features as the frontier (`simulations/frontier.py`: blog = a seeded
10,000-post subset, AG news = all 14,571 articles, MiniLM), 10 clients, every point through one Flower simulation
(Ray backend), the clients' policy and ledgers on. For a target T, the epsilon AGAINST THE SERVER per user:

- local DP: PrivUnitG (float sampler) on the representation at 0.75 T and k-ary randomized response on the label at
  0.25 T.
- local DP + shuffler (``federation.shuffle``): the same, at the local epsilon eps0 whose shuffled central epsilon
  (Wang et al. VLDB'24 bound, n = the smallest shuffled cohort's users, delta 1e-5) is T; the report's
  ``privacy.central`` is checked against T.
- secure aggregation (``server.aggregate = secagg``): each client's noisy class statistics through Flower's
  SecAgg+, central epsilon T at delta 1e-5 (``client.secagg-epsilon``), every client required
  (``client.secagg-min-clients`` = 10).
- secure aggregation + public data: the same, with the clients projecting onto the top 32 principal directions of
  public rows before summing (``privacy.projection = pca``) and the server's lda taking the public rows' covariance
  instead of a second moment in the sum (`fl_privtext.server.aggregate.public_within`). Public rows: blog = 10,000
  posts of the corpus's bloggers who are NOT simulated (``privacy.public-data = blog:other-users``: unlabelled text of
  the task's domain from people outside the federation); AG news = IMDB sentences (no in-domain rows remain: every
  article is a simulated user).

Every user keeps ONE record (``data.options.records_per_user = 1``: blog has 6,510 users in its 10,000 posts), so
a user's release is one report under every trust model and T is the per-user epsilon of the training release. The
test users' on-device answers (one randomized-response bit each, ``client.count-epsilon`` = 1, the same protocol
for every row) come on top. Repetitions: three role splits (``run.seed`` 0, 1, 2), one noise draw each.
The server's learner is chosen by ``server.learner = auto`` (cross-validated on uploads; from aggregates, the
secure path's rule in `fl_privtext.server.aggregate`). The eavesdropper: its best attribute attacker, against its
prior (secure aggregation leaves it nothing per user).

Figures (issue #37): ON DEVICE, EXACT is the referee's exact accuracy of the model the server shipped, applied by the
test clients to their clean features (a simulation-only figure: how good is the model each trust model allows);
the server's own estimate from the clients' randomized-response answers (what a deployed server knows) is in its own
table. Every interval is 95%: each split's percentile bootstrap over its test (or target) users, each with all its
records (`fl_privtext.bootstrap`, in the point's results.json), combined over the 3 splits by
`fl_privtext.bootstrap.seeds_interval` (each side the mean of the splits' sides in quadrature with Student's t over
the splits; the splits' test users differ, so this is conservative). Before 2026-11-28 the page showed the
randomized-response-counted accuracy with t-intervals over the splits (the old discussion:
trust_models/discussion_2026-11-27.md).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frontier import (
    DATASETS,
    Fig,
    advantage,
    fig_cell,
    non_monotone,
    on_device_exact,
    on_device_private,
    over_splits,
    per_upload,
)
from sweep import (
    RESULTS,
    Store,
    common_args,
    derive,
    drop_stale,
    eps_str,
    has_exact,
    list_points,
    md_table,
    run_sweep,
)

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy.amplification import shuffle_epsilon

FOLDER = RESULTS / "trust_models"
STORE = FOLDER / "points"
TARGETS = (1.0, 4.0)
SPLITS = (0, 1, 2)
DELTA = 1e-5
STAGES = ("federation_s", "train_s", "on_device_s", "attack_s")  # the page's cost: traffic, training, answers, attack
MODELS = ("no privacy", "local DP", "local DP + shuffler", "secure aggregation", "local DP, clients choose",
          "secure aggregation, clients choose", "secure aggregation + public data",
          "secure aggregation + public data, clients choose")
PUBLIC = {"blog": "blog:other-users", "ag_news": "imdb"}  # the public rows of "+ public data" (module docstring)
PUBLIC_DIM = 32
CHOOSE = {"server.select-on": "clients"}  # the test clients choose the on-device model (server/ondevice_selection.py)
COMMON: dict[str, Any] = {
    "extractor.name": "minilm", "run.seeds": 1, "run.client-seed": 918273645, "run.progress": False,
    "run.baseline": False, "federation.num-clients": 10, "server.learner": "auto", "server.epochs": 20,
    "server.hidden": 128, "server.batch-size": 128, "server.lr": 0.05, "attack.epochs": 15,
    "attack.families": "logistic,likelihood", "attack.folds": 2, "attack.extra": False,
    "privacy.sampler": "float", "privacy.delta": DELTA, "data.options.records_per_user": 1,
    "client.secagg-delta": DELTA, "client.secagg-min-clients": 10,
}


def base(dataset: str, data_root: str, split: int) -> ExperimentConfig:
    sets = {**COMMON, **{k: v for k, v in DATASETS[dataset].items() if k != "privacy.public-data"},
            "data.root": data_root, "run.seed": split}
    return ExperimentConfig.from_flat(sets, ExperimentConfig())


def smallest_cohort(cfg: ExperimentConfig) -> int:
    """Users in the smallest shuffled cohort (train or test users: the shuffler mixes each apart)."""
    prep = pipeline.prepare(cfg, features="none")
    users = np.asarray(prep.ds.user_index)
    return min(len(np.unique(users[prep.roles == r])) for r in ("train", "test"))


def local_for_central(target: float, n: int, delta: float) -> float:
    """The largest local epsilon (per user and round) whose shuffled central epsilon is at most ``target``."""
    lo, hi = target, 60.0
    if shuffle_epsilon(hi, n, delta) <= target:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if shuffle_epsilon(mid, n, delta) <= target else (lo, mid)
    return lo


def local_point(b: ExperimentConfig, eps_user: float, **extra: Any) -> ExperimentConfig:
    return derive(b, **{"privacy.mechanism": "privunitg", "privacy.epsilon": 0.75 * eps_user,
                        "privacy.label-epsilon": 0.25 * eps_user, **extra})


def points(data_root: str) -> dict[tuple[str, str, float, int], ExperimentConfig]:
    """(dataset, model, target, split) -> config."""
    out: dict[tuple[str, str, float, int], ExperimentConfig] = {}
    for ds in DATASETS:
        for split in SPLITS:
            b = base(ds, data_root, split)
            out[(ds, "no privacy", math.inf, split)] = derive(b, **{"privacy.mechanism": "none"})
            n = smallest_cohort(b)
            for t in TARGETS:
                out[(ds, "local DP", t, split)] = local_point(b, t)
                out[(ds, "local DP + shuffler", t, split)] = local_point(
                    b, local_for_central(t, n, DELTA), **{"federation.shuffle": True})
                out[(ds, "secure aggregation", t, split)] = derive(
                    b, **{"privacy.mechanism": "none", "server.aggregate": "secagg", "client.secagg-epsilon": t})
                out[(ds, "local DP, clients choose", t, split)] = local_point(b, t, **CHOOSE)
                out[(ds, "secure aggregation, clients choose", t, split)] = derive(
                    b, **{"privacy.mechanism": "none", "server.aggregate": "secagg", "client.secagg-epsilon": t,
                          **CHOOSE})
                public = {"privacy.mechanism": "none", "server.aggregate": "secagg", "client.secagg-epsilon": t,
                          "privacy.projection": "pca", "privacy.proj-dim": PUBLIC_DIM, "privacy.public-data": PUBLIC[ds]}
                out[(ds, "secure aggregation + public data", t, split)] = derive(b, **public)
                out[(ds, "secure aggregation + public data, clients choose", t, split)] = derive(b, **public, **CHOOSE)
    return out


# ---- the page (issue #37: the exact on-device figure, intervals over test users and role splits) ------------------


def private_over_splits(res: list[dict[str, Any]]) -> tuple[float, float]:
    """What the server can estimate: the mean over splits of its debiased randomized-response estimates, and the
    noise std of that mean (independent answers per split: sqrt(sum of variances) / splits)."""
    got = [on_device_private(r) for r in res]
    got = [(m, sd) for m, sd in got if not math.isnan(m)]
    if not got:
        return math.nan, math.nan
    return float(np.mean([m for m, _ in got])), float(math.sqrt(sum(sd * sd for _, sd in got)) / len(got))


def _learners(res: list[dict[str, Any]]) -> str:
    """The learner each split shipped (the clients' choice where they choose), e.g. 'lda / lda / centroid'."""
    return " / ".join(str(r["utility"].get("on_device", {}).get("learner") or r["utility"].get("learner", "-"))
                      for r in res)


def _mb(b: Any) -> str:
    return f"{float(b) / 1e6:.1f} MB" if isinstance(b, (int, float)) else "-"


def _central(res: dict[str, Any]) -> str:
    c = res.get("privacy", {}).get("central")
    if isinstance(c, dict):
        return f"{float(c['epsilon']):.3g} ({c.get('via')})"
    comp = res.get("privacy", {}).get("composition", {}).get("per_user", {})
    total = comp.get("max_epsilon_total", "-")
    return (f"{float(total):.3g}" if isinstance(total, (int, float)) else str(total)) + " (local, incl. on-device)"


def _splits_note(res: list[dict[str, Any]]) -> str:
    return "" if len(res) == len(SPLITS) else f" ({len(res)} of {len(SPLITS)} splits)"


def summarize(data_root: str) -> str:
    store = Store(STORE)
    pts = points(data_root)
    # points saved by earlier code (RR-counted accuracy, no exact figure) are not shown: they say "not regenerated"
    fresh = {k: r for k, c in pts.items() if (r := store.get(c)) is not None and has_exact(r)}
    lines = ["# Trust models at equal epsilon against the server (issues #24, #37)\n",
             (f"**{len(fresh)} of {len(pts)} points computed with the current code** (exact on-device figure); the "
             "others say \"not regenerated\".\n"), (__doc__ or "").split("\n\n", 2)[2], ""]
    for ds in DATASETS:
        rows, priv_rows, att_rows, flags = [], [], [], []
        attrs = sorted({a for (d, *_), r in fresh.items() if d == ds for a in r.get("attacks", {})})
        exact_lines: dict[str, list[tuple[float, Fig]]] = {}
        for model in MODELS:
            for t in ([math.inf] if model == "no privacy" else TARGETS):
                res = [fresh[(ds, model, t, s)] for s in SPLITS if (ds, model, t, s) in fresh]
                if not res:
                    rows.append([model, eps_str(t), "not regenerated", "-", "-", "-", "-", "-"])
                    priv_rows.append([model, eps_str(t), "not regenerated", "-"])
                    continue
                note = _splits_note(res)
                ex = over_splits([on_device_exact(r) for r in res])
                exact_lines.setdefault(model, []).append((t, ex))
                secure = any(r["config"].get("server.aggregate") == "secagg" for r in res)
                pu = "-" if secure else fig_cell(over_splits([per_upload(r) for r in res]))
                fed = res[0].get("federation", {})
                cost = np.mean([sum(float(r["timing"].get(k, 0.0)) for k in STAGES) for r in res])
                rows.append([model, eps_str(t), fig_cell(ex) + note, _learners(res), pu, _central(res[0]),
                             f"{fed.get('rounds', '-')} / {_mb(fed.get('bytes_observed'))}", f"{cost:.0f}"])
                pm, psd = private_over_splits(res)
                priv_rows.append([model, eps_str(t), "-" if math.isnan(pm) else f"{100 * pm:.1f} ± {100 * psd:.1f}",
                                  " / ".join("-" if math.isnan(m) else f"{100 * m:.1f} ± {100 * sd:.1f}"
                                             for m, sd in map(on_device_private, res))])
                if secure:
                    att_rows.append([model, eps_str(t)] + ["nothing per user (secure sum)"] * len(attrs))
                else:
                    adv = [advantage(r) for r in res]
                    att_rows.append([model, eps_str(t)] + [
                        fig_cell(over_splits([a[x] for a in adv if x in a], bounds=(-1.0, 1.0))) for x in attrs])
        clear = exact_lines.get("no privacy", [])
        for model, line in exact_lines.items():
            if model != "no privacy":
                bad = non_monotone(line + clear)
                if bad:
                    flags.append(f"- {model}: " + "; ".join(bad))
        lines += [(f"## {ds}: task accuracy ON DEVICE, exact (%), [95% interval over test users and the 3 role "
                  "splits]\n"),
                  ("The referee's exact accuracy of the model the server shipped, applied by the test clients to their "
                   "clean features (a simulation-only figure: how good is the model each trust model allows); the "
                   "learner shipped on each split; per upload: the server's accuracy on the test users' noisy uploads "
                   "(local DP only: a secure sum has no per-user uploads).\n"),
                  md_table(["trust model", "target ε", "on device, exact", "learner (per split)", "per upload",
                            "ε against the server (via)", "rounds / bytes",
                            "seconds (traffic + training + answers + attack)"], rows), ""]
        # the true majority share of the test users, from the no-privacy points (there the labels are clean; a
        # private point's exact.majority_baseline is the share of the class the server BELIEVES is the majority)
        maj = [float(r["utility"]["majority_baseline"]) for (d, m, *_), r in fresh.items()
               if d == ds and m == "no privacy"]
        if maj:
            lines.append("Majority (the true majority class's share of the test users, per split): "
                         + " / ".join(f"{100 * m:.1f}" for m in maj) + f", mean {100 * float(np.mean(maj)):.1f}.\n")
        lines.append("Monotone in epsilon (1, 4, then no privacy) within the intervals: " + (
            "every regenerated line.\n" if not flags else "not everywhere; a higher epsilon's interval lies wholly "
            "below a lower one's at:\n\n" + "\n".join(flags) + "\n"))
        lines += [f"### {ds}: what the server can estimate on device (%), ± the noise std of its estimate\n",
                  ("The server's own figure from the test clients' randomized-response answers (client.count-epsilon "
                   "1, debiased): what a deployed server knows; the mean over the splits (± the std of that mean) and "
                   "each split's. Where the clients choose, it comes from the reporting half of the test users. Read "
                   "the exact table for the model's quality.\n"),
                  md_table(["trust model", "target ε", "server's estimate, mean of splits", "per split"], priv_rows),
                  ""]
        lines += [(f"### {ds}: what the privatized uploads add to the eavesdropper (points), [95% interval over target "
                  "users and splits]\n"),
                  ("The eavesdropper's accuracy minus its prior (the majority given the task label, which is uploaded "
                   "in the clear); 0.0 [0.0, 0.0]: no learned attacker beat the prior on held-out auxiliary users, so "
                   "it answers the prior (no leak detected at this power). A secure sum leaves it nothing per user.\n"),
                  md_table(["trust model", "target ε", *attrs], att_rows), ""]
    disc = FOLDER / "discussion.md"
    if disc.is_file():
        lines.append(disc.read_text())
    text = "\n".join(lines) + "\n"
    (RESULTS / "trust_models.md").write_text(text)
    return text


def main() -> None:
    ap = common_args(__doc__ or "")
    ap.add_argument("--dataset", choices=sorted(DATASETS), help="run only this data set's points")
    ap.add_argument("--target", type=float, action="append", help="run only these targets (and no privacy)")
    ap.add_argument("--model", action="append", choices=MODELS, help="run only these trust models")
    ap.add_argument("--split", type=int, action="append", choices=SPLITS, help="run only these role splits")
    args = ap.parse_args()
    pts = points(args.data_root)
    todo = [c for (ds, m, t, s), c in pts.items()
            if (args.dataset is None or ds == args.dataset) and (args.target is None or t in args.target
                                                                 or math.isinf(t))
            and (args.model is None or m in args.model) and (args.split is None or s in args.split)]
    store = Store(STORE)
    if args.list:
        list_points(todo, store)
        return
    if not args.summary_only:
        gone = drop_stale(todo, store)  # saved by earlier code without the exact figure: recomputed
        print(f"[trust models] {len(gone)} stored points lack the exact on-device figure: recomputed")
        run_sweep(todo, store)
    print(summarize(args.data_root))


if __name__ == "__main__":
    main()
