"""Registry, validation, determinism, reports, accountant and the two CLI commands."""

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from fl_privtext import privacy
from fl_privtext.cli import main
from fl_privtext.privacy import MECHANISMS, Accountant, PrivacyReport, make_mechanism, mechanism_params
from fl_privtext.privacy.commands import audit, parse_params, privacy_report
from tests.samplers import float_mechanism

PACKAGE = Path(privacy.__file__).resolve().parent

VALID = {
    "none": {"dim": 6},
    "ome": {"epsilon": 1.0, "lam": 100.0, "dim": 6},
    "sue": {"epsilon": 1.0, "dim": 6},
    "oue": {"epsilon": 1.0, "dim": 6, "calibration": "textbook"},
    "bitrr": {"epsilon": 1.0, "dim": 6},
    "laplace-dpnr": {"epsilon": 1.0, "dim": 6},
    "laplace-dpnr-code": {"epsilon": 1.0, "dim": 6},
    "laplace-l1": {"epsilon": 1.0, "dim": 6},
    "laplace-box": {"epsilon": 1.0, "dim": 6},
    "gaussian": {"epsilon": 1.0, "delta": 1e-5, "dim": 6},
    "privunitg": {"epsilon": 1.0, "dim": 6},
    "privunit": {"epsilon": 1.0, "dim": 6},
    "duchi": {"epsilon": 1.0, "dim": 6},
    "mvlaplace": {"epsilon": 1.0, "dim": 6},
    "purkayastha": {"epsilon": 1.0, "dim": 6},
}


def test_registry_names_match_the_design():
    assert list(MECHANISMS) == ["none", "ome", "sue", "oue", "bitrr", "laplace-dpnr", "laplace-dpnr-code",
                                "laplace-l1", "laplace-box", "gaussian", "privunitg", "privunit", "duchi",
                                "mvlaplace", "purkayastha"]
    assert set(VALID) == set(MECHANISMS)


@pytest.mark.parametrize("name", list(VALID))
def test_interface_shapes_dtype_and_report(name):
    mech = make_mechanism(name, **VALID[name])
    assert mech.name == name
    x = np.random.default_rng(0).normal(size=(17, 6)).astype(np.float32)
    y = mech.privatize(x, np.random.default_rng(1))
    assert y.dtype == np.float32 and y.shape == (17, mech.output_dim)
    rep = mech.report()
    assert isinstance(rep, PrivacyReport) and rep.mechanism == name and rep.output_dim == mech.output_dim
    js = rep.to_json()
    json.dumps(js, allow_nan=False)  # strictly JSON-safe
    for key in ("mechanism", "epsilon_nominal", "epsilon_worst_case", "delta", "assumptions"):
        assert key in js
    assert js["assumptions"] and all(isinstance(a, str) and a.endswith(".") for a in js["assumptions"])
    assert any(k in js for k in ("p", "p1", "flip_probability", "noise_scale", "noise_std")) or name == "none"
    with pytest.raises(dataclasses.FrozenInstanceError):
        mech.mu = 0.5  # type: ignore[misc]


@pytest.mark.parametrize("name", list(VALID))
def test_same_seed_same_output_different_seed_different_output(name):
    mech = make_mechanism(name, **VALID[name])
    x = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32)
    a = mech.privatize(x, np.random.default_rng(42))
    b = mech.privatize(x, np.random.default_rng(42))
    c = mech.privatize(x, np.random.default_rng(43))
    assert np.array_equal(a, b)
    assert np.array_equal(a, c) == (name == "none")


def test_privatize_does_not_modify_or_alias_input():
    x = np.ones((4, 6), dtype=np.float32)
    x[:, 0] = 3.0
    before = x.copy()
    for name, params in VALID.items():
        y = make_mechanism(name, **params).privatize(x, np.random.default_rng(0))
        assert not np.shares_memory(x, y)
    assert np.array_equal(x, before)


