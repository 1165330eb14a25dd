"""A pca projection fitted on public data runs end to end: preflight, clients, server, report."""

from __future__ import annotations

import pytest

from fl_privtext import pipeline
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline.runner import validate


def test_pca_projection_passes_preflight_and_runs(data_root):
    sets = {"privacy.mechanism": "privunitg", "privacy.epsilon": "4", "privacy.projection": "pca",
            "privacy.proj-dim": "16", "privacy.public-data": "imdb", "data.root": str(data_root),
            "server.epochs": "3", "attack.enabled": "false", "run.progress": "false"}
    cfg = ExperimentConfig.load(None, sets)
    prep = validate(cfg)  # the probe mechanism is built at the extractor's width (a pca map is fitted to it)
    out = pipeline.run_plain(cfg, pipeline.prepare(cfg))
    seed = out["per_seed"][0]
    assert seed["output_dim"] == 16 and seed["uploads_received"] == len(prep.ds)
    params = out["privacy"]["parameters"]
    assert params["public_data"] == "imdb" and params["projector"]["method"] == "pca"
    with pytest.raises(ValueError, match="disjoint"):
        validate(ExperimentConfig.load(None, {**sets, "privacy.public-data": "default"}))
