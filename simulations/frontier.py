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
attacker and client noise differ by seed; users, roles and clients are fixed).

Figures (issue #37): ON DEVICE, EXACT is the referee's exact accuracy of the model the server shipped, applied by the
test clients to E[upload | x] (their clean features): a simulation-only figure, the answer to "how good is the model
the mechanism allows"; beside it the server's own estimate from the clients' randomized-response answers
(client.count-epsilon 1), what a deployed server knows. PER UPLOAD: the server classifies the test users' noisy
uploads. Every interval is a 95% percentile bootstrap over test (or target) users, each with all its records,
crossed with the 3 seeds (`fl_privtext.bootstrap`). Attack: the eavesdropper's best attribute attacker (logistic,
the mechanism-aware likelihood attack and the server's learners, chosen out of fold on the aux users; it answers its
prior where no learned attacker beats it on held-out aux users); its advantage = accuracy minus the prior (the
majority given the task label, which is uploaded in the clear).

The server: ``server.learner = auto`` ships the James-Stein-shrunk moment head (the lda, which nests the
centroid) unless it is significantly worse per upload than the constant; linear / mlp only where no
moment head qualifies (fl_privtext/server/selection.py, LEARNER_RULE). The cell names the learner shipped.

CPU budget (2 shared cores; say so): the server's MLP candidate has 128 hidden units, batch 128, lr 0.05, 20
epochs; the attacker families are logistic + likelihood + the server's learners (the 512-unit MLP attacker is left
out), 2 folds, 15 epochs; re-identification / membership / inversion are off. bitrr / sue / oue (3,840 uploaded
bits per MiniLM vector) are left out. Wall times of each run: docs/results/frontier/timings.json.
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

from fl_privtext.bootstrap import seeds_interval
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


# ---- figures (issue #37: exact on-device figures, intervals over test users and seeds) ----------------------------


Fig = tuple[float, float, float]  # (value, 95% interval low, high); nan where the result has none


def _fig(d: dict[str, Any] | None, key: str = "accuracy", low: str = "ci_low", high: str = "ci_high") -> Fig:
    d = d or {}
    get = (lambda k: float(d[k]) if d.get(k) is not None else math.nan)
    return get(key), get(low), get(high)


def per_upload(res: dict[str, Any]) -> Fig:
    """The server's accuracy on the test users' noisy uploads; interval over test users (clustered) and seeds."""
    return _fig(res["utility"])


def on_device_exact(res: dict[str, Any]) -> Fig:
    """The referee's exact accuracy of the shipped model on the test users' clean features (simulation only);
    interval over test users (clustered) and seeds."""
    return _fig(res["utility"].get("on_device", {}).get("exact"))


def on_device_private(res: dict[str, Any]) -> tuple[float, float]:
    """What the server can estimate (debiased randomized-response answers) and that estimate's noise std."""
    p = res["utility"].get("on_device", {}).get("private") or {}
    return float(p.get("accuracy", math.nan)), float(p.get("noise_std", math.nan))


def advantage(res: dict[str, Any]) -> dict[str, Fig]:
    """Per attribute: the eavesdropper's accuracy minus the best guess without the representation (its prior: the
    majority given the task label, which travels in the clear, where the attack reports it), with the interval of
    that difference over target users and seeds (results.json ``advantage_ci_low/high``)."""
    return {name: _fig(a, "advantage", "advantage_ci_low", "advantage_ci_high")
            for name, a in res.get("attacks", {}).items()}


def label_leak(res: dict[str, Any]) -> dict[str, float]:
    """What the clear label alone gives the attacker: majority given the label minus the majority."""
    return {name: a["majority_given_label_baseline"] - a["majority_baseline"]
            for name, a in res.get("attacks", {}).items() if "majority_given_label_baseline" in a}


def non_monotone(line: list[tuple[float, Fig]]) -> list[str]:
    """Where a line falls significantly as epsilon grows: a higher epsilon whose interval lies wholly below a lower
    epsilon's (the intervals do not overlap); a fall within the intervals is not reported."""
    out = []
    for i, (e1, (_, lo1, _)) in enumerate(line):
        for e2, (_, _, hi2) in line[i + 1:]:
            if hi2 < lo1:
                out.append(f"ε {eps_str(e2)} below ε {eps_str(e1)}")
    return out


# ---- the page ------------------------------------------------------------------------------------------------------


def fig_cell(f: Fig, scale: float = 100.0) -> str:
    m, lo, hi = f
    if math.isnan(m):
        return "-"
    return f"{scale * m:.1f}" + ("" if math.isnan(lo) else f" [{scale * lo:.1f}, {scale * hi:.1f}]")


