"""The untrusted server's task: choose and train the task classifier on the uploads it received, and evaluate it.

Framework-free (numpy, torch, scikit-learn); `fl_privtext.pipeline.train_point` calls it once per seed on what the
server received. ``server.learner`` names the learner (`fl_privtext.server.learners`); ``auto`` picks among those
``server.auto-candidates`` names (centroid, lda, linear by default; the MLP where added) and the constant
predictor by cross-validation on the server's uploads grouped by user
(`fl_privtext.server.selection`). The moment learners use the mechanism's noise law (`fl_privtext.server.noise`)
and, with label RR on, the label-RR matrix. Randomness: the streams ``(seed, "server", ...)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext import constant, metrics, rng
from fl_privtext.bootstrap import counts_bootstrap, user_counts
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ServerConfig
from fl_privtext.learn import MLPConfig, diverged
from fl_privtext.memory import (
    CHUNK_ROWS,
    column_mean,
    distinct,
    drop_dataset_pages,
    is_mapped,
    rows_on_disk,
    take_rows,
)
from fl_privtext.ondevice import is_finite
from fl_privtext.public import PublicSpec, check_public_data, public_features
from fl_privtext.server.learners import LEARNERS, ClassStats, Learner, Linear, label_rr_matrix, make_learner
from fl_privtext.server.noise import NoiseLaw, noise_law
from fl_privtext.server.ondevice_selection import constant_from_labels
from fl_privtext.server.selection import FOLDS, LEARNER_RULE, select
from fl_privtext.server.upload_split import split_uploads

AUTO_DEFAULT = ServerConfig().auto_learners()  # auto's default candidates beside the constant, parsed as the key is
CV_MAX_UPLOADS = 50_000  # auto: the selection's cross-validation reads at most about this many uploads

if TYPE_CHECKING:
    from fl_privtext.client.prepared import Prepared


def server_mlp_config(server: ServerConfig, dim: int) -> MLPConfig:
    """The task MLP; server.hidden = 0 picks the width from the upload width ``dim``: 128 for <= 300, else 768."""
    return server.mlp(hidden=server.hidden or (128 if dim <= 300 else 768))  # standardize from config


def server_inputs(features: np.ndarray, server: ServerConfig) -> np.ndarray:
    """What the task MLP sees of each upload: the upload itself, or (server.center) the upload minus its own mean
    over its coordinates, (N, D) -> (N, D). Post-processing of what was received: no privacy cost."""
    if not server.center:
        return features
    x = np.asarray(features, np.float64)
    return (x - x.mean(axis=1, keepdims=True)).astype(np.float32)


@dataclass(frozen=True)
class Trained:
    """The server's task model of one seed: its per-upload evaluation (``utility``), the model as plain arrays for
    on-device inference (None without a task label) and the majority class of its training uploads."""

    utility: dict[str, Any]
    model: dict[str, np.ndarray] | None = None
    majority_class: int = 0
    # server.select-on = clients: every candidate's exported model (the constant included), for the clients' choice
    candidates: dict[str, dict[str, np.ndarray]] | None = None
    # ... and the server's own estimate of the constant's accuracy (fl_privtext.server.ondevice_selection: not sent)
    constant_estimate: dict[str, Any] | None = None


def train_and_evaluate(prep: Prepared, features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                       seed: int, server: ServerConfig, public: PublicSpec) -> dict[str, Any]:
    """The server trains the task MLP on the uploads of train/aux users and evaluates on test users' uploads."""
    return train_server(prep, features, labels, rows, seed, server, public).utility


