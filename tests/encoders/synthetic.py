"""Data built to leak: the private attribute z is linearly encoded in the features, independently of the task y."""

from __future__ import annotations

import numpy as np
import torch

from fl_privtext import rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import ModelSpec, TrainData, build_model, defense_mechanism, encode, local_train
from fl_privtext.learn import MLPConfig, train_mlp
from fl_privtext.public import PublicSpec


def leaky_data(n: int = 1200, dim: int = 16, seed: int = 0) -> TrainData:
    g = np.random.Generator(np.random.PCG64(seed))
    y = g.integers(0, 2, n)
    z = g.integers(0, 2, n)
    x = g.normal(size=(n, dim)).astype(np.float32)
    x[:, 0] += 2.0 * (2 * y - 1)  # the task
    x[:, 1] += 3.0 * (2 * z - 1)  # the secret, linearly encoded
    x[:, 2] += 1.0 * (2 * z - 1)
    texts = [("abc " if zi else "xyz ") * 8 for zi in z]  # the text leaks z too (for the generation defence)
    return TrainData(labels=y.astype(np.int64), attributes={"gender": z.astype(np.int64)}, features=x, texts=texts)


def train_and_attack(defense: str, data: TrainData, *, epochs: int = 8, seed: int = 0,
                     sets: dict[str, object] | None = None, **train: object) -> dict:
    """Train the trunk centrally with ``defense`` on the first half, then a FRESH attacker on frozen r(x) of
    half of the rest, scored on the other half; also the task accuracy of a fresh classifier."""
    cfg = ExperimentConfig.from_flat({"train.defense": defense, "train.encoder": "trunk", "train.hidden": 32,
                                      "train.local-epochs": epochs, "train.lr": 0.003, "train.dropout": 0.0,
                                      **{f"train.{k}": v for k, v in train.items()}, **(sets or {})})
    n = len(data.labels)
    spec = ModelSpec(in_dim=data.features.shape[1], num_classes=2, attributes=(("gender", "categorical", 2),))
    model = build_model(cfg.train, spec, rng.torch_generator(seed, "init"))
    rows = np.arange(n)
    tr, att, te = rows[: n // 2], rows[n // 2 : 3 * n // 4], rows[3 * n // 4 :]
    local_train(model, data, tr, cfg.train, rng.generator(seed, "train"),
                mechanism=defense_mechanism(cfg.train, PublicSpec.of(cfg), model.out_dim))
    r_att, r_te = encode(model, data, att, cfg.train), encode(model, data, te, cfg.train)
    z = data.attributes["gender"]
    mcfg = MLPConfig(hidden=64, epochs=40, dropout=0.0)
    attacker = train_mlp(r_att, z[att], num_classes=2, config=mcfg, generator=torch.Generator().manual_seed(1))
    task = train_mlp(r_att, data.labels[att], num_classes=2, config=mcfg, generator=torch.Generator().manual_seed(2))
    return {"attack": float((attacker.predict(r_te) == z[te]).mean()),
            "task": float((task.predict(r_te) == data.labels[te]).mean())}
