"""The ServerApp of `flwr run .` (pyproject ``[tool.flwr.app.components]``): the orchestrator's point and report,
config from the run config. Its ClientApp is `fl_privtext.pipeline.clients.app`."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.server_app import server_app as make_server_app
from fl_privtext.pipeline.federated import serve
from fl_privtext.pipeline.point import run_plain
from fl_privtext.pipeline.runner import REFEREE_SOURCE, baseline_point, plain_blocker
from fl_privtext.report import finalize

log = logging.getLogger(__name__)


def main(grid: Any, context: Any) -> None:
    """`flwr run .`: the run config (pyproject [tool.flwr.app.config] + overrides) is the experiment config."""
    if any(str(k).startswith("client.") for k in context.run_config):
        raise ValueError("The [client] policy must not be in the run config: it is the clients' own. Give it to the "
                         "SuperNodes instead (--node-config 'client.max-epsilon=4 client.on-device=true').")
    cfg = ExperimentConfig.from_flat(dict(context.run_config))
    if cfg.run.client_seed is not None:
        raise ValueError("run.client-seed must not be in the run config: the ServerApp would hold the seed of the "
                         "clients' noise. Give it to the SuperNodes instead (--node-config 'client-seed=N', or the "
                         "FL_PRIVTEXT_CLIENT_SEED environment variable of the simulation).")
    t0 = time.perf_counter()
    (served,) = serve(grid, [cfg])
    baseline, skipped = referee_baseline(cfg)
    out = finalize(served, cfg, total_s=time.perf_counter() - t0, output=cfg.run.output or None,
                   baseline=baseline, baseline_source=REFEREE_SOURCE, baseline_skipped=skipped)
    log.warning("fl-privtext: results written to %s", os.path.abspath(out["output_dir"]))


def referee_baseline(cfg: ExperimentConfig) -> tuple[dict[str, Any] | None, str]:
    """`flwr run .`'s no-privacy reference: the SuperNodes serve only the private point (a client that held a
    no-privacy entry would hand its clean data to any server that asks), so the reference is the referee's own
    computation on the same data, without clients (`fl_privtext.pipeline.run_plain`, which the Flower path equals).
    Returns (the point, "") or (None, why not) where the plain loop cannot stand in for the federation."""
    reference = baseline_point(cfg)
    if reference is None:
        return None, ""
    why = plain_blocker(reference)
    if why:
        msg = f"{why}: the referee's plain loop does not run it, and the SuperNodes serve only the private point"
        log.warning("fl-privtext: no no-privacy reference (%s)", msg)
        return None, msg
    return run_plain(reference), ""


server_app = make_server_app(main)
