"""Phase A on the ClientApp: the bodies of Flower's ``@app.train`` / ``@app.evaluate`` handlers
(`fl_privtext.federation.train_handlers` registers them), and the trained encoder in the Phase B upload
(``encoded_client_data``).

A train message carries the global model's trainable parameters (ArrayRecord ``arrays``) and one ConfigRecord
``config``: the flat experiment config plus what the strategy adds (``server-round``; ``proximal-mu`` for FedProx;
``clipping_norm`` under DP-FedAvg). The client trains on its own training users, computing the defence from its
own z, and replies with its parameters (clipped to ``clipping_norm`` around the global model under DP-FedAvg) and
a MetricRecord: ``weight`` (its example count; 1 under DP-FedAvg, whose noise is calibrated to the unweighted
mean), ``num-examples``, losses. Nothing else leaves: no text, no features, no z, no labels.

This module loads torch (the encoders); `train_handlers` imports it on a Phase A message only, so the upload
path keeps its light start-up (numpy, flwr, privacy).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fl_privtext.client import (
    Refused,
    client_seed_from,
    phase_a_allowed,
    policy_from,
    release_phase_a,
    state_dir_from,
)
from fl_privtext.client.gate import sanitize
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import (
    TrainData,
    build_model,
    client_generator,
    defense_mechanism,
    encode,
    load_state,
    local_train,
    trainable_state,
)
from fl_privtext.encoders import evaluate as evaluate_model
from fl_privtext.encoders.model import spec_from
from fl_privtext.encoders.train import phase_a_rows, resolve_device
from fl_privtext.federation.client_data import prepared
from fl_privtext.federation.replies import array_digest, ledger_record, prep_key
from fl_privtext.public import PublicSpec

_SECTIONS = {f.name for f in dataclasses.fields(ExperimentConfig)}


def experiment_config(config: ConfigRecord) -> ExperimentConfig:
    """The experiment config inside a strategy's ConfigRecord (Flower's own keys are left out)."""
    try:
        return ExperimentConfig.from_flat({k: v for k, v in config.items() if k.partition(".")[0] in _SECTIONS})
    except (ValueError, TypeError) as exc:
        raise Refused("malformed request", f"the request's config: {exc}") from None


@functools.lru_cache(maxsize=2)
def train_data(key: tuple) -> tuple[Any, Any]:
    # Per actor: the dataset (texts, labels, z), roles, shards and cached features, and the TrainData view of it.
    cfg = ExperimentConfig.from_flat(dict(key))
    prep = prepared(cfg, "cached")
    if prep.features is None and cfg.train.encoder == "trunk":
        prep = prepared(cfg, "extract")
    return prep, TrainData.from_prepared(prep)


@functools.lru_cache(maxsize=2)
def _model(key: tuple, train_items: tuple) -> Any:
    # Built once per actor; every message loads the exchanged (trainable) parameters into it.
    cfg = ExperimentConfig.from_flat(dict(train_items))
    prep, _ = train_data(key)
    model = build_model(cfg.train, spec_from(prep), torch.Generator().manual_seed(0))  # overwritten on load
    return model.to(resolve_device(cfg.train.device))


def setup_model(cfg: ExperimentConfig, arrays: ArrayRecord) -> tuple[Any, Any, Any]:
    key = prep_key(cfg)
    prep, data = train_data(key)
    train_items = tuple(sorted((k, v) for k, v in cfg.to_flat().items() if k.startswith("train.")))
    model = _model(key, train_items)
    load_state(model, {k: a.numpy() for k, a in arrays.items()})
    return prep, data, model


def clip_update(new: list[np.ndarray], old: list[np.ndarray], clip: float) -> list[np.ndarray]:
    """``old + (new - old) * min(1, clip / ||new - old||_2)``, the norm over every array together (McMahan et al.
    2018, DP-FedAvg's per-client clipping)."""
    deltas = [np.asarray(n, np.float64) - np.asarray(o, np.float64) for n, o in zip(new, old, strict=True)]
    norm = float(np.sqrt(sum(float(np.sum(d * d)) for d in deltas)))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return [(np.asarray(o, np.float64) + d * scale).astype(np.asarray(n).dtype) for n, o, d in zip(new, old, deltas,
                                                                                                     strict=True)]


def client_index(context: Context, cfg: ExperimentConfig) -> int:
    client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    if int(context.node_config["num-partitions"]) != cfg.federation.num_clients:  # type: ignore[arg-type]
        raise ValueError("Start the federation with as many SuperNodes as federation.num-clients.")
    return client


def _clear_release_refused(kind: str, cfg: ExperimentConfig) -> Refused | None:
    """A refusal for a Phase A message in the clear under ``train.secagg`` with ``train.dp-mode = client``: there
    the client's guarantee against the server is the central epsilon of the noisy secure sums (its ledger charges
    that, `fl_privtext.federation.secagg_train`), so neither a plain update nor per-client validation metrics may
    leave in the clear (they would be unbounded releases outside it)."""
    if cfg.train.secagg and cfg.train.dp_mode == "client":
        what = "a Phase A update in the clear" if kind == "train" else "Phase A validation metrics in the clear"
        return Refused("clear release under secure aggregation", f"{what} under train.secagg = true, train.dp-mode = client (only noisy secure sums leave "
                       f"this client in that mode)")
    return None


def _guarded(kind: str, msg: Message, context: Context, cfg: ExperimentConfig, users: np.ndarray, rnd: int,
             compute: Any) -> Message:
    """A Phase A reply released through the client's policy and ledger (charged inf per user concerned: the server
    sees updates and metrics in the clear); a refusal is an error reply."""
    nc = dict(context.node_config)
    request = experiment_config(msg.content.config_records["config"])
    digest = f"{rnd}:{array_digest(msg.content.array_records['arrays'])}"
    answer, charged = release_phase_a(kind, users, request, int(nc["partition-id"]), rnd, digest,  # type: ignore[arg-type]
                                      compute, policy=policy_from(nc, dict(context.run_config)), state_dir=state_dir_from(nc))
    metrics: dict[str, Any] = {k.removeprefix("metric:"): float(v) for k, v in answer.items()
                               if k.startswith("metric:")}
    records: dict[str, Any] = {"metrics": MetricRecord(metrics), "ledger": ledger_record(charged)}
    arrays = {k.removeprefix("array:"): v for k, v in answer.items() if k.startswith("array:")}
    if arrays:
        records["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(v, np.float32)) for k, v in arrays.items()})
    return Message(RecordDict(records), reply_to=msg)


def train(msg: Message, context: Context, defend: bool = True) -> Message:
    """One round of local training on this client's training users (the defence computed from its own z)."""
    config = msg.content.config_records["config"]
    cfg = experiment_config(config)
    client = client_index(context, cfg)
    rnd = int(config["server-round"])  # type: ignore[arg-type]
    clip = config.get("clipping_norm")
    if defend:  # Phase A's DP settings are the client's own: the clipping is its policy's, never the server's
        if (no := _clear_release_refused("train", cfg)) is not None:
            raise no
        own = phase_a_allowed(policy_from(dict(context.node_config), dict(context.run_config)), cfg).config(cfg).train.dp_clip
        if clip is not None and float(clip) != own:  # type: ignore[arg-type]
            raise Refused("policy mismatch", f"clipping_norm = {clip!r} requested, this client's policy clips to "
                                             f"train.dp-clip = {own}")
        clip = own if own > 0 else None

    def compute() -> dict[str, np.ndarray]:
        arrays = msg.content.array_records["arrays"]
        prep, data, model = setup_model(cfg, arrays)
        rows, _ = phase_a_rows(prep, cfg.train, cfg.run.seed, client)
        stats = local_train(model, data, rows, cfg.train,
                            client_generator(client_seed_from(dict(context.node_config)), client, rnd, "fit"),
                            mechanism=defense_mechanism(cfg.train, PublicSpec.of(cfg), model.out_dim),
                            proximal_mu=float(config.get("proximal-mu", 0.0)))  # type: ignore[arg-type]
        state = trainable_state(model)
        new = [state[k] for k in arrays]
        if not all(np.isfinite(np.asarray(a)).all() for a in new):  # from the server's weights: never an error
            new = [np.asarray(a.numpy()) for a in arrays.values()]  # the zero update, as a whole (gate.sanitize)
        if clip is not None:  # DP-FedAvg: clip this client's update (what Flower's fixedclipping_mod does)
            new = clip_update(new, [a.numpy() for a in arrays.values()], float(clip))  # type: ignore[arg-type]
        metrics: dict[str, Any] = {**stats, "weight": 1.0 if clip is not None else float(len(rows)),
                                   "num-examples": float(len(rows))}
        return {**{f"array:{k}": np.asarray(v, np.float32) for k, v in zip(arrays.keys(), new)},
                **{f"metric:{k}": np.array(float(v)) for k, v in metrics.items()}}

    if not defend:  # the old behaviour: whatever the server asks, nothing charged
        answer = compute()
        out = ArrayRecord({k.removeprefix("array:"): Array(np.ascontiguousarray(v)) for k, v in answer.items()
                           if k.startswith("array:")})
        metrics: dict[str, Any] = {k.removeprefix("metric:"): float(v) for k, v in answer.items()
                                   if k.startswith("metric:")}
        return Message(RecordDict({"arrays": out, "metrics": MetricRecord(metrics)}), reply_to=msg)
    prep, _ = train_data(prep_key(cfg))
    rows, _ = _phase_a_rows(prep, cfg, client)
    return _guarded("train", msg, context, cfg, prep.ds.user_index[rows], rnd, compute)


def _phase_a_rows(prep: Any, cfg: ExperimentConfig, client: int) -> Any:
    return phase_a_rows(prep, cfg.train, cfg.run.seed, client)


def evaluate(msg: Message, context: Context, defend: bool = True) -> Message:
    """Federated evaluation on this client's held-out validation users (model selection)."""
    config = msg.content.config_records["config"]
    cfg = experiment_config(config)
    client = client_index(context, cfg)
    rnd = int(config["server-round"])  # type: ignore[arg-type]

    def compute() -> dict[str, np.ndarray]:
        prep, data, model = setup_model(cfg, msg.content.array_records["arrays"])
        _, rows = _phase_a_rows(prep, cfg, client)
        stats = evaluate_model(model, data, rows, cfg.train,
                               client_generator(client_seed_from(dict(context.node_config)), client, rnd,
                                                "evaluate"),
                               mechanism=defense_mechanism(cfg.train, PublicSpec.of(cfg), model.out_dim))
        return {f"metric:{k}": np.array(float(v)) for k, v in {**stats, "weight": float(len(rows))}.items()}

    if not defend:
        metrics_only: dict[str, Any] = {k.removeprefix("metric:"): float(v) for k, v in compute().items()}
        return Message(RecordDict({"metrics": MetricRecord(metrics_only)}), reply_to=msg)
    if (no := _clear_release_refused("evaluate", cfg)) is not None:
        raise no
    phase_a_allowed(policy_from(dict(context.node_config), dict(context.run_config)), cfg)
    prep, _ = train_data(prep_key(cfg))
    _, rows = _phase_a_rows(prep, cfg, client)
    return _guarded("evaluate", msg, context, cfg, prep.ds.user_index[rows], rnd, compute)


class _EncodedFeatures:
    """Stands in for ``ClientData.features``: indexing with row ids runs the trained encoder on those rows."""

    def __init__(self, model: Any, data: Any, cfg: ExperimentConfig):
        self.model, self.data, self.cfg = model, data, cfg

    def __getitem__(self, rows: Any) -> np.ndarray:
        # the encoder is the server's: a non-finite output is replaced, never an error (fl_privtext.client.gate)
        return sanitize(encode(self.model, self.data, np.asarray(rows, np.int64), self.cfg.train))


def encoded_client_data(data: Any, msg: Message, cfg: ExperimentConfig) -> Any:
    """The client's data with the Phase A encoder's output r(x) in place of the frozen features (Phase B)."""
    if cfg.privacy.mu > 0:
        raise ValueError("Word dropout (privacy.mu > 0) with a Phase A encoder is not supported.")
    _, tdata, model = setup_model(cfg, msg.content.array_records["encoder"])
    return dataclasses.replace(data, features=_EncodedFeatures(model, tdata, cfg))