def over_splits(figs: list[Fig], bounds: tuple[float, float] = (0.0, 1.0)) -> Fig:
    """The mean over role splits of one figure, with its 95% interval: each split's own interval over ITS test users
    (a clustered bootstrap in the point's results.json) in quadrature with Student's t over the splits
    (`fl_privtext.bootstrap.seeds_interval`). The splits draw different test users, so the users' side is the mean
    of the splits' sides, not divided by sqrt(splits): conservative. Splits without the figure are left out; NaN
    when none has it; one split: its own interval."""
    have = [f for f in figs if not math.isnan(f[0])]
    if not have:
        return math.nan, math.nan, math.nan
    m, lo, hi = (np.asarray(v, float) for v in zip(*have, strict=True))
    if np.isnan(lo).any() or np.isnan(hi).any():
        return float(m.mean()), math.nan, math.nan
    low, high = seeds_interval(m, lo, hi, bounds=bounds)
    return float(m.mean()), low, high


def chosen(res: dict[str, Any]) -> str:
    """'[lda]' when every seed shipped it, else e.g. '[lda 2/3]' (the clients' choice where they choose)."""
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


def _private_cell(res: dict[str, Any]) -> str:
    m, sd = on_device_private(res)
    return "-" if math.isnan(m) else f"{100 * m:.1f} ± {100 * sd:.1f}"


def _grid(done: dict[tuple[str, float], dict[str, Any]], labels: list[str], cell: Any) -> str:
    """A mechanism x true-epsilon table of ``cell(result)``; 'todo' where the point is not computed."""
    header = ["mechanism"] + [f"true ε {eps_str(e)}" for e in TRUE_EPS]
    return md_table(header, [[label] + ["todo" if (label, e) not in done else cell(done[(label, e)]) for e in TRUE_EPS]
                             for label in labels])


def summarize(data_root: str) -> str:
    store = Store(STORE)
    pts = points(data_root)
    lines = ["# The honest privacy-utility frontier (issues #11, #23, #37)\n", (__doc__ or "").split("\n\n", 1)[1], ""]
    total = done_total = 0
    for ds in DATASETS:
        results = {(line, x): store.get(cfg) for (d, line, x), cfg in pts.items() if d == ds}
        done = {k: r for k, r in results.items() if r is not None}
        total, done_total = total + len(results), done_total + len(done)
        lines.append(f"## {ds}: {len(done)} of {len(results)} points computed\n")
        clear = done.get(("no privacy", math.inf))
        if clear:
            lines.append(f"No privacy: on device, exact {fig_cell(on_device_exact(clear))}{chosen(clear)}; per upload "
                         f"{fig_cell(per_upload(clear))}; majority {100 * clear['utility']['majority_baseline']:.1f}.\n")
        lines += [f"### {ds}: task accuracy ON DEVICE, exact (%), [95% interval over test users and seeds]\n",
                  ("The referee's exact accuracy of the model the server shipped, applied by the test clients to their "
                   "clean features (a simulation-only figure: how good is the model the mechanism allows); in "
                   "brackets after it, the learner `auto` shipped over the 3 seeds.\n"),
                  _grid(done, lines_for(ds), lambda r: fig_cell(on_device_exact(r)) + chosen(r)), ""]
        flags = []
        for label in lines_for(ds):
            line = [(e, on_device_exact(done[(label, e)])) for e in TRUE_EPS if (label, e) in done]
            bad = non_monotone(line)
            if bad:
                flags.append(f"- {label}: " + "; ".join(bad))
        lines.append("Monotone in epsilon within the intervals: " + (
            "every computed line.\n" if not flags else "not everywhere; a higher epsilon's interval lies wholly below "
            "a lower one's at:\n\n" + "\n".join(flags) + "\n"))
        lines += [f"### {ds}: what the server can estimate on device (%), ± the noise std of its estimate\n",
                  ("The server's own figure from the test clients' randomized-response answers (client.count-epsilon "
                   "1, debiased): what a deployed server knows. Read the exact table for the model's quality.\n"),
                  _grid(done, lines_for(ds), _private_cell), ""]
        lines += [f"### {ds}: task accuracy PER UPLOAD (%), [95% interval over test users and seeds]\n",
                  _grid(done, lines_for(ds), lambda r: fig_cell(per_upload(r))), ""]
        pub_rows = []
        for label, (_, _, nominal) in PUBLISHED.items():
            for eps in nominal:
                r = done.get((label, eps))
                if r is None:
                    pub_rows.append([label, eps_str(eps), "todo", "todo", "todo"])
                    continue
                pub_rows.append([label, eps_str(eps), eps_str(r["privacy"]["epsilon_worst_case"]),
                                 fig_cell(on_device_exact(r)) + chosen(r), fig_cell(per_upload(r))])
        lines += ["Published mechanisms at their true epsilon:\n",
                  md_table(["mechanism", "nominal ε", "TRUE ε", "on device, exact", "per upload"], pub_rows), ""]
        lines.append(f"### {ds}: what the privatized representation adds to the eavesdropper (points), "
                     "[95% interval over target users and seeds]\n")
        leak = label_leak(clear) if clear else {}
        lines.append("The eavesdropper's accuracy minus its prior (the best guess without the representation: the "
                     "majority given the task label, which is uploaded in the clear"
                     + (": the label alone already gives " + ", ".join(f"{a} +{100 * v:.1f}"
                                                                       for a, v in sorted(leak.items()))
                        + " points over the majority" if leak else "")
                     + "). 0.0 [0.0, 0.0]: no learned attacker beat the prior on held-out auxiliary users, so it "
                     "answers the prior (no leak detected at this power).\n")
        attrs = sorted({a for r in done.values() for a in r.get("attacks", {})})
        arows = []
        for label in ["no privacy", *lines_for(ds)]:
            for eps in ([math.inf] if label == "no privacy" else TRUE_EPS):
                r = done.get((label, eps))
                if r is not None:
                    adv = advantage(r)
                    arows.append([label, eps_str(eps)] + [fig_cell(adv[a]) if a in adv else "-" for a in attrs])
        for label, (_, _, nominal) in PUBLISHED.items():
            for eps in nominal:
                r = done.get((label, eps))
                if r is not None:
                    adv = advantage(r)
                    arows.append([f"{label}, nominal ε {eps_str(eps)}", eps_str(r["privacy"]["epsilon_worst_case"])]
                                 + [fig_cell(adv[a]) if a in adv else "-" for a in attrs])
        lines += [md_table(["mechanism", "true ε", *attrs], arows), ""]
        if done:
            lines.append(f"![{ds} frontier](frontier_{ds}.png)\n")
            plot(ds, done)
    lines.insert(2, f"**{done_total} of {total} points computed with the current code** (the others say todo).\n")
    disc = FOLDER / "discussion.md"
    if disc.is_file():
        lines.append(disc.read_text())
    text = "\n".join(lines) + "\n"
    (RESULTS / "frontier.md").write_text(text)
    return text


