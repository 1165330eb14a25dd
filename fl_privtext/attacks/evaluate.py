"""Run every attack on one seed's recorded traffic and score it against the truth, its baselines and its ceiling.

This module is the referee, not the attacker: ``observe`` splits what the platform knows into the attacker's
:class:`AttackView` (traffic + public knowledge) and a :class:`Truth` (target attributes, the linkage game's answer
key, the targets' texts, every user's composed epsilon). Attacks only ever receive the view.

Ceilings use the mechanism's TRUE worst-case epsilon (``PrivacyReport.epsilon_worst_case``): per upload that
epsilon (plus the label randomizer's when labels are randomized; when labels travel in the clear the prior is the
attribute's distribution given the label, estimated on the targets); per user the composed epsilon of all the user's
observed uploads (Accountant). A violation is an attack whose 95% lower confidence bound exceeds its ceiling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from fl_privtext import constant, metrics, rng
from fl_privtext.attacks import ceilings, inversion, likelihood
from fl_privtext.attacks.attribute import infer_attribute, plain_logistic, user_truth
from fl_privtext.attacks.chunks import (
    block_rows,
    distinct_counts,
    gathered_mean,
    group_rows,
    group_sizes,
    row_chunks,
    user_blocks,
)
from fl_privtext.attacks.membership import membership_scores
from fl_privtext.attacks.reidentification import reidentify
from fl_privtext.attacks.view import AttackView, KnownAttribute
from fl_privtext.bootstrap import (
    Ratios,
    UserSums,
    counts_dtype,
    interval_keys,
    sums_bootstrap,
    user_sums,
)
from fl_privtext.config import AttackConfig
from fl_privtext.data import AttributeSpec
from fl_privtext.memory import narrowest, on_disk, positions
from fl_privtext.names import ATTACKS
from fl_privtext.threads import Task, limited, parallel_tasks


class PerUser:
    """A number per user (pseudonym -> float), as two sorted arrays: at a million users the two per-user dicts of
    `Truth` held ~200 MB of Python objects through the attack stage (issue #38). ``at(users)`` reads many at once;
    ``[u]`` one. With ``scale`` the held ``values`` are integer counts (each user's observed uploads) and a user's
    number is ``min(cap, count * scale)`` (``cap`` None: no clip), computed as it is read: the users in their own
    (narrowed) type and the counts in their narrowest (`narrowest`: ~6 bytes a user for the referee's epsilons and
    deltas together, which share both arrays, where two float64 copies of each held 32), the same float64 numbers
    as ``counts * scale`` computed once."""

    def __init__(self, users: np.ndarray, values: np.ndarray, *, scale: float | None = None,
                 cap: float | None = None) -> None:
        self.users = np.asarray(users)
        self.scale, self.cap = scale, cap
        self._held = np.asarray(values) if scale is not None else np.asarray(values, np.float64)
        if len(self.users) > 1 and not bool(np.all(self.users[1:] > self.users[:-1])):
            raise ValueError("PerUser needs users sorted and unique (np.unique's output).")

    def _numbers(self, held: np.ndarray) -> np.ndarray:
        if self.scale is None:
            return held
        with np.errstate(invalid="ignore"):
            out = held.astype(np.float64) * self.scale
            return out if self.cap is None else np.minimum(self.cap, out)

    @property
    def values(self) -> np.ndarray:
        """(U,) float64: every user's number, in the order of ``users``."""
        return self._numbers(self._held)

    def _same_rule(self, other: PerUser) -> bool:
        return all(a is b or a == b or (a != a and b != b)  # noqa: PLR0124 (nan: the same rule)
                   for a, b in ((self.scale, other.scale), (self.cap, other.cap)))

    def updated(self, other: PerUser) -> PerUser:
        """``dict.update``: the users of ``other`` take its values, the others keep theirs."""
        users = np.concatenate([other.users, self.users])
        first, where = np.unique(users, return_index=True)  # a user of both: its first entry (other's)
        if self.scale is not None and self._same_rule(other):
            return PerUser(first, np.concatenate([other._held, self._held])[where], scale=self.scale, cap=self.cap)
        return PerUser(first, np.concatenate([other.values, self.values])[where])

    def at(self, users: np.ndarray) -> np.ndarray:
        """(len(users),) float64: the users' numbers, looked up `row_chunks` users at a time (the same numbers;
        issue #38: the int64 positions and the widened counts of every target user at once were ~12 bytes a user
        beside the result, ~0.1 GB a call for the 8M target users at ten million synthetic users)."""
        users = np.asarray(users)
        out = np.empty(len(users), np.float64)
        for c in row_chunks(len(users)):
            pos = np.searchsorted(self.users, users[c])
            if len(pos) and (np.any(pos >= len(self.users)) or
                             np.any(self.users[np.minimum(pos, len(self.users) - 1)] != users[c])):
                raise KeyError("a user without observed uploads")
            out[c] = self._numbers(self._held[pos])
        return out

    def __getitem__(self, user: int) -> float:
        return float(self.at(np.array([user], np.int64))[0])

    def __len__(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class Truth:
    """The referee's answer key for one seed (never given to an attack)."""

    specs: tuple[AttributeSpec, ...]
    attributes: dict[str, np.ndarray]  # per upload (N,) or (N, K)
    texts: Sequence[str]  # per upload
    candidate_of_query: np.ndarray  # (Q,) index into view.candidates
    epsilon: float  # true worst-case epsilon of one upload's representation
    delta: float
    label_epsilon: float  # 0: labels in the clear (or no labels)
    user_epsilon: PerUser  # pseudonym -> composed epsilon over its observed uploads (representation+label)
    user_delta: PerUser
    # federation.shuffle: the account (named user) of each upload, when the view's pseudonyms are not accounts
    named_user: np.ndarray | None = None


def _held(a: np.ndarray) -> np.ndarray:
    """`narrowest` of a per-upload integer column the view or the truth holds, without copying one already in
    that type: a view of it (its own read-only flag, `AttackView`; the caller's array keeps its own). The same
    values and type; ``attack`` hands `observe` its users, labels, senders and attributes narrowed already, and
    the copies were 8 bytes a target at `observe`'s peak (issue #38)."""
    a = np.asarray(a)
    out = narrowest(a, copy=False)
    return a.view() if out is a else out


def observe(*, uploads: np.ndarray, labels: np.ndarray, users: np.ndarray, senders: np.ndarray,
            texts: Sequence[str], attributes: dict[AttributeSpec, np.ndarray], aux: np.ndarray,
            clean: Any, mechanism: Any, epsilon: float, delta: float, num_labels: int, label_epsilon: float,
            seed: int, attack: AttackConfig, word_vectors: Any = None,
            named_users: np.ndarray | None = None) -> tuple[AttackView, Truth]:
    """Split one seed's experiment into the attacker's view and the referee's truth.

    ``uploads/labels/users/senders/texts``: per observed upload; ``aux``: (N,) True for uploads of users whose
    attributes are public; ``clean``: callable(upload indices) -> clean representations of those uploads' texts
    (the public extractor on public texts), or None when no representation of a public text can be had;
    ``word_vectors``: callable(words) -> the public extractor on each word alone (keyword inversion's
    nearest-neighbour decoder), or None; ``named_users`` (federation.shuffle): each upload's account, when
    ``users`` are what the eavesdropper saw instead (one fresh pseudonym per shuffled report): the referee then
    scores per-user answers per named user (`score_attribute`)."""
    # per-upload columns held through the attack stage in their narrowest integer type (`narrowest`: 8 -> 1-4
    # bytes an upload each, ~0.9 GB at 10M synthetic users, issue #38); the attacks index with them, widen to count
    users = _held(users)
    attributes = {spec: _held(vals) for spec, vals in attributes.items()}
    aux = np.asarray(aux, bool)
    aux_idx = np.flatnonzero(aux)
    g = rng.generator(seed, "attack-game")
    # public texts: the text of every aux upload (the aux users published their posts)
    public_idx = aux_idx
    public_features = None if clean is None else np.asarray(clean(public_idx), np.float32)
    known = {spec.name: KnownAttribute(spec=spec, index=aux_idx, values=np.asarray(vals)[aux_idx],
                                       public_values=np.asarray(vals)[public_idx])
             for spec, vals in attributes.items()}
    # linkage game: M target uploads, their clean representations shuffled into the attacker's order
    targets = positions(~aux)  # int32 (`positions`): the same draws below as from np.flatnonzero's int64
    m = min(attack.reid_pool, len(targets))
    queries = np.sort(g.choice(targets, size=m, replace=False)) if m >= 2 and clean is not None else \
        np.zeros(0, np.int64)
    del targets  # (targets,): not held through the budgets' sort below
    perm = g.permutation(len(queries))  # candidate perm[i] is query i's source
    candidates = None
    cand_of_query = np.zeros(0, np.int64)
    if len(queries):
        cand_clean = np.asarray(clean(queries), np.float32)
        candidates = np.empty_like(cand_clean)
        candidates[perm] = cand_clean
        cand_of_query = perm
    view = AttackView(
        uploads=np.asarray(uploads, np.float32), labels=_held(labels),
        labels_in_clear=label_epsilon == 0, num_labels=num_labels, label_epsilon=label_epsilon,
        sender=_held(senders), user=users, mechanism=mechanism, known=known,
        public_texts=tuple(texts[int(i)] for i in public_idx), public_features=public_features,
        public_user=users[public_idx], candidates=candidates, queries=queries, config=attack, seed=seed,
        meta={} if word_vectors is None else {"word_vectors": word_vectors},
    )
    per_upload = epsilon + (label_epsilon if num_labels > 1 else 0.0)
    def budgets(who: np.ndarray) -> tuple[PerUser, PerUser]:
        # each user's observed uploads, held as counts: its epsilon counts * per_upload, its delta min(1, counts *
        # delta), computed when read (the same numbers; `PerUser`)
        uniq, counts = distinct_counts(who)
        return PerUser(uniq, counts, scale=per_upload), PerUser(uniq, counts, scale=float(delta), cap=1.0)

    u_eps, u_delta = budgets(users)
    if named_users is not None:  # accounts and shuffled pseudonyms are disjoint (fl_privtext.pipeline.server_users)
        n_eps, n_delta = budgets(narrowest(np.asarray(named_users)))
        u_eps, u_delta = u_eps.updated(n_eps), u_delta.updated(n_delta)
    truth = Truth(specs=tuple(attributes), attributes={s.name: np.asarray(v) for s, v in attributes.items()},
                  texts=texts, candidate_of_query=cand_of_query, epsilon=float(epsilon), delta=float(delta),
                  label_epsilon=float(label_epsilon), user_epsilon=u_eps, user_delta=u_delta,
                  named_user=None if named_users is None else narrowest(np.asarray(named_users)))
    return view, truth


# ------------------------------------------------------------------------------------------------ scoring
def _grouped(view: AttackView, users: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`group_rows` of ``users`` over ``rows``: the view's shared grouping (`AttackView.targets`) when they are the
    view's users and its targets, else computed."""
    if users is view.user and rows is view.targets[0]:
        return view.targets[1], view.targets[2]
    return group_rows(users, rows)


def _label_conditional(z: np.ndarray, labels: np.ndarray, k: int, num_labels: int) -> np.ndarray:
    """(L, k) P[z | label] on the targets (add-one smoothing). The (label, z) counts by `metrics.confusion`, a
    chunk at a time: the same float64 table as adding 1.0 per target with ``np.add.at`` (integer counts, exact).
    (Measured: ``np.add.at`` did not raise the referee's peak either; `_attribute_ceilings`' peak is its per-user
    arrays.)"""
    t = 1.0 + metrics.confusion(labels, z, max(num_labels, k))[:num_labels, :k].astype(np.float64)
    return t / t.sum(axis=1, keepdims=True)


def _attribute_ceilings(view: AttackView, truth: Truth, z: np.ndarray, idx: np.ndarray, k: int,
                        users: np.ndarray, multilabel: bool) -> tuple[float, float, float]:
    """(per-upload ceiling, per-user ceiling, the users' median epsilon). The per-user ceiling is the mean of every
    user's (`_users_ceiling`), each user's prior, epsilon and delta computed a block of users at a time
    (`user_blocks`): the (U, k) float64 posteriors and the (U,) epsilons and deltas of every target user at once
    were ~40 bytes a user at the referee's peak (issue #38), the same numbers."""
    clear = view.labels_in_clear and view.num_labels > 1 and not multilabel
    eps_up = truth.epsilon if clear or view.num_labels <= 1 else truth.epsilon + truth.label_epsilon
    # the median partitions the epsilons in place (`overwrite_input`: the same order statistics, no sorted copy)
    median_eps = _median(truth.user_epsilon.at(users))
    if multilabel:  # mean over classes of the binary ceiling (per-class accuracy is what is reported)
        pri = z.mean(axis=0)
        up = float(np.mean([ceilings.attribute_ceiling(np.array([1 - p, p]), eps_up, truth.delta) for p in pri]))
        def binary(p: float) -> Callable[[slice], np.ndarray]:  # every user's prior of one class's presence
            return lambda b: np.broadcast_to([1 - p, p], (b.stop - b.start, 2))

        us = float(np.mean([_users_ceiling(truth, users, binary(p)) for p in pri]))
        return up, us, median_eps
    prior = np.bincount(z, minlength=k) / len(z)
    if not clear:
        up = ceilings.attribute_ceiling(prior, eps_up, truth.delta)
        us = _users_ceiling(truth, users, lambda b: np.broadcast_to(prior, (b.stop - b.start, k)))
        return up, us, median_eps
    labels = view.labels[idx]
    cond = _label_conditional(z, labels, k, view.num_labels)  # (L, k)
    # each upload's ceiling is its label's (row-wise: the same numbers as one row per upload), averaged per upload
    per_label = ceilings.attribute_ceiling_many(cond, np.full(len(cond), eps_up), truth.delta)  # (L,)
    up = gathered_mean(per_label, labels)  # per_label[labels].mean(), no (targets,) float64 gather
    # per user: the prior given all of the user's labels (labels independent given z: an estimate)
    loglik = np.log(cond) - np.log(np.clip(prior, 1e-12, None))[None, :]  # log P[label|z]/P[label], up to const
    uniq, inv = _grouped(view, view.user, idx)

    def posteriors(b: slice) -> np.ndarray:
        """(users of ``b``, k): the posteriors of the grouped users ``b`` (positions in ``uniq``). Each user's terms
        added in row order, as in one ``np.add.at`` over every row; no (uploads, k) copy."""
        post = np.tile(np.log(np.clip(prior, 1e-12, None)), (b.stop - b.start, 1))
        whole = b.start == 0 and b.stop >= len(uniq)
        for c in row_chunks(len(idx)):
            if whole:
                np.add.at(post, inv[c], loglik[labels[c]])
            else:  # the block's rows only, in their order
                mine, at = block_rows(inv[c], b)
                np.add.at(post, at, loglik[labels[c][mine]])
        post -= post.max(axis=1, keepdims=True)  # in place: the same numbers as post - max, no (users, k) copy
        np.exp(post, out=post)
        return post

    if np.array_equal(uniq, users):  # the referee's users are these uploads' own (`user_truth`): by blocks
        return up, _users_ceiling(truth, users, posteriors), median_eps
    post = posteriors(slice(0, len(uniq)))[np.searchsorted(uniq, users)]
    return up, _users_ceiling(truth, users, lambda b: post[b]), median_eps


def _users_ceiling(truth: Truth, users: np.ndarray, priors: Callable[[slice], np.ndarray]) -> float:
    """The mean over ``users`` of `ceilings.attribute_ceiling_many` (each user's prior, ``priors(b)`` for the users
    at positions ``b``, its epsilon and its delta), computed `user_blocks` users at a time: row-wise, the same
    (U,) float64 figures as one call over every user, and their mean."""
    per = np.empty(len(users))
    for b in user_blocks(len(users)):
        per[b] = ceilings.attribute_ceiling_many(priors(b), truth.user_epsilon.at(users[b]),
                                                 truth.user_delta.at(users[b]))
    return float(per.mean())


def _median(values: np.ndarray) -> float:
    """The median of per-user figures, 0.0 for none (results.json ``median_epsilon``); partitions ``values`` in
    place."""
    return float(np.median(values, overwrite_input=True)) if len(values) else 0.0


def _ci(verdict: dict[str, object]) -> tuple[float, float]:
    """The (low, high) ends of a `ceilings.verdict`'s 95% interval (results.json ``ci_low`` / ``ci_high``)."""
    lo, hi = cast("list[float]", verdict["ci95"])
    return float(lo), float(hi)


ATTACK_INTERVAL = ("95% percentile bootstrap over target users (each with all its uploads; fl_privtext.bootstrap), "
                   "over seeds too where there are several")


def upload_figures(z: np.ndarray, pred: np.ndarray, prior: np.ndarray, k: int, multilabel: bool
                   ) -> tuple[np.ndarray, dict[str, Ratios]]:
    """Per-upload columns (N, C) and the per-upload figures as `Ratios` of their sums: ``accuracy``,
    ``advantage`` (accuracy minus the prior's, on the same uploads) and ``macro_f1`` (categorical; over the
    classes present) or ``f1`` (multilabel; micro over presence labels, where any label is present). Pooled over
    all targets they give exactly the figures `score_attribute` reports; summed per user they feed the bootstrap."""
    cols = _upload_columns(z, pred, prior, k, multilabel)
    return cols, _upload_ratios(k, multilabel, bool(cols[:, 4:].sum() > 0) if multilabel else True)


def _upload_columns(z: np.ndarray, pred: np.ndarray, prior: np.ndarray, k: int, multilabel: bool) -> np.ndarray:
    """`upload_figures`' (N, C) float64 columns, row by row (so any chunk of rows gives its rows' columns)."""
    if multilabel:  # columns: cells, correct cells, the prior's correct cells, tp, true, predicted
        zb, pb = z.astype(bool), pred.astype(bool)
        cols = np.stack([np.full(len(z), z.shape[1]), (z == pred).sum(axis=1), (z == prior).sum(axis=1),
                         (zb & pb).sum(axis=1), zb.sum(axis=1), pb.sum(axis=1)], axis=1)
        return cols.astype(np.float64)
    # columns: 1, correct, the prior's correct, then per class: tp, true, predicted
    right = z == pred
    truth_1h, pred_1h = np.eye(k)[z], np.eye(k)[pred]
    cols = np.concatenate([np.stack([np.ones(len(z)), right, z == prior], axis=1), truth_1h * right[:, None],
                           truth_1h, pred_1h], axis=1)
    return cols.astype(np.float64)


def _upload_ratios(k: int, multilabel: bool, presence: bool) -> dict[str, Ratios]:
    """`upload_figures`' `Ratios`; ``presence`` (multilabel): some label is present or predicted (F1 defined)."""
    if multilabel:
        e = np.eye(6)
        figures = {"accuracy": Ratios(e[[1]], e[[0]]), "advantage": Ratios(e[[1]] - e[[2]], e[[0]], low=-1.0)}
        if presence:
            figures["f1"] = Ratios(2 * e[[3]], e[[4]] + e[[5]])
        return figures
    e = np.eye(3 + 3 * k)
    tp, true, predicted = (3 + j * k + np.arange(k) for j in range(3))
    return {"accuracy": Ratios(e[[1]], e[[0]]), "advantage": Ratios(e[[1]] - e[[2]], e[[0]], low=-1.0),
            "macro_f1": Ratios(2 * e[tp], e[true] + e[predicted])}


def _upload_sums(view: AttackView, truth: Truth, idx: np.ndarray, z: np.ndarray, pred: np.ndarray,
                 prior: np.ndarray, k: int, multilabel: bool) -> tuple[UserSums, dict[str, Ratios]]:
    """`user_sums` of `upload_figures`' columns over the target users, and the figures (`_upload_intervals` reads
    them). The users are the referee's: the accounts under federation.shuffle, not the per-report pseudonyms."""
    owners = truth.named_user if truth.named_user is not None else view.user  # (N,): row idx[i]'s is owners[idx[i]]
    # built `row_chunks` at a time (in row order: each user's sums add in the order of one call) instead of one
    # (targets x C) float64 array (issue #38)
    users, inv = _grouped(view, owners, idx)  # in the owners' own (narrowed) type: no (uploads,) int64 copy
    # a column's per-user sum is a non-negative integer at most the user's records (times the classes, multilabel's
    # cell counts): held in the narrowest unsigned type that holds the largest (`counts_dtype`: 1 byte a column
    # while no user has more than 255 records), the same numbers, widened a block at a time by the bootstrap
    # (each user's records: the view's shared counts when these are its targets, else `group_sizes`; np.bincount
    # took an int64 copy of ``inv``)
    records = view.target_counts if inv is view.targets[2] else group_sizes(inv, len(users))
    dtype = counts_dtype(int(records.max(initial=0)) * (z.shape[1] if multilabel else 1))
    del records
    per_user = np.zeros((len(users), 6 if multilabel else 3 + 3 * k), dtype)
    for c in row_chunks(len(idx)):
        np.add.at(per_user, inv[c], _upload_columns(z[c], pred[c], prior[c], k, multilabel).astype(dtype))
    return UserSums(users, per_user), _upload_ratios(k, multilabel,
                                                     bool(per_user[:, 4:].sum() > 0) if multilabel else True)


def _upload_intervals(sums: UserSums, figures: dict[str, Ratios], seed: int, name: str) -> dict[str, Any]:
    """Every per-upload figure's 95% interval over target users (issue #37; `_upload_sums`): a user's uploads are
    resampled together (several per user share its secret and its style, so an interval over uploads is too
    narrow). ``_sums`` / ``_figures`` (internal): what the report pools over seeds, the sums kept on disk (`on_disk`:
    read again only where a point has several seeds; resident, the (target users x columns) sums of every attribute
    attacked so far stayed in the driver beside the attacks still running, ~9-12 bytes a target user each, issue
    #38)."""
    out: dict[str, Any] = {"interval": ATTACK_INTERVAL, "_sums": sums, "_figures": figures}
    for fig, (lo, hi) in sums_bootstrap([sums], figures, rng.generator(seed, "referee", "attack", name)).items():
        out[interval_keys(fig)[0]], out[interval_keys(fig)[1]] = lo, hi
    out["_sums"] = UserSums(sums.users, on_disk(sums.sums))
    return out


def score_attribute(view: AttackView, truth: Truth, name: str) -> dict[str, Any]:
    guess = infer_attribute(view, name)
    spec = view.known[name].spec
    multilabel = spec.kind == "multilabel"
    idx = guess.target_index
    z_all = truth.attributes[name]
    z = z_all[idx]
    t_users, z_user = user_truth(z, view.user, idx, _grouped(view, view.user, idx))
    assert np.array_equal(t_users, guess.target_users)
    k = len(spec.classes)
    ceil_up, ceil_user, median_eps = _attribute_ceilings(view, truth, z, idx, k, t_users, multilabel)
    acc = metrics.accuracy(z, guess.upload_pred)
    acc_user = metrics.accuracy(z_user, guess.user_pred)
    n_cells = z.size if multilabel else len(z)
    n_user_cells = z_user.size if multilabel else len(z_user)
    v_up = ceilings.verdict(acc * n_cells, n_cells, ceil_up)
    v_user = ceilings.verdict(acc_user * n_user_cells, n_user_cells, ceil_user)
    maj_up, maj_user = guess.baselines["majority"]
    prior_up, prior_user = guess.baselines["prior"]
    # the floor: plain logistic regression on the same aux users' uploads, scored on the same targets
    floor = plain_logistic(view, name)
    assert np.array_equal(floor.target_users, t_users)
    floor_user = {how: metrics.accuracy(z_user, pred) for how, pred in floor.user_pred.items()}
    per_user: dict[str, Any] = {
        "accuracy": acc_user, "majority_baseline": metrics.accuracy(z_user, maj_user), "ceiling": ceil_user,
        "ci95": v_user["ci95"], "ci_low": _ci(v_user)[0], "ci_high": _ci(v_user)[1],
        # plain logistic's soft vote over a user's uploads: fixed, never picked on the targets (both in by_combination)
        "floor_logistic": floor_user["mean_prob"], "floor_logistic_by_combination": floor_user,
        "ceiling_vacuous": v_user["ceiling_vacuous"], "violation": v_user["violation"],
        "learned_accuracy": metrics.accuracy(z_user, guess.learned_user_pred), "num_users": len(t_users),
        "median_epsilon": median_eps,
        "attacker": guess.diagnostics["per_user_attacker"],
        "learned_attacker": guess.diagnostics["learned_per_user_attacker"],
        "test": guess.diagnostics["per_user_test"],
        # the one baseline the answer is read against: the prior it answers without a leak, on these targets
        "prior": guess.diagnostics["per_user_prior"], "prior_baseline": metrics.accuracy(z_user, prior_user),
    }
    if "majority_given_label" in guess.baselines:
        per_user["majority_given_label_baseline"] = metrics.accuracy(z_user, guess.baselines["majority_given_label"][1])
    if truth.named_user is not None:
        per_user = _named_user_score(view, truth, name, guess, z, idx, multilabel, per_user)
    common: dict[str, Any] = {
        "attacker": guess.diagnostics["attacker"], "learned_attacker": guess.diagnostics["learned_attacker"],
        "learner": guess.diagnostics["attacker"],  # the family that answered (attack.learner; best out of fold)
        "num_known": len(view.known[name].index),
        "num_targets": len(idx), "ceiling": ceil_up, "accuracy_ci95": v_up["ci95"],
        "ceiling_vacuous": v_up["ceiling_vacuous"], "per_user": per_user,
        "violation": bool(v_up["violation"] or v_user["violation"]),
        "learned_accuracy": metrics.accuracy(z, guess.learned_upload_pred),
        "floor_logistic": metrics.accuracy(z, floor.upload_pred),
        "leak_test": guess.diagnostics["per_upload_test"], "families": guess.diagnostics["families"],
        # issue #36: the attacker's prior (majority, or majority given the observed label where that beat the
        # majority on the aux users) scored on the targets: without a leak the answer IS this prior
        "prior": guess.diagnostics["prior"], "prior_baseline": metrics.accuracy(z, prior_up),
        "likelihood_exact": guess.diagnostics["likelihood_exact"],
        "likelihood_note": guess.diagnostics["likelihood_note"],  # the approximation, when not exact
        "noise_law": guess.diagnostics["noise_law"],  # the server learners' law (None: none of them ran)
    }
    # issue #37: what the uploads add over the prior, and every per-upload figure's interval over target users
    common["advantage"] = acc - common["prior_baseline"]
    sums, figures = _upload_sums(view, truth, idx, z, guess.upload_pred, prior_up, k, multilabel)
    label_baseline = metrics.accuracy(z, guess.baselines["majority_given_label"][0]) \
        if "majority_given_label" in guess.baselines else None
    known_z = view.known[name].values
    if multilabel:
        pred = guess.upload_pred
        per_acc = {c: metrics.accuracy(z[:, j], pred[:, j]) for j, c in enumerate(spec.classes)}
        split_acc = {c: {side: metrics.accuracy(z[msk, j], pred[msk, j]) if msk.any() else None
                         for side, msk in (("present", z[:, j] == 1), ("absent", z[:, j] == 0))}
                     for j, c in enumerate(spec.classes)}
        per_maj = {c: metrics.majority_baseline(known_z[:, j], z[:, j]) for j, c in enumerate(spec.classes)}
        f1 = metrics.multilabel_f1(z, pred)
        head = {"kind": "multilabel", "f1": f1, "f1_majority_baseline": metrics.multilabel_f1(z, maj_up),
                "floor_logistic_f1": metrics.multilabel_f1(z, floor.upload_pred),
                "accuracy": acc, "majority_baseline": float(np.mean(list(per_maj.values()))),
                "per_class_accuracy": per_acc, "per_class_majority_baseline": per_maj,
                "per_class_presence_accuracy": split_acc, "empirical_privacy": 1.0 - f1}
        del pred
    else:
        maj = metrics.majority_baseline(known_z, z)
        lo, hi = metrics.binomial_interval(maj, len(z))
        head = {"kind": "categorical", "accuracy": acc, "macro_f1": metrics.macro_f1(z, guess.upload_pred, k),
                "majority_baseline": maj,
                # 1.0: the learned attacker answers one class for every upload (a constant predictor)
                "learned_modal_share": constant.modal_share(guess.learned_upload_pred), "majority_ci95": [lo, hi],
                "empirical_privacy": 1.0 - acc}
    # every figure above is read: the answers, the baselines' and the floor's, and the targets' values (bytes a
    # target and a target user: ~0.2 GB at ten million synthetic users, issue #38) go before the bootstrap, the
    # stage's longest piece, which reads the per-user sums alone
    del guess, floor, z, z_user, maj_up, maj_user, prior_up, prior_user
    common.update(_upload_intervals(sums, figures, view.seed, name))
    # the violation test reads the interval over target users: the binomial one over uploads (accuracy_ci95) is too
    # narrow when a user's uploads share its secret, and raised alarms no attacker had earned
    if common.get("ci_low") is not None:
        common["violation"] = bool((not v_up["ceiling_vacuous"] and common["ci_low"] > ceil_up + 1e-12)
                                   or v_user["violation"])
    if label_baseline is not None:
        common["majority_given_label_baseline"] = label_baseline
    return {**head, **common}


def _named_user_score(view: AttackView, truth: Truth, name: str, guess: Any, z: np.ndarray, idx: np.ndarray,
                      multilabel: bool, linked: dict[str, Any]) -> dict[str, Any]:
    """Per-user attack under federation.shuffle, scored per NAMED user (an account): the attacker answers for a
    named user with its per-user answer for the pseudonym equal to that account when the view carries one (a
    shuffler that kept record ids), else with its prior (the aux users' majority): without linkage it cannot tell
    which reports are the user's. ``linked``: the per-pseudonym scores, kept as ``per_pseudonym``."""
    assert truth.named_user is not None
    named = truth.named_user[idx]
    users, z_user = user_truth(z, named)
    known = view.known[name].values
    prior = ((known.mean(axis=0) > 0.5).astype(np.int8) if multilabel else
             np.bincount(known, minlength=len(view.known[name].spec.classes)).argmax())
    answer = np.stack([prior] * len(users)) if multilabel else np.full(len(users), prior)
    pos = np.searchsorted(guess.target_users, users)
    found = (pos < len(guess.target_users)) & (guess.target_users[np.minimum(pos, len(guess.target_users) - 1)]
                                                == users) if len(guess.target_users) else np.zeros(len(users), bool)
    answer[found] = guess.user_pred[pos[found]]
    maj = np.stack([prior] * len(users)) if multilabel else np.full(len(users), prior)
    acc, base = metrics.accuracy(z_user, answer), metrics.accuracy(z_user, maj)
    cells = z_user.size if multilabel else len(z_user)
    eps_users = truth.user_epsilon.at(users)
    d_users = truth.user_delta.at(users)
    k = len(view.known[name].spec.classes)
    if multilabel:
        pri = z.mean(axis=0)
        ceil = float(np.mean([ceilings.attribute_ceiling_many(np.broadcast_to([1 - p, p], (len(users), 2)), eps_users,
                                                               d_users).mean() for p in pri]))
    else:
        ceil = float(ceilings.attribute_ceiling_many(np.broadcast_to(np.bincount(z, minlength=k) / len(z), (len(users), k)),
                                                     eps_users, d_users).mean())
    v = ceilings.verdict(acc * cells, cells, ceil)
    return {"accuracy": acc, "majority_baseline": base, "prior": "majority", "prior_baseline": base,
            "ceiling": ceil, "ci95": v["ci95"], "ci_low": _ci(v)[0],
            "ci_high": _ci(v)[1],
            "ceiling_vacuous": v["ceiling_vacuous"], "violation": v["violation"], "num_users": len(users),
            "median_epsilon": float(np.median(eps_users)) if len(eps_users) else 0.0,
            "linkage": bool(found.any()), "users_linked": int(found.sum()),
            "answered_from_prior": int((~found).sum()),
            "attacker": linked.get("attacker"),
            "test": {"leak_detected": bool(found.any() and (linked.get("test") or {}).get("leak_detected")),
                     "verdict": ("answers for named users it links: the per-pseudonym test applies" if found.any()
                                 else "no named user linked: every per-user answer is the prior")},
            "note": ("federation.shuffle: scored per named user. The reports carry no sender and a fresh pseudonym "
                     "each, so the attacker cannot group a named user's reports: its answer for a user it cannot "
                     "link is its prior (the aux users' majority). Per-report inference is unaffected (the "
                     "per-upload scores above); 'per_pseudonym' is the per-user attack on the pseudonyms it saw "
                     "(one report each)."),
            "per_pseudonym": linked}


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def score_linkage(view: AttackView, truth: Truth) -> dict[str, Any]:
    """Re-identification and membership on the view's candidate pool."""
    ranking = reidentify(view)  # (Q, M)
    truth_c = truth.candidate_of_query
    q, m = ranking.shape
    rank_of_truth = np.argmax(ranking == truth_c[:, None], axis=1)  # 0 = top
    top1 = float((rank_of_truth == 0).mean())
    k = min(view.config.reid_topk, m)
    topk = float((rank_of_truth < k).mean())
    eps, delta = truth.epsilon, truth.delta
    ceil = ceilings.reidentification_ceiling(eps, m, delta)
    v = ceilings.verdict(top1 * q, q, ceil)
    exact, exact_note = likelihood.lookup(view.mechanism)[1], likelihood.note(view.mechanism)
    reid = {"top1": top1, f"top{k}": topk, "topk": topk, "k": k, "mrr": float(np.mean(1.0 / (rank_of_truth + 1))),
            "chance": 1.0 / m, "topk_chance": k / m, "pool": m, "queries": q, "ceiling": ceil,
            "ceiling_topk": ceilings.reidentification_topk_ceiling(eps, m, k, delta), "ci95": v["ci95"],
            "ceiling_vacuous": v["ceiling_vacuous"], "violation": v["violation"], "likelihood_exact": exact,
            "likelihood_note": exact_note}
    s = membership_scores(view)  # (Q, M)
    is_pos = np.zeros_like(s, bool)
    is_pos[np.arange(q), truth_c] = True
    pos, neg = s[is_pos], s[~is_pos]
    thr = np.quantile(neg, 0.99)
    tpr = float((pos > thr).mean())
    fpr = float((neg > thr).mean())
    tceil = ceilings.membership_tpr_ceiling(eps, max(fpr, 0.01), delta)
    vm = ceilings.verdict(tpr * len(pos), len(pos), tceil)
    memb = {"auc": _auc(pos, neg), "tpr_at_1pct_fpr": tpr, "fpr_at_threshold": fpr, "chance_auc": 0.5,
            "chance_tpr_at_1pct_fpr": 0.01, "ceiling_auc": ceilings.membership_auc_ceiling(eps, delta),
            "ceiling": tceil, "ci95": vm["ci95"], "ceiling_vacuous": vm["ceiling_vacuous"],
            "violation": vm["violation"], "pairs": int(s.size), "likelihood_exact": exact,
            "likelihood_note": exact_note}
    return {"reidentification": reid, "membership": memb}


# per target upload: the answer's tp, predicted, true, entity hits; the baseline's the same; the entity words present
INVERSION_COLUMNS = ("tp", "predicted", "true", "entity_hits", "tp_baseline", "predicted_baseline", "true_baseline",
                     "entity_hits_baseline", "entity_true")


def _inversion_intervals(per_upload: np.ndarray, owners: np.ndarray, seed: int) -> dict[str, Any]:
    """The keyword inversion's figures' 95% intervals over target users (issue #37): its precision, recall and F1
    are pooled over (upload, word) pairs, a user's uploads resampled together (`ATTACK_INTERVAL`); a figure with
    no positive denominator (nothing predicted, no entity word) has none. ``_sums`` / ``_figures``: internal."""
    e = np.eye(len(INVERSION_COLUMNS))
    col = {c: e[[j]] for j, c in enumerate(INVERSION_COLUMNS)}
    figures = {}
    for side in ("", "_baseline"):
        tp, predicted, true = col[f"tp{side}"], col[f"predicted{side}"], col[f"true{side}"]
        figures.update({f"f1{side}": Ratios(2 * tp, predicted + true), f"precision{side}": Ratios(tp, predicted),
                        f"recall{side}": Ratios(tp, true),
                        f"entity_recall{side}": Ratios(col[f"entity_hits{side}"], col["entity_true"])})
    pooled = per_upload.sum(axis=0)
    figures = {k: f for k, f in figures.items() if not np.isnan(f.value(pooled))}
    if not len(owners):
        return {}
    sums = user_sums(per_upload, owners)
    out: dict[str, Any] = {"interval": ATTACK_INTERVAL, "_sums": sums, "_figures": figures}
    for fig, ends in sums_bootstrap([sums], figures, rng.generator(seed, "referee", "attack", "inversion")).items():
        out.update(zip(interval_keys(fig), ends, strict=True))
    return out


SCORE_PIECES = 8  # tasks per decoder that score the targets (each a share of the row chunks): what balances the end


@dataclass(frozen=True)
class _Unavailable:
    """A piece of the keyword inversion that raised ValueError (no public texts, ...): what the attack reports."""

    reason: str


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as an inversion piece: a need that was unavailable passes on (the first in the needs' order), and a
    ValueError makes this piece unavailable."""
    def run(*needs: Any) -> Any:
        for need in needs:
            if isinstance(need, _Unavailable):
                return need
        try:
            return fn(*needs)
        except ValueError as exc:
            return _Unavailable(str(exc))
    return run


@dataclass(frozen=True)
class _TargetWords:
    """The referee's side of the inversion's targets, per row chunk (`inversion.chunk_rows`): each chunk's word
    presence, bit-packed (a dense (T, K) presence at 65,000 targets and K = 2000 is 130 MB; packed, 16 MB), the
    word-frequency baseline's per-upload counts and the entity words present."""

    chunks: list[slice]
    packed: list[np.ndarray]  # per chunk: np.packbits of its (rows, K) presence along the words
    entity: np.ndarray  # (K,) bool: entity words of the vocabulary
    baseline: np.ndarray  # (T, 4) int64: the baseline's tp, predicted, true, entity hits per target upload
    entity_true: np.ndarray  # (T,) int64: entity words present per target upload
    baseline_words: int  # j: the baseline predicts the j most frequent public words (`inversion.baseline`)

    def presence(self, i: int) -> np.ndarray:
        return np.unpackbits(self.packed[i], axis=1, count=len(self.entity)).astype(bool)


def _word_counts(y: np.ndarray, said: np.ndarray, entity: np.ndarray) -> np.ndarray:
    """(n, 4) int64 per upload: tp, predicted, true, entity words hit (`INVERSION_COLUMNS`' first four)."""
    return np.stack([(y & said).sum(axis=1), said.sum(axis=1), y.sum(axis=1),
                     (y[:, entity] & said[:, entity]).sum(axis=1)], axis=1)


def _target_words(truth: Truth, pub: inversion.Public) -> _TargetWords:
    """The targets' word presence, read from their texts row chunk by row chunk, and the baseline's counts."""
    entity = np.isin(np.array(pub.vocab, dtype=object), np.array(pub.entities, dtype=object))
    j, row = inversion.baseline(pub)
    said = row.astype(bool)
    chunks = list(row_chunks(len(pub.targets), inversion.chunk_rows(len(pub.vocab))))
    packed, base = [], np.zeros((len(pub.targets), 4), np.int64)
    entity_true = np.zeros(len(pub.targets), np.int64)
    for c in chunks:
        y = inversion.presence([truth.texts[i] for i in pub.targets[c]], pub.vocab).astype(bool)
        packed.append(np.packbits(y, axis=1))
        base[c] = _word_counts(y, np.broadcast_to(said, y.shape), entity)
        entity_true[c] = y[:, entity].sum(axis=1)
    return _TargetWords(chunks=chunks, packed=packed, entity=entity, baseline=base, entity_true=entity_true,
                        baseline_words=j)


def _pieces(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into ``parts`` consecutive ranges (some empty when n < parts)."""
    return [range(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def _score_piece(view: AttackView, name: str, part: int) -> Callable[..., list[np.ndarray]]:
    """Scores decoder ``name`` on its ``part``-th share of the target chunks: per chunk, `_word_counts`."""
    def run(pub: inversion.Public, held: tuple[float, float], model: inversion.Decoder,
            words: _TargetWords) -> list[np.ndarray]:
        rows = np.arange(len(pub.targets))
        return [_word_counts(words.presence(i),
                             inversion.predict(view, pub, model, held[0], rows[words.chunks[i]]).astype(bool),
                             words.entity)
                for i in _pieces(len(words.chunks), SCORE_PIECES)[part]]
    return run


def _score_inversion(view: AttackView, truth: Truth, pub: inversion.Public, *needs: Any) -> dict[str, Any]:
    """The inversion's results.json entry from its pieces: per decoder (`inversion.DECODERS` order) the
    held-out (threshold, F1), then the targets' `_TargetWords`, then the scoring pieces (decoder-major). The
    same figures as scoring every chunk with every decoder in turn: the per-upload counts are integers."""
    held = dict(zip(inversion.DECODERS, needs[: len(inversion.DECODERS)], strict=True))
    words: _TargetWords = needs[len(inversion.DECODERS)]
    scored = needs[len(inversion.DECODERS) + 1:]
    heldout_f1 = {d: held[d][1] for d in inversion.DECODERS}
    chosen = inversion.answer(heldout_f1)
    names = [chosen] + [d for d in inversion.DECODERS if d != chosen]
    empty = np.zeros((0, 4), np.int64)
    cols = {d: np.concatenate([empty] + [c for piece in scored[SCORE_PIECES * k: SCORE_PIECES * (k + 1)]
                                         for c in piece])
            for k, d in enumerate(inversion.DECODERS)}
    counts = np.stack([cols[d][:, :3].sum(axis=0) for d in names] + [words.baseline[:, :3].sum(axis=0)])
    entity_hits = np.array([int(cols[d][:, 3].sum()) for d in names] + [int(words.baseline[:, 3].sum())])
    # issue #37: per target upload, the answer's and the baseline's counts (INVERSION_COLUMNS), summed per user below
    per_upload = np.concatenate([cols[chosen], words.baseline, words.entity_true[:, None]], axis=1).astype(np.float64)
    ent = words.entity
    entity_true = int(per_upload[:, 8].sum())
    p, r, f1 = inversion.prf(*(int(v) for v in counts[0]))
    pb, rb, fb = inversion.prf(*(int(v) for v in counts[-1]))
    per_decoder = {d: dict(zip(("precision", "recall", "f1"), inversion.prf(*(int(v) for v in counts[j])),
                               strict=True)) | {"heldout_f1": heldout_f1[d]} for j, d in enumerate(names)}

    def recall(j: int) -> float | None:
        return float(entity_hits[j] / entity_true) if ent.any() and entity_true else None

    owners = (truth.named_user if truth.named_user is not None else view.user)[pub.targets]
    return {**_inversion_intervals(per_upload, owners, view.seed),
            "f1": f1, "precision": p, "recall": r, "f1_baseline": fb, "precision_baseline": pb,
            "recall_baseline": rb, "entity_recall": recall(0), "entity_recall_baseline": recall(len(names)),
            "decoder": chosen, "decoders": per_decoder, "word_vectors": pub.source,
            "vocab_size": len(pub.vocab), "entity_words": list(pub.entities)[:20],
            "num_entity_words": int(ent.sum()), "threshold": held[chosen][0], "baseline_words": words.baseline_words,
            "num_targets": len(pub.targets), "num_targets_total": pub.targets_total,
            "num_target_users": len(np.unique(view.user[pub.targets])),
            "ceiling": "none: no closed-form LDP bound for a set-valued secret (see the re-identification ceiling)"}


def inversion_tasks(view: AttackView, truth: Truth) -> list[Task[Any]]:
    """The keyword inversion (`score_inversion`) as independent pieces for `parallel_tasks`, in priority order:
    the public texts privatized once (`inversion.prepare`), each decoder's held-out fit and full fit (the learned
    decoder's L-BFGS and the votes' neighbour search the longest), the targets' words (`_TargetWords`), each
    decoder's scoring in `SCORE_PIECES` shares of the target chunks, and the results.json entry (key ``("extra",
    "inversion")``: ``{"inversion": ...}``). Only `inversion.prepare` draws (from ``(seed, "attack",
    "inversion")`` and ``"inversion-targets"``); the fits and the scoring draw nothing, so their order and overlap
    change no number. A piece that raises ValueError makes the attack unavailable, with its reason."""
    try:
        inversion.check(view)
    except ValueError as exc:
        reason = str(exc)
        return [Task(("extra", "inversion"), lambda: {"inversion": {"available": False, "reason": reason}})]
    pub = ("inversion", "public")
    fits = [("fit", "learned"), ("heldout", "learned"), ("heldout", "nearest+votes"), ("fit", "nearest+votes"),
            ("heldout", "nearest"), ("fit", "nearest")]  # the longest first (a 200k profile)
    tasks: list[Task[Any]] = [Task(pub, _guarded(lambda: inversion.prepare(view)), keep=False)]
    for kind, name in fits:
        piece = inversion.heldout if kind == "heldout" else inversion.fit
        tasks.append(Task(("inversion", kind, name), _guarded(lambda p, f=piece, n=name: f(p, n)), (pub,), keep=False))
    words = ("inversion", "words")
    tasks.append(Task(words, _guarded(lambda p: _target_words(truth, p)), (pub,), keep=False))
    scores = [("inversion", "score", name, part) for name in inversion.DECODERS for part in range(SCORE_PIECES)]
    for key in sorted(scores, key=lambda k: (-inversion.DECODERS.index(k[2]), k[3])):  # the votes' first
        name = key[2]
        tasks.append(Task(key, _guarded(_score_piece(view, name, key[3])),
                          (pub, ("inversion", "heldout", name), ("inversion", "fit", name), words), keep=False))
    final = [pub] + [("inversion", "heldout", d) for d in inversion.DECODERS] + [words] + scores
    tasks.append(Task(("extra", "inversion"), lambda *needs: _inversion_entry(view, truth, *needs), tuple(final)))
    return tasks


def _inversion_entry(view: AttackView, truth: Truth, *needs: Any) -> dict[str, Any]:
    """``{"inversion": ...}``: the scores, or why the attack could not run (the first unavailable piece)."""
    failed = next((n for n in needs if isinstance(n, _Unavailable)), None)
    if failed is not None:
        return {"inversion": {"available": False, "reason": failed.reason}}
    return {"inversion": _score_inversion(view, truth, *needs)}


def score_inversion(view: AttackView, truth: Truth) -> dict[str, Any]:
    """The keyword inversion's results.json entry, its pieces (`inversion_tasks`) one after the other; raises
    ValueError when it cannot run."""
    entry = inversion_attack(view, truth)["inversion"]
    if entry.get("available") is False:
        raise ValueError(entry["reason"])
    return entry


def run_attacks(view: AttackView, truth: Truth) -> tuple[dict[str, Any], dict[str, Any]]:
    """(attacks per attribute, attacks_extra) for one seed."""
    # The attackers' models are tiny (batch 32, <= 512 hidden): one torch thread is fastest, by ~18x measured on a
    # loaded 2-core box (thread hand-offs dominate such small ops).
    with limited(1):
        return _run_attacks(view, truth)


def linkage_attacks(view: AttackView, truth: Truth) -> dict[str, Any]:
    """``linkage`` (`ATTACKS`): re-identification and membership of the public candidates (`score_linkage`)."""
    if view.candidates is None or len(view.queries) < 2:
        unavailable = {"available": False, "reason": "no public representations"}
        return {"reidentification": unavailable, "membership": unavailable}
    extra = score_linkage(view, truth)
    if truth.named_user is not None:  # federation.shuffle: what a match can and cannot tell
        for key in ("reidentification", "membership"):
            extra[key]["scope"] = (
                "per report (federation.shuffle): the game matches a report's content to a candidate's "
                "public text, which the shuffler does not hide; the report carries no sender and a "
                "fresh pseudonym, so a match links it to no other report, round or node. The ceiling is "
                "the local one of one report; the central guarantee against the server is "
                "privacy.central.")
    return extra


def inversion_attack(view: AttackView, truth: Truth) -> dict[str, Any]:
    """``inversion`` (`ATTACKS`): keyword inversion (`score_inversion`), or why it could not run; its pieces
    (`inversion_tasks`) one after the other (`_run_attacks` schedules them beside the other attacks)."""
    return parallel_tasks(inversion_tasks(view, truth), 1, cores=1)["extra", "inversion"]  # type: ignore[no-any-return]


SPLIT: dict[Callable[..., Any], Callable[[AttackView, Truth], list[Task[Any]]]] = {
    inversion_attack: inversion_tasks}  # whole-traffic attacks scheduled as pieces; the key is the ATTACKS entry


def attack_tasks(view: AttackView, truth: Truth) -> list[Task[Any]]:
    """The seed's attacks as `parallel_tasks` tasks, in the order its workers take them: the keyword inversion's
    pieces (`inversion_tasks`; the longest chain at a million users: its public texts, then its decoder fits)
    before the attributes (``("attribute", name)``, `score_attribute`), then the other whole-traffic attacks of
    `ATTACKS` (``("extra", name)``, when ``attack.extra``), then the inversion's scoring of the targets (many
    short pieces: they fill both cores to the end). Each draws only from its own seeded streams
    (``(seed, "attack", ...)``), so the order changes no number."""
    extras = [n for n in ATTACKS if view.config.extra]
    split = {n: SPLIT[ATTACKS[n]](view, truth) for n in extras if ATTACKS[n] in SPLIT}
    first, last = [], []
    for tasks in split.values():  # their pieces up to their fits first, their scoring pieces last
        cut = next((i for i, t in enumerate(tasks) if t.key == ("inversion", "words")), len(tasks))
        first += tasks[:cut]
        last += tasks[cut:]
    attributes = [Task(("attribute", n), lambda n=n: score_attribute(view, truth, n)) for n in view.known]
    whole = [Task(("extra", n), lambda n=n: ATTACKS[n](view, truth)) for n in extras if n not in split]
    return first + attributes + whole + last


def _run_attacks(view: AttackView, truth: Truth, cores: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every attack of the seed, side by side on up to ``cores`` threads (`parallel_tasks`: one core, or a caller
    that is itself a worker, runs them one after the other), reassembled in the serial order."""
    done = parallel_tasks(attack_tasks(view, truth), 1, cores, name="fl-privtext-attack")
    attacks = {name: done["attribute", name] for name in view.known}
    extra: dict[str, Any] = {}
    if view.config.extra:
        for name in ATTACKS:  # each whole-traffic attack adds its results.json attacks_extra entries
            extra.update(done["extra", name])
        extra["violation"] = bool(any(v.get("violation", False) for v in extra.values() if isinstance(v, dict)))
    return attacks, extra
