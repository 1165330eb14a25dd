"""Local training of the Phase A model on one client's users, with the defence computed from the client's own z.

Framework-free (no flwr): `fl_privtext.federation.phase_a` wraps `local_train` / `evaluate` in Flower's
``@app.train`` / ``@app.evaluate``; tests call them directly.

Defences (``train.defense``; lambda = ``train.lambda-adv``, alpha = ``train.decluster-alpha``):
- ``noise``: the configured LDP mechanism (``privacy.*``) in the forward pass, fresh noise every step (DPNR
  Algorithm 1, CAPE's noise layer). The mechanism is numpy and not differentiable, so the layer is
  straight-through: forward = M(r), backward = identity. For the additive mechanisms (laplace-*, gaussian) this is
  the reparameterisation r' + n with the normalisation/clipping Jacobian replaced by the identity. Validation
  applies the noise too (the task model of Phase B sees noisy uploads). Needs a mechanism whose output has r's width.
- ``adversarial``: one adversary head per attribute on gradient-reversed r (CAPE, DPNR's ADV): the heads minimise
  their cross-entropy, the encoder maximises lambda times it; one optimizer, one step.
- ``cape`` (CAPE, Plant et al. 2021, Algorithm 1): both of the above, the adversaries reading the NOISY
  representation: task head and gradient-reversed adversary heads on M(r) (straight-through), weight lambda.
  ``train.adv-attributes`` picks the attribute(s) (CAPE trains one at a time). With lambda = 0 the adversary
  still learns (on a detached signal) but the encoder gets nothing from it: CAPE's "DP" row with its simulated
  attacker; ``adversarial`` with lambda = 0 is the "Base" row. Where CAPE adds the noise to the frozen
  extractor's features x_e before its dense layers, here it is added to r(x), the representation that is uploaded
  (Phase B privatizes r(x) with the same mechanism).
- ``multidetask`` (Coavoux Sec. 3.1.1): alternating updates. The adversary step minimises -log P(z|r) on a
  detached r; the main step minimises -log P(y|x) - lambda log P(not z | r) (for a categorical z with more than two
  classes P(not z) = 1 - P(z); multilabel: every bit flipped), updating the encoder and task head only.
- ``generation`` (Sec. 3.1.2): a character LSTM decoder initialised with r(x) learns to reconstruct the text's
  first ``train.gen-chars`` characters (adversary step); the main step minimises -log P(y|x) - lambda L_g.
- ``declustering`` (Sec. 3.2): -log P(y|x) + alpha (H(z, z') - 0.5) ||r(x) - r(x')||^2 over pairs (x, x') of the
  batch (x' a random permutation), H the normalised Hamming distance of the private attributes. This is the sign of
  the authors' code: pairs with the same z are pushed apart, pairs with different z pulled together. The paper's
  formula writes alpha (0.5 - H) and would cluster same-z pairs, the opposite of its stated intent.

With one user per client every example of a client has the same z: the local adversaries learn the constant
(a bias), their gradient carries no information about how r separates z, and declustering only pushes pairs apart
(H = 0 for all pairs); the defences then protect nothing. They need clients holding users with varied z.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fl_privtext import rng
from fl_privtext.client.upload import client_generator as private_generator
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import TrainConfig
from fl_privtext.encoders.inputs import TrainData
from fl_privtext.encoders.model import PrivModel
from fl_privtext.encoders.nets import Encoder, grad_reverse, set_generator
from fl_privtext.public import PublicSpec

NOISY = ("noise", "cape")  # defences with the LDP noise layer in the forward pass
GRL = ("adversarial", "cape")  # defences with gradient-reversed adversary heads


def client_generator(client_seed: int | None, client: int, rnd: int, purpose: str) -> np.random.Generator:
    """The ONE source of a client's Phase A randomness (noise layer, dropout masks, batch order): the client's
    private generator (OS entropy, or the reproducible client seed that never travels through the server)."""
    return private_generator(client_seed, "train", purpose, rnd, client)


def torch_gen(g: np.random.Generator) -> torch.Generator:
    return torch.Generator().manual_seed(int(g.integers(0, 2**62)))


def resolve_device(name: str) -> torch.device:
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def noise_mechanism(public: PublicSpec, width: int) -> Any:
    """The configured LDP mechanism (``public.privacy``) as a noise layer on ``width``-wide representations,
    built by `fl_privtext.client.upload.mechanism_for` (its pca projection is fitted on the public data
    `PublicSpec` names)."""
    mech = mechanism_for(public, width)
    if int(mech.output_dim) != width:
        raise ValueError(
            f"train.defense='noise' needs a mechanism whose output has the encoder's width ({width}); "
            f"privacy.mechanism={public.privacy.mechanism!r} outputs {mech.output_dim} values. Use "
            "laplace-*, gaussian or none."
        )
    return mech


def defense_mechanism(train: TrainConfig, public: PublicSpec, width: int) -> Any | None:
    """The noise layer's mechanism for ``local_train`` / ``evaluate`` when ``train.defense`` has one (noise,
    cape), else None."""
    return noise_mechanism(public, width) if train.defense in NOISY else None


def _noise_for(train: TrainConfig, mechanism: Any | None) -> Any | None:
    """The mechanism the defence's noise layer applies (None without one); a noisy defence without it is an
    error, never silently noise-free."""
    if train.defense not in NOISY:
        return None
    if mechanism is None:
        raise ValueError(f"train.defense = {train.defense} needs its noise layer's mechanism "
                         "(fl_privtext.encoders.defense_mechanism); none was given.")
    return mechanism


def noise_layer(r: torch.Tensor, mech: Any, g: np.random.Generator) -> torch.Tensor:
    """Straight-through LDP noise layer: forward M(r) with fresh noise from ``g``, backward identity."""
    noisy = mech.privatize(r.detach().float().cpu().numpy(), g)  # (B, D)
    return r + (torch.as_tensor(np.asarray(noisy, np.float32), device=r.device) - r).detach()


def _attr_loss(logits: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    if z.ndim == 2:
        return nn.functional.binary_cross_entropy_with_logits(logits, z)
    return nn.functional.cross_entropy(logits, z)


def _flipped_loss(logits: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """-log P(not z | r): the adversary is made to predict the flipped label."""
    if z.ndim == 2:
        return nn.functional.binary_cross_entropy_with_logits(logits, 1 - z)
    others = logits.masked_fill(nn.functional.one_hot(z, logits.shape[1]).bool(), float("-inf"))
    return (torch.logsumexp(logits, 1) - torch.logsumexp(others, 1)).mean()


def hamming(z: dict[str, torch.Tensor], perm: torch.Tensor) -> torch.Tensor:
    """(B,) normalised Hamming distance between each example's private attributes and its partner's."""
    parts = []
    for v in z.values():
        if v.ndim == 2:
            parts.append((v != v[perm]).float())  # (B, K)
        else:
            parts.append((v != v[perm]).float().unsqueeze(1))  # (B, 1)
    return torch.cat(parts, dim=1).mean(dim=1)


def declustering_term(r: torch.Tensor, z: dict[str, torch.Tensor], perm: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    """alpha * mean over pairs (i, perm[i]) of (H(z_i, z_perm[i]) - 0.5) ||r_i - r_perm[i]||^2 (the authors' code's
    sign: minimising it pushes same-z pairs apart and pulls different-z pairs together)."""
    dist = ((r - r[perm]) ** 2).sum(dim=1)  # (B,)
    return alpha * ((hamming(z, perm) - 0.5) * dist).mean()


def _total(losses: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(losses).sum()


def _optimizer(params: list[nn.Parameter], train: TrainConfig) -> torch.optim.Optimizer:
    if train.optimizer == "sgd":
        return torch.optim.SGD(params, lr=train.lr)
    return torch.optim.Adam(params, lr=train.lr)


def local_train(model: PrivModel, data: TrainData, rows: np.ndarray, train: TrainConfig,
                g: np.random.Generator, *, mechanism: Any = None,
                proximal_mu: float = 0.0) -> dict[str, float]:
    """``train.local-epochs`` epochs of mini-batch training on ``rows`` (this client's training users).

    Optimizer state starts afresh (FedAvg clients are stateless between rounds). ``proximal_mu`` > 0 adds FedProx's
    (mu/2) ||w - w_global||^2. ``mechanism``: the noise layer's (`defense_mechanism`), for train.defense =
    noise or cape. Returns the mean task loss and accuracy over the steps, and the example count."""
    t = train
    dev = next(model.parameters()).device
    set_generator(model, torch_gen(g))
    mech = _noise_for(t, mechanism)
    alternating = t.defense in ("multidetask", "generation") and (model.adversaries or model.generator is not None)
    main_params = [p for p in model.parameters() if p.requires_grad] if t.defense in GRL \
        else model.main_parameters()
    opt = _optimizer(main_params, t)
    opt_adv = _optimizer(model.adversary_parameters(), t) if alternating else None
    anchor = [p.detach().clone() for p in main_params] if proximal_mu > 0 else None
    kind = model.encoder.kind
    model.train()
    losses, correct, seen, adv_losses = [], 0, 0, []
    for _ in range(t.local_epochs):
        order = rows[g.permutation(len(rows))]
        for start in range(0, len(order), t.batch_size):
            batch = order[start : start + t.batch_size]
            inp = data.inputs(kind, batch, t, dev)
            y, z = data.targets(batch, dev)
            chars = data.chars(batch, t.gen_chars, dev) if t.defense == "generation" else None
            r = model.encoder(inp)  # (B, D)
            if opt_adv is not None:  # adversary step: its own parameters only, on a frozen r
                opt_adv.zero_grad(set_to_none=True)
                adv = (model.generator.nll(r.detach(), chars) if model.generator is not None and chars is not None
                       else _total([_attr_loss(h(r.detach()), z[n]) for n, h in model.adversaries.items()]))
                adv.backward()
                opt_adv.step()
                adv_losses.append(adv.item())
            r_task = noise_layer(r, mech, g) if mech is not None else r
            logits = model.task(r_task)
            loss = nn.functional.cross_entropy(logits, y)
            task_loss = loss.item()
            if t.defense in GRL:  # cape: the adversaries read the noisy r, as the task head does
                adv = _total([_attr_loss(h(grad_reverse(r_task, t.lambda_adv)), z[n])
                              for n, h in model.adversaries.items()])
                loss = loss + adv
                adv_losses.append(adv.item())
            elif t.defense == "multidetask":
                loss = loss + t.lambda_adv * _total([_flipped_loss(h(r), z[n]) for n, h in model.adversaries.items()])
            elif t.defense == "generation" and model.generator is not None and chars is not None:
                loss = loss - t.lambda_adv * model.generator.nll(r, chars)
            elif t.defense == "declustering" and len(batch) > 1:
                perm = torch.from_numpy(g.permutation(len(batch))).to(dev)
                loss = loss + declustering_term(r, z, perm, t.decluster_alpha)
            if anchor is not None:
                loss = loss + proximal_mu / 2 * _total([((p - a) ** 2).sum() for p, a in zip(main_params, anchor)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(task_loss)
            correct += int((logits.argmax(1) == y).sum())
            seen += len(batch)
    out = {"train_loss": float(np.mean(losses)) if losses else 0.0,
           "train_accuracy": correct / seen if seen else 0.0, "num_examples": float(len(rows)),
           "steps": float(len(losses))}
    if adv_losses:
        out["adversary_loss"] = float(np.mean(adv_losses))
    return out


@torch.no_grad()
def evaluate(model: PrivModel, data: TrainData, rows: np.ndarray, train: TrainConfig,
             g: np.random.Generator, batch_size: int = 256, *, mechanism: Any = None) -> dict[str, float]:
    """Task loss/accuracy on ``rows`` (held-out users; noise applied for the noise defence) and the in-training
    adversaries' accuracy (a training signal only: the privacy measure is the fresh attacker of Phase B).
    ``mechanism``: the noise layer's, as for `local_train`."""
    dev = next(model.parameters()).device
    mech = _noise_for(train, mechanism)
    model.eval()
    loss_sum, correct, adv_correct = 0.0, 0, {n: 0.0 for n in model.adversaries}
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        y, z = data.targets(batch, dev)
        r = model.encoder(data.inputs(model.encoder.kind, batch, train, dev))
        r = noise_layer(r, mech, g) if mech is not None else r  # cape's adversaries read the noisy r too
        logits = model.task(r)
        loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
        for n, h in model.adversaries.items():
            out = h(r)
            pred = (out > 0).float() if z[n].ndim == 2 else out.argmax(1)
            adv_correct[n] += float((pred == z[n]).float().mean(dim=-1).sum() if z[n].ndim == 2
                                    else (pred == z[n]).sum())
    count = max(len(rows), 1)
    out = {"val_loss": loss_sum / count, "val_accuracy": correct / count, "num_examples": float(len(rows))}
    out.update({f"adversary_accuracy_{k}": v / count for k, v in adv_correct.items()})
    return out


@torch.no_grad()
def encode(model: PrivModel | Encoder, data: TrainData, rows: np.ndarray, train: TrainConfig,
           batch_size: int = 256) -> np.ndarray:
    """(len(rows), out_dim) float32 r(x) of the trained encoder (eval mode, no noise: Phase B privatizes it)."""
    encoder = model.encoder if isinstance(model, PrivModel) else model
    dev = next(encoder.parameters()).device
    encoder.eval()
    out = [encoder(data.inputs(encoder.kind, rows[s : s + batch_size], train, dev)).float().cpu().numpy()
           for s in range(0, len(rows), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, encoder.out_dim), np.float32)


def validation_users(roles: np.ndarray, user_ids: np.ndarray, val_frac: float, seed: int) -> np.ndarray:
    """The training users held out for model selection (a ``val_frac`` share of role "train", from the run seed:
    roles are known to the server anyway)."""
    users = np.unique(user_ids[roles == "train"])
    k = round(val_frac * len(users))
    return np.sort(users[rng.generator(seed, "train-val").permutation(len(users))[:k]])


def phase_a_rows(prep: Any, train: TrainConfig, seed: int, client: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of ``client`` in Phase A: users of roles train/aux minus the validation
    users (``train.val-frac``, drawn from the run seed ``seed``), and the validation users. Test users never
    take part in training or model selection."""
    shard = np.asarray(prep.shards[client])
    roles, users = prep.roles, prep.ds.user_ids
    val = validation_users(roles, users, train.val_frac, seed)
    in_val = np.isin(users[shard], val)
    fit = shard[(roles[shard] != "test") & ~in_val]
    return np.sort(fit), np.sort(shard[in_val])
