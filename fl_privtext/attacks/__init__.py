"""The eavesdropper: attacks on recorded traffic, each next to its baseline and its LDP ceiling.

One module per attack, each reading only an :class:`AttackView` (observed traffic + public knowledge):

- :mod:`~fl_privtext.attacks.attribute`: attribute inference per upload and per user (MLP, logistic,
  mechanism-aware likelihood; chosen out of fold on aux users);
- :mod:`~fl_privtext.attacks.reidentification` and :mod:`~fl_privtext.attacks.membership`: linkage with the
  mechanism's exact likelihood (:mod:`~fl_privtext.attacks.likelihood`, which each mechanism declares beside its class);
- :mod:`~fl_privtext.attacks.inversion`: keyword inversion (Song & Raghunathan, CCS'20);
- :mod:`~fl_privtext.attacks.ceilings`: what any attacker can reach under the true epsilon, and the alarm;
- :mod:`~fl_privtext.attacks.evaluate`: the referee that builds the view, runs the attacks and scores them.
See docs/attacks.md.
"""

from fl_privtext.attacks.evaluate import Truth, observe, run_attacks
from fl_privtext.attacks.view import AttackView, KnownAttribute

ENTRY_POINTS = (
    "fl_privtext.attacks.attribute:infer_attribute",
    "fl_privtext.attacks.attribute:plain_logistic",  # the floor beside the attacker's answer
    "fl_privtext.attacks.reidentification:reidentify",
    "fl_privtext.attacks.reidentification:score_candidates",
    "fl_privtext.attacks.membership:membership_scores",
    "fl_privtext.attacks.inversion:invert",
)

__all__ = ["ENTRY_POINTS", "AttackView", "KnownAttribute", "Truth", "observe", "run_attacks"]
