"""Phase A through SecAgg+ (``train.secagg = true``): FedAvg rounds whose client updates the server only receives
as a secure sum (`fl_privtext.federation.secagg`), with DP-FedAvg's noise added by the clients
(``train.dp-mode = client``: distributed discrete Gaussian, `fl_privtext.privacy.distributed`) or by the server
after unmasking (``train.dp-mode = server``: the server then knows the exact sum of the clipped updates).

Client (`phase_a_vector`, task ``"phase-a"`` of `SECAGG_TASKS`): trains locally like `phase_a.train`, then
releases ``noisy_share(new - global)`` through its ledger. Everything that sets its noise is its own policy
(`fl_privtext.client.policy`): ``train.dp-clip``, ``train.dp-noise-multiplier``, ``train.dp-delta`` pinned in its
entry and ``client.secagg-min-clients``; the server's request only supplies the grid (``clipping-range``: a coarser
grid lowers the client's sigma in grid units, which its own accounting charges) and the global model. The charge
per round and user is the central epsilon of one round's sum with only ``secagg-min-clients`` contributors (at
``train.dp-delta``), composed by the ledger's basic composition; a round with fewer selected clients, or an
unmasking with fewer active, is refused (`require_contributors`). Without client noise (dp-mode = server, or
noise multiplier 0) the server sees the exact sum: charged inf. The stored update is keyed by round, model digest,
grid step AND the session's participant set (`session_participants`): a repeat in a session over the same set
replays it, a session over another set (e.g. the 3-of-4 subsets of four clients, whose sums differenced would
isolate one client's update) is a new release: fresh noise (in the seeded mode too: the set and the model digest
key the noise stream), charged again, so k sessions holding a client cost its users k round charges, which covers
whatever their differences reveal. An unmasking over another active set than the vector's first is refused
(`unmask_once`: a dropout after masking, once and not the other time, would isolate the dropped client).

Server (`train_phase_secagg`): each round ``train.clients-per-round`` clients (the server's seeded choice; no
amplification by sampling is claimed, the server knows whom it picked), one secure sum, the global model moves by
the sum over the number of contributors (FedAvg, unweighted as DP-FedAvg). Dropouts are survived and accounted
(the central epsilon uses each round's actual number of contributors). Model selection: under ``train.dp-mode =
server`` the best round by federated validation accuracy where clients answer it (the metrics are released in the
clear: clients with a finite ``client.max-epsilon`` refuse, and the last round is kept).

What leaves a client in the clear under ``train.dp-mode = client`` (the mode whose guarantee against the server is
the central epsilon of the noisy sums, `fl_privtext.report.accounting`): NO federated validation. Per-client validation
loss and accuracy are statistics of the client's users' data, computed on the model the noisy sums produced; sent in
the clear they are a release outside the sum's guarantee (an unbounded one: an exact accuracy over a handful of
users). Rather than a second secure sum with its own noise share, the server does not ask (`_evaluate` is not
called: the last round is kept, ``federated_validation`` says so) and the client refuses if asked
(`fl_privtext.federation.phase_a`: a Phase A evaluate, or a plain update outside SecAgg+, under a request in
this mode). Every other Phase A message of this mode is SecAgg+'s: the protocol's public keys, its encrypted shares
(readable only by the addressed client), the masked vector (uniform modulo 2^32 to the server), the unmasking shares,
and beside the masked vector ``FitRes.num_examples = 1`` (a constant: the weight is not the client's example count)
and `declare`'s metrics: the client's noise multiplier, clip, secagg-min-clients and the epsilon its ledger charged
for the round, all functions of the client's POLICY (public: the server's accountant needs them), none of its data.
Still public, and not protected (no user's data in them): which clients were selected, which completed or dropped
and the reason a dropout gives (a refusal names the policy rule it applies), message sizes (fixed by the model's
dimension) and timings (local training time grows with the client's number of training records: a coarse,
unprotected signal of its shard size, as the Phase B uploads' counts are, `fl_privtext.report.accounting.ALSO_RELEASED`).
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from fl_privtext import rng
from fl_privtext.client import Ledger, client_generator, client_seed_from, policy_from, state_dir_from
from fl_privtext.client.aggregate import session_key
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import build_model, defense_mechanism, local_train, trainable_state
from fl_privtext.encoders import client_generator as train_generator
from fl_privtext.encoders.model import spec_from
from fl_privtext.encoders.train import phase_a_rows
from fl_privtext.federation.phase_a import client_index, experiment_config, setup_model, train_data
from fl_privtext.federation.replies import array_digest, prep_key
from fl_privtext.federation.secagg import (
    RECORD,
    SecAggAborted,
    declare,
    grid_step,
    require_contributors,
    secure_sum,
    session_participants,
    session_record,
    unmask_once,
)
from fl_privtext.federation.training import check_training, dp_fedavg_guarantee
from fl_privtext.privacy.distributed import (
    declared_rho,
    distributed_guarantee,
    epsilon_of,
    noisy_share,
    round_rho,
    round_to_grid,
)
from fl_privtext.privacy.exact import SecureBits
from fl_privtext.public import PublicSpec

TASK = "phase-a"
NOISE_AT = {"client": "each client adds its discrete Gaussian share to its clipped, grid-rounded update before "
                      "masking: the server only holds the noisy sum",
            "server": "the server adds Gaussian noise after unmasking: it sees the exact sum of the clipped "
                      "updates (no protection against it; individual updates stay hidden by SecAgg+)"}


def _flat(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays.values()])


def _unflat(vector: np.ndarray, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for k, a in like.items():
        out[k] = vector[pos:pos + a.size].reshape(a.shape)
        pos += a.size
    return out


def clipping_range_for(cfg: ExperimentConfig, k: int) -> float:
    """The secure sum's range: every coordinate of the sum of k clipped updates (<= k * clip) plus its noise
    (10 standard deviations of the client shares' total). A range too small only wraps the sum around
    (a wrong model, never a privacy loss)."""
    t = cfg.train
    # the clients' minimum contributors is their policy, unknown here: the largest share (min_clients = 2) is assumed
    noise_std = t.dp_noise_multiplier * t.dp_clip * math.sqrt(k / 2) if t.dp_mode == "client" else 0.0
    return k * t.dp_clip + 10.0 * noise_std


# ---------------------------------------------------------------------------------------------------------- client


def phase_a_vector(msg: Message, context: Context) -> np.ndarray:
    """The client's contribution to one Phase A secure sum (see the module text). This module loads torch (the
    encoders): the secure-sum registry imports it on a Phase A task only, so a worker serving Phase B never does."""
    config = msg.content.config_records["config"]
    request = experiment_config(config)
    nc = dict(context.node_config)
    client = client_index(context, request)
    rnd = int(config["server-round"])  # type: ignore[arg-type]
    entry = policy_from(nc, dict(context.run_config)).entry_for(request)  # Refused unless the request is exactly one of its points
    own = entry.config(request).train  # the client's own clip, noise multiplier and delta
    m = entry.client.secagg_min_clients
    participants = session_participants(msg)  # the stored update is bound to this session's set (module text)
    require_contributors(context, m, participants)
    rec = msg.content.config_records[RECORD]
    _, step = grid_step(float(rec["clipping-range"]), int(rec["quantization-range"]))  # type: ignore[arg-type]
    arrays = msg.content.array_records["arrays"]
    dim = int(sum(a.numpy().size for a in arrays.values()))
    client_noise = request.train.dp_mode == "client" and own.dp_noise_multiplier > 0
    eps = (epsilon_of([round_rho(noise_multiplier=own.dp_noise_multiplier, clip=own.dp_clip, min_clients=m,
                                 contributors=m, step=step, dim=dim)], own.dp_delta) if client_noise else math.inf)
    prep, _ = train_data(prep_key(request))
    rows, _ = phase_a_rows(prep, request.train, request.run.seed, client)
    users = np.unique(prep.ds.user_index[rows])  # one charge per user and round: the update is one release
    client_seed = client_seed_from(nc)
    digest = array_digest(arrays)
    key = hashlib.sha256(f"phase-a-secagg|{rnd}|{digest}|{step!r}|{session_key(participants)}".encode()
                         ).hexdigest()[:32]

    def compute(_spent: Any) -> tuple[dict[str, np.ndarray], np.ndarray, float]:
        _, data, model = setup_model(request, arrays)
        local_train(model, data, rows, request.train, train_generator(client_seed, client, rnd, "fit"),
                    mechanism=defense_mechanism(request.train, PublicSpec.of(request), model.out_dim),
                    proximal_mu=float(config.get("proximal-mu", 0.0)))  # type: ignore[arg-type]
        state = trainable_state(model)
        old = {k: a.numpy() for k, a in arrays.items()}
        delta = _flat({k: state[k] for k in old}) - _flat(old)
        if not np.isfinite(delta).all():  # from the server's weights: the zero update as a whole, never an error
            delta = np.zeros_like(delta)
        if client_noise:
            bits = SecureBits.keyed_by(client_generator(client_seed, "secagg-noise", rnd, client, digest,
                                                        session_key(participants)))
            vec = noisy_share(delta, clip=own.dp_clip, noise_multiplier=own.dp_noise_multiplier, min_clients=m,
                              step=step, bits=bits)
        else:
            vec = round_to_grid(delta, own.dp_clip, step).astype(np.float64) * step
        return {"vector": vec}, users, eps

    answer, charged, _, _ = Ledger(state_dir_from(nc), client, entry.scope).release(key, entry.client.max_epsilon,
                                                                                     compute)
    unmask_once(context, session_record(state_dir_from(nc), client, entry.scope, key))
    # public: what this client's policy added and charged (the server's accountant uses it, not its own belief)
    declare(context, noise_multiplier=own.dp_noise_multiplier if client_noise else 0.0, clip=own.dp_clip,
            min_clients=m, charged=charged)
    return np.asarray(answer["vector"], np.float64)



# ---------------------------------------------------------------------------------------------------------- server


def _wait_for_nodes(grid: Grid, n: int, timeout: float = 300.0) -> list[int]:
    t0 = time.monotonic()
    while True:
        nodes = sorted(int(x) for x in grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() - t0 > timeout:
            return nodes
        time.sleep(0.5)


def _evaluate(grid: Grid, nodes: list[int], arrays: ArrayRecord, cfg: ExperimentConfig, rnd: int) -> dict[str, float]:
    """Federated validation (the usual ``evaluate`` messages); refusals and failures are left out."""
    from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

    msgs = [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({**cfg.to_flat(), "server-round": rnd})}),
                    dst_node_id=n, message_type="evaluate", group_id=f"secagg-eval-{rnd}") for n in nodes]
    ok = [r.content for r in grid.send_and_receive(msgs) if not r.has_error() and "metrics" in r.content]
    if not ok:
        return {}
    return {k: float(v) for k, v in aggregate_metricrecords(ok, "weight").items()}  # type: ignore[arg-type]


def _declared_noise(declared: list[dict[str, float]]) -> tuple[float, float, int, str]:
    """(noise multiplier, clip, min clients) the contributors declared when they all agree; else the smallest share
    against the largest clip, min clients 1 (for the report's description only: the epsilon comes from
    `declared_rho` per round)."""
    triples = {(d.get("noise-multiplier", 0.0), d.get("clip", math.inf), int(d.get("min-clients", 1)))
               for d in declared}
    if len(triples) == 1:
        z, c, m = triples.pop()
        return z, c, m, "every contributor declared the same noise"
    clip = max(c for _, c, _ in triples)
    share = min(z * c / math.sqrt(m) for z, c, m in triples)
    return share / clip, clip, 1, ("contributors declared different noise: each round is accounted with its best group "
                                   "of equal shares, the others counted as independent post-processing noise")


def train_phase_secagg(grid: Grid, cfg: ExperimentConfig, prep: Any, *, keep_updates: bool = False
                       ) -> dict[str, Any]:
    """Phase A through SecAgg+; returns `training.train_phase`'s summary, plus ``secagg`` (per round: selected,
    contributors, dropped, message rounds, bytes), ``noise_added`` and, under client noise, ``central``."""
    # torch (the encoders): the driver loads it only when a point trains Phase A

    t0 = time.perf_counter()
    t = cfg.train
    check_training(cfg, prep)
    if t.strategy == "fedadam":
        raise ValueError("train.secagg supports train.strategy = fedavg or fedprox (the server averages the sum).")
    model = build_model(t, spec_from(prep), rng.torch_generator(cfg.run.seed, "train-init"))
    glob = {k: np.asarray(v, np.float32) for k, v in trainable_state(model).items()}
    del model
    n = cfg.federation.num_clients
    k = t.clients_per_round or n
    nodes = _wait_for_nodes(grid, n)
    if len(nodes) < k:
        raise ValueError(f"train.secagg: {len(nodes)} clients connected, train.clients-per-round needs {k}.")
    select = rng.generator(cfg.run.seed, "secagg-select")
    server_noise = rng.generator(cfg.run.seed, "secagg-server-noise")
    c = clipping_range_for(cfg, k)
    dim = int(sum(a.size for a in glob.values()))
    per_round: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    best: dict[str, Any] = {"round": 0, "val_accuracy": -1.0, "arrays": dict(glob)}
    step = 0.0
    declared: list[dict[str, float]] = []  # what every contributor said it added (public, beside its vector)
    rhos: list[float] = []  # each completed round's zCDP rho from its contributors' declarations
    ledger: dict[int, float] = {}  # node -> what it declared its ledger charged, summed over the rounds it contributed
    # dp-mode = client: no per-client validation metric may travel in the clear (see the module text)
    validate = t.val_frac > 0 and t.dp_mode != "client"
    for rnd in range(1, t.rounds + 1):
        # by index: node ids are uint64 (numpy would turn a list of them into float64)
        chosen = sorted(nodes[int(i)] for i in select.choice(len(nodes), size=k, replace=False))
        content = RecordDict({"arrays": ArrayRecord({kk: Array(v) for kk, v in glob.items()}),
                              "config": ConfigRecord({**cfg.to_flat(), "server-round": rnd,
                                                      **({"proximal-mu": t.proximal_mu}
                                                         if t.strategy == "fedprox" else {})})})
        entry: dict[str, Any] = {"round": rnd, "selected": chosen}
        try:
            s = secure_sum(grid, chosen, TASK, content, clipping_range=c)
        except SecAggAborted as exc:
            entry.update(aborted=str(exc), contributors=[], dropped=chosen)
            per_round.append(entry)
            continue
        step = s.step
        total = s.total
        if t.dp_mode == "server" and t.dp_noise_multiplier > 0:  # DP-FedAvg's noise, by the server, on the sum
            total = total + server_noise.normal(0.0, t.dp_noise_multiplier * t.dp_clip, total.shape)
        mean = _unflat(total / len(s.contributors), glob)
        glob = {kk: (glob[kk].astype(np.float64) + mean[kk]).astype(np.float32) for kk in glob}
        declared.extend(s.declared.values())
        for node, d in s.declared.items():
            ledger[node] = ledger.get(node, 0.0) + float(d.get("charged", math.inf))
        rhos.append(declared_rho([(d.get("noise-multiplier", 0.0), d.get("clip", math.inf),
                                   int(d.get("min-clients", 1))) for d in s.declared.values()], step=s.step, dim=dim))
        entry.update(contributors=s.contributors, dropped=s.dropped, reasons=s.reasons, message_rounds=s.rounds,
                     bytes=s.bytes, grid_step=s.step, updates_observed=len(chosen) - len(s.dropped),
                     update_bytes_observed=s.bytes)
        val = _evaluate(grid, nodes, ArrayRecord({kk: Array(v) for kk, v in glob.items()}), cfg, rnd) \
            if validate else {}
        acc = float(val.get("val_accuracy", -1.0))
        entry["val_accuracy"] = acc
        entry.update({kk if kk.startswith("val") else f"val_{kk}": v for kk, v in val.items() if kk != "val_accuracy"})
        if acc > best["val_accuracy"] or acc < 0:  # no validation answers: keep the last round
            best.update(round=rnd, val_accuracy=acc, arrays=dict(glob))
        if keep_updates:
            kept.append({"global": dict(glob), "sum": total, "contributors": s.contributors})
        per_round.append(entry)
    done = [r for r in per_round if "aborted" not in r]
    contributors = [len(r["contributors"]) for r in done]
    noise = "client" if t.dp_mode == "client" and t.dp_noise_multiplier > 0 else (
        "server" if t.dp_noise_multiplier > 0 else "none")
    central: dict[str, Any] | None = None
    guarantee: Any = "none"
    if noise == "client" and done:
        z, clip, m, how = _declared_noise(declared)
        g = distributed_guarantee(noise_multiplier=z, clip=clip, min_clients=m, contributors=contributors, step=step,
                                  dim=dim, delta=t.dp_delta)
        # the figures from each round's declarations (equal to the above when every contributor declared the same)
        g.update(epsilon=epsilon_of(rhos, t.dp_delta), per_round_epsilon=[epsilon_of([r], t.dp_delta) for r in rhos])
        guarantee = {**g, "declared": how, "client_charged_per_round": sorted({d.get("charged", math.inf)
                                                                              for d in declared}),
                     "protects": "every released sum and model, against the server and any eavesdropper"}
        central = {"epsilon": g["epsilon"], "delta": g["delta"], "against": "server", "via": "secagg",
                   "rounds": len(done), "contributors": contributors,
                   # the clients' own ledgers (basic composition, n = their secagg-min-clients per round): never
                   # below the accountant's epsilon (RDP composition, each round's actual contributors >= that n)
                   "client_ledger_max_epsilon": max(ledger.values(), default=0.0)}
    elif noise == "server" and done:
        g = dp_fedavg_guarantee(noise_multiplier=t.dp_noise_multiplier, num_clients=n, clients_per_round=k,
                                rounds=len(done), delta=t.dp_delta)
        guarantee = g if g["epsilon"] != "inf" else "none"
    encoder = ArrayRecord({kk: Array(v) for kk, v in best["arrays"].items() if kk.startswith("encoder.")})
    note = {"client": "DP-FedAvg through SecAgg+ with client-side noise (distributed discrete Gaussian): central "
                      "(epsilon, delta) against the server",
            "server": "SecAgg+ with server-side DP-FedAvg noise: user-level (epsilon, delta) of the released models; "
                      "the server knows the exact sum of the clipped updates",
            "none": "SecAgg+ without noise: individual updates hidden, their exact sum seen by the server"}[noise]
    return {
        "enabled": True, "rounds": t.rounds, "defense": t.defense, "encoder": t.encoder, "strategy": t.strategy,
        "guarantee": guarantee, "guarantee_note": note, "noise_added": noise,
        "noise_added_where": NOISE_AT.get(noise, "nowhere: no noise"),
        "phase_b_guarantee": "per-upload LDP of privacy.mechanism on r(x), composed per user (see privacy)",
        "selected_round": best["round"], "selected_val_accuracy": best["val_accuracy"],
        "federated_validation": ("yes: per-client validation metrics in the clear (clients with a finite "
                                 "client.max-epsilon refuse)" if validate else
                                 "none: train.dp-mode = client sends no per-client metric in the clear (the last "
                                 "round is kept)" if t.dp_mode == "client" else "none: train.val-frac = 0"),
        "clients_per_round": k, "per_round": per_round,
        "updates_observed": int(sum(r.get("updates_observed", 0) for r in per_round)),
        "update_bytes_observed": int(sum(r.get("update_bytes_observed", 0) for r in per_round)),
        "secagg": {"clipping_range": grid_step(c, 2**22)[0], "grid_step": step, "dim": dim,
                   "rounds_completed": len(done), "message_rounds": int(sum(r.get("message_rounds", 0)
                                                                            for r in per_round)),
                   "bytes": int(sum(r.get("bytes", 0) for r in per_round)),
                   "dropped": sorted({d for r in per_round for d in r.get("dropped", [])})},
        **({"central": central} if central is not None else {}),
        "encoder_params": int(sum(a.numpy().size for a in encoder.values())),
        "train_s": time.perf_counter() - t0,
        "encoder_arrays": encoder,
        **({"kept": kept} if keep_updates else {}),
    }
