"""The honest privacy-utility frontier (issue #11): every mechanism at equal TRUE epsilon, MiniLM, federated path.

One command (resumable; every point goes through one Flower simulation per data set, clients' noise in the
reproducible simulation mode so the tables regenerate exactly):

    PYTHONPATH=. HF_HUB_OFFLINE=1 python simulations/frontier.py            # run what is missing, write the page
    python simulations/frontier.py --list | --summary-only

Writes docs/results/frontier.md and docs/results/frontier_{blog,ag_news}.png. For each data set (blog: a seeded
10,000-post subset of the balanced 60k file; AG news: all 14,571 articles), the MiniLM (all-MiniLM-L6-v2, mean
pooling, 128 tokens) representation is privatized by each mechanism at TRUE (worst-case) epsilon in
{0.5, 1, 2, 4, 8, 16}: the nominal epsilon is set so that the mechanism's own report gives that worst case
(mvlaplace: nominal = true/2 on the unit ball; purkayastha: true/pi; the others are exact). The published OME and
DPNR Laplace run at their papers' nominal epsilons and are placed at their true epsilon. 3 seeds per point (server,
attacker and client noise differ by seed; users, roles and clients are fixed); 95% t-intervals over seeds.

Utility is reported by both protocols: per upload (the server classifies the noisy uploads of test users) and on
device (the server's model, trained on the noisy uploads, is sent to the test clients and applied to E[upload | x],
their clean features; only confusion counts come back). Attack: the eavesdropper's best attribute attacker
(logistic or the mechanism-aware likelihood attack, chosen out of fold on the aux users); its advantage = accuracy
(entities: per-entity presence accuracy) minus the best guess without the representation (the majority given the
task label where the label is uploaded in the clear, else the majority).

The server (issue #23): ``server.learner = auto`` chooses, per point and seed, among the constant predictor, the
noise-aware class means (centroid), LDA with a method-of-moments covariance from the mechanism's noise law, a
cross-validated logistic regression (linear) and the MLP, by cross-validated log-loss on its own uploads grouped by
user; a learner is kept only where it beats the constant with one-sided 95% confidence (fl_privtext/server/
selection.py). The cell names the chosen learner. The attacker likewise tries logistic, the exact likelihood and
the server's centroid, LDA and linear learners, chosen out of fold.

CPU budget (2 shared cores; say so): the server's MLP candidate has 128 hidden units, batch 128, lr 0.05, 20
epochs; the attacker families are logistic + likelihood + the server's learners (the 512-unit MLP attacker is left
out), 2 folds, 15 epochs; re-identification / membership / inversion are off. bitrr / sue / oue (3,840 uploaded
bits per MiniLM vector) are left out. A point with the selecting server takes 40-100 s on this machine with
another job beside it (2026-11-26; 4-10 minutes before `Linear.choose_c`, 10-20 s with the MLP alone); every cell
but OME's four was regenerated with `server.learner = auto` on 2026-11-25/26 (102 of 106 points, 3 seeds each; OME's
3,840-bit uploads take the selecting server over 11 minutes a point); the line "privunitg, clients choose"
(``server.select-on = clients``, 12 points) was added on 2026-11-26. A cell whose point is missing shows the old
server's point where one is saved, marked †.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep import (
    RESULTS,
    Store,
    common_args,
    derive,
    eps_str,
    md_table,
    run_command,
)

from fl_privtext.client import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.public import PublicSpec

FOLDER = RESULTS / "frontier"
STORE = FOLDER / "points"
TRUE_EPS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
CLIENT_SEED = 918273645  # reproducible simulation mode (a large seed: small ones are guessable)
# line label -> (mechanism, extra settings); OME is placed at its true epsilon below.
LINES: dict[str, tuple[str, dict[str, Any]]] = {
    "privunitg": ("privunitg", {}),
    "privunitg + pca 32": ("privunitg", {"privacy.projection": "pca", "privacy.proj-dim": 32}),
    "privunit": ("privunit", {}),
    "duchi": ("duchi", {}),
    "gaussian (delta 1e-5)": ("gaussian", {"privacy.delta": 1e-5}),
    "laplace-l1": ("laplace-l1", {}),
    "mvlaplace (Feyisetan)": ("mvlaplace", {}),
    "purkayastha": ("purkayastha", {}),
    # the test clients choose the on-device model (server.select-on = clients: half the test users choose by
    # randomized-response answers, the other half reports; the cell's learner is then the clients' choice)
    "privunitg, clients choose": ("privunitg", {"server.select-on": "clients"}),
    # the projection fitted on IN-DOMAIN public rows: the corpus's posts by bloggers who are not simulated
    # (privacy.public-data = blog:other-users); for AG news MRPC's news sentences (IN_DOMAIN below)
    "privunitg + pca 32, in-domain public": ("privunitg", {"privacy.projection": "pca", "privacy.proj-dim": 32}),
    "privunitg + pca 32, in-domain public, clients choose": ("privunitg", {
        "privacy.projection": "pca", "privacy.proj-dim": 32, "server.select-on": "clients"}),
    # k chosen per point from the public rows and the noise law (privacy.proj-dim = auto, fl_privtext.public)
    "privunitg + pca auto, in-domain public": ("privunitg", {"privacy.projection": "pca", "privacy.proj-dim": "auto"}),
    "privunitg + pca auto, in-domain public, clients choose": ("privunitg", {
        "privacy.projection": "pca", "privacy.proj-dim": "auto", "server.select-on": "clients"}),
}
# data set -> its in-domain public rows: blog's bloggers who are not simulated; for AG news (every staged article is a
# simulated user) the nearest staged text: MRPC's news sentences (other sources, the same genre and years)
IN_DOMAIN: dict[str, str] = {"blog": "blog:other-users", "ag_news": "mrpc"}


def lines_for(ds: str) -> list[str]:
    """The lines drawn for data set ``ds`` (an in-domain public line only where in-domain public rows exist)."""
    return [label for label in LINES if "in-domain" not in label or ds in IN_DOMAIN]
PUBLISHED: dict[str, tuple[str, dict[str, Any], tuple[float, ...]]] = {  # label -> (mechanism, sets, nominal eps)
    "OME (published, lam 100)": ("ome", {"privacy.lam": 100.0}, (1.0, 10.0)),
    "laplace-dpnr (published)": ("laplace-dpnr", {}, (0.1, 1.0)),
}
DATASETS: dict[str, dict[str, Any]] = {
    "blog": {"data.name": "blog", "data.options.max_rows": 10000, "privacy.public-data": "ag_news"},
    "ag_news": {"data.name": "ag_news", "privacy.public-data": "imdb"},
}
COMMON: dict[str, Any] = {
    "extractor.name": "minilm", "run.seeds": 3, "run.client-seed": CLIENT_SEED, "run.progress": False,
    "run.baseline": False, "federation.num-clients": 10, "server.epochs": 20, "server.hidden": 128,
    "server.batch-size": 128, "server.lr": 0.05, "attack.epochs": 15, "attack.families": "logistic,likelihood",
    "attack.folds": 2, "attack.extra": False,
    # the mechanisms as analysed (simulation-grade float sampler): secure PrivUnitG is a different construction
    # (k-fold MSE) and refuses epsilon 16 at d=384; docs/privacy.md gives the secure samplers' cost
    "privacy.sampler": "float",
}


def base(dataset: str, data_root: str) -> ExperimentConfig:
    sets = {**COMMON, **DATASETS[dataset], "data.root": data_root}
    return ExperimentConfig.from_flat({k: v for k, v in sets.items() if k != "privacy.public-data"},
                                      ExperimentConfig())


def at_true_epsilon(cfg: ExperimentConfig, target: float) -> ExperimentConfig:
    """The point whose mechanism report gives worst-case epsilon ``target`` (checked)."""
    probe = mechanism_for(PublicSpec.of(cfg), 384).report()
    ratio = float(probe.epsilon_worst_case) / float(probe.epsilon_nominal)
    out = derive(cfg, **{"privacy.epsilon": target / ratio})
    got = float(mechanism_for(PublicSpec.of(out), 384).report().epsilon_worst_case)
    if not math.isclose(got, target, rel_tol=1e-6):
        raise RuntimeError(f"{cfg.privacy.mechanism}: worst case {got} at nominal {target / ratio}, wanted {target}")
    return out


def points(data_root: str) -> dict[tuple[str, str, float], ExperimentConfig]:
    """(dataset, line, x) -> config; x is the true epsilon (published lines: the nominal one)."""
    out: dict[tuple[str, str, float], ExperimentConfig] = {}
    for ds in DATASETS:
        b = base(ds, data_root)
        out[(ds, "no privacy", math.inf)] = derive(b, **{"privacy.mechanism": "none"})
        for label in lines_for(ds):
            mech, sets = LINES[label]
            extra = dict(sets)
            if extra.get("privacy.projection") == "pca":
                extra["privacy.public-data"] = (IN_DOMAIN[ds] if "in-domain" in label else
                                                DATASETS[ds]["privacy.public-data"])
            cfg = derive(b, **{"privacy.mechanism": mech, **extra})
            for eps in TRUE_EPS:
                out[(ds, label, eps)] = at_true_epsilon(cfg, eps)
        for label, (mech, sets, nominal) in PUBLISHED.items():
            for eps in nominal:
                out[(ds, label, eps)] = derive(b, **{"privacy.mechanism": mech, **sets, "privacy.epsilon": eps})
    return out


# ---- statistics ------------------------------------------------------------------------------------------------


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of the 95% t-interval over seeds (ddof=1)."""
    from scipy import stats

    v = np.asarray(values, float)
    if len(v) < 2:
        return float(v.mean()), math.nan
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def task(res: dict[str, Any], protocol: str) -> tuple[float, float]:
    u = res["utility"] if protocol == "per_upload" else res["utility"]["on_device"]
    return ci95([s["accuracy"] for s in u["per_seed"]])


