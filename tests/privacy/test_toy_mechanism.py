"""A mechanism defined here, in the test file, with its four declarations (how it is built from the privacy config
section, its noise law, its likelihood, its audit plan) and one registration: the construction path, the server's
noise law, the attacks' likelihood and the audit find them without an edit to any other file (issue #35, item 2).

The toy: per-coordinate randomised response on signs. The input is clipped to [-1, 1]^k, encoded as sign(x) in
{-1, +1}^k, and each sign is kept with probability e^a / (1 + e^a), a = epsilon / k, so two inputs differing in every
coordinate have likelihood ratio at most e^epsilon (pure epsilon-LDP, replacement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pytest

from fl_privtext.attacks import likelihood
from fl_privtext.client import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import (
    MECHANISMS,
    audit_mechanism,
    make_mechanism,
    mechanism_from_section,
    register_mechanism,
    unregister_mechanism,
)
from fl_privtext.privacy.audit import AuditPlan, Component
from fl_privtext.privacy.mechanisms import Mechanism
from fl_privtext.privacy.mechanisms.noise_law import NoiseLaw
from fl_privtext.privacy.stage import Stage
from fl_privtext.public import PublicSpec
from fl_privtext.server.noise import noise_law

NAME = "toy-sign-rr"


@dataclass(frozen=True, kw_only=True)
class ToySignRR(Mechanism):
    """Per-coordinate randomised response on the signs of the clipped input; epsilon split evenly over the k
    coordinates (module docstring)."""

    name: ClassVar[str] = NAME
    reference: ClassVar[str] = "A toy of the test suite."

    epsilon: float
    dim: int = 4  # required width (the default keeps the dataclass field order simple)

    # -- (a) how it is built from the privacy config section -----------------------------------------------------
    @classmethod
    def section_params(cls, section: Any, *, dim: int, projector: Any = None) -> dict[str, Any]:
        """Only epsilon and the width: the toy ignores every other privacy setting."""
        return {"epsilon": section.mechanism_params()["epsilon"], "dim": dim}

    @property
    def keep(self) -> float:
        """Pr[a sign is kept] = e^a / (1 + e^a), a = epsilon / k."""
        return 1.0 / (1.0 + math.exp(-self.epsilon / self.dim))

    def normalise(self, x: np.ndarray) -> Stage:
        return Stage(np.clip(x, -1.0, 1.0).astype(np.float32), {"method": "clip to [-1, 1]"})

    def encode(self, z: np.ndarray) -> Stage:
        return Stage(np.where(z >= 0, 1.0, -1.0).astype(np.float32), {"method": "sign"})

    def randomise(self, c: np.ndarray, rng: np.random.Generator) -> Stage:
        flip = rng.random(c.shape) >= self.keep
        return Stage(np.where(flip, -c, c).astype(np.float32), {"method": "sign flips", "keep": self.keep})

    def mean_output(self, c: np.ndarray) -> np.ndarray:
        return (2.0 * self.keep - 1.0) * np.asarray(c, np.float32)

    @property
    def claimed_epsilon(self) -> float:
        return float(self.epsilon)

    @property
    def epsilon_worst_case(self) -> float:
        return float(self.epsilon)

    # -- (b) its noise law ---------------------------------------------------------------------------------------
    def noise_law(self, input_dim: int, upload_mean: np.ndarray, generator: np.random.Generator, *,
                  input_norm2: float | None = None, norm_source: str = "") -> NoiseLaw:
        """Exact: each coordinate is +-1 with mean (2 keep - 1) s, so Var = 1 - (2 keep - 1)^2."""
        return NoiseLaw(np.full(len(upload_mean), 1.0 - (2.0 * self.keep - 1.0) ** 2), "closed form (toy)")

    # -- (c) its likelihood --------------------------------------------------------------------------------------
    def log_likelihood(self, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """log P[y | c] = sum_j (1 + y_j c_j) / 2 log keep + (1 - y_j c_j) / 2 log(1 - keep)."""
        agree = (uploads @ codes.T + uploads.shape[1]) / 2.0  # (N, M) coordinates where y_j = c_j
        return agree * math.log(self.keep) + (uploads.shape[1] - agree) * math.log1p(-self.keep)

    def likelihood_note(self) -> str:
        return ""

    # -- (d) its audit plan --------------------------------------------------------------------------------------
    def audit_plan(self, default_dim: int = 4) -> AuditPlan:
        """All-ones vs all-minus-ones codes: coordinate 0 stands for k identical independent coordinates."""
        k = self.dim
        return AuditPlan(np.ones(k), -np.ones(k), lambda c, rng: self.randomise(c, rng).values, k,
                         (Component("coordinate 0", k, lambda y: y[:, 0].astype(np.float64)),),
                         Component("number of +1 coordinates", 1, lambda y: (y > 0).sum(axis=1).astype(np.float64)),
                         "1 vs -1 (every sign differs)")


@dataclass(frozen=True, kw_only=True)
class OverClaimingToy(ToySignRR):
    """A known-bad variant: claims a tenth of the epsilon it spends (the audit must find it)."""

    name: ClassVar[str] = "toy-sign-rr-overclaim"

    @property
    def claimed_epsilon(self) -> float:
        return float(self.epsilon) / 10.0


@pytest.fixture
def registered():
    for cls in (ToySignRR, OverClaimingToy):
        register_mechanism(cls)
    yield
    for cls in (ToySignRR, OverClaimingToy):
        unregister_mechanism(cls.name)
    assert NAME not in MECHANISMS


def test_a_toy_mechanism_is_built_from_its_config_section_and_found_everywhere(registered):
    cfg = replace(ExperimentConfig(), privacy=replace(ExperimentConfig().privacy, mechanism=NAME, epsilon=2.0))
    mech = mechanism_for(PublicSpec.of(cfg), 6)  # the client's construction path: the toy's section_params
    assert type(mech) is ToySignRR and mech.epsilon == 2.0 and mech.dim == 6
    assert mechanism_from_section(cfg.privacy, 6) == mech
    assert mech.report().epsilon_worst_case == 2.0

    g = np.random.default_rng(0)
    x = g.normal(size=(4000, 6)).astype(np.float32)
    u = mech.privatize(x, g).astype(np.float64)
    law = noise_law(mech, 6, u.mean(axis=0), g)  # the server asks the mechanism
    assert law.method == "closed form (toy)"
    # the declared law is the measured one: uploads minus their noise-free mean
    np.testing.assert_allclose(((u - mech.expected(x)) ** 2).mean(axis=0), law.variance, rtol=0.05)

    fn, exact = likelihood.lookup(mech)  # the attacks ask the mechanism
    assert fn is ToySignRR.log_likelihood and exact and likelihood.note(mech) == ""
    codes = likelihood.encode_candidates(mech, x[:50])
    ll = likelihood.log_likelihood(mech, u[:50], codes)
    assert (ll.argmax(axis=1) == np.arange(50)).mean() > (ll.argmin(axis=1) == np.arange(50)).mean()


def test_a_toy_mechanism_is_audited_from_its_declared_plan_and_a_known_bad_variant_fails(registered):
    g = np.random.default_rng(1)
    good = audit_mechanism(make_mechanism(NAME, epsilon=2.0, dim=4), g, samples=20_000)
    assert good.verdict == "pass" and good.pair == "1 vs -1 (every sign differs)"
    bad = audit_mechanism(make_mechanism("toy-sign-rr-overclaim", epsilon=2.0, dim=4), g, samples=20_000)
    assert bad.verdict == "violation" and bad.epsilon_lower_bound > 0.2


def test_registration_refuses_a_taken_name_and_built_in_removal():
    @dataclass(frozen=True, kw_only=True)
    class Impostor(ToySignRR):
        name: ClassVar[str] = "laplace-l1"

    with pytest.raises(ValueError, match="'laplace-l1' is taken by"):
        register_mechanism(Impostor)
    with pytest.raises(ValueError, match="built-in"):
        unregister_mechanism("laplace-l1")
    assert NAME not in MECHANISMS
