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
for every row) come on top. Repetitions: three role splits (``run.seed`` 0, 1, 2), 95% t-intervals.
The server's learner is chosen by ``server.learner = auto`` (cross-validated on uploads; from aggregates, the
secure path's rule in `fl_privtext.server.aggregate`). The eavesdropper: the best attribute attack per upload and
per named user, against its baseline (secure aggregation leaves it nothing per user).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frontier import DATASETS, ci95
from sweep import RESULTS, Store, common_args, derive, eps_str, list_points, md_table, run_sweep

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


# ---- the page ------------------------------------------------------------------------------------------------------


def _cell(values: list[float]) -> str:
    if not values:
        return "todo"
    m, h = ci95(values)
    return f"{100 * m:.1f}" + ("" if math.isnan(h) else f" ± {100 * h:.1f}")


def _attack(res: dict[str, Any]) -> str:
    """The eavesdropper's best attribute attack: accuracy minus its baseline, per upload / per named user."""
    if not res.get("attacks"):
        return "nothing per user (" + str(res.get("attacks_note", "no uploads"))[:60] + "...)"
    cells = []
    for name, a in sorted(res["attacks"].items()):
        base_acc = a.get("majority_given_label_baseline", a["majority_baseline"])
        pu = a.get("per_user", {}).get("accuracy")
        cells.append(f"{name} {100 * (a['accuracy'] - base_acc):+.1f}"
                     + (f" / {100 * (pu - base_acc):+.1f}" if isinstance(pu, (int, float)) else ""))
    return "; ".join(cells)


def _mb(b: Any) -> str:
    return f"{float(b) / 1e6:.1f} MB" if isinstance(b, (int, float)) else "-"


def _central(res: dict[str, Any]) -> str:
    c = res.get("privacy", {}).get("central")
    if isinstance(c, dict):
        return f"{float(c['epsilon']):.3g} ({c.get('via')})"
    comp = res.get("privacy", {}).get("composition", {}).get("per_user", {})
    total = comp.get("max_epsilon_total", "-")
    return (f"{float(total):.3g}" if isinstance(total, (int, float)) else str(total)) + " (local, incl. on-device)"


def summarize(data_root: str) -> str:
    store = Store(STORE)
    pts = points(data_root)
    lines = ["# Trust models at equal epsilon against the server (issue #24)\n", (__doc__ or "").split("\n\n", 2)[2], ""]
    for ds in DATASETS:
        lines.append(f"## {ds}: on-device task accuracy (%), mean ± 95% CI over 3 role splits\n")
        rows = []
        for model in MODELS:
            for t in ([math.inf] if model == "no privacy" else TARGETS):
                res = [store.get(pts[(ds, model, t, s)]) for s in SPLITS]
                done = [r for r in res if r is not None]
                od = [r["utility"]["on_device"]["accuracy"] for r in done if r["utility"].get("on_device")]
                pu = [r["utility"]["accuracy"] for r in done if "accuracy" in r["utility"]]
                if not done:
                    rows.append([model, eps_str(t), "todo", "todo", "todo", "-", "-", "-", "-"])
                    continue
                first = done[0]
                cost = np.mean([sum(float(r["timing"].get(k, 0.0)) for k in STAGES) for r in done])
                fed = first.get("federation", {})
                learners = sorted({str(r["utility"].get("on_device", {}).get("learner")
                                       or r["utility"].get("learner", "-")) for r in done})
                rows.append([model, eps_str(t), _cell(od), _cell(pu) if not model.startswith("secure") else "-",
                             _central(first), " / ".join(learners), _attack(first),
                             f"{fed.get('rounds', '-')} / {_mb(fed.get('bytes_observed'))}",
                             f"{cost:.0f}"])
        lines += [md_table(["trust model", "target ε", "on device", "per upload", "ε against the server (via)",
                            "learner", "attack advantage, points (per upload / per user)", "rounds / bytes",
                            "seconds (traffic + training + answers + attack)"], rows), ""]
        # the true majority share of the test users (from the no-privacy points: there the labels are clean)
        maj = [r["utility"]["majority_baseline"] for r in
               (store.get(c) for k, c in pts.items() if k[0] == ds and k[1] == "no privacy") if r is not None]
        if maj:
            lines.append(f"Majority baseline (the true majority class's share of the test users) "
                         f"{100 * float(np.mean(maj)):.1f}.\n")
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
    args = ap.parse_args()
    pts = points(args.data_root)
    todo = [c for (ds, m, t, _s), c in pts.items()
            if (args.dataset is None or ds == args.dataset) and (args.target is None or t in args.target
                                                                 or math.isinf(t))
            and (args.model is None or m in args.model)]
    store = Store(STORE)
    if args.list:
        list_points(todo, store)
        return
    if not args.summary_only:
        run_sweep(todo, store)
    print(summarize(args.data_root))


if __name__ == "__main__":
    main()
