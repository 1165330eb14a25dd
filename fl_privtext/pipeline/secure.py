"""One experiment point with ``server.aggregate = secagg``: Phase B as one secure sum of noisy class statistics.

Per repetition (seed): every client puts its noisy class statistics (`fl_privtext.client.aggregate`) into one secure
sum (SecAgg+, `fl_privtext.federation.secagg`; ``sum_round`` is the transport), the server fits its learner from the
sum (`fl_privtext.server.aggregate`) and ships the model to the test clients for on-device evaluation (the same
protocol as for uploads, ``evaluate_round``). The eavesdropper sees only SecAgg+'s masked vectors and the noisy sum:
it has nothing per user to attack, so the per-user attacks are not run (``attacks`` is empty and
``attacks_note`` says what is left: class-level statistics under central DP).

results.json: ``privacy.central`` = {"epsilon", "delta", "against": "server", "via": "secagg"} (the worst seed's
actual central epsilon: its contributors' noise, dropouts included), ``utility.learner``; ``utility.accuracy`` is the
on-device accuracy (there are no test uploads to classify).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_privtext import metrics
from fl_privtext.client import ClientPolicy
from fl_privtext.client.aggregate import TASK, StatsLayout, release_statistics, share_noise_std
from fl_privtext.config import ExperimentConfig
from fl_privtext.data import SYNTHETIC_DATASETS
from fl_privtext.pipeline.point import plain_on_device
from fl_privtext.pipeline.preparation import Prepared, prepare
from fl_privtext.privacy.report import json_number
from fl_privtext.public import PublicSpec
from fl_privtext.report import aggregate
from fl_privtext.report.accounting import phase_a_report
from fl_privtext.report.referee import exact_candidates, exact_on_device
from fl_privtext.server.aggregate import (
    Aggregate,
    fit_from_aggregate,
    learner_for,
    plain_sum,
    public_within,
    wants_second,
)
from fl_privtext.server.aggregate_selection import ConstantRule, candidate_rule, select_from_folds
from fl_privtext.server.ondevice import OnDeviceRound, on_device_seed, shipped_model
from fl_privtext.server.ondevice_selection import constant_from_counts
from fl_privtext.server.training import Trained

__all__ = ["TASK", "SumResult", "layout_for", "run_plain_secagg", "run_secagg_point", "stats_request"]

ATTACKS_NOTE = ("server.aggregate = secagg: the server and the eavesdropper see SecAgg+'s masked vectors (uniform "
                "without the other clients' masks) and the noisy sum only: no per-user upload, no per-user "
                "representation or label, no linkage; per-user attribute, re-identification, membership and "
                "inversion attacks have nothing to work on. What is left: the class-level statistics (per-class "
                "counts and mean representations) under the central (epsilon, delta) of privacy.central, and "
                "participation metadata (which nodes took part, message sizes).")


@dataclass(frozen=True)
class SumResult:
    """What the secure sum revealed to the server: the total and who contributed / dropped."""

    total: np.ndarray
    contributors: list[int]
    dropped: list[int] = field(default_factory=list)
    rounds: int = 0
    nbytes: int = 0


SumRound = Callable[[int, StatsLayout, int], SumResult]  # (seed, layout, min contributors) -> the sum


# beta of the selection layout's second moment (StatsLayout.second_weight): the sum's sensitivity is sqrt(5) instead
# of sqrt(8), the noise on the class means 1.26x that of a sum without the second moment instead of 1.41x; the
# second moment (read only through K x K projections by the selection, and by lda) carries 2x the noise. Measured on
# blog 10k at central epsilon 1, exact on device over 10 repetitions (docs/results/secagg_selection.md, 2026-11-28):
# 0.517 (beta 1), 0.546 (0.5), 0.549 (0.25), 0.553 (0.1), the last three within their intervals; 0.5 kept for lda.
SELECTION_SECOND_WEIGHT = 0.5


def stats_users(prep: Prepared) -> int:
    """The users whose statistics the sum holds: every non-test user (train and aux roles)."""
    return int(np.unique(prep.ds.user_index[prep.roles != "test"]).size)


def layout_for(prep: Prepared, cfg: ExperimentConfig, dim: int) -> StatsLayout:
    """The statistics the server asks for (public): classes, width (``privacy.proj-dim`` under a public projection,
    `fl_privtext.client.aggregate.stats_projection`), the second moment when its learner needs it, and for
    ``server.learner = auto`` two folds (public seed ``run.seed``) and the second moment: the model selection from
    aggregates (`fl_privtext.server.aggregate_selection`). With public data (``privacy.projection = pca``) no second
    moment: lda and the selection take the public covariance (`fl_privtext.server.aggregate.public_within`)."""
    if cfg.privacy.projection != "none":
        dim = int(cfg.privacy.proj_dim)
    second = cfg.privacy.projection != "pca"
    weight = SELECTION_SECOND_WEIGHT if second else 1.0
    if cfg.server.learner == "auto" and cfg.server.select_on == "uploads":
        return StatsLayout(len(prep.ds.label_names), dim, second, folds=2, fold_seed=int(cfg.run.seed),
                           second_weight=weight)
    if cfg.server.learner == "auto":  # server.select-on = clients: ONE fold fits every candidate (no fold doubles
        # the noise), the second moment weighted as for the selection, so that lda is among the candidates
        return StatsLayout(len(prep.ds.label_names), dim, second, second_weight=weight)
    return StatsLayout(len(prep.ds.label_names), dim, wants_second(cfg.server.learner, stats_users(prep), dim,
                                                                         cfg.privacy, cfg.client))


def stats_request(cfg: ExperimentConfig, seed: int, layout: StatsLayout, min_contributors: int) -> dict[str, Any]:
    """The task record of the request (flat scalars): what the server asks and promises; the clients' noise and
    the contributors they require are their own policy (`release_statistics`)."""
    return {"seed": int(seed), "num-classes": layout.num_classes, "dim": layout.dim, "second": int(layout.second),
            "folds": layout.folds, "fold-seed": layout.fold_seed, "second-weight": float(layout.second_weight),
            "min-contributors": int(min_contributors),
            "epsilon": float(cfg.client.secagg_epsilon)}


def clipping_range(prep: Prepared, layout: StatsLayout, cfg: ExperimentConfig) -> float:
    """A bound on every coordinate of the sum (SecAgg+'s clipping range): sqrt(2) x the number of non-test users
    (counts, sums and second-moment entries are at most that) plus 12 noise standard deviations of the whole sum
    and its noise-variance entry, for clients running down to a quarter of the request's epsilon (delta >= 1e-6,
    each alone calibrated for the whole sum): a client whose policy needs more noise refuses."""
    n = float(stats_users(prep))
    c = cfg.client  # the server's expectation (what its request names); a client refuses below epsilon / 4
    share = share_noise_std(c.secagg_epsilon / 4, min(c.secagg_delta, 1e-6), layout.sensitivity, 1)
    total_var = cfg.federation.num_clients * share * share
    return max(n * math.sqrt(2.0), 1.0) + 12.0 * math.sqrt(total_var) + total_var + cfg.federation.num_clients


def train_from_sum(prep: Prepared, cfg: ExperimentConfig, total: np.ndarray, layout: StatsLayout,
                   public: np.ndarray | None = None) -> tuple[Trained, Aggregate]:
    """The server's model from one secure sum (and the sum as the server reads it); ``public``: the public
    covariance lda takes when the sum has no second moment (`fl_privtext.server.aggregate.public_within`)."""
    agg = Aggregate.of(total, layout)
    candidates: dict[str, Any] = {}
    exports: dict[str, dict[str, np.ndarray]] | None = None
    if cfg.server.select_on == "clients":  # every candidate of the whole sum; the test clients choose (two stages)
        names = ["constant", "centroid"] + (["lda"] if layout.second or public is not None else [])
        fitted = {n: ConstantRule(*candidate_rule(n, agg)) if n == "constant" else fit_from_aggregate(n, agg, public)[0]
                  for n in names}
        exports = {n: m.export() for n, m in fitted.items()}
        constant = constant_from_counts(agg.stats.counts, agg.stats_var, stats_users(prep))  # kept, not sent
        name = learner_for("auto", layout, public is not None)  # reported as the upload-side default; the clients' choice is
        rule = ("auto, chosen by the test clients' answers (server.select-on = clients, "  # utility.on_device.learner
                "fl_privtext.server.ondevice_selection) among " + ", ".join(names))
    elif layout.folds == 2 and cfg.server.learner == "auto":
        name, candidates = select_from_folds(total, layout, seed=int(cfg.run.seed), public=public)
        rule = ("auto: two-fold cross-validation from aggregates (fl_privtext.server.aggregate_selection); the "
                "class means shrunk by their deviations' own noise (denoised_means, issue #37)")
    else:
        name = learner_for(cfg.server.learner, layout, public is not None)
        rule = f"server.learner = {cfg.server.learner}" + (" (one fold: lda when the second moment is in the sum, "
                                                           "else centroid)" if cfg.server.learner == "auto" else "")
    if exports is not None:  # fitted above with every candidate
        model: Any = fitted[name]
    elif name == "constant":
        model = ConstantRule(*candidate_rule("constant", agg))
    else:
        model, name = fit_from_aggregate(name, agg, public)
    counts = agg.stats.counts
    truth = prep.ds.labels[prep.roles == "test"]
    majority = int(np.argmax(counts))
    utility: dict[str, Any] = {
        "available": True, "learner": name, "candidates": candidates, "learner_rule": rule,
        "majority_baseline": metrics.accuracy(truth, np.full(len(truth), majority)),
        "num_train_uploads": 0, "num_test_uploads": 0, "fairness": {}, "diverged": [],
        "aggregate": {"contributors": agg.contributors, "noise_std": math.sqrt(agg.noise_var),
                      "second_moment": layout.second, "vector_size": layout.size, "folds": layout.folds,
                      "dim": layout.dim, "projection": cfg.privacy.projection,
                      "covariance": ("second moment" if layout.second else "public data " +
                                     cfg.privacy.public_data if public is not None else "none (centroid)")},
    }
    if exports is not None:
        utility["learner"] = "chosen on device"  # replaced by the clients' choice (run_secagg_point)
    return Trained(utility, exports[name] if exports is not None else model.export(), majority, exports,
                   constant if exports is not None else None), agg


def run_secagg_point(prep: Prepared, cfg: ExperimentConfig, sum_round: SumRound, evaluate_round: OnDeviceRound,
                     *, dim: int, min_contributors: int | None = None,
                     training: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every seed of the point through ``sum_round`` (the secure sum) and ``evaluate_round`` (on-device); the
    result in the served-point format `fl_privtext.report.aggregate` reads, plus ``privacy.central``.
    ``training``: Phase A's summary when it ran first (its encoder's r(x) is what the sums hold); its users (the
    non-test users, as on the uploads path) are charged its central epsilon against the server under train.secagg
    with client-side noise, else inf (updates in the clear), composed with the sums' by basic composition."""

    t_start = time.perf_counter()
    layout = layout_for(prep, cfg, dim)
    public = None if layout.second else public_within(PublicSpec.of(cfg), dim)
    need = min_contributors or cfg.server.secagg_threshold or cfg.federation.num_clients
    per_seed: list[dict[str, Any]] = []
    central: list[float] = []
    randomness: set[str] = set()
    od_charged: list[float] = []  # the count-epsilon of every on-device answer
    for s in range(cfg.run.seeds):
        seed = cfg.run.seed + s
        t0 = time.perf_counter()
        got = sum_round(seed, layout, need)
        t1 = time.perf_counter()
        trained, agg = train_from_sum(prep, cfg, got.total, layout, public)
        eps = agg.epsilon(cfg.client.secagg_delta)
        randomness.add(agg.randomness)
        central.append(eps)
        t2 = time.perf_counter()
        test = prep.roles == "test"
        requests = {c: np.sort(np.asarray(rows)[test[np.asarray(rows)]]) for c, rows in enumerate(prep.shards)}
        requests = {c: r for c, r in requests.items() if len(r)}
        od = on_device_seed(trained, requests, seed, evaluate_round, prep.ds.user_index.reshape(-1))
        replies = od.pop("_replies")
        od = {k: v for k, v in od.items() if not k.startswith("_") and k != "seconds"}
        od_charged += [float(np.asarray(r["answer"]["count-epsilon"]).reshape(-1)[0]) for r in replies
                       if "answer" in r]
        t3 = time.perf_counter()
        # the referee's exact figure of the model sent (simulation only; not the server's time)
        od["exact"] = exact_on_device(prep, cfg, shipped_model(trained, od), trained.majority_class,
                                               seed)
        exact_candidates(prep, cfg, trained, od, seed)
        utility = dict(trained.utility)
        if "selection" in od:  # the clients chose the model (server.select-on = clients)
            utility["learner"] = od["learner"]
            utility["candidates"] = od["selection"]["candidates"]
        utility["accuracy"] = od.get("accuracy", math.nan)
        utility["macro_f1"] = math.nan  # the on-device answers carry correctness only
        utility["on_device"] = od
        utility["aggregate"] |= {"dropped": got.dropped, "central_epsilon": eps}
        per_seed.append({"seed": seed, "utility": utility, "attacks": {}, "attacks_extra": {},
                         "uploads_received": 0, "uploads_observed": 0, "messages_observed": got.rounds,
                         "bytes_observed": got.nbytes, "output_dim": layout.size,
                         "timing": {"federation_s": t1 - t0, "train_s": t2 - t1, "on_device_s": t3 - t2,
                                    "attack_s": 0.0}})
    c = cfg.client
    worst = max(central)
    od_eps = max(od_charged, default=0.0)  # a test user is in one answer per seed
    od_eps *= cfg.run.seeds
    phase_a = cfg.train.rounds > 0
    pa_central = (training or {}).get("central") if phase_a else None
    pa = phase_a_report(pa_central) if phase_a else None
    pa_eps, pa_delta = (float(pa.epsilon_worst_case), float(pa.delta)) if pa is not None else (0.0, 0.0)
    stats_total = math.fsum(central) + pa_eps  # the non-test users: Phase A, then the sums
    privacy = {
        "mechanism": "secagg-gaussian-sum", "epsilon_nominal": c.secagg_epsilon, "epsilon_worst_case":
        json_number(worst), "delta": c.secagg_delta,
        "central": {"epsilon": json_number(worst), "delta": c.secagg_delta, "against": "server", "via": "secagg",
                    "per_seed": [json_number(e) for e in central], "sensitivity": layout.sensitivity,
                    "neighbouring": "user-level replacement (all records of one user)",
                    "accountant": "analytic Gaussian (Balle & Wang 2018) of the sum's actual noise: the "
                                  "contributors' share variances (dropouts reduce it)"},
        "composition": {"labels": "inside the noisy secure sums (no label leaves a client on its own)", "per_user": {
            "max_epsilon_worst_case": json_number(math.fsum(central)),  # the sums' central epsilon, all repetitions
            "max_epsilon_on_device": json_number(od_eps),
            **({"max_epsilon_phase_a": json_number(pa_eps)} if phase_a else {}),
            "max_epsilon_total": json_number(max(stats_total, od_eps)),
            "max_delta_total": c.secagg_delta * len(central) + pa_delta,
            "guarantee": ("central (epsilon, delta) against the server via secagg, composed over repetitions "
                          "(basic composition; delta adds up) for train and aux users; test users are not in the "
                          "statistics and spend only the on-device answers' local epsilon; the max over both"
                          + ("" if not phase_a else "; Phase A's " + (
                              "central epsilon against the server via secagg (privacy.central_phase_a) added for the "
                              "non-test users" if pa_central is not None else
                              "updates reached the server in the clear (inf) for the non-test users")))}},
        "randomness": randomness.pop() if len(randomness) == 1 else "mixed",
    }
    if pa_central is not None:
        privacy["central_phase_a"] = dict(pa_central)
    dataset = {"name": prep.ds.name, "fingerprint": prep.ds.fingerprint, "label_names": list(prep.ds.label_names),
               "synthetic": prep.ds.name in SYNTHETIC_DATASETS,
               "attributes": {a.name: {"kind": a.kind, "classes": list(a.classes)} for a in prep.ds.attributes}}
    return {"config": cfg, "per_seed": per_seed, "num_users": prep.ds.num_users, "num_records": len(prep.ds),
            "privacy": privacy, "faults": {}, "dataset": dataset, "placement": {},
            "extractor_identity": prep.extractor.identity() if prep.extractor is not None else {},
            "attacks_note": ATTACKS_NOTE, "server_s": time.perf_counter() - t_start,
            **({"training": training} if training is not None else {}),
            "protocol": "on-device: the model from the secure sum applied by the test clients (no test uploads)"}