def test_no_global_rng_in_library_code():
    forbidden = [
        re.compile(r"np\.random\.(?!Generator\b)\w+"),  # np.random.seed/rand/normal/default_rng ...
        re.compile(r"numpy\.random\.(?!Generator\b)\w+"),
        re.compile(r"^\s*(import random|from random import)", re.MULTILINE),
        re.compile(r"torch\.(manual_seed|rand|randn|randint|normal|bernoulli)\b"),
        re.compile(r"default_rng\("),
    ]
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        text = path.read_text()
        for pattern in forbidden:
            assert not pattern.search(text), f"{path.name}: {pattern.pattern}"


@pytest.mark.parametrize(("name", "params", "match"), [
    ("ome", {"epsilon": 0.0, "lam": 1.0, "dim": 2}, r"epsilon must be a finite number > 0"),
    ("ome", {"epsilon": -1.0, "lam": 1.0, "dim": 2}, r"epsilon must be a finite number > 0"),
    ("laplace-l1", {"epsilon": math.inf}, r"epsilon must be a finite number > 0"),
    ("laplace-l1", {"epsilon": math.nan}, r"epsilon must be a finite number > 0"),
    ("ome", {"epsilon": 1.0, "lam": 0.0, "dim": 2}, r"lam must be a finite number > 0"),
    ("ome", {"epsilon": 1.0, "lam": -3.0, "dim": 2}, r"lam must be a finite number > 0"),
    ("ome", {"epsilon": 1.0, "lam": 1.0, "dim": 2, "int_bits": 0, "frac_bits": 0},
     r"int_bits \+ frac_bits must be between 1 and 32"),
    ("bitrr", {"epsilon": 1.0, "dim": 0}, r"dim must be an integer >= 1"),
    ("laplace-dpnr", {"epsilon": 1.0, "dim": 1}, r"dim must be an integer >= 2"),
    ("gaussian", {"epsilon": 1.0, "delta": 0.0}, r"delta must be in the open interval \(0, 1\)"),
    ("gaussian", {"epsilon": 1.0, "delta": 1.0}, r"delta must be in the open interval \(0, 1\)"),
    ("gaussian", {"epsilon": 1.0, "delta": -0.1}, r"delta must be in the open interval \(0, 1\)"),
    ("laplace-l1", {"epsilon": 1.0, "clip_norm": 0.0}, r"clip_norm must be a finite number > 0"),
    ("laplace-box", {"epsilon": 1.0, "dim": 3, "low": 1.0, "high": 0.0}, r"low < high"),
    ("sue", {"epsilon": 1.0, "dim": 3, "calibration": "exact"}, r"calibration must be one of 'paper', 'textbook'"),
    ("laplace-l1", {"epsilon": 1.0, "mu": 1.5}, r"mu \(word dropout rate\) must be a number in \[0, 1\]"),
    ("laplace-l1", {"epsilon": 1.0, "sampler": "exact"}, r"sampler must be one of 'float', 'secure'"),
    ("laplace-l1", {"epsilon": 1.0, "sampler": "secure"}, r"sampler='secure' needs dim"),
    ("laplace-l1", {"epsilon": 1e-40}, r"exceeds what float32 uploads can carry"),
    ("laplace-dpnr-code", {"epsilon": 1.0, "sampler": "secure"}, r"offers only sampler='float'"),
    ("gaussian", {"epsilon": 1e300, "delta": 1e-5}, r"outside what float32 uploads can carry"),
    ("bitrr", {"epsilon": 1e4, "dim": 1, "int_bits": 0, "frac_bits": 1}, r"below 2\^-53"),
    ("oue", {"epsilon": 1e4, "dim": 1, "int_bits": 0, "frac_bits": 1}, r"below 2\^-53"),
])
def test_bad_parameters_name_the_valid_range(name, params, match):
    with pytest.raises(ValueError, match=match):
        float_mechanism(name, **params)


def test_mechanism_params_lists_accepted_names():
    assert mechanism_params("ome") == ("dim", "mu", "epsilon", "int_bits", "frac_bits", "lam")
    assert mechanism_params("gaussian") == ("dim", "mu", "epsilon", "delta", "clip_norm", "sampler")
    assert mechanism_params("laplace-l1") == ("dim", "mu", "epsilon", "sampler", "clip_norm")
    with pytest.raises(ValueError, match="valid names"):
        mechanism_params("omg")


