"""The [train] section: defaults (Phase A off), and clear errors for impossible settings."""

from __future__ import annotations

import pytest

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.training import check_training, training_off


def test_phase_a_is_off_by_default():
    cfg = ExperimentConfig()
    assert cfg.train.rounds == 0 and cfg.train.dp_clip == 0
    off = training_off(cfg)
    assert off["enabled"] is False and off["rounds"] == 0 and off["guarantee"] == "none"


@pytest.mark.parametrize("sets,needle", [
    ({"train.defense": "adversary"}, "none, noise, adversarial, multidetask, declustering, generation"),
    ({"train.encoder": "bert"}, "trunk, lstm, minilm"),
    ({"train.strategy": "scaffold"}, "fedavg, fedprox, fedadam"),
    ({"train.rounds": -1}, "train.rounds must be >= 0"),
    ({"train.dp-noise-multiplier": 1.0}, "needs train.dp-clip > 0"),
    ({"train.dp-clip": 1.0, "train.strategy": "fedadam"}, "wraps train.strategy='fedavg' only"),
    ({"train.dp-delta": 0}, "train.dp-delta must be in (0, 1)"),
])
def test_bad_train_settings_fail_with_a_sentence(sets, needle):
    with pytest.raises(ValueError) as exc:
        ExperimentConfig.from_flat(sets)
    assert needle in str(exc.value)


@pytest.mark.parametrize("sets,needle", [
    ({"train.clients-per-round": 9}, "exceeds federation.num-clients=4"),
    ({"train.defense": "noise", "privacy.mechanism": "ome"}, "needs a mechanism whose output has the encoder's width"),
    ({"privacy.mu": 0.2}, "Word dropout"),
])
def test_impossible_combinations_fail_before_anything_starts(sets, needle):
    cfg = ExperimentConfig.from_flat({"train.rounds": 2, **sets})
    with pytest.raises(ValueError) as exc:
        check_training(cfg, pipeline.prepare(cfg, features="none"))
    assert needle in str(exc.value)
