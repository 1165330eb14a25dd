import tomllib
from pathlib import Path

import pytest

from fl_privtext.config import ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_round_trip_through_flat_and_toml(tmp_path):
    cfg = ExperimentConfig.from_flat({"privacy.epsilon": "2.5", "federation.num-clients": "7",
                                      "data.options.max_rows": "300", "data.options.user_per_record": "false",
                                      "data.options.label": "industry", "attack.enabled": "false"})
    assert cfg.privacy.epsilon == 2.5 and cfg.federation.num_clients == 7 and cfg.attack.enabled is False
    assert cfg.data.options == {"max_rows": 300, "user_per_record": False, "label": "industry"}
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert ExperimentConfig.load(path) == cfg
    assert ExperimentConfig.from_flat(cfg.to_flat()) == cfg


def test_pyproject_flower_config_mirrors_the_defaults():
    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    flat = {f"{sec}.{k}": v for sec, table in app_cfg.items() for k, v in table.items() if not isinstance(v, dict)}
    # the [client] policy is the clients' own (issue #22): never in the ServerApp's run config
    assert flat == {k: v for k, v in ExperimentConfig().to_flat().items() if not k.startswith("client.")}
    assert "client" not in app_cfg
    # every loader option of every dataset is declared (unset) so that `flwr run -c 'data.options.X=...'` works
    from fl_privtext.data import DATASETS, dataset_options

    declared = app_cfg["data"]["options"]
    assert set(declared) == {o for n in DATASETS for o in dataset_options(n)}
    assert set(declared.values()) == {""}
    assert ExperimentConfig.from_flat({f"data.options.{k}": v for k, v in declared.items()}) == ExperimentConfig()


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("privacy.epsilon", "0", "privacy.epsilon must be a finite number > 0"),
        ("privacy.epsilon", "inf", "privacy.epsilon must be a finite number > 0"),
        ("privacy.sampler", "exact", "privacy.sampler must be one of float, secure"),
        ("run.seed", "-1", "run.seed must be an integer >= 0"),
        ("run.client-seed", "-3", "run.client-seed must be an integer >= 0"),
        ("run.client-seed", "abc", "'run.client-seed' expects an integer"),
        ("privacy.epsilon", "abc", "expects a float"),
        ("federation.num-clients", "0", "num-clients must be >= 1"),
        ("federation.partition", "random", "iid, dirichlet, natural"),
        ("data.aux-frac", "1.5", "open interval (0, 1)"),
        ("data.aux-frac", "0", "open interval (0, 1)"),
        ("privacy.epsilonn", "1", "valid keys of [privacy]"),
        ("nosuch.key", "1", "sections are"),
        ("extractor.name", "word2vec", "glove, minilm, hf"),
        ("extractor.precision", "int8", "extractor.precision must be one of float32, bf16, fp16; got 'int8'"),
        ("extractor.precision", "bf16", "applies to minilm and hf; glove runs in float32"),  # default name: glove
        ("extractor.batch-size", "-1", "extractor.batch-size must be >= 0 (0 = auto"),
        ("server.epochs", "0", "server.epochs must be >= 1"),
        ("attack.dropout", "1", "attack.dropout must be in [0, 1)"),
    ],
)
def test_bad_config_names_the_key_and_the_valid_values(key, value, needle):
    with pytest.raises(ValueError, match=None) as exc:
        ExperimentConfig.from_flat({key: value})
    assert needle in str(exc.value)


def test_client_seed_is_unset_by_default_and_round_trips_when_set(tmp_path):
    assert ExperimentConfig().run.client_seed is None and ExperimentConfig().run.randomness == "secret"
    assert "run.client-seed" not in ExperimentConfig().to_flat()  # TOML and Flower's run config have no null
    cfg = ExperimentConfig.from_flat({"run.client-seed": "7"})
    assert cfg.run.client_seed == 7 and cfg.run.randomness == "reproducible"
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert ExperimentConfig.load(path) == cfg
    assert ExperimentConfig.from_flat({"run.client-seed": "none"}, cfg).run.client_seed is None


def test_scale_budgets_are_checked_with_their_key_names():
    import pytest

    with pytest.raises(ValueError, match=r"server\.max-steps must be >= 0"):
        ExperimentConfig.from_flat({"server.max-steps": -3})
    with pytest.raises(ValueError, match=r"attack\.max-aux-users must be >= 0"):
        ExperimentConfig.from_flat({"attack.max-aux-users": -1})
    cfg = ExperimentConfig.from_flat({"server.max-steps": 0, "attack.max-aux-users": 0})
    assert cfg.server.mlp().max_steps == 0 and cfg.attack.max_aux_users == 0


def test_extractor_precision_and_auto_batch_size_reach_the_extractor():
    from fl_privtext.extract import make_extractor_from

    cfg = ExperimentConfig.from_flat({"extractor.name": "minilm", "extractor.precision": "bf16", "extractor.device": "cpu"})
    assert cfg.extractor.batch_size == 0  # auto
    ext = make_extractor_from(cfg)
    assert ext.precision == "bf16" and ext.batch_size == 64 and ext.compute_dtype() == "bfloat16-autocast"
    explicit = make_extractor_from(ExperimentConfig.from_flat({"extractor.name": "minilm", "extractor.batch-size": 8}))
    assert explicit.precision == "float32" and explicit.batch_size == 8
