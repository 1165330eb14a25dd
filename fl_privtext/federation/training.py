"""Phase A on the ServerApp: federated training of the client-side encoder with a Flower strategy, then the
trained encoder handed to Phase B's uploads.

``train_phase`` runs ``train.rounds`` rounds of FedAvg (or FedProx / FedAdam) from `flwr.serverapp.strategy` over
the (eavesdropping) Grid: each round, ``train.clients-per-round`` clients train locally (`phase_a.train`)
and every client evaluates the new global model on its held-out validation users; the round with the best
federated validation accuracy is kept (model selection). Under DP-FedAvg (``train.dp-clip`` > 0) the strategy is
wrapped in Flower's ``DifferentialPrivacyClientSideFixedClipping``: clients clip their update to ``dp-clip``, the
server adds Gaussian noise of std ``dp-noise-multiplier * dp-clip`` to the sum; `dp_fedavg_guarantee` accounts.

What the eavesdropper sees of Phase A (every client update) is summarised per round: messages and bytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fl_privtext import rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import build_model, trainable_state
from fl_privtext.encoders.model import spec_from
from fl_privtext.encoders.train import noise_mechanism
from fl_privtext.federation.grid import CanonicalOrderGrid, DelegatingGrid
from fl_privtext.progress import progress_bar
from fl_privtext.public import PublicSpec

NO_GUARANTEE = ("updates unprotected: the server and any eavesdropper see every client's model update in the "
                "clear (no DP-FedAvg: train.dp-clip = 0)")
ADVERSARIAL_NOTE = ("adversarial defences (adversarial, multidetask, generation, declustering, the adversarial part of cape) give no formal "
                    "guarantee; their effect is measured by the fresh attacker only")


def dp_fedavg_guarantee(*, noise_multiplier: float, num_clients: int, clients_per_round: int, rounds: int,
                        delta: float) -> dict[str, Any]:
    """User-level (epsilon, delta) of DP-FedAvg's released global models (Flower's RDP accountant over Google's
    dp-accounting).

    Neighbouring relation: one USER's data added, removed or changed. A user lives on one client, whose update is
    clipped to C; changing the user changes that client's clipped update by at most 2C in L2 (the client still
    takes part: the replace-one relation), so the Gaussian noise of std z*C on the sum is a Gaussian mechanism of
    noise multiplier z/2 for that relation. Sampling: ``clients_per_round`` of ``num_clients`` without replacement
    each round (Wang, Balle & Kasiviswanathan 2019 amplification), composed over ``rounds`` (RDP, then the
    conversion of Canonne, Kamath & Steinke 2020 that dp-accounting uses).
    Protects what is released (the sequence of aggregated models, hence the encoder and everything computed from
    it); the untrusted server that aggregates sees each clipped update before the noise is added.
    """
    # dp-accounting's public API (installed by flwr[dp]); Flower's own wrapper of it lives in flwr.supercore (internal)
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if noise_multiplier <= 0:
        return {"epsilon": "inf", "delta": delta, "noise_multiplier": 0.0,
                "note": "clipping without noise (train.dp-noise-multiplier = 0) gives no DP guarantee"}
    acct = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acct.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, clients_per_round, dp_accounting.GaussianDpEvent(noise_multiplier / 2)), rounds)
    spent_epsilon = float(acct.get_epsilon(delta))
    return {"epsilon": spent_epsilon, "delta": float(delta), "noise_multiplier": noise_multiplier,
            "sampling_rate": clients_per_round / num_clients, "rounds": rounds, "accountant": "rdp (dp-accounting)",
            "relation": "user-level, replace-one (sensitivity 2C of the sum)",
            "protects": "the released global models; not individual updates from the aggregating server"}


def make_strategy(cfg: ExperimentConfig, evaluate_metrics_aggr_fn: Any = None) -> Any:
    from flwr.serverapp import strategy as st

    n = cfg.federation.num_clients
    k = cfg.train.clients_per_round or n
    common: dict[str, Any] = {  # no validation users (train.val-frac = 0): no federated evaluation
        "fraction_train": k / n, "fraction_evaluate": 1.0 if cfg.train.val_frac > 0 else 0.0, "min_train_nodes": k, "min_evaluate_nodes": n,
        "min_available_nodes": n, "weighted_by_key": "weight", "evaluate_metrics_aggr_fn": evaluate_metrics_aggr_fn}
    t = cfg.train
    if t.strategy == "fedprox":
        strategy: Any = st.FedProx(**common, proximal_mu=t.proximal_mu)
    elif t.strategy == "fedadam":
        strategy = st.FedAdam(**common, eta=t.server_lr)
    else:
        strategy = st.FedAvg(**common)
    if t.dp_clip > 0:
        strategy = st.DifferentialPrivacyClientSideFixedClipping(
            strategy, noise_multiplier=t.dp_noise_multiplier, clipping_norm=t.dp_clip, num_sampled_clients=k)
    return strategy


def check_training(cfg: ExperimentConfig, prep: Any) -> None:
    """Settings Phase A cannot run with (before anything starts)."""
    t = cfg.train
    if t.rounds == 0:
        return
    n = cfg.federation.num_clients
    if t.clients_per_round > n:
        raise ValueError(f"train.clients-per-round={t.clients_per_round} exceeds federation.num-clients={n}.")
    if not prep.ds.label_names:
        raise ValueError(f"Phase A trains the encoder on the task; dataset {prep.ds.name!r} has no task label.")
    if t.defense in ("adversarial", "multidetask", "declustering", "cape") and not prep.ds.attributes:
        raise ValueError(f"train.defense={t.defense!r} needs private attributes; dataset {prep.ds.name!r} has none.")
    names = [a.name for a in prep.ds.attributes]
    unknown = [a for a in t.adv_attribute_list() if a not in names]
    if unknown:
        raise ValueError(f"train.adv-attributes names {', '.join(unknown)}, which dataset {prep.ds.name!r} does not "
                         f"have; valid attributes: {', '.join(names) or 'none'}.")
    if cfg.privacy.mu > 0:
        raise ValueError("Word dropout (privacy.mu > 0) with a Phase A encoder is not supported; set privacy.mu = 0.")
    if t.defense in ("noise", "cape"):
        noise_mechanism(PublicSpec.of(cfg), 384 if t.encoder == "minilm" else t.hidden)
    if t.val_frac > 0 and not (prep.roles == "train").any():
        raise ValueError("train.val-frac > 0 needs training users to hold out.")


class InjectingGrid(DelegatingGrid):
    """Delegates to ``inner`` and adds ``records`` to every outgoing message whose type is in ``message_types``
    (the trained encoder in Phase B's upload queries and in the on-device evaluation queries)."""

    def __init__(self, inner: Grid, records: dict[str, Any],
                 message_types: tuple[str, ...] = ("query.upload", "query.evaluate")) -> None:
        super().__init__(inner)
        self._records, self._types = records, message_types

    def __getattr__(self, name: str) -> Any:  # observations, uploads(), reset(), ... of the eavesdropper
        return getattr(self._inner, name)

    def _inject(self, messages: Iterable[Message]) -> list[Message]:
        messages = list(messages)
        for m in messages:
            if m.metadata.message_type in self._types:
                for k, v in self._records.items():
                    m.content[k] = v
        return messages

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._inner.push_messages(self._inject(messages))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._inner.send_and_receive(self._inject(messages), timeout=timeout)


def train_phase(grid: Grid, cfg: ExperimentConfig, prep: Any, *, keep_updates: bool = False) -> dict[str, Any]:
    """Run Phase A; returns the training summary (results.json ``training``) and, under ``"encoder"``, the
    selected encoder's parameters (an ArrayRecord for the Phase B queries). ``keep_updates`` adds, per round,
    the global model and every observed client update with its weight (``"kept"``; tests check FedAvg with it).
    Phase A runs once per point, from ``run.seed`` (extra seeds repeat Phase B only). ``prep``: the point's users,
    roles and shards (`fl_privtext.pipeline.prepare`, features "none"). Under ``train.secagg`` the updates reach
    the server only as a secure sum instead (`fl_privtext.federation.secagg_train.train_phase_secagg`, issue #24)."""
    t0 = time.perf_counter()
    t = cfg.train
    check_training(cfg, prep)
    model = build_model(t, spec_from(prep), rng.torch_generator(cfg.run.seed, "train-init"))
    initial = ArrayRecord({k: Array(v) for k, v in trainable_state(model).items()})
    del model
    observations = getattr(grid, "observations", None)
    per_round: list[dict[str, Any]] = []
    best: dict[str, Any] = {"round": 0, "val_accuracy": -1.0, "arrays": initial}
    last_val: dict[str, float] = {}

    def aggregate_evaluate(records: list[RecordDict], key: str) -> MetricRecord:
        from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

        agg = aggregate_metricrecords(records, key)
        last_val.clear()
        last_val.update({k: float(v) for k, v in agg.items()})  # type: ignore[arg-type]
        return agg

    strategy = make_strategy(cfg, aggregate_evaluate)
    bar = progress_bar(total=t.rounds, desc="phase A rounds", unit="round", enabled=cfg.run.progress, leave=False)
    seen = [len(observations) if observations is not None else 0]

    kept: list[dict[str, Any]] = []
    prev = [{k: a.numpy().astype(np.float64) for k, a in initial.items()}]  # the global model clients start from

    def after_round(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        if rnd == 0:
            return None
        entry: dict[str, Any] = {"round": rnd, **{k if k.startswith("val") else f"val_{k}": v
                                                 for k, v in last_val.items()}}
        if observations is not None:  # what the eavesdropper recorded this round: every client update
            ups = [o for o in observations[seen[0]:] if o.message_type == "train"]
            seen[0] = len(observations)
            entry["updates_observed"] = len(ups)
            entry["update_bytes_observed"] = int(sum(o.nbytes for o in ups))
            entry["update_norms"] = sorted(  # sorted: the arrival order is not a result
                float(np.sqrt(sum(np.sum((a.astype(np.float64) - prev[0][k]) ** 2)
                                  for k, a in o.arrays["arrays"].items()))) for o in ups)
        acc = float(last_val.get("val_accuracy", -1.0))
        entry["val_accuracy"] = acc
        # train.val-frac = 0 (no validation users, e.g. data.split = source): nothing to select on, keep the last round
        if acc > best["val_accuracy"] or t.val_frac == 0:
            best.update(round=rnd, val_accuracy=acc,
                        arrays=ArrayRecord({k: Array(a.numpy().copy()) for k, a in arrays.items()}))
        if keep_updates and observations is not None:
            kept.append({"global": {k: a.numpy().copy() for k, a in arrays.items()},
                         "updates": [(o.arrays["arrays"], float(o.metrics["metrics"]["weight"])) for o in ups]})
        per_round.append(entry)
        prev[0] = {k: a.numpy().astype(np.float64) for k, a in arrays.items()}
        bar.update()
        bar.set_postfix(val_acc=f"{acc:.3f}")
        return None

    train_config = ConfigRecord({**cfg.to_flat()})
    result = strategy.start(grid=CanonicalOrderGrid(grid), initial_arrays=initial, num_rounds=t.rounds, train_config=train_config,
                            evaluate_config=ConfigRecord({**cfg.to_flat()}), evaluate_fn=after_round)
    bar.close()
    for rnd, m in result.train_metrics_clientapp.items():
        if 1 <= rnd <= len(per_round):
            per_round[rnd - 1].update({f"train_{k}" if not k.startswith("train") else k: float(v)
                                       for k, v in m.items()})
    if t.dp_clip > 0:
        guarantee: Any = dp_fedavg_guarantee(noise_multiplier=t.dp_noise_multiplier,
                                             num_clients=cfg.federation.num_clients,
                                             clients_per_round=t.clients_per_round or cfg.federation.num_clients,
                                             rounds=t.rounds, delta=t.dp_delta)
        if guarantee["epsilon"] == "inf":
            guarantee = "none"
    else:
        guarantee = "none"
    encoder = ArrayRecord({k: a for k, a in best["arrays"].items() if k.startswith("encoder.")})
    return {
        "enabled": True, "rounds": t.rounds, "defense": t.defense, "encoder": t.encoder, "strategy": t.strategy,
        "guarantee": guarantee,
        "guarantee_note": (("DP-FedAvg: " + ("user-level (epsilon, delta) of the released global models"
                                             if guarantee != "none" else "clipping without noise"))
                           if t.dp_clip > 0 else NO_GUARANTEE)
        + ("; " + ADVERSARIAL_NOTE if t.defense not in ("none", "noise") else ""),
        "phase_b_guarantee": "per-upload LDP of privacy.mechanism on r(x), composed per user (see privacy)",
        "selected_round": best["round"], "selected_val_accuracy": best["val_accuracy"],
        "clients_per_round": t.clients_per_round or cfg.federation.num_clients,
        "per_round": per_round,
        "updates_observed": int(sum(r.get("updates_observed", 0) for r in per_round)),
        "update_bytes_observed": int(sum(r.get("update_bytes_observed", 0) for r in per_round)),
        "encoder_params": int(sum(a.numpy().size for a in encoder.values())),
        "train_s": time.perf_counter() - t0,
        "encoder_arrays": encoder,
        **({"kept": kept} if keep_updates else {}),
    }


def encoder_out_dim(cfg: ExperimentConfig, prep: Any) -> int:
    """The width of Phase A's r(x) (public: the server builds the same model, `train_phase`); ``prep``: the point's
    prepared users, roles and shards (`fl_privtext.pipeline.prepare`, features "none")."""
    return build_model(cfg.train, spec_from(prep), rng.torch_generator(cfg.run.seed, "train-init")).out_dim


def training_off(cfg: ExperimentConfig) -> dict[str, Any]:
    """results.json ``training`` when Phase A is off (train.rounds = 0)."""
    return {"enabled": False, "rounds": 0, "defense": cfg.train.defense, "encoder": cfg.train.encoder,
            "guarantee": "none", "guarantee_note": "no Phase A: the frozen extractor's features are uploaded",
            "phase_b_guarantee": "per-upload LDP of privacy.mechanism, composed per user (see privacy)"}