def run_plain_secagg(cfg: ExperimentConfig, prep: Prepared | None = None, *, state_dir: str | None = None,
                     transport: Callable[[list[np.ndarray]], np.ndarray] = plain_sum) -> dict[str, Any]:
    """The point as a plain in-process loop (no Flower): each client releases its statistics under its policy
    (the driver's ``[client]`` section) into ``transport`` (the exact sum, which is what SecAgg+ reveals); the
    on-device answers as in `fl_privtext.pipeline.run_plain`. The reference the federated path must match."""
    if cfg.train.rounds > 0:
        raise ValueError("Phase A (train.rounds > 0) runs through Flower only: `fl-privtext run` (the plain secure-"
                         "aggregation loop sums the cached extractor's features).")
    prep = prep or prepare(cfg, features="extract", progress=cfg.run.progress)
    assert prep.features is not None
    if state_dir is None:  # the clients' ledgers for this call only: removed after it, not left in /tmp
        with tempfile.TemporaryDirectory(prefix="fl_privtext_secagg_") as tmp:
            return run_plain_secagg(cfg, prep, state_dir=tmp, transport=transport)
    policy = ClientPolicy.from_points([cfg])
    state = state_dir

    def sum_round(seed: int, layout: StatsLayout, need: int) -> SumResult:
        vecs = [release_statistics(prep.client, c, cfg, seed, layout=layout, min_contributors=need,
                                   epsilon=cfg.client.secagg_epsilon, policy=policy, state_dir=state,
                                   client_seed=cfg.run.client_seed)[0] for c in range(cfg.federation.num_clients)]
        return SumResult(transport(vecs), list(range(len(vecs))), [], 1, sum(v.nbytes for v in vecs))

    def evaluate_round(trained: Trained, requests: dict[int, np.ndarray], seed: int, stage: str = "all"
                       ) -> list[Any]:
        return plain_on_device(prep, cfg, trained, requests, seed, stage)

    return run_secagg_point(prep, cfg, sum_round, evaluate_round, dim=int(prep.features.shape[1]))


