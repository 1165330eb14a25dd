"""On-device inference: the server's task model, trained on noisy uploads, applied by the clients to clean features.

The second utility protocol (the first, per-upload inference, has the server classify noisy test uploads; under LDP
its accuracy is itself capped by the noise). In federated deployments the model is shipped to devices and applied
to their own data, so the utility that matters is often this one.

Protocol (`fl_privtext.federation` sends it through Flower; `fl_privtext.pipeline.run_plain` runs it in-process):
1. The server trains its model on the uploads (as for per-upload inference) and sends its weights (`MLPClassifier.
   export`) to every client holding test users, with the test record ids that client uploaded.
2. The client maps each clean record x to E[upload | x] (`Mechanism.expected`): the clipped / normalised /
   projected x for the unbiased mechanisms (PrivUnitG, PrivUnit, Duchi, Gaussian, Laplace, multivariate Laplace),
   C E[cos theta] x/||x|| for Purkayastha, q + (p - q) * bits for the bit mechanisms. The model was trained on
   noisy samples around this point, so this is the input it was fitted for ("unbiased decoding" on the client);
   the moment learners (`fl_privtext.server.learners`: centroid, lda) export their clean head, fitted with the
   errors-in-variables correction from the mechanism's noise law.
3. The client returns only its confusion counts (k x k, true label x prediction) over those records.

What the counts reveal: they are computed from clean labels and features and are not protected by the mechanism
(listed under ``privacy.composition.also_released``); `server.on-device = false` turns the protocol off.

Light by design (numpy only): it runs inside the ClientApp, which imports no torch.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fl_privtext.metrics import confusion, macro_f1_from_confusion

__all__ = ["MODEL_KEYS", "check_model", "confusion", "is_finite", "mlp_logits", "on_device_counts", "summarize"]

MODEL_KEYS = ("mean", "std")  # plus weight_i / bias_i for i = 0 .. layers-1; optional "center" (server.center)
APPLIED_TO = ("E[upload | x] on the client (the mechanism's noise-free mean: the clipped / normalised input for "
              "unbiased mechanisms); the server's learner is named in utility.learner")


def check_model(params: dict[str, np.ndarray]) -> int:
    """Number of linear layers of an exported model; ValueError when the arrays do not form an MLP."""
    missing = [k for k in MODEL_KEYS if k not in params]
    layers = 0
    while f"weight_{layers}" in params and f"bias_{layers}" in params:
        layers += 1
    if missing or layers == 0:
        raise ValueError(f"An exported model needs {list(MODEL_KEYS)} and weight_i/bias_i for i = 0..; got keys "
                         f"{sorted(params)}.")
    width = params["mean"].shape[0]
    for i in range(layers):
        w, b = params[f"weight_{i}"], params[f"bias_{i}"]
        if w.ndim != 2 or w.shape[1] != width or b.shape != (w.shape[0],):
            raise ValueError(f"Layer {i} of the exported model has shape {w.shape} / {b.shape}; expected "
                             f"(out, {width}) / (out,).")
        width = w.shape[0]
    return layers


def is_finite(params: dict[str, np.ndarray]) -> bool:
    """Whether every value of an exported model is finite (the client refuses any other; the server sends none)."""
    return all(np.isfinite(np.asarray(v, np.float64)).all() for v in params.values())


def mlp_logits(params: dict[str, np.ndarray], x: np.ndarray, batch_size: int = 8192) -> np.ndarray:
    """Logits of an exported MLP (standardise, linear layers with ReLU between them) on (N, D) inputs. A model
    with a nonzero ``center`` entry (server.center) first subtracts each input's own mean over its coordinates; that
    map is linear, so applied to E[upload | x] it equals E[centred upload | x]."""
    layers = check_model(params)
    mean, std = params["mean"].astype(np.float32), params["std"].astype(np.float32)
    if x.ndim != 2 or x.shape[1] != mean.shape[0]:
        raise ValueError(f"The model expects inputs of width {mean.shape[0]}, got an array of shape {x.shape}.")
    center = bool(np.any(params.get("center", 0)))
    out = []
    for s in range(0, len(x), batch_size):
        h = np.asarray(x[s:s + batch_size], np.float32)
        if center:
            h = h - h.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        h = (h - mean) / std
        for i in range(layers):
            h = h @ params[f"weight_{i}"].T + params[f"bias_{i}"]
            if i < layers - 1:
                np.maximum(h, 0.0, out=h)
        out.append(h)
    width = params[f"bias_{layers - 1}"].shape[0]
    return np.concatenate(out) if out else np.zeros((0, width), np.float32)


def on_device_counts(features: np.ndarray, labels: np.ndarray, mechanism: Any,
                     params: dict[str, np.ndarray], num_classes: int) -> np.ndarray:
    """A client's side: clean features (N, dim) of its test records and their labels -> confusion counts of the
    server's model applied to E[upload | x]."""
    if len(features) == 0:
        return np.zeros((num_classes, num_classes), np.int64)
    pred = mlp_logits(params, mechanism.expected(features)).argmax(axis=1)
    return confusion(labels, pred, num_classes)


