"""Each Phase A defence does what it claims, on data built to leak (z linearly encoded in the features)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_privtext import rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.encoders import ModelSpec, build_model, defense_mechanism, evaluate, local_train
from fl_privtext.encoders.train import declustering_term, noise_layer, noise_mechanism
from fl_privtext.learn import MLPConfig, train_mlp
from fl_privtext.public import PublicSpec
from tests.encoders.synthetic import leaky_data, train_and_attack

SPEC = ModelSpec(in_dim=16, num_classes=2, attributes=(("gender", "categorical", 2),))


@pytest.fixture(scope="module")
def data():
    return leaky_data()


@pytest.fixture(scope="module")
def undefended(data):
    return train_and_attack("none", data, epochs=15)


def _noise(cfg: ExperimentConfig, model):
    """The defence's noise-layer mechanism for ``model`` (None for defences without one)."""
    return defense_mechanism(cfg.train, PublicSpec.of(cfg), model.out_dim)


def _trained(defense: str, data, epochs: int = 10, epsilon: float = 1.0, rows: int = 600, mechanism: str = "laplace-l1",
             **train: object):
    cfg = ExperimentConfig.from_flat({"train.defense": defense, "train.hidden": 32, "train.local-epochs": epochs,
                                      "train.lr": 0.003, "train.dropout": 0.0, "privacy.epsilon": epsilon,
                                      "privacy.mechanism": mechanism,
                                      **{f"train.{k}": v for k, v in train.items()}})
    model = build_model(cfg.train, SPEC, rng.torch_generator(0, "init"))
    local_train(model, data, np.arange(rows), cfg.train, rng.generator(0, "train"),
                mechanism=_noise(cfg, model))
    return model, cfg


def test_the_undefended_trunk_leaks_z(undefended):
    assert undefended["task"] > 0.9 and undefended["attack"] > 0.9  # the fresh attacker recovers z


def test_gradient_reversal_lowers_a_fresh_attackers_accuracy(data, undefended):
    res = train_and_attack("adversarial", data, epochs=15, lambda_adv=3.0)
    assert res["attack"] < undefended["attack"] - 0.05
    assert res["task"] > 0.9  # the task survives


def test_declustering_lowers_a_fresh_attackers_accuracy(data, undefended):
    res = train_and_attack("declustering", data, epochs=15)
    assert res["attack"] < undefended["attack"] - 0.05
    assert res["task"] > 0.9


def test_declustering_pushes_same_z_pairs_apart_and_pulls_different_z_pairs_together():
    # the authors' code's sign (the paper's formula has it inverted)
    r = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 3.0]], requires_grad=True)
    z = {"gender": torch.tensor([0, 0, 1, 0])}
    perm = torch.tensor([1, 0, 3, 2])  # pairs (0, 1): same z; (2, 3): different z
    declustering_term(r, z, perm, alpha=0.1).backward()
    with torch.no_grad():
        step = r - 0.5 * r.grad
    assert torch.dist(step[0], step[1]) > torch.dist(r[0], r[1])  # same z: apart
    assert torch.dist(step[2], step[3]) < torch.dist(r[2], r[3])  # different z: together


def test_multidetask_deceives_its_duplicate_adversary_but_not_a_fresh_one(data):
    # Coavoux's protocol: the in-training adversary is no privacy measure; the fresh attacker is.
    model, cfg = _trained("multidetask", data)
    held = np.arange(600, 1200)
    duplicate = evaluate(model, data, held, cfg.train, rng.generator(1, "eval"),
                         mechanism=_noise(cfg, model))["adversary_accuracy_gender"]
    with torch.no_grad():
        r = model.encoder(data.inputs("features", held, cfg.train, torch.device("cpu"))).numpy()
    z = data.attributes["gender"][held]
    fresh = train_mlp(r[:300], z[:300], num_classes=2, config=MLPConfig(hidden=64, epochs=40, dropout=0.0),
                      generator=torch.Generator().manual_seed(0))
    assert duplicate < 0.75
    assert (fresh.predict(r[300:]) == z[300:]).mean() > duplicate + 0.1