def test_unknown_name_param_and_missing_param():
    with pytest.raises(ValueError, match="valid names: none, ome, sue, oue, bitrr, laplace-dpnr"):
        make_mechanism("ldp")
    with pytest.raises(ValueError, match="accepted parameters: dim, mu, epsilon, sampler, clip_norm"):
        make_mechanism("laplace-l1", epsilon=1.0, lam=3.0, sampler="float")
    with pytest.raises(ValueError, match="requires dim, lam"):
        make_mechanism("ome", epsilon=1.0)
    with pytest.raises(ValueError, match="numpy.random.Generator"):
        make_mechanism("laplace-l1", epsilon=1.0, sampler="float").privatize(np.zeros((1, 2)), 0)  # type: ignore[arg-type]


def test_accountant_composes_per_user():
    acc = Accountant()
    ome = make_mechanism("ome", epsilon=1.0, lam=100.0, dim=50).report()
    l1 = make_mechanism("laplace-l1", epsilon=0.5, sampler="float").report()
    g = make_mechanism("gaussian", epsilon=1.0, delta=1e-6, sampler="float").report()
    acc.charge(np.array([3, 1, 3]), l1)  # user 3 twice in one upload batch
    acc.charge(np.array([1, 2]), l1, times=4)
    acc.charge(2, g)
    assert acc.epsilon_of(3) == pytest.approx(1.0) and acc.releases_of(3) == 2
    assert acc.epsilon_of(1) == pytest.approx(2.5) and acc.epsilon(1) == acc.epsilon_of(1)
    assert acc.epsilon_of(2) == pytest.approx(3.0) and acc.delta_of(2) == pytest.approx(1e-6)
    assert acc.epsilon_of(99) == 0.0 and acc.max_epsilon() == pytest.approx(3.0)
    acc.charge(np.array([1]), ome)
    assert acc.epsilon_of(1, "nominal") == pytest.approx(3.5)
    assert acc.epsilon_of(1) == pytest.approx(2.5 + 3451.39, abs=0.01)
    ids, eps = acc.epsilons()
    assert ids.tolist() == [1, 2, 3] and eps.shape == (3,)
    js = acc.to_json()
    json.dumps(js, allow_nan=False)
    assert js["users"] == 3 and js["per_user"]["3"]["releases"] == 2
    with pytest.raises(ValueError, match="integer user ids"):
        acc.charge(np.array(["a"]), l1)
    with pytest.raises(ValueError, match="times must be an integer >= 1"):
        acc.charge(np.array([1]), l1, times=0)


def test_accountant_string_ids_and_infinity():
    acc = Accountant()
    code = make_mechanism("laplace-dpnr-code", epsilon=1.0).report()
    acc.charge(np.array(["u1", "u22"]), code)
    acc.charge(["u1"], make_mechanism("laplace-l1", epsilon=1.0, sampler="float").report())
    assert math.isinf(acc.epsilon_of("u1")) and acc.epsilon_of("u1", "nominal") == pytest.approx(2.0)
    assert acc.to_json()["max_epsilon_worst_case"] == "inf" and acc.to_json()["max_epsilon"] == "inf"
    assert acc.max_epsilon("nominal") == pytest.approx(2.0)
    with pytest.raises(ValueError, match="kind must be one of worst_case, nominal"):
        acc.max_epsilon("typical")  # type: ignore[arg-type]


def test_parse_params_types_and_dashes():
    p = parse_params("ome", {"epsilon": "1", "lam": "100", "dim": "50", "int-bits": "4", "frac_bits": "5"})
    assert p == {"epsilon": 1.0, "lam": 100.0, "dim": 50, "int_bits": 4, "frac_bits": 5}
    assert parse_params("laplace-l1", {"epsilon": "2", "clip-norm": "0.5", "dim": "none"})["dim"] is None
    with pytest.raises(ValueError, match="expects an integer"):
        parse_params("ome", {"dim": "5.5"})
    with pytest.raises(ValueError, match="expects a number"):
        parse_params("ome", {"epsilon": "big"})
    with pytest.raises(ValueError, match="accepted parameters: .*int-bits"):
        parse_params("ome", {"bogus": "1"})


