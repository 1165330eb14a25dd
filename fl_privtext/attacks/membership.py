"""Mechanism-aware membership inference: was this observed upload produced from this candidate's text?

Game: pairs (candidate c, upload y) from the re-identification pool; positive when y = M(x_c), negative when y came
from another candidate. The score is the likelihood ratio of "from c" against "from the pool":
log p(y | c) - log (1/M sum_j p(y | j)), with the mechanism's exact likelihood (Neyman-Pearson: the most powerful
test against the pool mixture). Reported as AUC and TPR at 1% FPR; under (eps, delta)-LDP every test has
TPR <= e^eps FPR + delta (:func:`fl_privtext.attacks.ceilings.membership_tpr_ceiling`).
Note: this is membership of a text in the uploaded traffic, which output LDP does bound; membership in the
encoder's training data is not bounded by output LDP (privacy-facts.md, section 5) and is not attacked here.
Reference: Yeom et al. (CSF 2018) for the game; Kairouz et al. (2014) / Humphries et al. for the LDP ROC bound.
"""

from __future__ import annotations

import numpy as np

from fl_privtext.attacks.reidentification import score_candidates
from fl_privtext.attacks.view import AttackView


def membership_scores(view: AttackView) -> np.ndarray:
    """(Q, M) likelihood-ratio score that query upload q was produced from candidate m."""
    ll = score_candidates(view)
    m = ll.max(axis=1, keepdims=True)
    log_pool = m + np.log(np.exp(ll - m).mean(axis=1, keepdims=True))
    return ll - log_pool
