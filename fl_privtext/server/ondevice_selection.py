"""The on-device model chosen by the clients' answers (``server.select-on = clients``).

Why: under strong local noise the server's own evidence (out-of-fold log-loss on noisy uploads,
`fl_privtext.server.selection`; held-out scores from noisy aggregates, `fl_privtext.server.aggregate_selection`)
cannot see how a head does on CLEAN features, which is what on-device inference applies it to. Measured on AG news
(PrivUnitG, true epsilon 4, one seed): applied on device the heads give lda 63.0, linear 61.3, centroid 60.6 against
the constant's 58.7, while their per-upload log-losses tie to the third decimal (0.8524 / 0.8515 / 0.8524 vs 0.8523).
Only the clients hold clean features, so only they can tell.

Protocol (two stages of the on-device round, `fl_privtext.client.ondevice`): the server fits every candidate of
``server.learner = auto`` (the constant included) on all it received and sends them all to the test clients with
stage ``select``; each client answers for the test users of its select half (a public hash of the user id), each
record for ONE candidate drawn by the client, one randomized-response bit at ``client.count-epsilon``. The server
debiases per candidate (`choose`), then sends the chosen model with stage ``report`` and the other half of the test
users answer for it: the reported on-device accuracy never comes from the records that chose it. Privacy: each test
record releases one bit at count-epsilon in the stage of its half, as in the single-stage protocol; no training
user pays anything more.

The constant is not asked about: its accuracy is the share of its class, which the server already estimates from
the labels it holds (`constant_from_labels`: the training uploads' labels, debiased through the label-RR matrix when
label RR is on; `constant_from_counts`: a secure sum's noisy class counts), with a standard error from the users'
binomial sampling (and the label RR's or the sum's noise). No answer is spent on it, so each of the m - 1 other
candidates is judged on (select records) / (m - 1), and the comparison's variance loses the constant's randomized-
response term, the largest one (at count-epsilon 1 one record's RR answer has a standard deviation of ~0.96, a
label share over n users ~0.5 / sqrt(n)). Measured on the frontier before this (the constant answered by the clients
too): blog, PrivUnitG + in-domain PCA at true epsilon 16, the clients' estimate of the constant came out 0.39
+- 0.08 (true share ~0.27) and the centroid's 0.62 +- 0.07 was not separated from it (z = 2.1 < 2.24): the clients
kept the constant.

Decision (as on uploads): a candidate is chosen only when its estimated accuracy beats the constant's by more than z
standard errors (one-sided 95%, Bonferroni over the candidates tried; the estimates come from disjoint records (or
the training users' labels), so their variances add: the randomized response's and the records' binomial sampling);
among those that pass, the highest estimate wins; otherwise the constant, and ``selection.candidates`` says that
nothing beat it.

Power (``min_detectable_difference``, per candidate and for the selection): the smallest lead over the constant the
choice could detect, z sqrt(v_RR / n + a0 (1 - a0) / n + se_0^2), with n the records that answered for the
candidate, v_RR = p (1 - p) / (2 p - 1)^2 one randomized-response answer's variance at the count-epsilon (p its
keep probability), a0 the constant's accuracy (the head's binomial variance under the null), se_0 the constant's
standard error and z the Bonferroni-corrected critical value above: a head leading by exactly this much is chosen
with probability 1/2, one leading by less mostly not (`min_detectable_difference`; a simulation of the RR counts
checks it in tests/server/test_ondevice_selection.py). Measured on AG news (issue #37): ~364 answers per candidate at
count-epsilon 1, four candidates (z = 2.24): ~12.7 points, while the best clean heads lead by 3-5. ``exact_accuracy`` of each
candidate (the referee's, simulation only: `fl_privtext.pipeline.exact_on_device`) stands beside its estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from fl_privtext.metrics import bincount
from fl_privtext.ondevice import debiased_accuracy, keep_probability
from fl_privtext.server.learners import label_rr_matrix

__all__ = ["ALPHA", "choose", "constant_from_counts", "constant_from_labels", "estimates", "min_detectable_difference"]

ALPHA = 0.05  # one-sided level of "beats the constant" (Bonferroni over the candidates tried)


def estimates(replies: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per candidate: the debiased accuracy pooled over the clients' select answers (weighted by records), its
    standard error (randomized response + binomial sampling) and the number of records that answered for it."""
    per: dict[str, list[tuple[int, float, float]]] = {n: [] for n in names}
    for r in replies:
        if "answer" not in r:
            continue
        a = r["answer"]
        eps = float(np.asarray(a["count-epsilon"]).reshape(-1)[0])
        s, n = np.asarray(a["noisy-correct"]).reshape(-1), np.asarray(a["n"]).reshape(-1)
        if len(s) != len(names) or len(n) != len(names):
            raise ValueError(f"node {r['node']}: a select answer must hold one count per candidate ({len(names)}); "
                             f"got {len(s)} / {len(n)}.")
        for name, sj, nj in zip(names, s, n, strict=True):
            if nj > 0:
                est, sd = debiased_accuracy(int(sj), int(nj), eps)
                per[name].append((int(nj), est, sd))
    out: dict[str, dict[str, float]] = {}
    for name, parts in per.items():
        total = sum(n for n, _, _ in parts)
        if total == 0:
            out[name] = {"accuracy": math.nan, "se": math.inf, "records": 0}
            continue
        acc = math.fsum(n * e for n, e, _ in parts) / total
        noise_var = math.fsum((n * sd) ** 2 for n, _, sd in parts) / total ** 2
        p = min(max(acc, 0.0), 1.0)
        out[name] = {"accuracy": acc, "se": math.sqrt(noise_var + p * (1 - p) / total), "records": total,
                     "rr_se": math.sqrt(noise_var)}
    return out


