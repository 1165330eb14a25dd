"""MLP classifiers trained on (privatized) representations: the server's task model and the eavesdropper's attackers.

Defaults follow the OME paper (Lyu et al. SIGIR'20, Sec. 4): one hidden layer, SGD lr 0.01, momentum 0.9,
weight decay 1e-6, dropout 0.5 on the input representation, batch 32. DPNR's attacker is a 2-layer MLP with 512
hidden units and ReLU. Initialisation, dropout masks and batch order come from a ``torch.Generator``; no global RNG is touched.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fl_privtext.config import MLPConfig
from fl_privtext.progress import progress_bar

__all__ = ["EarlyStop", "MLPClassifier", "MLPConfig", "train_mlp", "warm_up"]


class MLPClassifier:
    """A fitted MLP; ``predict`` gives class indices (or 0/1 matrices for multi-label)."""

    losses: list[float]  # mean training loss per epoch (divergence shows as a rise or NaN)
    steps: int  # SGD steps taken (at most the config's max_steps when it is > 0)
    best_step: int  # the step whose parameters were kept (= steps without early stopping)
    holdout_losses: list[tuple[int, float]]  # (step, held-out loss) at each early-stopping check

    def __init__(self, net: nn.Module, mean: np.ndarray, std: np.ndarray, multilabel: bool, device: torch.device):
        self.net, self.mean, self.std, self.multilabel, self.device = net, mean, std, multilabel, device

    @torch.inference_mode()
    def logits(self, x: np.ndarray, batch_size: int = 8192) -> np.ndarray:
        self.net.eval()
        out = []
        for i in range(0, len(x), batch_size):
            xb = torch.from_numpy((np.asarray(x[i : i + batch_size], np.float32) - self.mean) / self.std)
            out.append(self.net(xb.to(self.device)).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = self.logits(x)
        return (z > 0).astype(np.int8) if self.multilabel else z.argmax(axis=1)

    def export(self) -> dict[str, np.ndarray]:
        """The fitted model as plain arrays (`fl_privtext.ondevice.mlp_logits` applies it without torch):
        ``mean``, ``std`` and ``weight_i`` / ``bias_i`` of the i-th linear layer (ReLU between layers)."""
        layers = [m for m in self.net.modules() if isinstance(m, nn.Linear)]
        out = {"mean": np.asarray(self.mean, np.float32), "std": np.asarray(self.std, np.float32)}
        for i, layer in enumerate(layers):
            out[f"weight_{i}"] = layer.weight.detach().float().cpu().numpy()
            out[f"bias_{i}"] = layer.bias.detach().float().cpu().numpy()
        return out


class _Dropout(nn.Module):
    """Inverted dropout whose masks come from an explicit generator (nn.Dropout draws from the global RNG)."""

    def __init__(self, p: float, generator: torch.Generator):
        super().__init__()
        self.p, self.generator = p, generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)
        return x * keep / (1 - self.p)


def linear(d_in: int, d_out: int, g: torch.Generator) -> nn.Linear:
    """torch's default nn.Linear initialisation, drawn from ``g`` instead of the global RNG."""
    layer = torch.nn.utils.skip_init(nn.Linear, d_in, d_out)
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=g)
        bound = 1 / math.sqrt(d_in)
        nn.init.uniform_(layer.bias, -bound, bound, generator=g)
    return layer


def _net(d_in: int, d_out: int, cfg: MLPConfig, init: torch.Generator, masks: torch.Generator) -> nn.Module:
    drop = _Dropout(cfg.dropout, masks)
    if cfg.hidden == 0:
        return nn.Sequential(drop, linear(d_in, d_out, init))
    return nn.Sequential(drop, linear(d_in, cfg.hidden, init), nn.ReLU(), linear(cfg.hidden, d_out, init))


@dataclass(frozen=True)
class EarlyStop:
    """Early stopping on held-out rows: every ``every`` SGD steps the mean loss on ``x``, ``y`` (rows NOT in the
    training set, standardised like it) is measured; training stops after ``patience`` checks without a new
    minimum, and the parameters of the check with the lowest held-out loss are kept. The step budget
    (``max_steps``) still bounds the run. Why: a fixed budget keeps fitting after the held-out loss has turned
    (the eavesdropper's 512-wide probe on 50-d noisy uploads over-fits within a few thousand steps), so its last
    parameters are worse held out than an earlier checkpoint, and they cost the whole budget (issue #38)."""

    x: np.ndarray  # (M, D) held-out inputs
    y: np.ndarray  # (M,) or (M, K), as the training labels
    every: int = 250
    patience: int = 4

    def __post_init__(self) -> None:
        if self.every < 1 or self.patience < 1 or len(self.x) == 0 or len(self.x) != len(self.y):
            raise ValueError(f"EarlyStop needs every >= 1, patience >= 1 and M > 0 held-out rows with one label "
                             f"each; got every={self.every}, patience={self.patience}, x {np.shape(self.x)}, "
                             f"y {np.shape(self.y)}.")