def results(point: dict[str, Any], total_s: float = 0.0) -> dict[str, Any]:
    """results.json's structure for a secagg point (`fl_privtext.report.aggregate`)."""
    return aggregate(point, total_s)


def serve_point(t: Any) -> Callable[[], dict[str, Any]]:
    """The secure-aggregation mode of `fl_privtext.pipeline.federated.serve_point` over the Flower transport ``t``
    (`fl_privtext.federation.server_app.PointTransport`): Phase A first when train.rounds > 0 (the secure sums and
    the on-device queries then carry its encoder), every seed's secure sum and on-device evaluation now (while the
    federation runs); returns the (already done) computation as a job."""
    cfg = t.cfg
    if cfg.train.rounds > 0 and cfg.privacy.projection != "none":
        raise ValueError("server.aggregate = secagg after Phase A sums the trained encoder's r(x); a public projection "
                         "(privacy.projection) is fitted to the frozen extractor's features: set privacy.projection "
                         "= none or train.rounds = 0.")
    t0 = time.perf_counter()
    prep = prepare(cfg, features="none")  # users, roles and shards; never texts or features
    training = t.train_encoder(prep, keep_updates=False)
    if cfg.train.rounds > 0:
        dim = t.encoder_width(prep)
    else:
        dim = int(prep.extractor.output_dim(paired=prep.ds.text_pair_column is not None))
    secure_sum = t.sum_round(lambda seed, layout, need: stats_request(cfg, seed, layout, need),
                             lambda layout: clipping_range(prep, layout, cfg))

    def sum_round(seed: int, layout: StatsLayout, need: int) -> SumResult:
        out = secure_sum(seed, layout, need)
        return SumResult(out.total, out.contributors, out.dropped, out.rounds, out.bytes)

    point = run_secagg_point(prep, cfg, sum_round, t.evaluate_everywhere, dim=dim, training=training)
    point["server_s"] = time.perf_counter() - t0
    return lambda: point