def test_privacy_report_command_example():
    out = privacy_report("ome", {"epsilon": "1", "lam": "100", "dim": "50", "int-bits": "4", "frac-bits": "5"})
    assert out["mechanism"] == "ome" and out["epsilon_nominal"] == 1.0
    assert out["epsilon_worst_case"] == pytest.approx(3451.4, abs=0.05)
    assert out["p1"] == pytest.approx(0.990099, abs=1e-6) and out["q"] == pytest.approx(0.009881, abs=1e-6)
    assert out["delta"] == 0.0


def test_audit_command_example():
    out = audit("laplace-l1", {"epsilon": "1", "dim": "4", "sampler": "secure"}, samples=20_000, seed=0)
    assert out["verdict"] == "pass" and out["samples"] == 20_000 and out["alpha"] == 0.05
    assert 0.5 < out["epsilon_lower_bound"] <= 1.0 and out["epsilon_claimed"] == 1.0
    flt = audit("laplace-l1", {"epsilon": "1", "dim": "4", "sampler": "float"}, samples=50_000, seed=0)
    assert flt["verdict"] == "violation" and flt["detectors"][0]["lower_bound"] > 5  # the low bits leak
    bad = audit("laplace-dpnr-code", {"epsilon": "1", "dim": "4", "alpha": "0.01"}, samples=20_000, seed=1)
    assert bad["verdict"] == "violation" and bad["alpha"] == 0.01 and bad["epsilon_worst_case"] == "inf"


def test_cli_outputs_json(capsys):
    assert main(["privacy-report", "ome", "--set", "epsilon=1", "--set", "lam=100", "--set", "dim=50",
                 "--set", "int-bits=4", "--set", "frac-bits=5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon_worst_case"] == pytest.approx(3451.4, abs=0.05)
    assert main(["audit", "laplace-l1", "--set", "epsilon=1", "--set", "dim=2", "--set", "sampler=secure",
                 "--samples", "5000"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "pass"


@pytest.mark.parametrize(("argv", "match"), [
    (["privacy-report", "ome", "--set", "epsilon=0", "--set", "lam=1", "--set", "dim=2"], "epsilon must be"),
    (["privacy-report", "ome", "--set", "epsilon=1", "--set", "lam=-1", "--set", "dim=2"], "lam must be"),
    (["privacy-report", "ome", "--set", "epsilon=1", "--set", "lam=1", "--set", "dim=2", "--set", "int-bits=0",
      "--set", "frac-bits=0"], "between 1 and 32"),
    (["privacy-report", "gaussian", "--set", "epsilon=1", "--set", "delta=2"], r"open interval \(0, 1\)"),
    (["privacy-report", "nope"], "valid names"),
    (["audit", "nope", "--set", "epsilon=1"], "valid names"),
    (["audit", "laplace-l1", "--set", "epsilon=1", "--set", "sampler=float", "--samples", "5"], "samples must be"),
    (["privacy-report", "laplace-l1", "--set", "epsilon=1", "--set", "lam=2"], "accepted parameters"),
])
def test_cli_errors_are_one_line_and_exit_2(capsys, argv, match):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fl-privtext {argv[0]}: error:")
    assert re.search(match, lines[0])


def test_default_run_mechanism_is_float_safe():
    """The README main job's configuration (defaults + pyproject) privatizes with the secure sampler."""
    from fl_privtext.config import ExperimentConfig

    cfg = ExperimentConfig.load()
    assert cfg.privacy.sampler == "secure"
    accepted = mechanism_params(cfg.privacy.mechanism)
    params = {k: v for k, v in cfg.privacy.mechanism_params().items() if k in accepted} | {"dim": 50}
    report = make_mechanism(cfg.privacy.mechanism, **params).report().to_json()
    assert report["float_safe"] is True
    assert report["epsilon_worst_case"] <= cfg.privacy.epsilon * (1 + 1e-4)
    float_report = make_mechanism(cfg.privacy.mechanism, **(params | {"sampler": "float"})).report().to_json()
    assert float_report["float_safe"] is False
