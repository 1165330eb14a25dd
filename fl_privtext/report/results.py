"""results.json, config.toml, summary.md and the stdout table of one experiment point.

results.json keys (public contract, ../shared/docs/architecture.md): utility.accuracy, utility.macro_f1;
privacy.mechanism, privacy.epsilon_nominal, privacy.epsilon_worst_case; attacks.<attribute>.accuracy,
attacks.<attribute>.majority_baseline (and f1 for entities), attacks.<attribute>.floor_logistic (plain logistic
regression on the same aux users and targets), attacks.<attribute>.per_user.ci_low / ci_high (over target users
and, with several seeds, seeds: `fl_privtext.bootstrap.seeds_interval`); attacks.<attribute>.ci_low / ci_high,
advantage (+ _ci_low / _ci_high), macro_f1_ci_low / _ci_high or f1_ci_low / _ci_high (the per-upload figures over
target users, each with all its uploads, and seeds: `fl_privtext.bootstrap.sums_bootstrap`); empirical_privacy; federation.num_clients,
federation.num_users, federation.uploads_observed, federation.server_received; baseline.federation ("separate"
whenever a no-privacy reference was computed: never by the private point's clients) and baseline.server_received;
timing.total_s (and per stage); utility.on_device.exact.{accuracy, ci_low, ci_high} (the referee's exact figure,
simulation only) and utility.on_device.private.{accuracy, noise_std} (the server's estimate), issue #37. Means are
over seeds; ``*_std``
are the standard deviations (ddof=0) and ``per_seed`` keeps every value.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.bootstrap import counts_bootstrap, interval_keys, seeds_interval, sums_bootstrap
from fl_privtext.client import published, seed_fingerprint
from fl_privtext.config import ExperimentConfig
from fl_privtext.display import fmt_epsilon
from fl_privtext.metrics import clip_interval
from fl_privtext.report.plots import RUN_PLOT, summary_section
from fl_privtext.rng import generator
from fl_privtext.rundir import keep_going, make_dir, unwritten, write_atomic

SCHEMA_VERSION = 2  # results.json layout; bumped when keys change meaning

COLUMNS = (
    "**How to read this.** `attacker acc`: accuracy of the eavesdropper's best attacker at inferring the attribute of "
    "users it did not know, from their uploads. `prior`: the attacker's baseline, the accuracy on the same targets "
    "of what it answers without reading an upload: the most frequent value among the known (aux) users, or the most "
    "frequent one given the observed task label where that beat the majority on the aux users (results.json "
    "`attacks.<attribute>.prior` says which, `prior_baseline` is the figure; `majority_baseline` keeps the plain "
    "majority). On the targets it can fall below 0.5 even for a binary attribute when the known users' majority "
    "differs from the targets'. An attacker at its prior learned nothing it could use; when the held-out test on "
    "the aux users finds no leak the attacker answers the prior, so its accuracy IS the prior's. `F1`: "
    "macro-F1 (entities: F1 over presence labels). `1-X / 1-F`: the papers' empirical privacy, 1 - attacker "
    "accuracy (demographics) or 1 - F1 (entities): higher is more private. `fair gap`: the largest difference of the "
    "task accuracy between groups of the attribute (0 = equally accurate for every group). `no-privacy acc`: the "
    "same attacker on the same users without privacy (mechanism `none`). `TRUE worst-case` epsilon: what the "
    "mechanism really guarantees per upload (any two inputs of a user), next to the epsilon the publication states; "
    "`per user`: composed over every upload and round of the user, labels included (`TOTAL`); `tight ... at delta "
    "d`: the same composition by the privacy-loss accountant, an (epsilon, delta) pair (inf when labels travel in the "
    "clear). `ceiling`: the highest accuracy any attacker can reach at the mechanism's true epsilon (the LDP bound); "
    "an attack above it at 95% confidence is flagged as a violation (the mechanism leaks more than it reports). `floor`: plain logistic regression on the same aux "
    "users and targets, read beside the attacker's answer. `per upload [95% CI]`, `advantage` (accuracy minus the "
    "prior's on the same uploads) and the F1's interval: a bootstrap over target users, each with all its uploads "
    "(a user's uploads share its secret, so an interval over uploads would be too narrow), and over seeds where "
    "there are several; `per user [95% CI]`: one answer per user (Clopper-Pearson), seeds added the same way. The "
    "violation test reads the interval over target users (per upload) and the per-user one; `accuracy_ci95` keeps "
    "the binomial interval over uploads for reference."
)
# one line under the console's tables: what the less obvious columns mean (COLUMNS, in summary.md, says more)
LEGEND = ("legend: prior = what the attacker answers when no leak is detected (aux users' majority, or majority "
          "given the label) | 1-X / 1-F = 1 - attacker accuracy (entities: 1 - F1), higher = more private | fair "
          "gap = largest task-accuracy gap between groups | ceiling = best accuracy any attacker can reach at the "
          "true epsilon | tight = per-user epsilon by the privacy-loss accountant at that delta")


def most_frequent(names: list[str]) -> str:
    """The most frequent name, a tie going to the one of the earliest seed. (``max(set(names), ...)`` broke ties by
    the set's order, which follows the process's string hash seed: a frontier point whose three seeds shipped three
    different heads was labelled centroid by one run and linear by the next, same results.)"""
    return max(dict.fromkeys(names), key=names.count)


def _mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std())


def _mean_tree(trees: list[Any]) -> Any:
    """Element-wise mean over seeds of nested dicts of floats (None where a value is missing in any seed)."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: _mean_tree([t[k] for t in trees]) for k in first}
    if any(t is None for t in trees):
        return None
    if all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in trees):
        return float(np.mean(trees))
    return first  # non-numeric leaves (names, choices) are the same in every seed


