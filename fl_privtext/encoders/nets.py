"""Trainable client-side encoders r(x) and the heads the defences put on top of them.

Every module draws its initialisation from an explicit ``torch.Generator`` (``skip_init`` + seeded init) and its
dropout masks from a generator the client sets before training (`GDropout`); nothing touches the global RNG.

Encoders (``out_dim`` is the width of r(x), what Phase B privatizes and uploads):
- `Trunk` (CAPE, Plant et al. 2021, Sec. 3): dense(hidden) - ReLU - dropout - dense(hidden) - tanh on the frozen
  extractor's features. The tanh bounds r(x) (declustering's push-apart term is otherwise unbounded).
- `LSTMEncoder` (Coavoux et al. 2018, Sec. 2.1): word embeddings (GloVe 6B 50d init optional; vocabulary: the
  ``vocab_size`` most frequent GloVe words, others -> <unk>) + one LSTM layer of ``hidden`` units trained from
  scratch; r(x) is the last state. Dropout 0.2 on the embeddings (the paper's LSTM dropout).
- `MiniLMEncoder` (DPNR, Lyu et al. 2020): all-MiniLM-L6-v2 mean-pooled, its top ``minilm_layers`` transformer
  layers fine-tuned (0 = all, as DPNR fine-tunes BERT); only those are exchanged with the server. The model's own
  dropout is switched off (nn.Dropout draws from the global RNG).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from fl_privtext.learn import linear  # torch's default nn.Linear init drawn from an explicit generator

PAD, UNK, CHAR_BOS, CHAR_VOCAB = 0, 1, 256, 257


class GDropout(nn.Module):
    """Inverted dropout whose masks come from ``self.generator`` (set by the client before training)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if self.generator is None:
            raise RuntimeError("GDropout needs a generator: call set_generator(model, g) before training.")
        keep = torch.empty(x.shape, device="cpu").bernoulli_(1 - self.p, generator=self.generator).to(x.device)
        return x * keep / (1 - self.p)


def set_generator(model: nn.Module, g: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, GDropout):
            m.generator = g


def lstm(d_in: int, hidden: int, g: torch.Generator) -> nn.LSTM:
    """torch's default LSTM initialisation (uniform +-1/sqrt(hidden)) drawn from ``g``."""
    with torch.device("meta"):  # no default initialisation (it would draw from the global RNG)
        layer = nn.LSTM(d_in, hidden, batch_first=True)
    layer = layer.to_empty(device="cpu")
    with torch.no_grad():
        for p in layer.parameters():
            nn.init.uniform_(p, -1 / math.sqrt(hidden), 1 / math.sqrt(hidden), generator=g)
    return layer


def mlp(d_in: int, d_out: int, g: torch.Generator, hidden: int = 64) -> nn.Sequential:
    """A head with one hidden layer of 64 ReLU units (Coavoux et al., Sec. 4.2)."""
    return nn.Sequential(linear(d_in, hidden, g), nn.ReLU(), linear(hidden, d_out, g))


class Encoder(nn.Module):
    """r(x): ``kind`` names the inputs it reads (see `fl_privtext.encoders.inputs`), ``out_dim`` the width of r."""

    kind: str = ""
    out_dim: int = 0


class Trunk(Encoder):
    kind = "features"

    def __init__(self, in_dim: int, hidden: int, dropout: float, g: torch.Generator):
        super().__init__()
        self.net = nn.Sequential(linear(in_dim, hidden, g), nn.ReLU(), GDropout(dropout), linear(hidden, hidden, g),
                                 nn.Tanh())
        self.out_dim = hidden

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(inputs["x"])  # (B, hidden)


class LSTMEncoder(Encoder):
    kind = "tokens"

    def __init__(self, vocab_size: int, hidden: int, dropout: float, g: torch.Generator,
                 vectors: Any = None, emb_dim: int = 50):
        super().__init__()
        emb_dim = vectors.shape[1] if vectors is not None else emb_dim
        self.embed = torch.nn.utils.skip_init(nn.Embedding, vocab_size + 2, emb_dim, padding_idx=PAD)
        with torch.no_grad():
            nn.init.normal_(self.embed.weight, std=0.1, generator=g)
            self.embed.weight[PAD].zero_()
            if vectors is not None:  # rows 2.. are the GloVe words in frequency order
                self.embed.weight[2:] = torch.as_tensor(vectors[:vocab_size], dtype=torch.float32)
        self.drop = GDropout(dropout)
        self.rnn = lstm(emb_dim, hidden, g)
        self.out_dim = hidden

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        ids, lengths = inputs["ids"], inputs["lengths"]  # (B, T), (B,)
        emb = self.drop(self.embed(ids))
        packed = nn.utils.rnn.pack_padded_sequence(emb, lengths.clamp(min=1).cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, (h, _) = self.rnn(packed)
        return h[-1]  # (B, hidden): the last state


class MiniLMEncoder(Encoder):
    kind = "transformer"

    def __init__(self, net: Any, layers: int):
        super().__init__()
        self.net: Any = net
        for m in self.net.modules():  # its dropout would draw from the global RNG
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        blocks = list(self.net.encoder.layer)
        train_from = 0 if layers == 0 else max(0, len(blocks) - layers)
        for p in self.net.parameters():
            p.requires_grad_(layers == 0)
        for block in blocks[train_from:]:
            for p in block.parameters():
                p.requires_grad_(True)
        self.out_dim = int(self.net.config.hidden_size)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.net(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
        m = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)  # (B, 384)


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lam: float) -> torch.Tensor:
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.lam * grad, None


def grad_reverse(x: torch.Tensor, lam: float) -> torch.Tensor:
    """Identity forward, gradient times -lam backward (Ganin & Lempitsky 2015; CAPE's adversarial head)."""
    return _Reverse.apply(x, lam)


class CharDecoder(nn.Module):
    """Coavoux et al. Sec. 3.1.2: a character-level LSTM language model whose state is initialised with r(x)
    (h0 = tanh(W r(x)), c0 = 0); characters are UTF-8 bytes, 256 = beginning of text."""

    def __init__(self, r_dim: int, g: torch.Generator, hidden: int = 128, emb: int = 32):
        super().__init__()
        self.init = linear(r_dim, hidden, g)
        self.embed = torch.nn.utils.skip_init(nn.Embedding, CHAR_VOCAB, emb)
        with torch.no_grad():
            nn.init.normal_(self.embed.weight, std=0.1, generator=g)
        self.rnn = lstm(emb, hidden, g)
        self.out = linear(hidden, 256, g)

    def nll(self, r: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        """Mean per-character negative log-likelihood of ``chars`` (B, C) (-1 = padding) given r (B, D)."""
        prev = torch.cat([torch.full_like(chars[:, :1], CHAR_BOS), chars[:, :-1].clamp(min=0)], dim=1)
        h0 = torch.tanh(self.init(r)).unsqueeze(0)  # (1, B, H)
        out, _ = self.rnn(self.embed(prev), (h0, torch.zeros_like(h0)))
        logits = self.out(out)  # (B, C, 256)
        return nn.functional.cross_entropy(logits.reshape(-1, 256), chars.reshape(-1), ignore_index=-1)
