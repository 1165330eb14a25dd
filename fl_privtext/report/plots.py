"""Privacy-utility plots (matplotlib, the ``plots`` extra): one per run, and the frontiers of a sweep.

The x axis is always the TRUE worst-case epsilon (log scale), never the nominal one: a mechanism whose published
epsilon understates its guarantee lands where it really is. Infinite epsilon (no privacy, or a mechanism with no
finite guarantee) is drawn at a separate position on the right, labelled "inf".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fl_privtext.display import fmt_epsilon
from fl_privtext.rundir import report_unwritten

RUN_PLOT = "privacy_utility.png"
FRONTIER_TASK = "frontier_task.png"
FRONTIER_ATTACK = "frontier_attack.png"
MISSING = "matplotlib is not installed (pip install -e \".[plots]\")"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only; no display needed
    import matplotlib.pyplot as plt

    return plt


def as_epsilon(x: Any) -> float:
    """An epsilon from results.json: a number, or the string "inf"."""
    if x is None:
        return math.nan
    return math.inf if x == "inf" else float(x)


def _inf_position(values: Sequence[float]) -> float:
    """Where epsilon = inf is drawn: 1.5 decades right of the largest finite epsilon."""
    finite = [v for v in values if math.isfinite(v) and v > 0]
    return (max(finite) if finite else 1.0) * 10 ** 1.5


def _x(values: Sequence[float]) -> tuple[list[float], float]:
    pos = _inf_position(values)
    return [pos if math.isinf(v) else v for v in values], pos


def _mark_inf(ax: Any, pos: float, values: Sequence[float]) -> None:
    """Log x axis with the finite epsilons as ticks (powers of ten when there are many), a dotted separator and
    an "inf" tick at ``pos``."""
    finite = sorted({v for v in values if math.isfinite(v) and v > 0})
    sep = pos / 10 ** 0.75
    lo = finite[0] if finite else pos / 100
    ax.set_xscale("log")
    ax.axvline(sep, color="0.7", lw=0.8, ls=":")
    ax.set_xlim(lo / 3, pos * 3)
    if 0 < len(finite) <= 8:
        ticks = finite
    else:
        ticks = [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(sep)) + 1)
                 if lo / 3 <= 10.0 ** k < sep]
    ax.minorticks_off()
    ax.set_xticks(ticks + [pos])
    ax.set_xticklabels([fmt_epsilon(t) for t in ticks] + ["inf"])


def run_plot(results: dict[str, Any], path: str | Path) -> Path:
    """One run: task accuracy (left) and attacker accuracy per attribute (right) at the run's true worst-case
    epsilon, the no-privacy baseline at epsilon = inf when the run has one, baselines dashed (task: majority;
    attacks: the attacker's prior). Task accuracy twice, each named in the legend: per upload (the server classifies
    noisy uploads) and on device, exact (the referee's figure of the shipped model, with its 95% interval over test
    users), slightly apart on the x axis so neither hides the other."""
    plt = _pyplot()
    fig = run_figure(results)
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def run_figure(results: dict[str, Any]) -> Any:
    """`run_plot`'s matplotlib figure (not saved, not closed)."""
    plt = _pyplot()
    p, u = results["privacy"], results["utility"]
    base = results.get("baseline_no_privacy")
    eps = as_epsilon(p["epsilon_worst_case"])
    xs, pos = _x([eps, math.inf])
    attacks = results.get("attacks", {})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    if u.get("available"):
        ax.errorbar([xs[0]], [u["accuracy"]], yerr=_yerr(u["accuracy"], u.get("ci_low"), u.get("ci_high"),
                                                          u.get("accuracy_std", 0.0)),
                    fmt="o", color="C0", capsize=3, label=f"{p['mechanism']}: per upload (server, noisy uploads)")
        ex = ((u.get("on_device") or {}).get("exact")) or {}
        if ex.get("available"):  # issue #36: the figure the research questions use, beside the per-upload one
            ax.errorbar([xs[0] * 1.25], [ex["accuracy"]], yerr=_yerr(ex["accuracy"], ex.get("ci_low"),
                                                                      ex.get("ci_high"), 0.0),
                        fmt="D", color="C3", capsize=3, label=f"{p['mechanism']}: on device, exact (95% over users)")
        if base:
            ax.plot([pos], [base["utility"]["accuracy"]], "s", color="0.3", label="no privacy (per upload)")
            bex = ((base["utility"].get("on_device") or {}).get("exact")) or {}
            if bex.get("available"):
                ax.plot([pos * 1.25], [bex["accuracy"]], "D", color="0.3", mfc="none",
                        label="no privacy (on device, exact)")
        ax.axhline(u["majority_baseline"], color="0.5", ls="--", lw=1, label="majority")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no task label", ha="center", transform=ax.transAxes)
    ax.set_title("task accuracy")
    ax.set_ylabel("accuracy")
    ax = axes[1]
    for k, (name, a) in enumerate(attacks.items()):
        color = f"C{k + 1}"
        # issue #37: the bar is the interval over target users (and seeds) where the result has one
        ax.errorbar([xs[0]], [a["accuracy"]], yerr=_yerr(a["accuracy"], a.get("ci_low"), a.get("ci_high"), 0.0),
                    fmt="o", color=color, capsize=3, label=name)
        if base and name in base.get("attacks", {}):
            ax.plot([pos], [base["attacks"][name]["accuracy"]], "s", color=color)
        ax.axhline(a.get("prior_baseline", a["majority_baseline"]), color=color, ls="--", lw=1)
    if attacks:
        ax.legend(fontsize=8, title="attacker (dashed: its prior)", title_fontsize=8)
    else:
        ax.text(0.5, 0.5, "no attack", ha="center", transform=ax.transAxes)
    ax.set_title("attacker accuracy (eavesdropper)")
    for ax in axes:
        _mark_inf(ax, pos, [eps])
        ax.set_xlabel("true worst-case epsilon (log)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{results.get('dataset', {}).get('name', '')}: {p['mechanism']}, nominal epsilon "
                 f"{fmt_epsilon(p['epsilon_nominal'])}, true worst-case {fmt_epsilon(p['epsilon_worst_case'])}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _yerr(y: float, low: Any, high: Any, sd: Any) -> list[list[float]]:
    """matplotlib's asymmetric error bar: the 95% interval where there is one (clipped to [0, 1]), else +- sd."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        low, high = max(0.0, min(float(low), y)), min(1.0, max(float(high), y))
        return [[y - low], [high - y]]
    return [[float(sd or 0.0)], [float(sd or 0.0)]]


def summary_section(results: dict[str, Any], out_dir: str | Path) -> str:
    """report.finalize's hook: write the run's plot next to summary.md and return the markdown that links it
    (or says why there is no plot). Never fails the run: the results are already computed."""
    if not available():
        return f"\n_No privacy-utility plot: {MISSING}._\n"
    try:
        path = run_plot(results, Path(out_dir) / RUN_PLOT)
    except Exception as exc:  # noqa: BLE001 - a plot must not lose a finished run
        return f"\n_No privacy-utility plot: {report_unwritten(Path(out_dir) / RUN_PLOT, exc)}._\n"  # warns
    return (f"\n## Privacy-utility\n\n![privacy-utility plot]({path.name})\n\n"
            "Task and attacker accuracy at the TRUE worst-case epsilon (log axis). Task: circle = per upload (the "
            "server classifies noisy uploads), diamond = on device, exact (the shipped model on the test users' "
            "clean features), bars = 95% intervals over test users; squares and open diamonds at \"inf\": the same "
            "users without privacy; dashed: the majority (task) and each attacker's prior.\n")


def on_device_columns(rows: Sequence[dict[str, Any]]) -> tuple[str, str, str, str]:
    """The table columns a frontier draws for the on-device curve (value, interval ends, legend): the referee's exact
    figure where the rows have it, else the server's randomized-response estimate."""
    if any(r.get("on_device_exact") is not None for r in rows):
        return "on_device_exact", "on_device_exact_ci_low", "on_device_exact_ci_high", "on device, exact"
    return "on_device_accuracy", "on_device_ci_low", "on_device_ci_high", "on device, server's estimate"


def frontier(rows: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """A sweep's frontiers: task accuracy vs true worst-case epsilon (``frontier_task.png``) and attacker accuracy
    per attribute (``frontier_attack.png``), one line per ``series`` (the grid values other than epsilon).

    ``rows``: dicts with ``series`` (str), ``epsilon_worst_case``, ``accuracy``, ``accuracy_std``,
    ``majority_baseline`` and ``attacks`` ({attribute: {"accuracy", "majority_baseline"}}, the latter the attacker's
    prior, `fl_privtext.report.prior_baseline`); optionally the 95% bands over seeds ``accuracy_ci_low/high`` and
    the on-device curve, drawn dashed beside the per-upload one: the exact ``on_device_exact``
    (``on_device_exact_ci_low/high``, over test users and seeds) when the rows have it, else the server's estimate
    ``on_device_accuracy`` (``on_device_ci_low/high``)."""
    plt = _pyplot()
    out = Path(out_dir)
    eps_all = [as_epsilon(r["epsilon_worst_case"]) for r in rows]
    _, pos = _x(eps_all)
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault(r["series"], []).append(r)

    def xy(items: list[dict[str, Any]], get: Any) -> tuple[list[float], list[float], list[dict[str, Any]]]:
        items = sorted((r for r in items if get(r) is not None), key=lambda r: as_epsilon(r["epsilon_worst_case"]))
        xs = [pos if math.isinf(e) else e for e in (as_epsilon(r["epsilon_worst_case"]) for r in items)]
        return xs, [get(r) for r in items], items

    written = []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    majority = [r["majority_baseline"] for r in rows if r.get("majority_baseline") is not None]
    for k, (name, items) in enumerate(series.items()):
        xs, ys, kept = xy(items, lambda r: r.get("accuracy"))
        if xs and all(r.get("accuracy_ci_low") is not None for r in kept):  # a 95% band over seeds
            ax.plot(xs, ys, marker="o", color=f"C{k}", label=f"{name or 'all'} (per upload)")
            ax.fill_between(xs, [r["accuracy_ci_low"] for r in kept], [r["accuracy_ci_high"] for r in kept],
                            color=f"C{k}", alpha=0.15, lw=0)
        elif xs:
            ax.errorbar(xs, ys, yerr=[r.get("accuracy_std") or 0.0 for r in kept], marker="o", color=f"C{k}",
                        label=name or "all", capsize=2)
        # on-device: the server's model applied on the test clients to their clean features (dashed, own band):
        # the referee's exact figure with its interval over test users and seeds where the rows have it (issue
        # #37: "how good is the model"), else the server's randomized-response estimate, labelled so
        key, lo, hi, what = on_device_columns(items)
        xs, ys, kept = xy(items, lambda r, key=key: r.get(key))
        if xs:
            ax.plot(xs, ys, marker="s", ls="--", color=f"C{k}", label=f"{name or 'all'} ({what})")
            if all(r.get(lo) is not None for r in kept):
                ax.fill_between(xs, [r[lo] for r in kept], [r[hi] for r in kept],
                                color=f"C{k}", alpha=0.1, lw=0, hatch="//")
    if majority:
        ax.axhline(max(majority), color="0.5", ls="--", lw=1, label="majority")
    _mark_inf(ax, pos, eps_all)
    ax.set(xlabel="true worst-case epsilon (log)", ylabel="task accuracy", title="privacy-utility frontier")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: never over the curves
    fig.set_size_inches(9.5, 4.5)
    fig.tight_layout()
    fig.savefig(out / FRONTIER_TASK, dpi=110)
    plt.close(fig)
    written.append(out / FRONTIER_TASK)

    attrs = list(dict.fromkeys(a for r in rows for a in (r.get("attacks") or {})))
    if attrs:
        fig, axes = plt.subplots(1, len(attrs), figsize=(5 * len(attrs), 4.2), squeeze=False)
        for ax, attr in zip(axes[0], attrs):
            for k, (name, items) in enumerate(series.items()):
                xs, ys, _ = xy(items, lambda r, attr=attr: (r.get("attacks") or {}).get(attr, {}).get("accuracy"))
                if xs:
                    ax.plot(xs, ys, marker="o", color=f"C{k}", label=name or "all")
                    low = xy(items, lambda r, attr=attr: (r.get("attacks") or {}).get(attr, {}).get("ci_low"))
                    high = xy(items, lambda r, attr=attr: (r.get("attacks") or {}).get(attr, {}).get("ci_high"))
                    if low[0] == xs and high[0] == xs:  # a 95% band over target users (and seeds), issue #37
                        ax.fill_between(xs, low[1], high[1], color=f"C{k}", alpha=0.15, lw=0)
            maj = [r["attacks"][attr]["majority_baseline"] for r in rows if attr in (r.get("attacks") or {})]
            if maj:
                ax.axhline(max(maj), color="0.5", ls="--", lw=1, label="prior (attacker's baseline)")
            _mark_inf(ax, pos, eps_all)
            ax.set(xlabel="true worst-case epsilon (log)", ylabel="attacker accuracy", title=f"attacker: {attr}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / FRONTIER_ATTACK, dpi=110)
        plt.close(fig)
        written.append(out / FRONTIER_ATTACK)
    return written
