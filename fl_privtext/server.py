"""The untrusted server's task: train the task classifier on the uploads it received and evaluate it.

Framework-free (numpy and torch); `fl_privtext.pipeline.evaluate_point` calls it once per seed on what the server
received. Randomness: the stream ``(seed, "server")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_privtext import constant, metrics, rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.learn import MLPConfig, diverged, train_mlp

if TYPE_CHECKING:
    from fl_privtext.pipeline import Prepared


def server_mlp_config(cfg: ExperimentConfig, dim: int) -> MLPConfig:
    """The task MLP; server.hidden = 0 picks the width from the upload width ``dim``: 128 for <= 300, else 768."""
    return cfg.server.mlp(hidden=cfg.server.hidden or (128 if dim <= 300 else 768))  # standardize from config


def server_inputs(features: np.ndarray, cfg: ExperimentConfig) -> np.ndarray:
    """What the task MLP sees of each upload: the upload itself, or (server.center) the upload minus its own mean
    over its coordinates, (N, D) -> (N, D). Post-processing of what was received: no privacy cost."""
    if not cfg.server.center:
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


def train_and_evaluate(prep: Prepared, features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                       seed: int, cfg: ExperimentConfig) -> dict[str, Any]:
    """The server trains the task MLP on the uploads of train/aux users and evaluates on test users' uploads."""
    return train_server(prep, features, labels, rows, seed, cfg).utility


def train_server(prep: Prepared, features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                 seed: int, cfg: ExperimentConfig) -> Trained:
    """`train_and_evaluate`, also keeping the model (for on-device inference, `fl_privtext.ondevice`)."""
    if len(prep.ds.label_names) == 0:
        return Trained({"available": False, "reason": f"dataset {prep.ds.name!r} has no task label (attacker-only)"})
    roles = prep.roles[rows]
    tr, te = roles != "test", roles == "test"
    if not tr.any() or not te.any():
        raise ValueError("Need uploads from both training and test users; check data.test-frac and the dataset size.")
    k = len(prep.ds.label_names)
    features = server_inputs(features, cfg)
    model = train_mlp(features[tr], labels[tr], num_classes=k, config=server_mlp_config(cfg, features.shape[1]),
                      generator=rng.torch_generator(seed, "server"),
                      progress="server: task MLP" if cfg.run.progress else None)
    pred = model.predict(features[te])
    truth = prep.ds.labels[rows[te]]  # evaluated against the true labels of test users
    out: dict[str, Any] = {
        "available": True,
        "accuracy": metrics.accuracy(truth, pred),
        "macro_f1": metrics.macro_f1(truth, pred, k),
        "majority_baseline": metrics.majority_baseline(labels[tr], truth),
        "modal_prediction_share": constant.modal_share(pred),  # 1.0: the task model predicts one class only
        "num_train_uploads": int(tr.sum()),
        "num_test_uploads": int(te.sum()),
        "train_steps": int(getattr(model, "steps", 0)),  # SGD steps taken (server.max-steps caps them)
        "diverged": [r for r in [diverged(getattr(model, "losses", []))] if r],  # warnings in the report
    }
    fairness: dict[str, Any] = {}
    for spec in prep.ds.attributes:
        z = prep.ds.attribute(spec.name)[rows[te]]
        if spec.kind == "multilabel":
            per = {}
            for j, cls in enumerate(spec.classes):
                g = z[:, j].astype(bool)
                if g.any() and (~g).any():
                    per[cls] = {"present": metrics.accuracy(truth[g], pred[g]),
                                "absent": metrics.accuracy(truth[~g], pred[~g])}
                    per[cls]["gap"] = abs(per[cls]["present"] - per[cls]["absent"])
            fairness[spec.name] = {"per_class": per, "gap": max((v["gap"] for v in per.values()), default=0.0)}
        else:
            names = np.asarray(spec.classes, dtype=object)[z]
            per_group = metrics.group_accuracy(truth, pred, names)
            fairness[spec.name] = {"per_group": per_group, "gap": metrics.fairness_gap(per_group)}
    out["fairness"] = fairness
    values, counts = np.unique(labels[tr], return_counts=True)
    exported = model.export()
    if cfg.server.center:  # the clients must centre E[upload | x] as the server centred the uploads
        exported["center"] = np.ones(1, np.float32)
    return Trained(out, exported, int(values[counts.argmax()]))