def test_adversarial_generation_makes_the_encoder_raise_the_decoders_loss(data):
    held = np.arange(600, 900)

    def decoder_nll(lam: float) -> float:
        model, cfg = _trained("generation", data, epochs=3, rows=300, gen_chars=8, lambda_adv=lam,
                              batch_size=64)
        with torch.no_grad():
            r = model.encoder(data.inputs("features", held, cfg.train, torch.device("cpu")))
            return float(model.generator.nll(r, data.chars(held, 8, torch.device("cpu"))))

    assert decoder_nll(1.0) > decoder_nll(0.0) + 0.05  # lambda = 0: the decoder trains, nobody opposes it


def test_noise_layer_is_straight_through_with_fresh_noise():
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0})
    mech = noise_mechanism(PublicSpec.of(cfg), 4)
    g = rng.generator(0, "noise")
    r = torch.ones(3, 4, requires_grad=True)
    a, b = noise_layer(r, mech, g), noise_layer(r, mech, g)
    assert not torch.equal(a, b)  # fresh noise per step
    a.sum().backward()
    assert torch.equal(r.grad, torch.ones(3, 4))  # backward: identity


def test_training_with_the_noise_layer_beats_training_without_under_the_same_noise(data):
    # DPNR's robust training: the task head trained on noisy r(x) does better on noisy r(x)
    noisy = ExperimentConfig.from_flat({"train.defense": "noise", "privacy.epsilon": 10.0})
    held = np.arange(600, 1200)
    scores = {}
    for defense in ("none", "noise"):
        model, _ = _trained(defense, data, hidden=8, epsilon=10.0)
        scores[defense] = evaluate(model, data, held, noisy.train, rng.generator(1, "eval"),
                                   mechanism=_noise(noisy, model))
    assert scores["noise"]["val_loss"] < scores["none"]["val_loss"]
    assert scores["noise"]["val_accuracy"] >= scores["none"]["val_accuracy"] - 0.01


def test_noise_defense_rejects_a_mechanism_of_another_width():
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": "ome"})
    with pytest.raises(ValueError, match="width"):
        noise_mechanism(PublicSpec.of(cfg), 8)


def test_adv_attributes_gives_heads_to_the_named_attributes_only():
    spec = ModelSpec(in_dim=16, num_classes=2, attributes=(("gender", "categorical", 2), ("age", "categorical", 3)))
    for defense in ("adversarial", "cape"):
        cfg = ExperimentConfig.from_flat({"train.defense": defense, "train.adv-attributes": "age"})
        assert list(build_model(cfg.train, spec, rng.torch_generator(0, "init")).adversaries) == ["age"]
    every = ExperimentConfig.from_flat({"train.defense": "cape"})
    assert list(build_model(every.train, spec, rng.torch_generator(0, "init")).adversaries) == ["gender", "age"]
    with pytest.raises(ValueError, match="train.adv-attributes must be a comma-separated list"):
        ExperimentConfig.from_flat({"train.adv-attributes": "gender,"})


def test_cape_without_noise_is_gradient_reversal_exactly(data):
    # the noise layer of mechanism none is the identity: cape must then train the same model as adversarial
    plain = train_and_attack("adversarial", data, epochs=5, lambda_adv=3.0)
    cape = train_and_attack("cape", data, epochs=5, lambda_adv=3.0, sets={"privacy.mechanism": "none"})
    assert cape == plain


def test_cape_adversary_reads_the_noisy_representation(data):
    # evaluated on noisy r at epsilon 0.05 (Lap(40) on an L1-normalised r), the in-training adversary is at chance;
    # on clean r (mechanism none) the same model's adversary recovers z
    model, cfg = _trained("cape", data, epochs=5, lambda_adv=0.0, epsilon=0.05)
    held = np.arange(600, 1200)
    noisy = evaluate(model, data, held, cfg.train, rng.generator(1, "eval"),
                     mechanism=_noise(cfg, model))["adversary_accuracy_gender"]
    clean_cfg = ExperimentConfig.from_flat({"privacy.mechanism": "none"}, cfg)
    model_clean, _ = _trained("cape", data, epochs=5, lambda_adv=0.0, mechanism="none")
    clean = evaluate(model_clean, data, held, clean_cfg.train, rng.generator(1, "eval"),
                     mechanism=_noise(clean_cfg, model_clean))["adversary_accuracy_gender"]
    assert abs(noisy - 0.5) < 0.06 and clean > 0.9
