"""Issue #35 item 2: learners, attacks, extractors and secure-sum tasks sit behind registries like the mechanisms'.

Adding one is its own code plus one registration: this file registers a toy learner, a toy attacker family and a
toy whole-traffic attack from here (no other file changes) and sees each accepted by the config, run end to end
through the plain loop (`fl_privtext.pipeline.run_plain`, no Flower) and named in the results.json that
`fl_privtext.report.finalize` writes. The registries' names are read without importing torch (the up-front checks'
contract, tests/test_errors_before_imports.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fl_privtext.config import ExperimentConfig
from fl_privtext.names import (
    ATTACK_FAMILIES,
    ATTACKS,
    EXTRACTORS,
    LEARNERS,
    MECHANISMS,
    SECAGG_TASKS,
    Registry,
)

ROOT = Path(__file__).resolve().parents[1]


# ---- the generic registry -------------------------------------------------------------------------------------------
def test_names_are_read_without_importing_the_components():
    code = ("import sys\nfrom fl_privtext import names\n"
            "assert list(names.LEARNERS) == ['mlp', 'linear', 'lda', 'centroid']\n"
            "assert 'hf' in names.EXTRACTORS and 'phase-a' in names.SECAGG_TASKS\n"
            "print(sorted(m for m in ('torch', 'numpy', 'flwr', 'fl_privtext.server', 'fl_privtext.extract') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_unknown_name_is_one_line_listing_the_choices():
    reg: Registry[int] = Registry("widget", {"a": 1, "b": "math:pi"})
    with pytest.raises(ValueError) as e:
        reg.get("c")
    assert str(e.value) == "Unknown widget 'c'; valid names: a, b."  # the mechanism registry's words
    assert reg.get("b") == pytest.approx(np.pi) and reg["a"] == 1  # "module:attr" imported on first use
    assert reg.get("c", None) is None  # the Mapping form, with a default, does not raise
    with pytest.raises(ValueError, match="'a' is already registered"):
        reg.register("a", 2)

    @reg.register("c")
    def c() -> int:
        return 3

    assert list(reg) == ["a", "b", "c"] and reg.get("c") is c


def test_builtins_resolve_to_their_owners():
    """Every lazy built-in names a real component, and the owners read the very same registry objects."""
    from fl_privtext import extract
    from fl_privtext.attacks import attribute
    from fl_privtext.client.aggregate import TASK as STATS_TASK
    from fl_privtext.federation import secagg, secagg_train
    from fl_privtext.server import learners

    for reg in (LEARNERS, ATTACK_FAMILIES, ATTACKS, EXTRACTORS, SECAGG_TASKS):
        assert all(callable(reg[name]) for name in reg), reg
    assert learners.LEARNERS is LEARNERS and extract.EXTRACTORS is EXTRACTORS and secagg.SECAGG_TASKS is SECAGG_TASKS
    assert {STATS_TASK, secagg_train.TASK} <= set(SECAGG_TASKS)  # no import of client_app needed to know them
    assert set(ATTACK_FAMILIES) <= set(attribute.FAMILIES)  # the built-ins' trial order covers every built-in family
    assert {EXTRACTORS[n].__name__ for n in EXTRACTORS} == {"GloveExtractor", "MiniLMExtractor", "HFExtractor"}


# ---- toy components, registered from this file ----------------------------------------------------------------------
class NearestMean:
    """A toy learner: the nearest class mean of the uploads (no noise law), exported as one linear layer."""

    name = "toy-nearest-mean"

    def __init__(self, num_classes: int) -> None:
        self.k = num_classes

    @classmethod
    def build(cls, inputs: Any) -> NearestMean:
        return cls(inputs.num_classes)

    def fit(self, x: np.ndarray, y: np.ndarray) -> NearestMean:
        self.m = np.stack([x[y == c].mean(axis=0) if (y == c).any() else x.mean(axis=0) for c in range(self.k)])
        return self

    def logits(self, u: np.ndarray) -> np.ndarray:
        return np.asarray(u, np.float64) @ self.m.T - (self.m * self.m).sum(1) / 2

    def export(self) -> dict[str, np.ndarray]:
        d = self.m.shape[1]
        return {"mean": np.zeros(d, np.float32), "std": np.ones(d, np.float32),
                "weight_0": self.m.astype(np.float32), "bias_0": (-(self.m * self.m).sum(1) / 2).astype(np.float32)}


def prior_family(prob: Any, train: np.ndarray, rows: np.ndarray, key: object) -> np.ndarray:
    """A toy attacker family: the aux users' class frequencies for every upload (log posteriors)."""
    lp = prob.log_prior(prob.z[train])
    return np.tile(lp - np.logaddexp.reduce(lp), (len(rows), 1))


