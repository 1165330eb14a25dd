"""``server.auto-candidates`` (issue #38): the learners auto cross-validates beside the constant. The MLP is out by
default (it rarely won, at 25-35x its winner's fit: `fl_privtext.config.AUTO_CANDIDATES`) and scored where added."""

from __future__ import annotations

import numpy as np
import pytest

from fl_privtext import rng
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy import make_mechanism
from fl_privtext.server.training import fit_learner


@pytest.mark.parametrize("value", ["centroid,mlpp", "", " , ", "constant", "auto"])
def test_unknown_names_or_an_empty_list_are_one_line_errors_naming_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match=r"server.auto-candidates must be .*centroid.*lda.*linear.*mlp|"
                                         r"server.auto-candidates must be .*mlp.*linear.*lda.*centroid") as err:
        ExperimentConfig.from_flat({"server.auto-candidates": value})
    assert "\n" not in str(err.value)


def test_the_default_leaves_the_mlp_out_and_names_are_read_in_order() -> None:
    assert ExperimentConfig().server.auto_learners() == ("centroid", "lda", "linear")
    cfg = ExperimentConfig.from_flat({"server.auto-candidates": " lda, mlp,constant,lda"})
    assert cfg.server.auto_learners() == ("lda", "mlp")


def _fit(candidates: tuple[str, ...] | None) -> dict[str, dict]:
    g = np.random.default_rng(0)
    n, d, k = 600, 6, 3
    y = g.integers(0, k, n)
    x = (np.eye(k, d)[y] + 0.5 * g.standard_normal((n, d))).astype(np.float32)
    cfg = ExperimentConfig.from_flat({"server.epochs": 1, "server.hidden": 8})
    mlp = {"config": cfg.server.mlp(), "generator": rng.torch_generator(0, "server"), "progress": None}
    kw = {} if candidates is None else {"candidates": candidates}
    _, _, scores = fit_learner("auto", x, y, np.arange(n) // 3, num_classes=k, seed=0, input_dim=d, mlp=mlp,
                               mechanism=make_mechanism("gaussian", epsilon=1.0, delta=1e-5, clip_norm=1.0,
                                                        sampler="float"), **kw)
    return scores


def test_auto_by_default_never_fits_the_mlp_even_when_given_its_settings_and_scores_it_when_added() -> None:
    assert set(_fit(None)) == {"constant", "centroid", "lda", "linear"}
    assert set(_fit(("centroid", "mlp"))) == {"constant", "centroid", "mlp"}  # no linear C search either