def _yerr(figs: list[Fig]) -> np.ndarray:
    m, lo, hi = (np.asarray(v, float) for v in zip(*figs, strict=True))
    return np.nan_to_num(np.vstack([m - lo, hi - m]))


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
        for ax, get in zip(axes[:2], (on_device_exact, per_upload), strict=True):
            figs = [get(r) for r in res]
            ax.errorbar(true, [f[0] for f in figs], yerr=_yerr(figs), fmt=style, capsize=3, label=label)
        adv = [advantage(r) for r in res]
        if adv and adv[0]:
            first = min(adv[0])
            figs = [a[first] for a in adv]
            axes[2].errorbar(true, [f[0] for f in figs], yerr=_yerr(figs), fmt=style, capsize=3, label=label)
            axes[2].set_ylabel(f"eavesdropper's advantage on {first} over its prior")
    for ax, title in zip(axes, ("task accuracy on device, exact", "task accuracy per upload", "eavesdropper"),
                         strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("TRUE epsilon per upload (log)")
        ax.set_title(f"{ds}: {title} (95% over users, seeds)")
        ax.grid(alpha=0.3)
    if clear:
        for ax, get in zip(axes[:2], (on_device_exact, per_upload), strict=True):
            ax.axhline(get(clear)[0], color="k", ls=":", label="no privacy")
            ax.axhline(clear["utility"]["majority_baseline"], color="grey", ls="-.", label="majority")
        axes[0].set_ylabel("accuracy")
    axes[2].axhline(0, color="grey", ls="-.")
    axes[0].legend(fontsize=7)
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
    selected = [cfg for (ds, line, x), cfg in pts.items() if args.dataset in (None, ds)
              and (not args.line or line in args.line) and (not args.eps or x in args.eps)]
    run_command(args, selected, Store(STORE), name="frontier" + (f" --dataset {args.dataset}" if args.dataset else ""),
                folder=FOLDER, summarize=summarize)


if __name__ == "__main__":
    main()