def train_mlp(
    x: np.ndarray,
    y: np.ndarray,
    *,
    num_classes: int | None = None,
    config: MLPConfig | None = None,
    generator: torch.Generator,
    device: str | torch.device | None = None,
    progress: str | None = None,
    early_stop: EarlyStop | None = None,
) -> MLPClassifier:
    """Fit an MLP on ``x`` (N, D) and ``y`` ((N,) class indices, or (N, K) 0/1 for multi-label).

    Features are standardised with the training mean/std (the server sees only privatized inputs; this is
    post-processing). Mini-batch order and initialisation come from ``generator``. ``progress``: a label for a
    per-epoch progress bar (None = silent). ``early_stop``: stop on held-out loss and keep the best checkpoint
    (`EarlyStop`); None trains the full budget (epochs, capped at ``max_steps``).
    """
    config = config or MLPConfig()
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y)
    if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"train_mlp expects x (N, D) and y with N > 0 rows each, got {x.shape} and {y.shape}.")
    multilabel = y.ndim == 2
    if multilabel:
        d_out = y.shape[1]
    else:
        d_out = int(num_classes if num_classes is not None else y.max() + 1)
        if y.min() < 0 or y.max() >= d_out:
            raise ValueError(f"labels must lie in [0, {d_out}), got range [{y.min()}, {y.max()}].")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    mean = x.mean(axis=0) if config.standardize else np.zeros(x.shape[1], np.float32)
    std = x.std(axis=0) + 1e-6 if config.standardize else np.ones(x.shape[1], np.float32)
    z = x - mean  # (N, D) a new float32 array, standardised in place: one copy of x instead of two
    z /= std
    xt = torch.from_numpy(z).to(dev)
    yt = torch.from_numpy(y.astype(np.float32) if multilabel else y.astype(np.int64)).to(dev)

    masks = torch.Generator(device=dev)
    masks.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator).item()))
    net = _net(x.shape[1], d_out, config, generator, masks).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    loss_fn: nn.Module = nn.BCEWithLogitsLoss() if multilabel else nn.CrossEntropyLoss()
    n = len(xt)
    checks: list[tuple[int, float]] = []
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None  # (held-out loss, step, parameters)
    if early_stop is not None:
        hx = torch.from_numpy((np.asarray(early_stop.x, np.float32) - mean) / std).to(dev)
        hy = np.asarray(early_stop.y)
        hyt = torch.from_numpy(hy.astype(np.float32) if multilabel else hy.astype(np.int64)).to(dev)

    def check() -> bool:
        """Measure the held-out loss at this step, keep the parameters if it is the lowest; True = stop."""
        nonlocal best
        assert early_stop is not None
        net.eval()
        with torch.inference_mode():
            held = float(sum(loss_fn(net(hx[i : i + 8192]), hyt[i : i + 8192]).item() * len(hx[i : i + 8192])
                             for i in range(0, len(hx), 8192)) / len(hx))
        net.train()
        checks.append((taken, held))
        if best is None or held < best[0]:
            best = (held, taken, copy.deepcopy(net.state_dict()))
        return sum(1 for s, _ in checks if s > best[1]) >= early_stop.patience

    net.train()
    losses: list[float] = []
    stop = False
    budget = config.max_steps or math.inf  # the budget: cost stops growing with N once it binds
    taken = 0
    # a bar on a terminal; in a log file a plain line only when training outlasts the progress interval
    bar = progress_bar(total=config.epochs, desc=progress or "", unit="epoch", enabled=progress is not None,
                       leave=False, plain_final=False)
    for _ in range(config.epochs):
        if taken >= budget or stop:
            break
        order = torch.randperm(n, generator=generator).to(dev)
        total = torch.zeros((), device=dev)
        seen = 0
        for i in range(0, n, config.batch_size):
            if taken >= budget:
                break
            idx = order[i : i + config.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
            seen += len(idx)
            taken += 1
            if early_stop is not None and taken % early_stop.every == 0 and check():
                stop = True
                break
        losses.append(float(total) / max(seen, 1))
        bar.update()
    bar.close()
    if early_stop is not None and (not checks or checks[-1][0] != taken):
        check()  # the last parameters compete too
    if best is not None:
        net.load_state_dict(best[2])
    model = MLPClassifier(net, mean, std, multilabel, dev)
    model.losses = losses
    model.steps = taken
    model.best_step = taken if best is None else best[1]
    model.holdout_losses = checks
    return model


def diverged(losses: list[float]) -> str | None:
    """Why a training run looks diverged (NaN/inf loss, or a last epoch worse than the first), else None."""
    if not losses:
        return None
    if not all(np.isfinite(losses)):
        return "the training loss became NaN or infinite"
    if len(losses) > 1 and losses[-1] > losses[0] * 1.05:
        return f"the training loss rose from {losses[0]:.3g} to {losses[-1]:.3g}"
    return None


def warm_up() -> None:
    """Do once what the first `train_mlp` of a process does lazily: torch imports ``torch._dynamo`` when the first
    optimizer is built, and initialises its kernels and thread pool (~1.4 s on 2 CPU cores, measured). The Flower
    driver calls this while Ray starts, so the server's first training does not pay it."""
    x = np.zeros((2, 2), np.float32)
    train_mlp(x, np.array([0, 1]), num_classes=2, config=MLPConfig(hidden=2, epochs=1),
              generator=torch.Generator().manual_seed(0))