def fit_learner(name: str, x: np.ndarray, y: np.ndarray, groups: np.ndarray, *, num_classes: int,
                mechanism: Any, input_dim: int, seed: int, label_epsilon: float = 0.0,
                mlp: dict[str, Any] | None = None, stream: tuple[str, ...] = ("server",),
                input_norm2: float | None = None, norm_source: str = "", centered: bool = False,
                fit_all: dict[str, Learner] | None = None, candidates: Sequence[str] = AUTO_DEFAULT,
                score_all: bool = False) -> tuple[Learner, str, dict[str, dict[str, Any]]]:
    """Fit learner ``name`` (or, for ``auto``, the best of every learner and the constant by cross-validation
    grouped by ``groups``) on uploads ``x`` (N, D) with uploaded labels ``y``. Returns (fitted learner, its name,
    out-of-fold {"accuracy", "log_loss", ...} per candidate, ``{"scored": False, "why"}`` for one the lazy
    selection did not need; empty for an explicit name). ``input_norm2``: E||E[u | x]||^2
    measured on public data named ``norm_source`` (`public_input_norm2`), for the cap mechanisms' noise law;
    ``centered``: the uploads were centred (``server.center``), so only the per-coordinate variance applies.
    ``fit_all`` (auto only): filled with every candidate fitted on all of ``x`` (the chosen one is the same object).
    ``candidates`` (auto only): the learners cross-validated beside the constant (``server.auto-candidates``; the MLP
    only where named, and then ``mlp`` must be given). Auto scores linear and the MLP only where no moment head
    qualifies (`select`, lazy: the same choice; linear's C search too is run only then); ``score_all`` scores every
    candidate all the same, as ``fit_all`` does (every candidate is fitted and exported then: scored first, the
    MLP's generator is drawn in the same order as before, so the exported candidates are unchanged). Where the
    selection read every upload (at most ``CV_MAX_UPLOADS``), a moment winner (or the constant) is fitted from the
    folds' total sums (`select`'s ``totals``): one pass over the uploads, not two, and the explicit learner's model
    up to float rounding (`fl_privtext.server.selection`'s module docstring); on a sample, its own pass (bit for
    bit)."""
    if name != "auto" and name not in LEARNERS:
        raise ValueError(f"learner must be auto or one of {', '.join(LEARNERS)}; got {name!r}.")
    if name == "auto" and "mlp" in candidates and mlp is None:
        raise ValueError("auto with the MLP among its candidates needs its config and generator (mlp={...}).")
    noise = noise_law(mechanism, input_dim, column_mean(x), rng.generator(seed, *stream, "noise"),
                      input_norm2=input_norm2, norm_source=norm_source)
    if centered and noise.moments is not None:  # the exact structure is that of the uploads, not of P u
        noise = NoiseLaw(noise.variance, f"{noise.method} (per-coordinate only: uploads centred by server.center)")
    rr = label_rr_matrix(num_classes, label_epsilon) if label_epsilon > 0 else None

    linear_c: float | None = None
    linear_start: tuple[np.ndarray, np.ndarray] | None = None

    def make(learner: str) -> Learner:
        made = make_learner(learner, num_classes=num_classes, noise=noise, label_rr=rr, seed=seed, mlp=mlp,
                            linear_c=linear_c)
        if isinstance(made, Linear):  # lbfgs starts from the C search's fit (Linear.start): fewer iterations
            made.start = linear_start
        return made

    def maker(learner: str) -> Any:
        return lambda: make(learner)

    scores: dict[str, dict[str, Any]] = {}
    chosen = name
    if name == "auto":
        names = ("constant", *(n for n in candidates if n != "constant"))
        if len(y) > CV_MAX_UPLOADS:  # select on a seeded sample of users: the CV's cost is bounded at any N
            # the distinct users by a sorted copy (`distinct`: np.unique's hash set held ~20 bytes a training
            # upload at its peak, most of it left resident; issue #38), and no (uploads,) int64 arange beside it
            users = distinct(groups)
            share = CV_MAX_UPLOADS / len(y)
            keep = rng.generator(seed, *stream, "cv-users").choice(users, max(2, int(len(users) * share)),
                                                                   replace=False)
            # the sampled users' uploads, a chunk of uploads at a time: np.isin over every training upload at once
            # held ~8 bytes an upload of temporaries (offsets, range masks; issue #38)
            member = np.empty(len(groups), bool)
            for a in range(0, len(groups), CHUNK_ROWS * 16):
                member[a : a + CHUNK_ROWS * 16] = np.isin(groups[a : a + CHUNK_ROWS * 16], keep)
            cv = np.flatnonzero(member)
            del member
        else:
            cv = np.arange(len(y))
        every = len(cv) == len(y)  # the selection reads every upload: its folds' sums are the winner's too
        # the selection's uploads in memory (at most ~CV_MAX_UPLOADS of them; every one: x itself where in memory)
        x_cv = x if every and not is_mapped(x) else take_rows(x, cv)
        y_cv = np.asarray(y[cv], np.int64)  # the labels as the selection has always seen them (held in int8)

        def choose_c() -> None:  # Linear's L2 strength: chosen once on the selection's folds by user, then fixed
            nonlocal linear_c, linear_start
            chooser = Linear(num_classes=num_classes, seed=seed)
            linear_c, linear_start = chooser.choose_c(x_cv, y_cv, groups[cv], FOLDS), chooser.path_start

        totals: dict[int, ClassStats] = {}
        chosen, scores = select({n: maker(n) for n in names}, x_cv, y_cv, groups[cv], label_rr=rr, law=noise,
                                num_classes=num_classes, score_all=score_all or fit_all is not None,
                                prepare={"linear": choose_c}, totals=totals)
        if linear_c is not None:  # linear was scored (lazy selection: only where no moment head qualified)
            scores["linear"]["C"] = linear_c
        if fit_all is not None:
            fit_all.update({n: maker(n)().fit(x, y) for n in names})
            return fit_all[chosen], chosen, scores
        winner = maker(chosen)()
        fit_stats = getattr(winner, "fit_stats", None)
        if every and fit_stats is not None and num_classes in totals:
            # one pass, not two: the selection's folds summed every upload, so the winner (constant, centroid,
            # lda) fits from their total; the explicit learner's single pass sums the same uploads in another
            # order, so the two models agree to float rounding (~1e-12 relative), not bit for bit
            # (tests/server/test_lazy_selection.py)
            return fit_stats(totals[num_classes]), chosen, scores
    elif name == "linear":  # the L2 strength by folds over users, as auto chooses it
        chooser = Linear(num_classes=num_classes, seed=seed)
        linear_c, linear_start = chooser.choose_c(x, y, groups, FOLDS), chooser.path_start
    return maker(chosen)().fit(x, y), chosen, scores