def advantage(res: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """What the representation adds to the attacker, per attribute: per-seed accuracy minus the best guess without
    it (the majority given the task label, which travels in the clear, where the attack reports it; else the
    majority)."""
    out = {}
    for name, a in res.get("attacks", {}).items():
        base = a.get("majority_given_label_baseline", a["majority_baseline"])
        out[name] = ci95([s["accuracy"] - base for s in a["per_seed"]])
    return out


def label_leak(res: dict[str, Any]) -> dict[str, float]:
    """What the clear label alone gives the attacker: majority given the label minus the majority."""
    return {name: a["majority_given_label_baseline"] - a["majority_baseline"]
            for name, a in res.get("attacks", {}).items() if "majority_given_label_baseline" in a}


# ---- the page ------------------------------------------------------------------------------------------------------


def _cell(m: float, h: float) -> str:
    return "-" if m is None or math.isnan(m) else (f"{100 * m:.1f}" + ("" if math.isnan(h) else f" ± {100 * h:.1f}"))


OLD_MARK = "†"
OLD_NOTE = (f"{OLD_MARK} not yet regenerated: the point as the OLD server computed it (the MLP alone, no model "
            "selection, no constant candidate; issue #11), shown until `python simulations/frontier.py` reruns it "
            "with `server.learner = auto`. In brackets: the learner `auto` chose (over the 3 seeds).")


def old_point(store: Store, cfg: ExperimentConfig) -> dict[str, Any] | None:
    """The point as saved before issue #23 (server.learner = mlp, the then only learner; attack.inversion-vocab was
    100 then, inversion being off here it changed nothing), if any."""
    res = store.get(derive(cfg, **{"server.learner": "mlp", "attack.inversion-vocab": 100}))
    return None if res is None else {**res, "old_server": True}


def chosen(res: dict[str, Any]) -> str:
    """'[lda]' when every seed chose it, else e.g. '[lda 2/3]'; '' for an old-server point."""
    if res.get("old_server"):
        return ""
    od = res["utility"].get("on_device", {}).get("per_seed", [])
    by_clients = bool(od) and all("learner" in s for s in od)  # server.select-on = clients: the clients' choice
    names = [s.get("learner") or "?" for s in (od if by_clients else res["utility"]["per_seed"])]
    ranked = sorted(set(names), key=lambda n: (-names.count(n), n))
    top = ranked[0]
    if names.count(top) == len(names):
        return f" [{top}]"
    if names.count(top) == 1:  # every seed chose another learner
        return f" [{'/'.join(ranked)}]"
    return f" [{top} {names.count(top)}/{len(names)}]"


def mark(res: dict[str, Any]) -> str:
    return f" {OLD_MARK}" if res.get("old_server") else ""


def summarize(data_root: str) -> str:
    store = Store(STORE)
    pts = points(data_root)
    lines = ["# The honest privacy-utility frontier (issues #11, #23)\n", (__doc__ or "").split("\n\n", 1)[1], ""]
    for ds in DATASETS:
        results = {(line, x): store.get(cfg) or old_point(store, cfg) for (d, line, x), cfg in pts.items()
                   if d == ds}
        done = {k: r for k, r in results.items() if r is not None}
        lines.append(f"## {ds}: task accuracy (%) per upload / on device, mean ± 95% CI over 3 seeds\n")
        clear = done.get(("no privacy", math.inf))
        if clear:
            pu, od = task(clear, "per_upload"), task(clear, "on_device")
            lines.append(f"No privacy: per upload {_cell(*pu)}, on device {_cell(*od)}{chosen(clear)}{mark(clear)}; "
                         f"majority {100 * clear['utility']['majority_baseline']:.1f}.\n")
        header = ["mechanism"] + [f"true ε {eps_str(e)}" for e in TRUE_EPS]
        rows = []
        for label in lines_for(ds):
            row = [label]
            for eps in TRUE_EPS:
                r = done.get((label, eps))
                row.append("todo" if r is None else
                           f"{_cell(*task(r, 'per_upload'))} / {_cell(*task(r, 'on_device'))}{chosen(r)}{mark(r)}")
            rows.append(row)
        lines += [md_table(header, rows), "", OLD_NOTE, ""]
        pub_rows = []
        for label, (_, _, nominal) in PUBLISHED.items():
            for eps in nominal:
                r = done.get((label, eps))
                if r is None:
                    pub_rows.append([label, eps_str(eps), "todo", "todo", "todo"])
                    continue
                pub_rows.append([label + mark(r), eps_str(eps), eps_str(r["privacy"]["epsilon_worst_case"]),
                                 _cell(*task(r, "per_upload")), _cell(*task(r, "on_device")) + chosen(r)])
        lines += ["Published mechanisms at their true epsilon:\n",
                  md_table(["mechanism", "nominal ε", "TRUE ε", "per upload", "on device"], pub_rows), ""]
        lines.append(f"### {ds}: what the privatized representation adds to the attacker (points), mean ± 95% CI\n")
        leak = label_leak(clear) if clear else {}
        lines.append("Attacker accuracy minus the best guess without the representation"
                     + (" (the majority given the task label, which is uploaded in the clear: the label alone "
                        "already gives " + ", ".join(f"{a} +{100 * v:.1f}" for a, v in sorted(leak.items()))
                        + " points over the majority)" if leak else " (the majority)") + ".\n")
        attrs = sorted({a for r in done.values() for a in r.get("attacks", {})})
        arows = []
        for label in ["no privacy", *lines_for(ds)]:
            for eps in ([math.inf] if label == "no privacy" else TRUE_EPS):
                r = done.get((label, eps))
                if r is None:
                    continue
                adv = advantage(r)
                arows.append([label + mark(r), eps_str(eps)] + [_cell(*adv[a]) if a in adv else "-" for a in attrs])
        for label, (_, _, nominal) in PUBLISHED.items():
            for eps in nominal:
                r = done.get((label, eps))
                if r is not None:
                    adv = advantage(r)
                    arows.append([f"{label}, nominal ε {eps_str(eps)}{mark(r)}", eps_str(r["privacy"]["epsilon_worst_case"])]
                                 + [_cell(*adv[a]) if a in adv else "-" for a in attrs])
        lines += [md_table(["mechanism", "true ε", *attrs], arows), ""]
        fresh = {k: r for k, r in done.items() if not r.get("old_server")}
        if fresh:  # the plot shows regenerated points only
            lines.append(f"![{ds} frontier](frontier_{ds}.png)\n")
            plot(ds, fresh)
    disc = FOLDER / "discussion.md"
    if disc.is_file():
        lines.append(disc.read_text())
    text = "\n".join(lines) + "\n"
    (RESULTS / "frontier.md").write_text(text)
    return text


def plot(ds: str, done: dict[tuple[str, float], dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    clear = done.get(("no privacy", math.inf))
    for label in [*LINES, *PUBLISHED]:
        xs = sorted(x for (lbl, x) in done if lbl == label)
        if not xs:
            continue
        res = [done[(label, x)] for x in xs]
        true = [float(r["privacy"]["epsilon_worst_case"]) for r in res]
        style = "o--" if label in PUBLISHED else "o-"
        for ax, proto in zip(axes[:2], ("per_upload", "on_device"), strict=True):
            m, h = zip(*(task(r, proto) for r in res), strict=True)
            ax.errorbar(true, m, yerr=np.nan_to_num(h), fmt=style, capsize=3, label=label)
        adv = [advantage(r) for r in res]
        if adv and adv[0]:
            first = min(adv[0])
            m, h = zip(*(a[first] for a in adv), strict=True)
            axes[2].errorbar(true, m, yerr=np.nan_to_num(h), fmt=style, capsize=3, label=label)
            axes[2].set_ylabel(f"attacker advantage on {first} from the representation")
    for ax, title in zip(axes, ("task accuracy, per upload", "task accuracy, on device", "eavesdropper"),
                         strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("TRUE epsilon per upload (log)")
        ax.set_title(f"{ds}: {title}")
        ax.grid(alpha=0.3)
    if clear:
        for ax, proto in zip(axes[:2], ("per_upload", "on_device"), strict=True):
            ax.axhline(task(clear, proto)[0], color="k", ls=":", label="no privacy")
            ax.axhline(clear["utility"]["majority_baseline"], color="grey", ls="-.", label="majority")
        axes[0].set_ylabel("accuracy")
    axes[2].axhline(0, color="grey", ls="-.")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"frontier_{ds}.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = common_args(__doc__ or "")
    ap.add_argument("--dataset", choices=sorted(DATASETS), help="run only this data set's points")
    ap.add_argument("--line", action="append", help="run only these lines (labels as in the table; repeatable)")
    ap.add_argument("--eps", action="append", type=float,
                    help="run only these true epsilons (published lines: nominal; repeatable; 'no privacy' is inf)")
    args = ap.parse_args()
    pts = points(args.data_root)
    chosen = [cfg for (ds, line, x), cfg in pts.items() if args.dataset in (None, ds)
              and (not args.line or line in args.line) and (not args.eps or x in args.eps)]
    run_command(args, chosen, Store(STORE), name="frontier" + (f" --dataset {args.dataset}" if args.dataset else ""),
                folder=FOLDER, summarize=summarize)


if __name__ == "__main__":
    main()
