"""The untrusted server: learners on noisy uploads (`learners`), the mechanism's noise law (`noise`), model
selection by user-grouped cross-validation (`selection`), training and evaluation (`training`).

The eavesdropper (`fl_privtext.attacks`) reuses these learners.
"""

from fl_privtext.server.learners import LEARNERS, ClassStats, Learner, label_rr_matrix, make_learner
from fl_privtext.server.noise import noise_variance
from fl_privtext.server.selection import cross_validate, select
from fl_privtext.server.training import (
    Trained,
    fit_learner,
    server_inputs,
    server_mlp_config,
    train_and_evaluate,
    train_server,
)

__all__ = [
    "LEARNERS",
    "ClassStats",
    "Learner",
    "Trained",
    "cross_validate",
    "fit_learner",
    "label_rr_matrix",
    "make_learner",
    "noise_variance",
    "select",
    "server_inputs",
    "server_mlp_config",
    "train_and_evaluate",
    "train_server",
]
