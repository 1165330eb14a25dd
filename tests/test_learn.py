import numpy as np
import pytest

from fl_privtext import rng
from fl_privtext.learn import MLPConfig, train_mlp


def _blobs(n=600, seed=0):
    g = np.random.default_rng(seed)
    y = g.integers(0, 3, n)
    x = g.normal(size=(n, 5)).astype(np.float32) + np.eye(3, 5)[y] * 3
    return x, y


def test_mlp_learns_separable_classes_and_is_deterministic():
    x, y = _blobs()
    cfg = MLPConfig(hidden=16, epochs=10)
    m1 = train_mlp(x[:400], y[:400], config=cfg, generator=rng.torch_generator(1, "t"))
    m2 = train_mlp(x[:400], y[:400], config=cfg, generator=rng.torch_generator(1, "t"))
    acc = (m1.predict(x[400:]) == y[400:]).mean()
    assert acc > 0.9
    np.testing.assert_array_equal(m1.logits(x[400:]), m2.logits(x[400:]))
    m3 = train_mlp(x[:400], y[:400], config=cfg, generator=rng.torch_generator(2, "t"))
    assert not np.array_equal(m1.logits(x[400:]), m3.logits(x[400:]))


def test_multilabel_and_errors():
    x, y = _blobs()
    yy = np.eye(3, dtype=np.int8)[y]
    m = train_mlp(x, yy, config=MLPConfig(hidden=0, epochs=5), generator=rng.torch_generator(0))
    assert m.predict(x).shape == (600, 3)
    with pytest.raises(ValueError, match="labels must lie"):
        train_mlp(x, y, num_classes=2, generator=rng.torch_generator(0))
    with pytest.raises(ValueError, match="dropout"):
        MLPConfig(dropout=1.0)


def test_training_leaves_the_global_rng_alone():
    import torch

    x, y = _blobs(200)
    before = torch.random.get_rng_state().clone()
    train_mlp(x, y, config=MLPConfig(hidden=8, epochs=2), generator=rng.torch_generator(3))
    assert torch.equal(before, torch.random.get_rng_state())


def test_max_steps_caps_the_sgd_steps_and_never_binds_below_the_epochs():
    x, y = _blobs(n=1000)
    full = train_mlp(x, y, config=MLPConfig(hidden=8, epochs=3, batch_size=32), generator=rng.torch_generator(0))
    assert full.steps == 3 * 32 and len(full.losses) == 3  # ceil(1000 / 32) = 32 steps per epoch
    roomy = train_mlp(x, y, config=MLPConfig(hidden=8, epochs=3, batch_size=32, max_steps=1000),
                      generator=rng.torch_generator(0))
    np.testing.assert_array_equal(roomy.logits(x), full.logits(x))  # a cap above the work changes nothing
    capped = train_mlp(x, y, config=MLPConfig(hidden=8, epochs=3, batch_size=32, max_steps=40),
                       generator=rng.torch_generator(0))
    assert capped.steps == 40 and len(capped.losses) == 2  # one full epoch, then 8 steps of the second
    assert not np.array_equal(capped.logits(x), full.logits(x))
    with pytest.raises(ValueError, match=r"max_steps must be >= 0 \(0 = no cap\); got -1"):
        MLPConfig(max_steps=-1)