def critical_value(tried: int, alpha: float = ALPHA) -> float:
    """z of "beats the constant": one-sided ``alpha``, Bonferroni over ``tried`` candidates."""
    return float(stats.norm.ppf(1 - alpha / max(1, int(tried))))


def min_detectable_difference(records: int, count_epsilon: float, tried: int, constant_accuracy: float,
                              constant_se: float = 0.0, alpha: float = ALPHA, rr_se: float | None = None) -> float:
    """The smallest lead over the constant that the clients' choice detects with probability 1/2 (module docstring):
    z sqrt(v_RR / n + a0 (1 - a0) / n + se_0^2) for ``records`` = n answers at ``count_epsilon`` (``rr_se``: the
    pooled RR standard error when the clients answered at several epsilons). inf without answers."""
    if records <= 0:
        return math.inf
    if rr_se is None:
        p = keep_probability(count_epsilon)
        rr_se = math.sqrt(p * (1 - p) / records) / (2 * p - 1)
    a0 = min(max(float(constant_accuracy), 0.0), 1.0)
    return critical_value(tried, alpha) * math.sqrt(rr_se ** 2 + a0 * (1 - a0) / records + constant_se ** 2)


def constant_from_labels(labels: np.ndarray, num_classes: int, label_epsilon: float, num_users: int
                         ) -> dict[str, Any]:
    """The constant's accuracy as the server estimates it from the uploaded labels (module docstring): the share of
    the majority class, debiased through k-ary randomized response at ``label_epsilon`` (0: labels in the clear),
    with its standard error over ``num_users`` independent users (records of one user are not independent: the user
    count is the conservative n)."""
    labels = np.asarray(labels)  # any integer type (the server's: int8), counted without an int64 copy
    k, n = int(num_classes), len(labels)
    if n == 0 or k < 1:
        raise ValueError(f"constant_from_labels needs labels of >= 1 class; got {n} labels, {k} classes.")
    q = bincount(labels, k).astype(np.float64) / n  # observed shares
    rr = label_rr_matrix(k, label_epsilon)  # the clients' k-ary randomized response (identity at epsilon 0)
    keep, other = float(rr[0, 0]), float(rr[0, 1]) if k > 1 else 0.0
    shares = (q - other) / (keep - other)  # E[q_j] = other + (keep - other) pi_j
    j = int(np.argmax(shares))
    se = math.sqrt(q[j] * (1 - q[j]) / max(num_users, 1)) / (keep - other)
    return {"accuracy": float(shares[j]), "se": se, "records": 0, "class": j,
            "by": "the server, from the training users' uploaded labels" + (
                f" (debiased label RR at epsilon {label_epsilon:g})" if label_epsilon > 0 else "")}


