"""The model a client trains in Phase A: encoder r(x), task head, and the defence's heads; its exchanged state.

Only the trainable parameters travel (a MiniLM's frozen lower layers are loaded locally from the model files on
both sides). Names are stable ``state_dict`` keys, so a Flower ArrayRecord maps one to one onto the model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fl_privtext.config import TrainConfig
from fl_privtext.encoders import nets
from fl_privtext.extract.glove import glove_table
from fl_privtext.extract.transformer import default_model_dir, load_model


@dataclass(frozen=True)
class ModelSpec:
    """What the model's shape depends on besides the train config (all public: the server builds it too)."""

    in_dim: int  # width of the frozen extractor's features (trunk)
    num_classes: int
    attributes: tuple[tuple[str, str, int], ...]  # (name, "categorical" | "multilabel", classes)


ADVERSARIAL_HEADS = ("adversarial", "multidetask", "cape")


class PrivModel(nn.Module):
    def __init__(self, encoder: nets.Encoder, spec: ModelSpec, cfg: TrainConfig, g: torch.Generator):
        super().__init__()
        self.encoder: nets.Encoder = encoder
        self.spec, self.defense = spec, cfg.defense
        d = encoder.out_dim
        self.task = nets.mlp(d, max(spec.num_classes, 2), g)
        self.adversaries = nn.ModuleDict()
        if cfg.defense in ADVERSARIAL_HEADS:
            chosen = cfg.adv_attribute_list()
            for name, _kind, k in spec.attributes:
                if not chosen or name in chosen:
                    self.adversaries[name] = nets.mlp(d, k, g)
        self.generator: nets.CharDecoder | None = nets.CharDecoder(d, g) if cfg.defense == "generation" else None

    @property
    def out_dim(self) -> int:
        return int(self.encoder.out_dim)

    def adversary_parameters(self) -> list[nn.Parameter]:
        params = list(self.adversaries.parameters())
        if self.generator is not None:
            params += list(self.generator.parameters())
        return params

    def main_parameters(self) -> list[nn.Parameter]:
        adv = {id(p) for p in self.adversary_parameters()}
        return [p for p in self.parameters() if p.requires_grad and id(p) not in adv]


def build_encoder(cfg: TrainConfig, spec: ModelSpec, g: torch.Generator) -> nets.Encoder:
    if cfg.encoder == "trunk":
        return nets.Trunk(spec.in_dim, cfg.hidden, cfg.dropout, g)
    if cfg.encoder == "lstm":
        vectors = None
        if cfg.glove_init:
            vectors = np.array(glove_table().vectors[: cfg.vocab_size], np.float32)  # a writable copy
        return nets.LSTMEncoder(cfg.vocab_size, cfg.hidden, cfg.dropout, g, vectors=vectors)
    if cfg.encoder == "minilm":
        _, net, _ = load_model(str(default_model_dir()), torch.device("cpu"))
        return nets.MiniLMEncoder(copy.deepcopy(net).train(), cfg.minilm_layers)
    raise ValueError(f"train.encoder must be one of trunk, lstm, minilm; got {cfg.encoder!r}.")


def build_model(cfg: TrainConfig, spec: ModelSpec, g: torch.Generator) -> PrivModel:
    """The Phase A model, initialised from ``g`` (the server's initial global model; public)."""
    return PrivModel(build_encoder(cfg, spec, g), spec, cfg, g)


def trainable_state(model: nn.Module, prefix: str = "") -> dict[str, np.ndarray]:
    """The exchanged state: every trainable parameter (float32, copied), in module order."""
    return {k: p.detach().cpu().numpy().astype(np.float32, copy=True)
            for k, p in model.named_parameters() if p.requires_grad and k.startswith(prefix)}


def load_state(model: nn.Module, state: dict[str, np.ndarray]) -> None:
    """Load exchanged parameters (a subset of the trainable ones, e.g. the encoder's only)."""
    params = dict(model.named_parameters())
    unknown = set(state) - set(params)
    if unknown:
        raise ValueError(f"Received parameters the model does not have: {sorted(unknown)[:3]}.")
    with torch.no_grad():
        for k, v in state.items():
            params[k].copy_(torch.as_tensor(np.asarray(v), dtype=params[k].dtype))


def spec_from(prep: object) -> ModelSpec:
    """The model's shape from a `fl_privtext.pipeline.Prepared` (public: the server derives the same)."""
    ds = prep.ds  # type: ignore[attr-defined]
    features = prep.features  # type: ignore[attr-defined]
    in_dim = int(features.shape[1]) if features is not None else int(prep.extractor.dim)  # type: ignore[attr-defined]
    attrs = tuple((a.name, a.kind, len(a.classes)) for a in ds.attributes)
    return ModelSpec(in_dim=in_dim, num_classes=len(ds.label_names), attributes=attrs)