def summarize(counts: Sequence[np.ndarray], majority_class: int, clients: int) -> dict[str, Any]:
    """The server's view: sum the clients' confusion counts into accuracy, macro-F1 and the majority baseline
    (always predicting the class most frequent in the server's training uploads)."""
    total = np.sum(np.stack(list(counts)), axis=0) if counts else np.zeros((1, 1), np.int64)
    n = int(total.sum())
    if n == 0:
        raise ValueError("On-device evaluation: no test client reported any record.")
    return {
        "available": True,
        "accuracy": float(np.trace(total)) / n,
        "macro_f1": macro_f1_from_confusion(total),
        "majority_baseline": float(total[majority_class].sum()) / n,
        "num_test_records": n,
        "clients": int(clients),
        "applied_to": APPLIED_TO,
    }


def summarize_private(replies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The server's view of the clients' randomized-response answers (`fl_privtext.client.ondevice`): each client's
    debiased accuracy, weighted by its record count; the noise's standard deviation and a 95% CI (normal
    approximation: noise of the randomized response plus the binomial sampling of the test records). Clients that
    refused are listed; none answering gives ``available = False``."""

    answers = [r for r in replies if "answer" in r]
    refused = [{"node": int(r["node"]), "reason": str(r["refused"])} for r in replies if "refused" in r]
    if not answers:
        return {"available": False, "reason": "every test client refused on-device evaluation", "refusals": refused}
    n = np.array([_scalar(a["answer"]["n"]) for a in answers], np.float64)
    est_sd = [debiased_accuracy(_scalar(a["answer"]["noisy-correct"]), _scalar(a["answer"]["n"]),
                                float(_scalar(a["answer"]["count-epsilon"]))) for a in answers]
    total = float(n.sum())
    # exact sums (math.fsum): the result does not depend on the order in which the replies arrived
    acc = math.fsum(float(ni) * e for ni, (e, _) in zip(n, est_sd, strict=True)) / total
    noise_sd = math.sqrt(math.fsum((float(ni) * sd) ** 2 for ni, (_, sd) in zip(n, est_sd, strict=True))) / total
    sampling_sd = float(np.sqrt(max(min(acc, 1.0), 0.0) * (1 - max(min(acc, 1.0), 0.0)) / total))
    half = 1.96 * float(np.hypot(noise_sd, sampling_sd))
    # clipped to [0, 1] (as `fl_privtext.metrics.clip_interval`; this module stays numpy-only): the normal band
    # around a debiased estimate can pass either end, and no accuracy lies there (issue #36: [-0.009, 0.545])
    low, high = min(max(acc - half, 0.0), 1.0), min(max(acc + half, 0.0), 1.0)
    return {
        "available": True, "accuracy": acc, "accuracy_noise_std": noise_sd, "ci95": [low, high],
        "mechanism": "binary randomized response on each test record's correctness (client.count-epsilon)",
        "count_epsilon": sorted({float(_scalar(a["answer"]["count-epsilon"])) for a in answers}),
        "num_test_records": int(total), "clients": len(answers), "refusals": refused, "applied_to": APPLIED_TO,
    }


def model_digest(model: dict[str, np.ndarray] | Sequence[dict[str, np.ndarray]]) -> np.ndarray:
    """(16,) uint8: a digest of the model(s) an on-device answer is about (names, dtypes, shapes and values). The
    client puts it in its answer (the server sent the model: this tells it nothing new), so that an answer replayed
    for another model is recognised (`stale_replies`)."""
    h = hashlib.sha256()
    for m in ([model] if isinstance(model, dict) else list(model)):
        for name in sorted(m):
            a = np.ascontiguousarray(m[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return np.frombuffer(h.digest()[:16], np.uint8).copy()


def stale_replies(replies: Sequence[dict[str, Any]], sent: dict[str, np.ndarray] | Sequence[dict[str, np.ndarray]]
                  ) -> list[int]:
    """The nodes whose answer is about another model than ``sent``: a client answers once per (point, seed, stage)
    and replays that answer to a later request whatever model it carries (`fl_privtext.client.guard`), e.g. a sweep's
    point that differs from an earlier one only in the server's settings. Such an answer measures the earlier model;
    the server leaves it out of its estimate. Answers without a digest (older clients) are taken as they are."""
    digest = model_digest(sent)
    return [int(r["node"]) for r in replies
            if "answer" in r and "model" in r["answer"] and not np.array_equal(np.asarray(r["answer"]["model"]), digest)]


def _scalar(a: Any) -> Any:
    """The one value of a (1,)-shaped answer array."""
    return np.asarray(a).reshape(-1)[0].item()


def keep_probability(epsilon: float) -> float:
    """Binary randomized response at ``epsilon``: the probability that a client's bit is reported as it is."""
    return math.exp(epsilon) / (1.0 + math.exp(epsilon))


def debiased_accuracy(noisy_correct: int, n: int, count_epsilon: float) -> tuple[float, float]:
    """(unbiased accuracy estimate, its standard deviation from the randomized response) for n records."""
    p = keep_probability(count_epsilon)
    if n <= 0:
        raise ValueError("debiased_accuracy needs n >= 1 records.")
    est = (noisy_correct / n - (1 - p)) / (2 * p - 1)
    return est, math.sqrt(p * (1 - p) / n) / (2 * p - 1)