def count_attack(view: Any, truth: Any) -> dict[str, Any]:
    """A toy whole-traffic attack: how many uploads the eavesdropper saw."""
    return {"toy-count": {"uploads_seen": len(view.uploads), "violation": False}}


def toy_mechanism() -> type:
    """A toy mechanism: Laplace in L1 under another name. What registering a mechanism needs today, nothing more:
    its class (here inheriting the noise law, likelihood and audit plan that the isinstance chains of
    fl_privtext.server.noise / attacks.likelihood / privacy.audit find for LaplaceL1) and its registration."""
    from fl_privtext.privacy.mechanisms import LaplaceL1

    return type("ToyLaplace", (LaplaceL1,), {"name": "toy-laplace"})


@pytest.fixture
def toys() -> Iterator[None]:
    LEARNERS.register(NearestMean.name, NearestMean.build)
    ATTACK_FAMILIES.register("toy-prior")(prior_family)
    ATTACKS.register("toy-count", count_attack)
    MECHANISMS.register("toy-laplace", toy_mechanism())
    try:
        yield
    finally:
        for reg, name in ((LEARNERS, NearestMean.name), (ATTACK_FAMILIES, "toy-prior"), (ATTACKS, "toy-count"),
                          (MECHANISMS, "toy-laplace")):
            del reg[name]


def test_unregistered_names_are_refused_by_the_config():
    from fl_privtext.pipeline.preflight import check_privacy

    for key, value in (("server.learner", NearestMean.name), ("attack.learner", NearestMean.name),
                       ("attack.families", "logistic,toy-prior")):
        with pytest.raises(ValueError, match=f"{key} must be"):
            ExperimentConfig.from_flat({key: value})
    with pytest.raises(ValueError, match="Unknown mechanism 'toy-laplace'"):
        check_privacy(ExperimentConfig.from_flat({"privacy.mechanism": "toy-laplace"}))


def test_toy_learner_and_attacks_run_end_to_end_and_are_named_in_results(toys, tmp_path):
    from fl_privtext import pipeline
    from fl_privtext.pipeline.preflight import check_point
    from fl_privtext.report import finalize

    cfg = ExperimentConfig.from_flat({"server.learner": NearestMean.name, "attack.families": "toy-prior",
                                      "privacy.mechanism": "toy-laplace", "privacy.epsilon": 8, "run.progress": False,
                                      "run.baseline": False, "attack.inversion-vocab": 50,
                                      "attack.reid-pool": 20})
    check_point(cfg)  # the up-front checks accept every toy
    point = pipeline.run_plain(cfg)
    finalize(point, cfg, total_s=0.0, output=tmp_path, echo=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["utility"]["learner"] == NearestMean.name
    assert results["utility"]["accuracy"] > 0
    assert results["config"]["server.learner"] == NearestMean.name
    for name, attack in results["attacks"].items():
        assert "oof_upload_accuracy" in attack["families"]["toy-prior"], name
    assert results["attacks_extra"]["toy-count"]["uploads_seen"] > 0
    assert results["privacy"]["mechanism"] == "toy-laplace"
    seen = results["attacks_extra"]["toy-count"]["uploads_seen"]
    assert f"toy-count: uploads_seen {seen}" in (tmp_path / "summary.md").read_text()  # the report names it too
