"""The three trainable encoders build, train a step, exchange their state and encode (CPU, tiny data)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_privtext import rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import (
    ModelSpec,
    TrainData,
    build_model,
    encode,
    load_state,
    local_train,
    trainable_state,
)

TEXTS = ["the movie was great and i loved it", "terrible service , never again", "an ok product for the price",
         "i would buy this again", "it broke after two days", "my wife likes it", "fast delivery , nice box",
         "not worth the money at all"] * 2
SPEC = ModelSpec(in_dim=6, num_classes=2, attributes=(("gender", "categorical", 2), ("ents", "multilabel", 3)))


@pytest.fixture
def data():
    g = np.random.Generator(np.random.PCG64(0))
    n = len(TEXTS)
    return TrainData(labels=np.arange(n) % 2, attributes={"gender": (np.arange(n) // 2) % 2,
                                                          "ents": g.integers(0, 2, (n, 3)).astype(np.int8)},
                     features=g.normal(size=(n, 6)).astype(np.float32), texts=TEXTS)


@pytest.mark.parametrize("encoder,extra", [
    ("trunk", {}),
    ("lstm", {"train.hidden": 12, "train.vocab-size": 2000}),
    ("lstm", {"train.hidden": 12, "train.vocab-size": 2000, "train.glove-init": False}),
    ("minilm", {"train.minilm-layers": 1, "train.max-tokens": 16}),
])
@pytest.mark.parametrize("defense", ["none", "adversarial", "generation"])
def test_encoder_trains_exchanges_and_encodes(data, encoder, extra, defense):
    if encoder == "minilm" and defense == "generation":
        pytest.skip("covered by the other encoders (slow on CPU)")
    cfg = ExperimentConfig.from_flat({"train.encoder": encoder, "train.defense": defense, "train.batch-size": 8,
                                      "train.gen-chars": 8, **extra})
    model = build_model(cfg.train, SPEC, rng.torch_generator(0, "init"))
    before = trainable_state(model)
    rows = np.arange(len(TEXTS))
    stats = local_train(model, data, rows, cfg.train, rng.generator(0, "fit"))
    after = trainable_state(model)
    assert stats["num_examples"] == len(rows) and stats["steps"] == 2
    assert set(before) == set(after) and any(not np.array_equal(before[k], after[k]) for k in before)
    r = encode(model, data, rows[:5], cfg.train)
    assert r.shape == (5, model.out_dim) and np.isfinite(r).all()
    # a fresh model loaded with the exchanged state encodes identically
    other = build_model(cfg.train, SPEC, rng.torch_generator(1, "init"))
    load_state(other, after)
    np.testing.assert_allclose(encode(other, data, rows[:5], cfg.train), r, rtol=1e-5, atol=1e-6)


def test_minilm_exchanges_only_its_fine_tuned_layers():
    cfg = ExperimentConfig.from_flat({"train.encoder": "minilm", "train.minilm-layers": 1})
    state = trainable_state(build_model(cfg.train, SPEC, rng.torch_generator(0, "init")), prefix="encoder.")
    assert state and all(".encoder.layer.5." in k for k in state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_minilm_trains_on_cuda(data):  # pragma: no cover - only where a GPU is present
    cfg = ExperimentConfig.from_flat({"train.encoder": "minilm", "train.device": "cuda", "train.max-tokens": 16})
    model = build_model(cfg.train, SPEC, rng.torch_generator(0, "init")).to("cuda")
    local_train(model, data, np.arange(8), cfg.train, rng.generator(0, "fit"))
    assert encode(model, data, np.arange(4), cfg.train).shape == (4, 384)
