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

Decision (as on uploads): a candidate is chosen only when its estimated accuracy beats the constant's by more than z
standard errors (one-sided 95%, Bonferroni over the candidates tried; the two estimates come from disjoint records,
so their variances add: the randomized response's and the records' binomial sampling); among those that pass, the
highest estimate wins; otherwise the constant, and ``selection.candidates`` says that nothing beat it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from fl_privtext.ondevice import debiased_accuracy

__all__ = ["ALPHA", "choose", "estimates"]

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
        out[name] = {"accuracy": acc, "se": math.sqrt(noise_var + p * (1 - p) / total), "records": total}
    return out


def choose(replies: Sequence[dict[str, Any]], names: Sequence[str], alpha: float = ALPHA
           ) -> tuple[str, dict[str, Any]]:
    """(chosen candidate, the selection's record for results.json) from the clients' select answers; ``names``
    in the order the models were sent, "constant" among them."""
    if "constant" not in names:
        raise ValueError("The on-device selection needs the constant predictor among the candidates.")
    est = estimates(replies, names)
    tried = max(1, len(names) - 1)
    z = float(stats.norm.ppf(1 - alpha / tried))
    base = est["constant"]
    for name, e in est.items():
        e["beats_constant"] = bool(name != "constant" and e["records"] > 0 and base["records"] > 0 and
                                   e["accuracy"] - base["accuracy"] > z * math.hypot(e["se"], base["se"]))
    passing = [n for n in names if est[n]["beats_constant"]]
    chosen = max(passing, key=lambda n: est[n]["accuracy"]) if passing else "constant"
    record = {"by": "clients", "rule": f"beats the constant by z = {z:.3f} standard errors (one-sided {alpha:g}, "
                                       f"Bonferroni over {tried}); the highest estimate among those that do",
              "candidates": est, "records": int(sum(e["records"] for e in est.values())),
              "clients": sum(1 for r in replies if "answer" in r),
              "refusals": [{"node": int(r["node"]), "reason": str(r["refused"])} for r in replies if "refused" in r]}
    return chosen, record
