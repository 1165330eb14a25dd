"""Mechanism-aware re-identification: which of M public candidates produced an observed upload?

Game (closed world): the attacker holds the clean representations of M candidates (their texts are public, run
through the public extractor) and an upload known to come from one of them. It ranks the candidates by the exact
log-likelihood of the upload under each candidate's code (:mod:`fl_privtext.attacks.likelihood`): the maximum-
likelihood rule, which is Bayes-optimal for a uniform prior over candidates. Under eps-LDP no rule beats
e^eps / (e^eps + M - 1) top-1 accuracy (:func:`fl_privtext.attacks.ceilings.reidentification_ceiling`).
Reference: the linkage attacks of Song & Raghunathan (CCS'20, Sec. 6) and the LDP bound of Kairouz et al. (2014).
"""

from __future__ import annotations

import numpy as np

from fl_privtext.attacks import likelihood
from fl_privtext.attacks.view import AttackView


def score_candidates(view: AttackView) -> np.ndarray:
    """(Q, M) log-likelihood of each query upload under each candidate (higher = more likely the source)."""
    if view.candidates is None or len(view.queries) == 0:
        raise ValueError("The re-identification game needs candidates and queries in the view.")
    codes = likelihood.encode_candidates(view.mechanism, view.candidates)
    return likelihood.log_likelihood(view.mechanism, view.uploads[view.queries], codes)


def reidentify(view: AttackView) -> np.ndarray:
    """(Q, M) candidate indices of each query, most likely first."""
    scores = score_candidates(view)
    return np.argsort(-scores, axis=1, kind="stable")