def predict_rows(model: Learner, features: np.ndarray, index: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """The class ``model`` gives each upload ``features[index]`` (argmax of its logits), ``chunk`` uploads at a
    time (default `fl_privtext.memory.CHUNK_ROWS`; `take_rows`: a mapped ``features`` keeps no page resident).
    Each upload's logits are its own row of the product, so the classes do not depend on the chunk. Held in int8
    up to 127 classes (int64 beyond): the same values as argmax's int64, written into one array as they come
    (issue #38: the chunks' int64 parts and their concatenation were 16 bytes a test upload)."""
    step = chunk or CHUNK_ROWS
    out = np.zeros(0, np.int64)
    for a in range(0, len(index), step):
        logits = model.logits(take_rows(features, index[a : a + step]))
        if a == 0:
            out = np.empty(len(index), np.int8 if logits.shape[1] <= 127 else np.int64)
        out[a : a + len(logits)] = logits.argmax(axis=1)
    return out


def public_input_norm2(public: PublicSpec, mechanism: Any) -> tuple[float | None, str]:
    """E||E[u | x]||^2 over ``privacy.public-data`` through the mechanism's own (public) projection and clipping,
    for the cap mechanisms under the round map (whose uploads do not reveal the inputs' norms,
    `fl_privtext.server.noise`); (None, "") when not applicable or no public data is configured. The public
    rows are read and extracted (`fl_privtext.public.public_features`) as `PublicSpec` names them."""
    mo = mechanism.noise_moments() if hasattr(mechanism, "noise_moments") else None
    if mo is None or mo.kind != "cap" or mo.sphere_map != "round" or not public.privacy.public_data.strip():
        return None, ""
    m = np.asarray(mechanism.expected(public_features(public)), np.float64)
    return float(np.einsum("ij,ij->i", m, m).mean()), f"{check_public_data(public)!r} ({len(m)} rows)"


def train_server(prep: Prepared, features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                 seed: int, server: ServerConfig, public: PublicSpec, *, input_dim: int | None = None,
                 mechanism: Any = None, seen: np.ndarray | None = None,
                 spill: str | os.PathLike[str] | None = None) -> Trained:
    """`train_and_evaluate`, also keeping the model (for on-device inference, `fl_privtext.ondevice`).
    ``mechanism`` (default: the configured one for inputs of width ``input_dim``) gives the noise law.
    ``seen``: the upload ids as the server saw them, default ``rows``; the user pseudonym the server attaches to
    each (its cross-validation folds, `fl_privtext.server.pseudonyms.server_users`) is the record's account, or
    under federation.shuffle one fresh pseudonym per report.
    ``server.select-on = clients``: every candidate of auto is also fitted on all training uploads and exported
    (``Trained.candidates``), for the clients' choice (`fl_privtext.server.ondevice_selection`). Reads the
    server section and the public one (`PublicSpec`): the configured mechanism
    (`fl_privtext.client.upload.mechanism_for`), privacy.label-epsilon, the public data (`public_input_norm2`)
    and run.progress (the MLP's progress bar).

    Memory (issue #38): uploads on disk (``features`` a memory map: the Flower path's `Spill`) stay there. The
    training uploads are copied into another file in ``spill`` (`fl_privtext.memory.rows_on_disk`; None: the
    temporary folder), which the moment learners sum in chunks (`fl_privtext.server.learners.ClassStats.raw`),
    dropping each chunk's pages; the test uploads are classified `fl_privtext.memory.CHUNK_ROWS` at a time. An
    in-memory ``features`` (the plain loop) is indexed in memory. The same bytes reach the learners either way,
    summed in the same order (`fl_privtext.memory.column_mean`), so the results are identical. Which uploads
    train and test, the training labels and pseudonyms and the test uploads' record ids come from one chunked
    pass (`fl_privtext.server.upload_split`, int32 where the values fit); the training positions go once the
    training copy is written, before the learners' pass."""
    if len(prep.ds.label_names) == 0:
        return Trained({"available": False, "reason": f"dataset {prep.ds.name!r} has no task label (attacker-only)"})
    split = split_uploads(prep, rows, labels, seen)
    drop_dataset_pages(prep.ds)  # the roles and users it read (`fl_privtext.data.TextDataset.hold`), before the pass
    train_at, test_at, y_train, train_groups, test_rows = (split.train, split.test, split.labels, split.groups,
                                                           split.test_rows)
    del split  # each column goes when its last use is past
    if not len(train_at) or not len(test_at):
        raise ValueError("Need uploads from both training and test users; check data.test-frac and the dataset size.")
    k = len(prep.ds.label_names)
    features = server_inputs(features, server)
    if mechanism is None:
        dim = input_dim or (prep.features.shape[1] if prep.features is not None else features.shape[1])
        mechanism = mechanism_for(public, dim)
    input_dim = input_dim or int(getattr(mechanism, "dim", None) or features.shape[1])
    mlp = {"config": server_mlp_config(server, features.shape[1]),
           "generator": rng.torch_generator(seed, "server"),
           "progress": "server: task MLP" if public.progress else None}
    norm2, norm_source = public_input_norm2(public, mechanism) if not server.center else (None, "")
    centered = server.center
    fitted: dict[str, Learner] = {}
    label_epsilon = public.privacy.label_epsilon
    x_train = rows_on_disk(features, train_at, spill) if is_mapped(features) else take_rows(features, train_at)
    del train_at  # in the copy now: not held through the learners' pass
    model, chosen, candidates = fit_learner(
        server.learner, x_train, y_train, train_groups, num_classes=k,
        mechanism=mechanism, input_dim=input_dim, seed=seed, label_epsilon=label_epsilon, mlp=mlp,
        input_norm2=norm2, norm_source=norm_source, centered=centered,
        fit_all=fitted if server.select_on == "clients" else None, candidates=server.auto_learners())
    del x_train  # a map: its file (already unlinked) goes with it
    train_users = len(distinct(train_groups)) if fitted else 0  # the clients' prior (below) reads only this
    del train_groups
    pred = predict_rows(model, features, test_at)
    # evaluated against the true labels of test users, as the codes are held (narrow: no int64 copy; issue #38)
    truth = prep.ds.label_codes[test_rows]
    out: dict[str, Any] = {
        "available": True,
        "learner": chosen,  # server.learner, or what auto chose
        # auto: out-of-fold accuracy and log-loss per candidate on the server's uploads, folds by user (selection.py)
        "candidates": candidates,
        **({"learner_rule": LEARNER_RULE} if server.learner == "auto" else {}),
        "accuracy": metrics.accuracy(truth, pred),
        "macro_f1": metrics.macro_f1(truth, pred, k),
        "majority_baseline": metrics.majority_baseline(y_train, truth),
        "modal_prediction_share": constant.modal_share(pred),  # 1.0: the task model predicts one class only
        "num_train_uploads": len(y_train),
        "num_test_uploads": len(test_at),
        "train_steps": int(getattr(getattr(model, "model", None), "steps", 0)),  # MLP: SGD steps (server.max-steps)
        "diverged": [r for r in [diverged(getattr(getattr(model, "model", None), "losses", []))] if r],
    }
    # issue #37: the interval over test users (each with all its uploads; fl_privtext.bootstrap), the referee's
    # scoring like the accuracy above; ``_per_user`` (internal) lets the report pool seeds
    per_user = user_counts(pred == truth, prep.ds.user_index.reshape(-1)[test_rows])
    out["ci_low"], out["ci_high"] = counts_bootstrap([per_user], rng.generator(seed, "referee", "per-upload"))
    out["_per_user"] = per_user
    record = getattr(model, "record", None)
    if record:  # moment learners: the noise law, its assumption, the clean variance used
        out["clean_head"] = record
    fairness: dict[str, Any] = {}
    for spec in prep.ds.attributes:
        z = prep.ds.attribute_codes(spec.name)[test_rows]  # held narrow: the test uploads' values only
        if spec.kind == "multilabel":
            per = {}
            for j, cls in enumerate(spec.classes):
                g = z[:, j].astype(bool)
                if g.any() and (~g).any():
                    per[cls] = {"present": metrics.accuracy(truth[g], pred[g]),
                                "absent": metrics.accuracy(truth[~g], pred[~g])}
                    per[cls]["gap"] = abs(per[cls]["present"] - per[cls]["absent"])
            fairness[spec.name] = {"per_class": per, "gap": max((v["gap"] for v in per.values()), default=0.0)}
        else:  # by code (no (test uploads,) object array of names): the same groups, in their names' order
            per_group = metrics.group_accuracy_by_code(truth, pred, z, spec.classes)
            fairness[spec.name] = {"per_group": per_group, "gap": metrics.fairness_gap(per_group)}
    out["fairness"] = fairness
    def export(m: Learner) -> dict[str, np.ndarray]:
        e = m.export()  # a dict of arrays (fl_privtext.server.learners: the exported format)
        if server.center:  # the clients must centre E[upload | x] as the server centred the uploads
            e["center"] = np.ones(1, np.float32)
        return e

    exports = {n: export(m) for n, m in fitted.items()}  # server.select-on = clients: every candidate
    sendable: dict[str, dict[str, np.ndarray]] | None = None
    if exports:  # a head whose float32 export overflows would have every client refuse the whole select request
        sendable = {n: e for n, e in exports.items() if is_finite(e)}
        out["on_device_candidates_dropped"] = sorted(set(exports) - set(sendable))  # not finite in float32
    prior = None
    if sendable is not None:  # the clients choose: the constant is scored from the labels the server holds
        prior = constant_from_labels(y_train, k, label_epsilon, train_users)
    return Trained(out, exports.get(chosen) or export(model), int(metrics.majority_class(y_train)), sendable, prior)
