"""Per-user accounting of one experiment point: everything a user released, charged to that user.

Charged per released record and round (basic composition, `Totals`: `fl_privtext.privacy.Accountant`'s sums held as
one small count per user and charge):
- the representation: the mechanism's worst-case (and nominal) epsilon for every upload that was sent;
- the label: k-ary randomized response's epsilon when ``privacy.label-epsilon > 0``; a label sent in the clear is
  an infinitely private-less release (epsilon = inf), so the total is "inf" whenever labels travel in the clear.
"Sent" is what the server received, plus, conservatively, what a client that timed out may have sent; a client that
failed before replying sent nothing and is not charged. Other values a user reveals without a formal guarantee
(record ids, counts, which client holds it) are listed under ``also_released``.

Phase A (the federated encoder, ``train.rounds > 0``) is charged to every train and aux user: inf (the server sees
each update, and the validation metrics, in the clear; also under DP-FedAvg with server-side noise), EXCEPT under
``train.secagg = true`` with ``train.dp-mode = client`` and client noise, where the server only ever holds the noisy
secure sums and no per-client metric leaves in the clear (`fl_privtext.federation.secagg_train`): there each user is
charged the central (epsilon, delta) of those sums against the server (`phase_a_central`: KLS'21 distributed
discrete Gaussian, each round with its actual contributors, composed over the rounds in dp-accounting's RDP
accountant, `fl_privtext.privacy.distributed`), composed with the uploads by basic composition. That charge is an
upper bound for a user whose client sat out some rounds (its sensitivity there is 0). The clients' own ledgers
charge more, never less: per round the epsilon of a sum of only ``client.secagg-min-clients`` contributors,
composed by basic composition (``max_epsilon_phase_a_ledger``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_privtext.config import FederationConfig, PrivacyConfig, TrainConfig
from fl_privtext.memory import distinct, drop_mapped_pages, narrowest
from fl_privtext.privacy import Accountant, PrivacyReport, label_rr_report
from fl_privtext.privacy.amplification import compose_rounds, gaussian_shuffle_delta, shuffle_guarantee
from fl_privtext.privacy.report import json_number

ALSO_RELEASED = (
    "Record ids (pseudonyms): the server links every upload of a user, so per-user epsilons compose (charged).",
    "How many records each user uploads and in which rounds (visible from the record ids): not protected.",
    ("Which client (node) sent each upload: not protected; under non-IID partitions (dirichlet by label, natural) "
     "the client identity correlates with labels and users."),
    "Per-client counts, the representation width and timings in each reply's stats: not protected.",
)
ON_DEVICE_RELEASE = ("On-device evaluation (server.on-device): each test client that opts in (client.on-device) "
                     "returns the randomized-response sum of its test records' correctness, client.count-epsilon per "
                     "record, charged in its ledger and in the per-user total.")


def _label_report(privacy: PrivacyConfig, num_classes: int) -> PrivacyReport | None:
    """The label's release per upload: k-ary RR, or None when labels go in the clear (or there are none)."""
    if privacy.label_epsilon > 0 and num_classes > 1:
        return label_rr_report(num_classes, privacy.label_epsilon)
    return None


def charge(user_ids: np.ndarray, released_rows: np.ndarray, rep: PrivacyReport, privacy: PrivacyConfig,
           num_classes: int) -> tuple[Accountant, Accountant]:
    """Accountants for the representations and for everything (representations + labels) of ``released_rows``
    (one entry per release: a record uploaded in two rounds appears twice)."""
    users = np.asarray(user_ids)[np.asarray(released_rows, dtype=np.int64)]
    reps, total = Accountant(), Accountant()
    if users.size == 0:
        return reps, total
    reps.charge(users, rep)
    total.charge(users, rep)
    if num_classes > 0:
        label = _label_report(privacy, num_classes)
        if label is None:  # in the clear: every release of a label is unbounded
            label = PrivacyReport(mechanism="label-in-the-clear", epsilon_nominal=math.inf,
                                  epsilon_worst_case=math.inf)
        total.charge(users, label)
    return reps, total


