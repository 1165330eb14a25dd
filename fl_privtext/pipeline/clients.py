"""The ClientApp with the orchestrator's data preparation: `build_app` for `fl-privtext run` and the tests, ``app``
for `flwr run .` (pyproject ``[tool.flwr.app.components]``).

Kept light (numpy, flwr and the privacy package), like `fl_privtext.federation.client_app`: every Ray actor
unpickles the app, and with it this module, before its first reply; the full-dataset preparation is imported only
by a client that has no snapshot to map in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fl_privtext.config import ExperimentConfig
from fl_privtext.federation import client_app

if TYPE_CHECKING:  # the type only: Flower is imported by fl_privtext.federation alone
    from flwr.clientapp import ClientApp


def client_prepare(cfg: ExperimentConfig, features: str) -> Any:
    """How a client prepares its own data when no snapshot is handed to it (`fl_privtext.pipeline.prepare`)."""
    from fl_privtext.pipeline.preparation import (
        prepare,  # heavy: HF datasets and torch, the full-dataset path only
    )

    return prepare(cfg, features=features)


def build_app(defend: bool = True) -> ClientApp:
    """The ClientApp (`fl_privtext.federation.client_app.build_app`) with the orchestrator's data preparation;
    ``defend=False`` gives the OLD, obedient behaviour (adversarial tests' power checks only)."""
    return client_app.build_app(client_prepare, defend)


app = build_app()