def constant_from_counts(counts: np.ndarray, noise_var: float, num_users: int) -> dict[str, Any]:
    """The constant's accuracy from a secure sum's class counts (each carrying added noise of variance
    ``noise_var``): the majority class's share, its standard error from the users' sampling and the noise."""
    c = np.clip(np.asarray(counts, np.float64), 0.0, None)
    total = float(c.sum())
    if total <= 0:
        raise ValueError("constant_from_counts needs positive class counts.")
    j = int(np.argmax(c))
    p = float(c[j] / total)
    # delta method for c_j / sum(c), each count with added noise of variance noise_var
    noise = noise_var * ((1 - p) ** 2 + (len(c) - 1) * p * p) / total ** 2
    se = math.sqrt(p * (1 - p) / max(num_users, 1) + noise)
    return {"accuracy": p, "se": se, "records": 0, "class": j,
            "by": "the server, from the secure sum's class counts"}


def choose(replies: Sequence[dict[str, Any]], names: Sequence[str], alpha: float = ALPHA,
           constant: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(chosen candidate, the selection's record for results.json) from the clients' select answers; ``names``
    in the order the models were sent. ``constant``: the server's own estimate of the constant
    (`constant_from_labels` / `constant_from_counts`), the constant then not among ``names``; without it the
    clients answered for the constant too ("constant" among ``names``)."""
    if constant is None and "constant" not in names:
        raise ValueError("The on-device selection needs the constant predictor among the candidates, or the "
                         "server's estimate of it.")
    if constant is not None and "constant" in names:
        raise ValueError("The constant is estimated by the server here; it must not be among the models sent.")
    est = estimates(replies, names)
    if constant is not None:
        est = {"constant": dict(constant), **est}
    tried = max(1, len(est) - 1)
    z = critical_value(tried, alpha)
    base = est["constant"]
    known = base["records"] > 0 or constant is not None
    for name, e in est.items():
        e["beats_constant"] = bool(name != "constant" and e["records"] > 0 and known and
                                   e["accuracy"] - base["accuracy"] > z * math.hypot(e["se"], base["se"]))
    for name, e in est.items():
        if name != "constant":
            e["min_detectable_difference"] = (min_detectable_difference(
                int(e["records"]), math.nan, tried, base["accuracy"], base["se"], alpha, e["rr_se"])
                if e["records"] > 0 and known else math.inf)
    passing = [n for n in est if est[n]["beats_constant"]]
    chosen = max(passing, key=lambda n: est[n]["accuracy"]) if passing else "constant"
    record = {"by": "clients", "rule": f"beats the constant by z = {z:.3f} standard errors (one-sided {alpha:g}, "
                                       f"Bonferroni over {tried}); the highest estimate among those that do",
              "candidates": est, "records": int(sum(e["records"] for e in est.values())),
              "min_detectable_difference": min((e["min_detectable_difference"] for n, e in est.items()
                                                if n != "constant"), default=math.inf),
              "min_detectable_difference_means": ("the smallest lead over the constant a candidate must have to be "
                                                  "chosen with probability 1/2 at its number of answers, the count-"
                                                  "epsilon and the Bonferroni factor (the best-powered candidate "
                                                  "here; per candidate in candidates)"),
              "clients": sum(1 for r in replies if "answer" in r),
              "refusals": [{"node": int(r["node"]), "reason": str(r["refused"])} for r in replies if "refused" in r]}
    return chosen, record