def tight_epsilon(rep: PrivacyReport, label: PrivacyReport | None, counts: dict[str, int],
                  on_device_eps: float, delta: float) -> float:
    """The tight composed epsilon at ``delta`` of one user's releases (dp-accounting's privacy-loss-distribution
    accountant; Meiser & Mohammadi 2018, Doroshenko et al. 2022): ``counts["rep"]`` representations (a Gaussian
    mechanism by its noise and L2 sensitivity; any other as a pure (eps, 0) or (eps, delta) mechanism's worst case),
    ``counts["label"]`` labels (k-ary RR as an (eps, 0) mechanism) and ``counts["on_device"]`` randomized-response
    bits. inf when any release is unbounded; the basic total is an upper bound of it."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    parts: list[tuple[Any, int]] = []
    rep_eps = float(rep.epsilon_worst_case)
    label_eps = float(label.epsilon_worst_case) if label is not None else math.inf
    if counts.get("phase_a", 0) or (counts.get("label", 0) and label is None) or (
            counts.get("rep", 0) and not math.isfinite(rep_eps)):
        return math.inf
    basic = (counts.get("rep", 0) * rep_eps + (counts.get("label", 0) * label_eps if counts.get("label", 0) else 0.0)
             + counts.get("on_device", 0) * on_device_eps)
    if max(rep_eps if counts.get("rep", 0) else 0.0, label_eps if counts.get("label", 0) else 0.0,
           on_device_eps if counts.get("on_device", 0) else 0.0) > 30:
        return basic  # e^eps overflows the PLD's grid; at such epsilons composition is basic to within e^-30

    def pure(eps: float, d: float = 0.0) -> Any:
        return pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(eps, d))

    if counts.get("rep", 0):
        cal = rep.calibration or {}
        eps = float(rep.epsilon_worst_case)
        if not math.isfinite(eps):
            return math.inf
        if "noise_std" in cal and "l2_sensitivity" in cal and rep.mechanism.startswith("gaussian"):
            parts.append((pld_lib.from_gaussian_mechanism(float(cal["noise_std"]) / float(cal["l2_sensitivity"])),
                          counts["rep"]))
        else:
            parts.append((pure(eps, float(rep.delta or 0.0)), counts["rep"]))
    if counts.get("label", 0):
        if label is None:
            return math.inf
        parts.append((pure(float(label.epsilon_worst_case)), counts["label"]))
    if counts.get("on_device", 0):
        parts.append((pure(on_device_eps), counts["on_device"]))
    if counts.get("phase_a", 0):
        return math.inf
    if not parts:
        return 0.0
    total = None
    try:
        for dist, n in parts:
            d = dist.self_compose(n) if n > 1 else dist
            total = d if total is None else total.compose(d)
        return min(float(total.get_epsilon_for_delta(delta)), basic)  # type: ignore[union-attr]
    except (OverflowError, ValueError):
        return basic


_COUNT_ROWS = 1 << 20  # released rows counted per block (bounds the user-id temporaries: ~20 bytes a row)
_SUM_USERS = 1 << 20  # users whose totals are summed at once


def dense_users(user_ids: np.ndarray) -> np.ndarray:
    """Each record's user as an index into 0..U-1: ``user_ids`` itself when it already is one (a dataset's
    ``user_index``), else the position of its id among the sorted distinct ids (strings, negative ids)."""
    users = np.asarray(user_ids)
    if users.dtype.kind in "iu" and (not len(users) or int(users.min()) >= 0):
        return users
    return np.unique(users, return_inverse=True)[1].reshape(-1)


Released = np.ndarray | Sequence[np.ndarray]  # one repetition's released rows: an array, or its parts in order


def _parts(rows: Released) -> list[np.ndarray]:
    return [rows] if isinstance(rows, np.ndarray) else list(rows)


def _count(rows: Released) -> int:
    return sum(len(p) for p in _parts(rows))


def release_counts(users: np.ndarray, rows: Released, num_users: int) -> np.ndarray:
    """(num_users,) how many of ``rows`` (one entry per release; an array, or parts whose concatenation it is)
    belong to each user, in the narrowest integer type that holds them: counted a block of rows at a time, so no
    int64 copy of every released row's user is made, and a mapped part's pages (a round's spill, the Flower path)
    are dropped after each block. The sums are held in int32 where the rows are fewer than 2**31 (no count can
    exceed them): 12 bytes a user beside each block's int64 counts instead of 16."""
    parts = _parts(rows)
    counts = np.zeros(num_users, np.int32 if sum(len(p) for p in parts) < 2**31 else np.int64)
    for part in parts:
        for a in range(0, len(part), _COUNT_ROWS):
            block = np.asarray(part[a:a + _COUNT_ROWS]).astype(np.int64, copy=False)
            np.add(counts, np.bincount(users[block], minlength=num_users), out=counts, casting="unsafe")
            drop_mapped_pages(part)
    return narrowest(counts)


class Totals:
    """Per-user totals of a sequence of charges (basic composition) over dense user indices: what `Accountant`
    sums, for a point's report at any population size. Each charge keeps one small integer count per user (the
    releases it charges to that user); the floating totals are summed a block of users at a time, each user's
    charges added in the order they were made, so every user's total is the same float additions as
    `Accountant.charge` makes (``n * epsilon`` added per charge that touches the user; a charge that does not
    touch it adds nothing) and the maxima and median are the same numbers. Memory: one count per user and charge
    (1-4 bytes) instead of five float64 / int64 arrays per user and accountant (~2 GB at 10M users for the five
    accountants of a point's summary)."""

    def __init__(self, num_users: int) -> None:
        self.num_users = int(num_users)
        self._charges: list[tuple[np.ndarray, PrivacyReport]] = []

    def charge(self, counts: np.ndarray, report: PrivacyReport) -> None:
        """Charge ``counts[u]`` releases described by ``report`` to every user u (a count of 0 charges nothing)."""
        if len(counts) != self.num_users:
            raise ValueError(f"counts must hold one entry per user ({self.num_users}), got {len(counts)}.")
        if counts.any():
            self._charges.append((counts, report))

    def _ranges(self) -> Any:
        return ((a, min(self.num_users, a + _SUM_USERS)) for a in range(0, self.num_users, _SUM_USERS))

    def _charged(self) -> Any:
        """Per block of users: which were charged at least once."""
        for a, b in self._ranges():
            hit = np.zeros(b - a, bool)
            for counts, _ in self._charges:
                hit |= counts[a:b] > 0
            yield hit

    def _blocks(self, value: str) -> Any:
        """Per block of users: their totals of ``value`` ("worst_case" / "nominal" epsilon, or "delta")."""
        for a, b in self._ranges():
            total = np.zeros(b - a)
            for counts, rep in self._charges:
                c = counts[a:b]
                hit = c > 0
                per = (rep.delta if value == "delta" else rep.epsilon_worst_case if value == "worst_case"
                       else rep.epsilon_nominal)
                total[hit] += c[hit].astype(np.int64) * per
            yield total

    def max_epsilon(self, kind: str = "worst_case") -> float:
        """Largest per-user total epsilon (0.0 when nobody was charged)."""
        return max((float(t.max()) for t in self._blocks(kind) if len(t)), default=0.0)

    def max_delta(self) -> float:
        """Largest per-user delta total."""
        return max((float(t.max()) for t in self._blocks("delta") if len(t)), default=0.0)

    def median_epsilon(self) -> float:
        """Median worst-case total over the users charged at least once (0.0 when none)."""
        parts = [t[hit] for hit, t in zip(self._charged(), self._blocks("worst_case"), strict=True)]
        values = np.concatenate(parts) if parts else np.zeros(0)
        return float(np.median(values)) if len(values) else 0.0

    def to_json(self) -> dict[str, Any]:
        """`Accountant.to_json(per_user=False)`'s summary, the same keys and numbers."""
        worst = json_number(self.max_epsilon("worst_case"))
        return {
            "composition": "basic: epsilon and delta add over every release of the same user",
            "users": sum(int(hit.sum()) for hit in self._charged()),
            "releases": sum(int(c.sum(dtype=np.int64)) for c, _ in self._charges),
            "max_epsilon": worst,
            "max_epsilon_worst_case": worst,
            "max_epsilon_nominal": json_number(self.max_epsilon("nominal")),
            "max_delta": self.max_delta(),
            "charges": [{"mechanism": r.mechanism, "users": int(np.count_nonzero(c)),
                         "releases": int(c.sum(dtype=np.int64)),
                         "epsilon_worst_case": json_number(r.epsilon_worst_case),
                         "epsilon_nominal": json_number(r.epsilon_nominal), "delta": r.delta}
                        for c, r in self._charges],
        }


def privacy_summary(rep: PrivacyReport, privacy: PrivacyConfig, federation: FederationConfig,
                    train: TrainConfig, user_ids: np.ndarray, num_classes: int,
                    released_rows: Sequence[Released], releases_per_record: int, *,
                    on_device_rows: Sequence[tuple[np.ndarray, float]] = (),
                    phase_a_rows: np.ndarray | None = None, shuffled_users: int | None = None,
                    phase_a_central: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The mechanism's report plus what each USER spent over EVERY release of the point (issue #22): every round
    of every repetition (``released_rows``, one array per seed, or its parts), the on-device answers
    (``on_device_rows``: the records each answer covered and the epsilon charged per record) and Phase A
    (``phase_a_rows``: records whose users' model updates the server saw in the clear: inf; or, given ``phase_a_central``, the Phase A summary's
    ``central`` guarantee against the server of the noisy secure sums, see the module text). Basic composition
    (what a client's ledger enforces) with its parts, and beside it the tight composition (`tight_epsilon`) at
    ``privacy.delta`` (plus Phase A's delta when it is charged a finite central epsilon).
    ``shuffled_users`` (federation.shuffle): the users shuffled together per round, for ``privacy.central``.
    Reads ``privacy`` (label-epsilon, delta), ``federation`` (shuffle, rounds, schedule) and ``train``
    (Phase A's secagg, dp-mode and dp-noise-multiplier)."""
    users = dense_users(user_ids)
    n_users = int(users.max()) + 1 if len(users) else 0
    reps, labels_acc, od_acc, total = Totals(n_users), Totals(n_users), Totals(n_users), Totals(n_users)
    uploaded = Totals(n_users)  # what went through the shuffler (representations + labels)
    label = _label_report(privacy, num_classes)
    released_counts = [release_counts(users, rows, n_users) for rows in released_rows if _count(rows)]
    for counts in released_counts:
        reps.charge(counts, rep)
        total.charge(counts, rep)
        uploaded.charge(counts, rep)
        if num_classes > 0:
            lab = label or PrivacyReport(mechanism="label-in-the-clear", epsilon_nominal=math.inf,
                                         epsilon_worst_case=math.inf)
            labels_acc.charge(counts, lab)
            total.charge(counts, lab)
            uploaded.charge(counts, lab)
    od_eps = 0.0
    od_counts = np.zeros(n_users, np.int64)
    for rows, eps in _on_device_charges(users, on_device_rows):
        counts = release_counts(users, rows, n_users)
        od = PrivacyReport(mechanism="on-device randomized response", epsilon_nominal=eps, epsilon_worst_case=eps)
        od_acc.charge(counts, od)
        total.charge(counts, od)
        od_counts += counts
        od_eps = eps
    phase_a = phase_a_rows is not None and len(phase_a_rows) > 0
    if phase_a_central is not None and not (train.secagg and train.dp_mode == "client"):
        raise ValueError("phase_a_central applies only under train.secagg = true with train.dp-mode = client (every "
                         "other Phase A mode shows the server updates or metrics in the clear: charged inf).")
    pa = phase_a_report(phase_a_central) if phase_a else None
    if phase_a and pa is not None:  # once per user, however many of its records took part
        total.charge((release_counts(users, np.asarray(phase_a_rows), n_users) > 0).view(np.uint8), pa)
    pa_eps = (pa.epsilon_worst_case if pa is not None else 0.0)
    pa_delta = pa.delta if pa is not None else 0.0
    out = rep.to_json()
    per_user = reps.to_json()  # a summary: a table of every user's epsilon would be megabytes
    per_user["median_epsilon_worst_case"] = reps.median_epsilon()
    per_user["max_epsilon_labels"] = json_number(labels_acc.max_epsilon()) if num_classes > 0 else 0.0
    od_max = od_acc.max_epsilon()
    per_user["max_epsilon_on_device"] = json_number(od_max)
    per_user["max_epsilon_phase_a"] = json_number(pa_eps)
    secagg_a = pa is not None and math.isfinite(pa_eps)
    if pa is not None:
        per_user["max_delta_phase_a"] = pa_delta
        per_user["phase_a_guarantee"] = (
            "central against the server via secagg (privacy."
            f"{'central_phase_a' if federation.shuffle else 'central'}"
            "): the noisy secure sums' epsilon at train.dp-delta, composed over the completed rounds with each "
            "round's actual contributors" if secagg_a else
            "inf: the server sees Phase A's updates (and validation metrics) in the clear"
            + (" (DP-FedAvg's noise is the server's own)" if train.dp_noise_multiplier > 0 else ""))
        if phase_a_central is not None and "client_ledger_max_epsilon" in phase_a_central:
            per_user["max_epsilon_phase_a_ledger"] = json_number(float(phase_a_central["client_ledger_max_epsilon"]))
    total_max = total.max_epsilon()  # one pass over every user's charges
    per_user["max_epsilon_total"] = json_number(total_max)
    per_user["max_delta_total"] = total.max_delta()
    # Phase A's finite central charge composes with the rest by basic composition: epsilons and deltas add up
    tight = _tight_max(rep, label, released_counts, od_counts, od_eps, phase_a and not secagg_a, num_classes,
                       privacy.delta)
    # the most releases of each kind (plus Phase A) may belong to different users (on-device answers come from test
    # users, Phase A from train users): the largest basic total, also an upper bound of every user's, caps it
    per_user["max_epsilon_tight"] = json_number(min(tight + pa_eps if secagg_a else tight, total_max))
    per_user["delta_tight"] = privacy.delta + (pa_delta if secagg_a else 0.0)
    if secagg_a and not federation.shuffle:
        per_user["max_epsilon_total_guarantee"] = (
            "basic composition of the uploads' and on-device answers' local epsilon (they hold against the server "
            "too) and Phase A's central epsilon against the server via secagg (privacy.central); max_delta_total "
            "adds train.dp-delta")
    if num_classes == 0:
        labels: Any = "no labels uploaded"
    elif label is None:
        labels = {"mechanism": "none (sent in the clear)", "epsilon_per_upload": "inf",
                  "note": ("privacy.label-epsilon = 0: labels are NOT protected; the per-user total epsilon is "
                           "infinite. Set privacy.label-epsilon > 0 for k-ary randomized response.")}
    else:
        labels = {"mechanism": "k-ary randomized response", "epsilon_per_upload": label.epsilon_worst_case,
                  "num_classes": num_classes, "keep_probability": label.calibration["keep_probability"]}
    if federation.shuffle:  # issue #24: the central guarantee against the server a shuffler buys
        n = shuffled_users if shuffled_users is not None else int(np.count_nonzero(np.bincount(users)))
        out["central"] = shuffle_central(uploaded, n, federation, privacy,
                                         repetitions=max(1, len(released_rows)),
                                         local_delta=uploaded.max_delta())
        per_user["max_epsilon_total_local"] = per_user["max_epsilon_total"]
        od_max = od_max if len(on_device_rows) else 0.0
        central = out["central"]["epsilon"]
        per_user["max_epsilon_total"] = json_number(
            (math.inf if central == "inf" else float(central)) + od_max + pa_eps)
        per_user["max_epsilon_total_guarantee"] = (
            "against the server: the shuffled uploads' central epsilon (privacy.central, via shuffle), plus, by basic "
            "composition, the on-device answers' local epsilon (they do not pass through the shuffler) and Phase A ("
            + ("its central epsilon against the server via secagg, privacy.central_phase_a" if secagg_a else
               "inf: updates in the clear") + "); max_epsilon_total_local is the local-DP total the clients' ledgers "
            "charge")
    out["composition"] = {
        "releases_per_record": releases_per_record,
        "repetitions": len(released_rows),
        "per_user": per_user,
        "labels": labels,
        "charged": ("what was sent: rows the server received (every round of every repetition), plus rows a "
                    "timed-out client may have sent; the on-device answers; Phase A's updates (inf: the server "
                    "sees them in the clear, also under DP-FedAvg, whose noise the server itself adds; under "
                    "train.secagg with train.dp-mode = client, the central epsilon of the noisy secure sums)"),
        "tight": ("max_epsilon_tight: the most releases of each kind any user made, composed by "
                  "dp-accounting's privacy-loss-distribution accountant at privacy.delta; basic composition "
                  "(max_epsilon_total, what the clients' ledgers enforce) bounds it from above"),
        "also_released": list(ALSO_RELEASED),
    }
    return out


def _on_device_charges(users: np.ndarray, on_device_rows: Sequence[tuple[np.ndarray, float]]
                       ) -> list[tuple[np.ndarray, float]]:
    """The on-device answers' charges as (records, epsilon) pairs, in the order ``privacy_summary`` applies them,
    the last one at the epsilon of the last non-empty answer. There is one answer per test client; when no user
    appears in two answers (a user's records sit on one client; the select and report halves split by user), every
    user gets exactly one addition whatever the grouping, so the answers of one epsilon are charged at once (same
    totals, bit for bit, and one count per user instead of one per user and answer); else one by one, as they
    came (the per-user sums keep their order of additions)."""
    parts = [(np.asarray(rows, np.int64), float(eps)) for rows, eps in on_device_rows if len(rows)]
    if len(parts) < 2:
        return parts
    # sorted copies, not np.unique's hash set (numpy >= 2.3: ~20 bytes a value, much of it left resident; #38)
    each = [distinct(users[r]) for r, _ in parts]
    if len(distinct(np.concatenate(each))) != sum(len(d) for d in each):
        return parts  # a user answered twice
    last = parts[-1][1]
    by_eps: dict[float, list[np.ndarray]] = {}
    for r, eps in parts:
        by_eps.setdefault(eps, []).append(r)
    by_eps[last] = by_eps.pop(last)  # the last answer's epsilon stays last (privacy_summary's od_eps)
    return [(np.concatenate(rs), eps) for eps, rs in by_eps.items()]


def phase_a_report(central: Mapping[str, Any] | None) -> PrivacyReport:
    """What Phase A costs each of its users over the whole phase: ``central`` (the Phase A summary's ``central``,
    present only under train.secagg with client-side noise: {"epsilon", "delta", "against": "server", "via":
    "secagg"}) as one (epsilon, delta) release; without it inf (updates in the clear)."""
    if central is None:
        return PrivacyReport(mechanism="phase-a-update-in-the-clear", epsilon_nominal=math.inf,
                             epsilon_worst_case=math.inf)
    if central.get("via") != "secagg" or central.get("against") != "server":
        raise ValueError(f"phase_a_central must be the secure sums' guarantee against the server (via secagg); got "
                         f"{dict(central)!r}.")
    eps = float(central["epsilon"])  # "inf" parses to inf
    delta = float(central["delta"])
    return PrivacyReport(mechanism="phase-a-secagg-distributed-discrete-gaussian", epsilon_nominal=eps,
                         epsilon_worst_case=eps, delta=delta if math.isfinite(eps) else 0.0)


def _tight_max(rep: PrivacyReport, label: PrivacyReport | None, released_counts: Sequence[np.ndarray],
               od_counts: np.ndarray, od_eps: float, phase_a: bool, num_classes: int, delta: float) -> float:
    """`tight_epsilon` of the most releases of each kind any user made (all releases of one kind cost the same):
    an upper bound of every user's tight epsilon."""
    if phase_a:
        return math.inf
    if not released_counts:
        return 0.0
    n_rep = np.zeros(len(od_counts), np.int64)
    for counts in released_counts:
        n_rep += counts
    # the most releases of each kind, over every user (a test user may answer on device without uploading):
    # an upper bound of every user's tight epsilon
    nr, no = int(n_rep.max()), int(od_counts.max()) if len(od_counts) else 0
    return tight_epsilon(rep, label, {"rep": nr, "label": nr if num_classes > 0 else 0, "on_device": no}, od_eps,
                         delta)


def shuffle_central(released: Accountant | Totals, num_users: int, federation: FederationConfig,
                    privacy: PrivacyConfig, *, repetitions: int = 1,
                    local_delta: float = 0.0) -> dict[str, Any]:
    """``privacy.central`` under ``federation.shuffle`` (issue #24): the central (epsilon, delta) against the server.

    Applied to what ONE user releases in a round, never per record: the user's local epsilon per round is its
    composed epsilon over its records' uploads (representation + label; ``released``'s largest per-user total
    divided by the rounds it was charged over: rounds x ``repetitions`` under schedule = repeat, ``repetitions``
    under stream, where each user uploads in one round). n = ``num_users``: the users shuffled together in a round
    (the smallest unlinked cohort, per round under stream). The bound is Wang et al. VLDB'24 (`fl_privtext.privacy.
    amplification`); rounds compose (best of basic and advanced composition).

    Approximate-DP local randomizers (``local_delta`` > 0: the Gaussian family): the pure-LDP bound is applied to
    the report's epsilon and FMT21 Theorem 3.8's extra delta, (e^eps + 1)(1 + e^-eps0 / 2) n delta0 per round
    (delta0 = the user's composed local delta per round), is added to each round's delta before composing."""
    repeat = federation.schedule == "repeat"
    rounds = (federation.rounds if repeat else 1) * max(1, repetitions)
    n = max(1, int(num_users))
    local = released.max_epsilon() / rounds
    if not math.isfinite(local):
        return {"epsilon": "inf", "delta": 0.0, "against": "server", "via": "shuffle", "users_shuffled": n,
                "note": "a user's local epsilon is infinite (labels in the clear): shuffling amplifies nothing"}
    if local <= 0:
        return {"epsilon": 0.0, "delta": 0.0, "against": "server", "via": "shuffle", "users_shuffled": n,
                "note": "nothing was released"}
    central_delta = privacy.delta if 0 < privacy.delta < 1 else 1e-6
    guarantee = shuffle_guarantee(local, n, central_delta, rounds)
    out: dict[str, Any] = dict(guarantee.to_json())
    out["applied_to"] = ("what one user releases per round: its records' uploads composed (representation + label),"
                         " the largest such total over users, divided by the rounds charged")
    out["cohorts"] = ("train and test users are shuffled per cohort (n = users of the smallest cohort that "
                      "uploads in a round); aux users (the attacker's colluders) keep their record ids")
    if local_delta > 0:
        delta0 = local_delta / rounds
        extra = gaussian_shuffle_delta(guarantee.epsilon_round, local, delta0, n)
        per_round = guarantee.delta + extra
        eps_total, delta_total = compose_rounds(guarantee.epsilon_round, per_round, rounds, central_delta / 2)
        out.update({"epsilon": eps_total, "delta": min(1.0, delta_total), "delta_per_round": min(1.0, per_round),
                    "approximate_ldp": {"local_delta_per_user_round": delta0, "extra_delta_per_round": extra,
                                        "bound": "FMT21 Theorem 3.8 (pure-LDP bound on eps0, plus the extra delta)",
                                        "vacuous": bool(delta_total >= 1.0)}})
    return out