def _mean_tree_lenient(trees: list[Any]) -> Any:
    """`_mean_tree` over seeds whose dicts may lack keys (an attack unavailable in one seed): first seed's keys."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: _mean_tree_lenient([t.get(k) if isinstance(t, dict) else None for t in trees]) for k in first}
    if all(isinstance(t, int) and not isinstance(t, bool) for t in trees) and len(set(trees)) == 1:
        return first  # counts (pool size, k) stay integers
    if all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in trees):
        return float(np.mean(trees))
    return first


def _aggregate_extra(per_seed: list[dict[str, Any]], root_seed: int = 0) -> dict[str, Any]:
    """attacks_extra (re-identification, membership, inversion): means over seeds; an alarm in any seed counts;
    the intervals over target users of an entry that carries them (the inversion's) over users and seeds."""
    if not per_seed or not per_seed[0]:
        return {}
    out = _mean_tree_lenient(per_seed)
    for name, value in out.items():
        if isinstance(value, dict) and "violation" in value:
            value["violation"] = any(bool(s.get(name, {}).get("violation")) for s in per_seed)
        if isinstance(value, dict) and "_figures" in value:
            value.update(_attack_intervals([s.get(name, {}) for s in per_seed], name, root_seed))
            for key in [k for k in value if k.startswith("_")]:
                del value[key]
    out["violation"] = any(bool(s.get("violation")) for s in per_seed)
    return out


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return "inf" if math.isinf(f) and f > 0 else f
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _candidate_metrics(seeds: list[dict[str, Any]], name: str) -> list[str]:
    """The scores recorded for candidate ``name`` (uploads: accuracy, log_loss, beats_constant; from aggregates:
    accuracy, advantage, standard_error, beats_constant), in the order the seeds first record them; a score some
    seed lacks is averaged over the seeds that have it."""
    recorded = [s["utility"]["candidates"][name] for s in seeds if name in s["utility"].get("candidates", {})]
    return list(dict.fromkeys(m for r in recorded for m in r if isinstance(r[m], (bool, int, float))))


def _users_interval(seeds: list[dict[str, Any]], stream: str, root_seed: int) -> tuple[float | None, float | None]:
    """The per-upload accuracy's 95% interval over test users (and seeds; `fl_privtext.bootstrap`): one seed, its
    own; (None, None) where a seed has none (a secure-sum point: no test uploads)."""
    u = [s["utility"] for s in seeds]
    if not all("ci_low" in x and "_per_user" in x for x in u):
        return None, None
    if len(u) == 1:
        return u[0]["ci_low"], u[0]["ci_high"]
    return counts_bootstrap([x["_per_user"] for x in u], generator(root_seed, "referee", stream, "seeds"))


def _attack_intervals(per_seed: list[dict[str, Any]], name: str, root_seed: int) -> dict[str, Any]:
    """An attack's per-upload figures' 95% intervals over target users (issue #37; `fl_privtext.attacks.evaluate`
    ``_upload_intervals``): one seed, its own; several, one bootstrap over users crossed with seeds
    (`fl_privtext.bootstrap.sums_bootstrap`, stream ``(run.seed, "referee", "attack", name, "seeds")``). None
    where a seed has none (a result of a path that does not compute them)."""
    figures = per_seed[0].get("_figures") or {}
    if not figures or not all("_sums" in a and a.get("_figures", {}).keys() == figures.keys() for a in per_seed):
        return {k: None for fig in figures for k in interval_keys(fig)}
    if len(per_seed) == 1:
        return {k: per_seed[0][k] for fig in figures for k in interval_keys(fig)}
    got = sums_bootstrap([a["_sums"] for a in per_seed], figures,
                         generator(root_seed, "referee", "attack", name, "seeds"))
    return {k: v for fig, ends in got.items() for k, v in zip(interval_keys(fig), ends, strict=True)}


def _exact(seeds: list[dict[str, Any]], runs: list[dict[str, Any]], root_seed: int) -> dict[str, Any]:
    """utility.on_device.exact: the referee's exact figure of the shipped model (simulation only,
    `fl_privtext.pipeline.exact_on_device`): means over seeds, and the interval of the bootstrap over seeds and
    test users (`fl_privtext.bootstrap`; one seed: that seed's own)."""
    exact = [r.get("exact") or {"available": False, "reason": "not computed on this path"} for r in runs]
    missing = next((e for e in exact if not e.get("available")), None)
    if missing is not None:
        return {"available": False, "reason": missing.get("reason", "not computed")}
    out: dict[str, Any] = {"available": True}
    for key in ("accuracy", "macro_f1", "majority_baseline"):
        out[key], out[f"{key}_std"] = _mean_std([e[key] for e in exact])
    del out["majority_baseline_std"]
    if len(exact) == 1:
        out["ci_low"], out["ci_high"] = exact[0]["ci_low"], exact[0]["ci_high"]
    else:  # seeds resampled, users crossed with them
        out["ci_low"], out["ci_high"] = counts_bootstrap([e["_per_user"] for e in exact],
                                                         generator(root_seed, "referee", "on-device", "seeds"))
    out.update({"num_test_records": exact[0]["num_test_records"], "num_test_users": exact[0]["num_test_users"],
                "seeds": len(exact), "by": exact[0]["by"], "interval": exact[0]["interval"],
                "per_seed": [{"seed": s["seed"], **{k: e[k] for k in ("accuracy", "macro_f1", "ci_low", "ci_high")}}
                             for s, e in zip(seeds, exact, strict=True)]})
    return out


def _private(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """utility.on_device.private: what the server estimates from the clients' answers (randomized response on
    each record's correctness; old clients: exact confusion counts), mean over seeds, with the standard deviation
    of that mean's randomized-response noise (``noise_std``; ``noise_std_per_seed``: one seed's)."""
    rr = all("accuracy_noise_std" in r for r in runs)
    sds = [float(r["accuracy_noise_std"]) if rr else 0.0 for r in runs]
    out: dict[str, Any] = {
        "available": True, "accuracy": float(np.mean([r["accuracy"] for r in runs])),
        "noise_std": math.sqrt(math.fsum(sd * sd for sd in sds)) / len(sds),
        "noise_std_per_seed": float(np.mean(sds)),
        "by": ("the server's estimate: the clients' randomized-response answers, debiased (what a deployed server "
               "knows)" if rr else "the server's sum of the clients' exact confusion counts (old clients)")}
    if len(runs) == 1 and "ci95" in runs[0]:  # randomized-response noise and the records' binomial sampling
        out["ci_low"], out["ci_high"] = (float(v) for v in runs[0]["ci95"])
    return out


def _on_device(seeds: list[dict[str, Any]], root_seed: int = 0) -> dict[str, Any]:
    """utility.on_device: the server's model applied on the test clients to clean features (ondevice.py). The
    top-level figures are the server's estimate (as before issue #37); ``exact`` (simulation only) and ``private``
    (the server's estimate) say which is which."""
    runs = [s["utility"].get("on_device", {"available": False, "reason": "not run"}) for s in seeds]
    if not all(r.get("available", True) for r in runs):
        off: dict[str, Any] = {"available": False, "reason": runs[0].get("reason", "not run")}
        if any("exact" in r for r in runs):  # every client refused: the model was sent all the same
            off["exact"] = _exact(seeds, runs, root_seed)
        return off
    out: dict[str, Any] = {"available": True}
    for key in ("accuracy", "macro_f1"):
        if all(key in r for r in runs):
            out[key], out[f"{key}_std"] = _mean_std([r[key] for r in runs])
    for key in ("majority_baseline", "num_test_records", "clients", "applied_to", "mechanism", "count_epsilon"):
        if key in runs[0]:
            out[key] = runs[0][key]
    if all("ci95" in r for r in runs):  # randomized-response answers: the noise and a CI per seed
        out["accuracy_noise_std"] = float(np.mean([r["accuracy_noise_std"] for r in runs]))
    if all("learner" in r for r in runs):  # server.select-on = clients: the clients chose (most frequent over seeds)
        chosen = [str(r["learner"]) for r in runs]
        out["learner"] = most_frequent(chosen)
        out["selection"] = {"by": "clients", "rule": runs[0]["selection"]["rule"],
                            "records": int(np.mean([r["selection"]["records"] for r in runs]))}
    out["per_seed"] = [{"seed": s["seed"], "accuracy": r["accuracy"], **({"ci95": r["ci95"]} if "ci95" in r else {}),
                        **({"learner": r["learner"], "candidates": r["selection"]["candidates"],
                            "dropped": r["selection"].get("dropped", [])} if "learner" in r else {})}
                       for s, r in zip(seeds, runs, strict=True)]
    out["exact"] = _exact(seeds, runs, root_seed)
    out["private"] = _private(runs)
    return out


def aggregate(point: dict[str, Any], total_s: float) -> dict[str, Any]:
    """Turn one served point (per-seed results) into the results.json structure."""
    cfg: ExperimentConfig = point["config"]
    seeds = point["per_seed"]
    utility: dict[str, Any] = {"available": seeds[0]["utility"].get("available", False)}
    if utility["available"]:
        for key in ("accuracy", "macro_f1"):
            mean, std = _mean_std([s["utility"][key] for s in seeds])
            utility[key], utility[f"{key}_std"] = mean, std
        utility["ci_low"], utility["ci_high"] = _users_interval(seeds, "per-upload", cfg.run.seed)
        utility["majority_baseline"] = seeds[0]["utility"]["majority_baseline"]
        if "modal_prediction_share" in seeds[0]["utility"]:
            utility["modal_prediction_share"] = float(np.mean([s["utility"]["modal_prediction_share"] for s in seeds]))
        utility["num_train_uploads"] = seeds[0]["utility"]["num_train_uploads"]
        utility["num_test_uploads"] = seeds[0]["utility"]["num_test_uploads"]
        utility["diverged"] = sorted({r for s in seeds for r in s["utility"].get("diverged", [])})
        utility["per_seed"] = [{"seed": s["seed"], "accuracy": s["utility"]["accuracy"],
                                **{k: s["utility"][k] for k in ("ci_low", "ci_high") if k in s["utility"]},
                                "macro_f1": s["utility"]["macro_f1"], "learner": s["utility"].get("learner"),
                                "candidates": s["utility"].get("candidates", {}),
                                **({"clean_head": s["utility"]["clean_head"]} if "clean_head" in s["utility"] else {})}
                               for s in seeds]
        # the server's learner (server.learner, or what auto chose: the most frequent over seeds) and, per
        # candidate, its out-of-fold accuracy and log-loss on the server's uploads (mean over seeds)
        chosen = [s["utility"].get("learner", "mlp") for s in seeds]
        utility["learner"] = most_frequent(chosen)
        names = {n for s in seeds for n in s["utility"].get("candidates", {})}
        utility["candidates"] = {n: {m: float(np.mean([s["utility"]["candidates"][n][m] for s in seeds
                                                       if m in s["utility"].get("candidates", {}).get(n, {})]))
                                     for m in _candidate_metrics(seeds, n)} for n in sorted(names)}
        utility["protocol"] = point.get("protocol", "per-upload: the server classifies the noisy uploads of test users")
        utility["on_device"] = _on_device(seeds, cfg.run.seed)
    else:
        utility["reason"] = seeds[0]["utility"].get("reason", "")

    attacks: dict[str, Any] = {}
    for name in seeds[0]["attacks"]:
        first = seeds[0]["attacks"][name]
        ends = {k for fig in first.get("_figures", {}) for k in interval_keys(fig)}  # set below, over users & seeds
        entry: dict[str, Any] = {k: v for k, v in first.items()
                                 if not isinstance(v, (float, dict)) and not k.startswith("_")}
        for key, value in first.items():
            if key in ends or key.startswith("_"):
                continue
            if isinstance(value, float):
                mean, std = _mean_std([s["attacks"][name][key] for s in seeds])
                entry[key], entry[f"{key}_std"] = mean, std
            elif isinstance(value, dict):  # per-class values: mean over seeds
                entry[key] = _mean_tree([s["attacks"][name][key] for s in seeds])
        # each seed's answer, its prior and its held-out verdicts (the console counts seeds that found a leak)
        entry["per_seed"] = [{"seed": s["seed"], "accuracy": s["attacks"][name]["accuracy"],
                              **({"prior_baseline": s["attacks"][name]["prior_baseline"]}
                                 if "prior_baseline" in s["attacks"][name] else {}),
                              "leak_detected": bool((s["attacks"][name].get("leak_test") or {}).get("leak_detected")),
                              "per_user_leak_detected": bool(((s["attacks"][name].get("per_user") or {})
                                                              .get("test") or {}).get("leak_detected"))}
                             for s in seeds]
        entry.update(_attack_intervals([s["attacks"][name] for s in seeds], name, cfg.run.seed))
        pus = [s["attacks"][name].get("per_user") or {} for s in seeds]
        if len(seeds) > 1 and all(all(k in pu for k in ("accuracy", "ci_low", "ci_high")) for pu in pus):
            # over test users AND seeds (fl_privtext.bootstrap.seeds_interval), not the mean of each seed's ends
            entry["per_user"]["ci_low"], entry["per_user"]["ci_high"] = seeds_interval(
                [pu["accuracy"] for pu in pus], [pu["ci_low"] for pu in pus], [pu["ci_high"] for pu in pus])
        if "violation" in first:  # an alarm in any seed is an alarm
            entry["violation"] = any(bool(s["attacks"][name].get("violation")) for s in seeds)
            entry["per_user"]["violation"] = any(bool(s["attacks"][name]["per_user"].get("violation"))
                                                 for s in seeds)
        attacks[name] = entry
    attacks_extra = _aggregate_extra([s.get("attacks_extra", {}) for s in seeds], cfg.run.seed)

    fairness: dict[str, Any] = {}
    if utility["available"]:
        for name in seeds[0]["utility"]["fairness"]:
            gap_mean, gap_std = _mean_std([s["utility"]["fairness"][name]["gap"] for s in seeds])
            fairness[name] = {**seeds[0]["utility"]["fairness"][name], "gap": gap_mean, "gap_std": gap_std,
                              "note": "per-group values are from the first seed; gap is the mean over seeds"}

    timing: dict[str, Any] = {k: float(np.sum([s["timing"][k] for s in seeds])) for k in seeds[0]["timing"]}
    timing["server_s"] = point["server_s"]
    if "simulation" in point:  # the Flower simulation's fixed costs (fl_privtext.federation.simulation.fixed_costs)
        timing["simulation"] = {k: v for k, v in point["simulation"].items() if k.endswith("_s")}
    timing["total_s"] = total_s
    privacy = point["privacy"]
    if "central" in point.get("training", {}):  # Phase A through SecAgg+ with client noise (issue #24)
        # privacy.central is the uploads' guarantee where they have one (shuffler, secure aggregation); Phase A's
        # then sits beside it under its own key
        key = "central_phase_a" if "central" in privacy else "central"
        privacy = {**privacy, key: point["training"]["central"]}
    return _json_safe({**({"attacks_note": point["attacks_note"]} if "attacks_note" in point else {}),
        "utility": utility,
        "privacy": privacy,
        "attacks": attacks,
        "attacks_extra": attacks_extra,
        "empirical_privacy": {k: v["empirical_privacy"] for k, v in attacks.items()},
        "fairness": fairness,
        "faults": point.get("faults", {}),
        "federation": {
            "num_clients": cfg.federation.num_clients, "num_users": point["num_users"],
            "num_records": point["num_records"], "rounds": cfg.federation.rounds,
            "schedule": cfg.federation.schedule, "seeds": cfg.run.seeds,
            "uploads_received": seeds[0]["uploads_received"], "uploads_observed": seeds[0]["uploads_observed"],
            "messages_observed": seeds[0]["messages_observed"], "bytes_observed": seeds[0]["bytes_observed"],
            "upload_dim": seeds[0]["output_dim"],
            "placement": point.get("placement", {}),
            # issue #24: the server saw one sender-free message per cohort and round (fl_privtext.federation.shuffler)
            "shuffle": bool(getattr(cfg.federation, "shuffle", False)),
            "server_received": server_received(cfg, point["num_users"], utility),
        },
        "dataset": point["dataset"],
        "training": point.get("training", {"enabled": False, "rounds": 0, "defense": cfg.train.defense,
                                           "encoder": cfg.train.encoder, "guarantee": "none"}),
        "timing": timing,
        "config": published(cfg.to_flat()),  # the client seed never: its fingerprint (issue #22)
        "schema_version": SCHEMA_VERSION,
        "provenance": provenance(point, cfg),
    })


def _commit() -> str | None:
    """The git commit of the package source, when it runs from a checkout (None otherwise)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    if out.returncode != 0 or len(commit) != 40:
        return None
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def provenance(point: dict[str, Any], cfg: ExperimentConfig) -> dict[str, Any]:
    """What produced these numbers: package version and commit, data fingerprint, extractor identity, time, mode."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg = version("fl-privtext")
    except PackageNotFoundError:
        pkg = None
    return {
        "package_version": pkg,
        "commit": _commit(),
        "dataset_fingerprint": point.get("dataset", {}).get("fingerprint"),
        "extractor": point.get("extractor_identity", {"name": cfg.extractor.name, "model": cfg.extractor.model}),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "randomness": point.get("privacy", {}).get("randomness", cfg.run.randomness),
    }


def warnings_for(results: dict[str, Any]) -> list[str]:
    """Plain-language warnings about results that need a second look (also in results.json ``warnings``)."""
    out: list[str] = []
    u, p = results["utility"], results["privacy"]
    base = results.get("baseline_no_privacy")
    eps = p.get("epsilon_worst_case")
    if u.get("available"):
        acc, maj = u["accuracy"], u["majority_baseline"]
        clear = base["utility"]["accuracy"] if base else None
        if clear is not None and clear < maj:
            out.append(f"Without privacy the task model reaches {clear:.3f}, below the majority baseline {maj:.3f}: "
                       "training failed (check server.lr, server.epochs, server.standardize).")
        elif acc < maj and eps == "inf":
            out.append(f"The task model ({acc:.3f}) is below the majority baseline ({maj:.3f}) with no privacy noise: "
                       "training failed (check server.lr, server.epochs, server.standardize).")
        elif p.get("mechanism") == "secagg-gaussian-sum":  # on device only: noisy answers, judged by their interval
            hi = max((s["ci95"][1] for s in u.get("on_device", {}).get("per_seed", []) if "ci95" in s), default=acc)
            if hi < maj:
                out.append(f"The on-device accuracy of the model from the secure sum ({acc:.3f}, 95% CI up to "
                           f"{hi:.3f}) is below the majority baseline ({maj:.3f}): at central epsilon {fmt_epsilon(eps)} the "
                           "sum's noise hides the class statistics (server.learner = auto falls back to the constant "
                           "when its selection sees nothing better).")
        elif acc < maj:
            why = (f"expected at a true worst-case epsilon of {fmt_epsilon(eps)} per upload: the noise hides most of the "
                   "signal and a model trained on it can do worse than always predicting the majority class"
                   if isinstance(eps, float) and eps < 50 else
                   "the mechanism's output carries little of what the task needs")
            out.append(f"The private task model ({acc:.3f}) is below the majority baseline ({maj:.3f}); {why}.")
        for reason in u.get("diverged") or []:
            out.append(f"Task model training diverged ({reason}).")
        below = on_device_below_majority(u, eps)
        if below:
            out.append(below)
    for name, a in results.get("attacks", {}).items():
        test = a.get("leak_test") or {}
        if test and not test.get("leak_detected", True):
            out.append(f"Attack on {name}: the eavesdropper's best model ({a.get('learned_attacker')}) does not beat "
                       f"the prior on the held-out aux users, so it answers the prior ({a.get('attacker')}); "
                       f"{test.get('verdict', 'no leak detected at this power')}. That is 'no leak detected at this "
                       "power', not 'no leak'.")
        floor, hi = a.get("floor_logistic"), (a.get("accuracy_ci95") or [None, None])[1]
        if isinstance(floor, float) and isinstance(hi, float) and floor > hi:
            out.append(f"Attack on {name}: plain logistic regression on the same aux users reaches {floor:.3f} on the "
                       f"targets, above the attacker's answer ({a['accuracy']:.3f}, 95% CI up to {hi:.3f}): this "
                       "audit under-states the leak (too few aux users to confirm it, or a weak attacker choice).")
        if a.get("violation"):
            out.append(f"PRIVACY VIOLATION on {name}: an attack's lower confidence bound exceeds the LDP ceiling of "
                       "the true epsilon; the mechanism does not deliver what its report says.")
    faults = results.get("faults") or {}
    if faults.get("failed_clients"):
        out.append(f"{len(faults['failed_clients'])} client failure(s): results use the replies that arrived "
                   f"({faults.get('num_users_not_heard_from', 0)} user(s) never heard from); see faults.")
    if not p.get("float_safe", True):
        out.append(_float_note(p))
    return out


POPULATION_DOC = "docs/results/population.md"


def on_device_below_majority(u: dict[str, Any], epsilon: Any = None) -> str | None:
    """The warning when the on-device model's EXACT accuracy (``utility.on_device.exact``) is below the majority
    baseline of the same test records, or None. Rule: the whole 95% interval lies below the majority (ci_high <
    majority); a point below the majority whose interval still reaches it is within the noise of the test users and
    is not flagged. Without an interval (older results), the point itself. Why: a model worse than always
    answering the majority usually means the population is too small for the epsilon (the server's statistics are
    noise), which a reader would otherwise take for a result."""
    ex = ((u.get("on_device") or {}).get("exact")) or {}
    if not ex.get("available") or ex.get("majority_baseline") is None:
        return None
    acc, maj, hi = ex["accuracy"], ex["majority_baseline"], ex.get("ci_high")
    if isinstance(hi, (int, float)):
        if hi >= maj:
            return None
        lo = ex.get("ci_low", acc)
        figure = f"{acc:.3f} {_band(lo, hi)} (its whole 95% interval over test users)"
    elif acc < maj:
        figure = f"{acc:.3f} (the point; no interval recorded)"
    else:
        return None
    head = (f"The on-device model's exact accuracy {figure} is below the majority baseline {maj:.3f}: the server "
            "learned less than always answering the most frequent label.")
    if epsilon == "inf" or (isinstance(epsilon, float) and math.isinf(epsilon)):
        return head + " With no privacy noise that is a training failure (check server.learner, server.epochs)."
    return (f"{head} Usually too few users for this epsilon ({fmt_epsilon(epsilon)} per upload; the server's "
            f"statistics are mostly noise): use more users or a larger epsilon; see {POPULATION_DOC} for how many "
            "users each mechanism needs.")


def _has_secure(p: dict[str, Any]) -> bool:
    return "sampler" in (p.get("parameters") or {})


def _float_label(p: dict[str, Any]) -> str:
    if _has_secure(p):
        return "float sampler: SIMULATION-GRADE, low bits leak; privacy.sampler=secure for deployment"
    return "float noise: SIMULATION-GRADE, low bits leak; no secure sampler for this mechanism"


def _float_note(p: dict[str, Any]) -> str:
    if _has_secure(p):
        return ("privacy.sampler='float': floating-point noise is simulation-grade; its low bits leak (Mironov "
                "2012). Use privacy.sampler='secure' (the default) for a deployment-grade guarantee.")
    return (f"{p.get('mechanism')}: floating-point noise, simulation-grade (float_safe false: its low bits leak, "
            "Mironov 2012; `fl-privtext audit` certifies it); this mechanism has no secure sampler yet.")


def _fmt(x: Any, digits: int = 3) -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "-"
    return f"{x:.{digits}f}" if abs(x) < 1e5 else f"{x:.3g}"


def _total_label(p: dict[str, Any]) -> str:
    """How the per-user TOTAL is composed (issue #24)."""
    central = p.get("central")
    if isinstance(central, dict) and central.get("via") == "shuffle":
        return "(against the server: central + on-device" + (" + Phase A central)" if "central_phase_a" in p else ")")
    if isinstance(central, dict) and central.get("via") == "secagg" and p.get("mechanism") == "secagg-gaussian-sum":
        return ("(against the server: the secure sums' central epsilon" + (" + Phase A's" if "central_phase_a" in p
                                                                           else "") + "; on-device users apart)")
    if isinstance(central, dict) and central.get("via") == "secagg":
        return "(basic: uploads' local epsilon + Phase A's central epsilon against the server)"
    return "(basic)"


def table(results: dict[str, Any]) -> str:
    """A readable plain-text summary (stdout and summary.md)."""
    p, u, f = results["privacy"], results["utility"], results["federation"]
    sampler = "" if p.get("float_safe", True) else f" [{_float_label(p)}]"
    lines = [
        (f"dataset {results['dataset']['name']}{' (SYNTHETIC users)' if results['dataset'].get('synthetic') else ''}"
         f" | {f['num_users']} users, {f['num_records']} records in "
         f"{f['num_clients']} clients x {f['rounds']} round(s) | seeds {f['seeds']}"),
        (f"mechanism {p['mechanism']}: epsilon nominal {fmt_epsilon(p['epsilon_nominal'])}, "
         f"TRUE worst-case {fmt_epsilon(p['epsilon_worst_case'])}, delta {p.get('delta', 0.0):g}{sampler}"),
    ]
    comp = p.get("composition", {})
    per_user = comp.get("per_user", {})
    if per_user:
        labels = comp.get("labels")
        label_eps = labels.get("epsilon_per_upload") if isinstance(labels, dict) else None
        label_txt = ("labels IN THE CLEAR (label epsilon inf)" if label_eps == "inf" else
                     f"labels by randomized response, epsilon {fmt_epsilon(label_eps)} per upload"
                     if label_eps is not None else str(labels))
        d_tight = per_user.get("delta_tight")
        lines.append(f"per user (max over users, every round and repetition): representations "
                     f"{fmt_epsilon(per_user.get('max_epsilon_worst_case'))} | {label_txt} (labels "
                     f"{fmt_epsilon(per_user.get('max_epsilon_labels', '-'))}) | on-device "
                     f"{fmt_epsilon(per_user.get('max_epsilon_on_device', 0.0))} | Phase A "
                     f"{fmt_epsilon(per_user.get('max_epsilon_phase_a', 0.0))} | TOTAL "
                     f"{fmt_epsilon(per_user.get('max_epsilon_total', '-'))} "
                     f"{_total_label(p)} | tight "
                     f"{fmt_epsilon(per_user.get('max_epsilon_tight', '-'))} at delta "
                     f"{d_tight if isinstance(d_tight, str) else format(d_tight or 0.0, 'g')}")
    central = p.get("central")
    for pa in (p.get("central_phase_a"), central):  # issue #24: Phase A's noisy secure sums against the server
        if isinstance(pa, dict) and pa.get("via") == "secagg" and "rounds" in pa:
            lines.append(f"Phase A central against the server via secagg: epsilon {fmt_epsilon(pa.get('epsilon'))} at delta "
                         f"{_fmt(pa.get('delta'), 8)} over {pa.get('rounds')} round(s), contributors "
                         f"{pa.get('contributors')} | the clients' ledgers charge up to "
                         f"{fmt_epsilon(pa.get('client_ledger_max_epsilon', '-'))} (basic composition at their "
                         f"secagg-min-clients) | no federated validation in the clear")
    if isinstance(central, dict) and central.get("via") != "secagg":  # the shuffler's central guarantee
        lines.append(f"central against the server via {central.get('via')}: epsilon "
                     f"{fmt_epsilon(central.get('epsilon'))} at delta {_fmt(central.get('delta'), 8)} over "
                     f"{central.get('rounds', '-')} round(s) ({fmt_epsilon(central.get('epsilon_per_round', '-'))} "
                     f"per round) | applied to one user's local epsilon per round "
                     f"{fmt_epsilon(central.get('local_epsilon_per_user_round', '-'))} (its records "
                     f"composed), n = {central.get('users_shuffled', '-')} users shuffled per cohort | "
                     f"{central.get('bound', central.get('note', ''))}")
    led = p.get("ledger") or {}
    if led:
        lines.append(f"clients' own ledgers: largest per-user total charged "
                     f"{fmt_epsilon(led.get('per_user', {}).get('max_epsilon_charged', '-'))}; "
                     f"{len(led.get('refusals', []))} refusal(s); "
                     f"{led.get('records_withheld', 0)} record(s) withheld at their users' caps")
        if led.get("stopped_at"):
            first = (led.get("refusals") or [{}])[0]
            lines.append(f"STOPPED: every client refused seed {led['stopped_at']['seed']} round "
                         f"{led['stopped_at']['round']} ({str(first.get('reason', ''))[:160]}); the results use "
                         "the rounds before it")
    if "randomness" in p:
        mode = p["randomness"]
        lines.append("client randomness: " + ("secret (OS entropy on every client)" if mode == "secret" else
                                               "reproducible: simulation only, a server holding the client seed "
                                               "could remove the noise"))
    faults = results.get("faults") or {}
    if faults.get("failed_clients"):
        first = faults["failed_clients"][0]
        lines.append(f"FAULTS: {len(faults['failed_clients'])} client failure(s) (e.g. node {first['node']}, "
                     f"{first['kind']}: {str(first['reason'])[:120]}); {faults['records_not_received']} record "
                     f"upload(s) missing, {faults['num_users_not_heard_from']} user(s) not heard from")
    base = results.get("baseline_no_privacy")
    if u.get("available") and p.get("mechanism") == "secagg-gaussian-sum":  # no uploads: on device only
        lines.append(f"task (the server's model from the secure sum of class statistics, learner "
                     f"{u.get('learner', '-')}): measured on device only, no test uploads (below)")
    elif u.get("available"):
        clear = f"; without privacy {_fmt(base['utility']['accuracy'])}" if base else ""
        band = (f" {_band(u['ci_low'], u['ci_high'])} (95% over test users"
                f"{' and seeds' if f['seeds'] > 1 else ''})" if u.get("ci_low") is not None else "")
        lines.append(f"task: accuracy {_fmt(u['accuracy'])} +- {_fmt(u['accuracy_std'])}{band}, macro-F1 "
                     f"{_fmt(u['macro_f1'])} +- {_fmt(u['macro_f1_std'])} (majority {_fmt(u['majority_baseline'])}"
                     f"{clear}) [per-upload: the server classifies noisy test uploads; learner "
                     f"{u.get('learner', 'mlp')}]")
    if u.get("available"):
        od = u.get("on_device", {})
        if od.get("available"):
            bod = (base or {}).get("utility", {}).get("on_device", {})
            clear = f"; without privacy {_fmt(bod['accuracy'])}" if bod.get("available") else ""
            noise = (f", randomized-response noise sd {_fmt(od['accuracy_noise_std'])}, 95% CI "
                     f"{_band(*od['per_seed'][0]['ci95'])}" if "accuracy_noise_std" in od else "")
            major = f" (majority {_fmt(od['majority_baseline'])}{clear})" if "majority_baseline" in od else clear
            chooser = (f"; learner {od['learner']}, chosen by half of the test clients' answers, the other half "
                       f"reports" if "learner" in od else "")
            ex = od.get("exact") or {}
            if ex.get("available"):  # issue #37: the exact figure first, the server's estimate beside it
                bex = bod.get("exact") or {}
                clear = f"; without privacy {_fmt(bex['accuracy'])}" if bex.get("available") else ""
                over = "test users and seeds" if ex.get("seeds", 1) > 1 else "test users"
                priv = od.get("private") or {}
                est = f"server's estimate {_fmt(priv.get('accuracy', od['accuracy']))}"
                if "accuracy_noise_std" in od:
                    band = f", 95% CI {_band(priv['ci_low'], priv['ci_high'])}" if "ci_low" in priv else ""
                    est += f" (randomized-response noise sd {_fmt(priv.get('noise_std'))}{band})"
                lines.append(f"task on device: exact (simulation) {_fmt(ex['accuracy'])} "
                             f"{_band(ex['ci_low'], ex['ci_high'])} (95% over {over}), macro-F1 {_fmt(ex['macro_f1'])} (majority "
                             f"{_fmt(ex['majority_baseline'])}{clear}) | {est} [the server's model applied by the "
                             f"test clients to their clean features{chooser}]")
            else:
                lines.append(f"task on device: accuracy {_fmt(od['accuracy'])} +- {_fmt(od['accuracy_std'])}{major}"
                             f"{noise} [the server's model applied by the test clients to their clean features"
                             f"{chooser}]")
    else:
        lines.append(f"task: none ({u.get('reason', '')})")
    lines.append("")
    head = f"{'attribute':<14} {'attacker acc':>13} {'prior':>9} {'F1':>7} {'1-X / 1-F':>10} {'fair gap':>9}"
    lines.append(head + (f" {'no-privacy acc':>15}" if base else ""))
    for name, a in results["attacks"].items():
        f1 = a.get("f1", a.get("macro_f1"))
        gap = results["fairness"].get(name, {}).get("gap")
        row = (f"{name:<14} {_fmt(a['accuracy']):>13} {_fmt(prior_baseline(a)):>9} {_fmt(f1):>7} "
               f"{_fmt(a['empirical_privacy']):>10} {_fmt(gap):>9}")
        if base and name in base["attacks"]:
            row += f" {_fmt(base['attacks'][name]['accuracy']):>15}"
        lines.append(row)
    lines.extend(attack_lines(results))
    if results["attacks"]:
        lines.append(LEGEND)
    lines.append("")
    lines.append(f"eavesdropper observed {f['uploads_observed']} uploads in {f['messages_observed']} messages "
                 f"({f['bytes_observed'] / 1e6:.2f} MB); total {results['timing']['total_s']:.1f} s")
    tr = results.get("training", {})
    if tr.get("enabled"):  # Phase A (issue #12): its guarantee is stated apart from the uploads' LDP above
        g = tr["guarantee"]
        guarantee = (f"DP-FedAvg user-level epsilon {fmt_epsilon(g['epsilon'])}, delta {g['delta']:g} (released models)"
                     if isinstance(g, dict) else "none, updates unprotected")
        if "central" in tr:  # issue #24: SecAgg+ with client noise
            guarantee = (f"central epsilon {fmt_epsilon(tr['central']['epsilon'])}, delta {tr['central']['delta']:g} "
                         f"against the server (SecAgg+, noise added by the clients)")
        lines.append(f"phase A: {tr['encoder']} encoder, defence {tr['defense']}, {tr['rounds']} {tr['strategy']} "
                     f"rounds, selected round {tr['selected_round']}, {tr['updates_observed']} updates observed "
                     f"({tr['update_bytes_observed'] / 1e6:.2f} MB); Phase A guarantee: {guarantee}")
    return "\n".join(lines)


def _band(lo: Any, hi: Any, sep: str = ", ") -> str:
    """An accuracy's interval for display, clipped to [0, 1] (results saved before the clip at the source)."""
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        lo, hi = clip_interval(lo, hi)
    return f"[{_fmt(lo)}{sep}{_fmt(hi)}]"


def prior_baseline(a: dict[str, Any]) -> Any:
    """The one baseline an attack's accuracy is read against (per upload: ``attacks.<attribute>``, per user: its
    ``per_user``): the attacker's prior on the targets, what it answers without a leak (results.json
    ``prior_baseline``); results written before issue #36 name the prior that answered in ``attacker``."""
    if "prior_baseline" in a:
        return a["prior_baseline"]
    if a.get("attacker") == "majority_given_label" and "majority_given_label_baseline" in a:
        return a["majority_given_label_baseline"]
    return a.get("majority_baseline")


def _verdict(a: dict[str, Any], side: str) -> str:
    """The verdict on one side (``upload`` or ``user``) of an attack, on the same evidence as the figure beside it:
    the held-out test on the aux users decides whether the learned model or the prior answered, so "no leak
    detected" sits beside accuracy = prior and "leak" beside the model's answer. Several seeds: each seed's own
    test, counted."""
    pu = a.get("per_user") or {}
    if (a if side == "upload" else pu).get("violation"):
        return "VIOLATION"
    key = "leak_detected" if side == "upload" else "per_user_leak_detected"
    seeds = [s[key] for s in a.get("per_seed", []) if key in s]
    if not seeds:  # one seed, or a result written before issue #36
        test = a.get("leak_test") if side == "upload" else pu.get("test")
        seeds = [bool((test or {}).get("leak_detected"))]
    hits = sum(bool(x) for x in seeds)
    if hits == 0:
        return "no leak detected = prior"
    return "leak detected" if hits == len(seeds) else f"leak in {hits} of {len(seeds)} seeds"


def _ceil(value: Any, vacuous: Any) -> str:
    return "vacuous" if vacuous else _fmt(value)


# attacks_extra entries with a line of their own below; any other (a registered attack) is listed by its figures
DESCRIBED_EXTRA = ("reidentification", "membership", "inversion")


def _is_figure(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def attack_lines(results: dict[str, Any]) -> list[str]:
    """Every attack next to its baseline, its LDP ceiling (true epsilon) and its 95% CI; alarms first."""
    attacks, extra = results.get("attacks", {}), results.get("attacks_extra", {})
    alarms = [f"attacks.{n}" for n, a in attacks.items() if a.get("violation")]
    alarms += [f"attacks_extra.{n}" for n, a in extra.items() if isinstance(a, dict) and a.get("violation")]
    out: list[str] = []
    if alarms:
        out += ["", ("!!! PRIVACY VIOLATION: " + ", ".join(alarms) + " exceed(s) the LDP ceiling of the mechanism's "
                     "TRUE epsilon at 95% confidence: the mechanism leaks more than it reports (a bug) !!!")]
    if attacks:
        out += ["", (f"{'attribute':<12} {'per upload [95% CI]':<21} {'prior':>5} {'ceiling':>7}  {'verdict':<25}| "
                     f"{'per user [95% CI]':<21} {'prior':>5} {'ceiling':>7}  verdict")]
    for name, a in attacks.items():
        pu = a.get("per_user")
        if not pu:
            continue
        # the interval over target users (issue #37); results written before it: the binomial one over uploads
        lo, hi = (a["ci_low"], a["ci_high"]) if a.get("ci_low") is not None else a.get("accuracy_ci95", [None, None])
        ulo, uhi = pu.get("ci95", [None, None])
        out.append(f"{name:<12} {_fmt(a['accuracy'])} {_band(lo, hi, ','):<15} {_fmt(prior_baseline(a)):>5} "
                   f"{_ceil(a.get('ceiling'), a.get('ceiling_vacuous')):>7}  {_verdict(a, 'upload'):<25}| "
                   f"{_fmt(pu['accuracy'])} {_band(ulo, uhi, ','):<15} {_fmt(prior_baseline(pu)):>5} "
                   f"{_ceil(pu.get('ceiling'), pu.get('ceiling_vacuous')):>7}  {_verdict(a, 'user')}")
    for name, a in attacks.items():
        if a.get("advantage_ci_low") is not None:  # the other per-upload figures, each with its interval over users
            f1 = next((k for k in ("macro_f1", "f1") if a.get(f"{k}_ci_low") is not None), None)
            out.append(f"{name}: per upload, advantage over the prior {_fmt(a['advantage'])} "
                       f"[{_fmt(a['advantage_ci_low'])}, {_fmt(a['advantage_ci_high'])}]"
                       + (f", {f1.replace('_', '-')} {_fmt(a[f1])} {_band(a[f'{f1}_ci_low'], a[f'{f1}_ci_high'])}"
                          if f1 else "") + " (95% over target users" + (", seeds" if len(a.get("per_seed", [])) > 1
                                                                        else "") + ")")
    for name, a in attacks.items():
        if "floor_logistic" in a:  # the plain attacker beside the answer (same aux users, same targets)
            ufloor = (a.get("per_user") or {}).get("floor_logistic")
            out.append(f"{name}: floor (plain logistic regression on the same aux users and targets): per upload "
                       f"{_fmt(a['floor_logistic'])}" + (f", per user {_fmt(ufloor)}" if ufloor is not None else ""))
    for name, a in attacks.items():
        pu = a.get("per_user") or {}
        if "answered_from_prior" in pu:  # federation.shuffle: scored per named user
            out.append(f"{name}: per user under the shuffler: {int(pu['answered_from_prior'])} of "
                       f"{int(pu['num_users'])} named users answered from the prior (no report linked to them); "
                       f"per-report inference as above")
    reid, memb, inv = (extra.get(k, {}) for k in DESCRIBED_EXTRA)
    if "scope" in reid:
        out.append("re-identification / membership under the shuffler: per-report content matching (a match links "
                   "no other report, round or node)")
    if "top1" in reid:
        out.append(f"re-identification among {reid['pool']}: top-1 {_fmt(reid['top1'])} [{_fmt(reid['ci95'][0])},"
                   f"{_fmt(reid['ci95'][1])}], top-{reid['k']} {_fmt(reid['topk'])}, chance {_fmt(reid['chance'])}, "
                   f"ceiling {_ceil(reid['ceiling'], reid['ceiling_vacuous'])}")
    if "auc" in memb:
        out.append(f"membership: AUC {_fmt(memb['auc'])} (ceiling {_ceil(memb['ceiling_auc'], memb['ceiling_vacuous'])}),"
                   f" TPR at 1% FPR {_fmt(memb['tpr_at_1pct_fpr'])} (ceiling "
                   f"{_ceil(memb['ceiling'], memb['ceiling_vacuous'])})")
    if "f1" in inv:
        def band(key: str) -> str:  # issue #37: the interval over target users (and seeds), where there is one
            lo, hi = inv.get(f"{key}_ci_low"), inv.get(f"{key}_ci_high")
            return f" {_band(lo, hi)}" if lo is not None else ""

        out.append(f"keyword inversion (top-{inv['vocab_size']} words): F1 {_fmt(inv['f1'])}{band('f1')} vs "
                   f"word-frequency baseline {_fmt(inv['f1_baseline'])}{band('f1_baseline')}; entity recall {_fmt(inv.get('entity_recall'))} vs "
                   f"{_fmt(inv.get('entity_recall_baseline'))}")
    for name, a in extra.items():  # an attack registered beyond the built-ins (fl_privtext.names.ATTACKS)
        if name not in DESCRIBED_EXTRA and isinstance(a, dict):
            out.append(f"{name}: " + (", ".join(f"{k} {_fmt(v)}" for k, v in a.items() if _is_figure(v))
                                      if a.get("available", True) else f"not available ({a.get('reason')})"))
    if any(a.get("ceiling_vacuous") for a in attacks.values()) or reid.get("ceiling_vacuous"):
        out.append("ceilings marked 'vacuous' are 1: the mechanism's true worst-case epsilon bounds nothing there.")
    return out


def server_received(cfg: ExperimentConfig, num_users: int, utility: dict[str, Any]) -> str:
    """What the server of this point's federation received, in a few words (results.json
    ``federation.server_received``): the releases the point's epsilon is about, or the clean data of a
    no-privacy point."""
    if cfg.server.aggregate == "secagg":
        what = f"SecAgg+ sums of the clients' noisy class statistics over {num_users} users, no per-user upload"
    elif cfg.privacy.mechanism == "none":
        what = f"clean features and labels of {num_users} users"
    else:
        labels = ("labels in the clear" if cfg.privacy.label_epsilon == 0 else
                  f"labels by randomized response (epsilon {cfg.privacy.label_epsilon:g})")
        what = (f"{'shuffled, sender-free ' if cfg.federation.shuffle else ''}privatized uploads of {num_users} "
                f"users ({cfg.privacy.mechanism}, epsilon {cfg.privacy.epsilon:g} per upload; {labels})")
    if cfg.train.rounds > 0:
        how = "summed by SecAgg+" if cfg.train.secagg else "per client"
        noise = "with DP noise" if cfg.train.dp_noise_multiplier > 0 else "without DP noise"
        what += f"; Phase A model updates ({how}, {noise})"
    if (utility.get("on_device") or {}).get("available"):
        what += "; the test clients' randomized-response on-device counts"
    return what


def baseline_summary(point: dict[str, Any]) -> dict[str, Any]:
    """The same users and seeds without privacy (mechanism `none`): what the mechanism changed."""
    agg = aggregate(point, total_s=0.0)
    return {"mechanism": "none",
            "utility": {k: agg["utility"].get(k) for k in ("accuracy", "accuracy_std", "macro_f1", "on_device")},
            "attacks": {k: {"accuracy": v["accuracy"], "f1": v.get("f1", v.get("macro_f1"))}
                        for k, v in agg["attacks"].items()}}


def published_toml(cfg: ExperimentConfig) -> str:
    """config.toml without the client seed (issue #22): a comment with its fingerprint instead; to rerun the same
    reproducible noise, pass --set run.client-seed=N again."""
    import dataclasses

    if cfg.run.client_seed is None:
        return cfg.to_toml()
    text = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, client_seed=None)).to_toml()
    return (f"# run.client-seed withheld (fingerprint {seed_fingerprint(cfg.run.client_seed)}); pass "
            "--set run.client-seed=N to reproduce the clients' noise\n" + text)


def finalize(point: dict[str, Any], cfg: ExperimentConfig, *, total_s: float, output: str | Path | None,
             echo: bool = True, baseline: dict[str, Any] | None = None, baseline_source: str = "",
             baseline_skipped: str = "") -> dict[str, Any]:
    """Aggregate one point, write results.json, config.toml and summary.md to ``output``, print the table.
    ``baseline``: the same users with mechanism `none`, computed OUTSIDE the private point's federation (its own
    federation, or the referee's plain loop; ``baseline_source`` says which): its figures go to
    ``baseline_no_privacy``, and ``baseline`` says where it came from (``federation = "separate"``) and what that
    federation's server received. ``baseline_skipped``: why a reference that ``run.baseline`` asked for was not
    computed."""
    results = aggregate(point, total_s)
    if baseline is not None:
        results["baseline_no_privacy"] = baseline_summary(baseline)
        ref = aggregate(baseline, total_s=0.0)["federation"]["server_received"]
        # public contract: baseline.federation = "separate" whenever a no-privacy reference was computed
        results["baseline"] = {"federation": "separate", "computed_by": baseline_source,
                               "server_received": f"{ref} (the no-privacy reference's own server; no client shared "
                                                  "with the private point's federation)"}
    elif baseline_skipped:
        results["baseline"] = {"federation": "not computed", "reason": baseline_skipped}
    results["warnings"] = warnings_for(results)
    out = Path(output) if output else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    make_dir(out)
    keep_going(out / "config.toml", lambda: _write_atomic(out / "config.toml", published_toml(cfg)))
    text = table(results)
    note = results["privacy"].get("published_claim_note")
    summary = f"# fl_privtext run\n\n```\n{text}\n```\n"
    if results["warnings"]:
        summary += "\n**Warnings.**\n\n" + "".join(f"- {w}\n" for w in results["warnings"])
    if note:
        summary += f"\n**Privacy note.** {note}\n"
    summary += summary_section(results, out)  # writes privacy_utility.png beside summary.md and links it
    summary += f"\n{COLUMNS}\n"
    prov = results["provenance"]
    summary += (f"\n*Produced by fl-privtext {prov['package_version']} (commit {prov['commit']}) at "
                f"{prov['timestamp']}; dataset fingerprint {str(prov['dataset_fingerprint'])[:16]}; client "
                f"randomness {prov['randomness']}.*\n")
    alarm = next((ln for ln in text.splitlines() if ln.startswith("!!! PRIVACY VIOLATION")), None)
    if alarm:
        summary = f"# fl_privtext run\n\n**{alarm.strip('! ')}**\n" + summary.removeprefix("# fl_privtext run\n")
    keep_going(out / "summary.md", lambda: _write_atomic(out / "summary.md", summary))
    if unwritten():  # reported on stderr as they failed; the command ends "incomplete" (fl_privtext.rundir)
        results["incomplete"] = unwritten()
    _write_atomic(out / "results.json", json.dumps(results, indent=2))  # last: its presence means a finished run
    if echo:
        print(text)
        for w in results["warnings"]:
            print(f"warning: {w}")
        print(f"\nwrote {out}/results.json, config.toml{', ' + RUN_PLOT if (out / RUN_PLOT).is_file() else ''}")
        print(f"read the full report (legend, warnings, plot): {out / 'summary.md'}")
    results["output_dir"] = str(out)
    return results


def _write_atomic(path: Path, text: str) -> None:
    """`fl_privtext.rundir.write_atomic`: no half-written file; a failure is one line naming the file."""
    write_atomic(path, text)
