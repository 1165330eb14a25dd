"""Local privacy of text representations: normalise -> encode -> randomise, reports, accounting, audits.

Pure numpy (+ scipy special functions). No global RNG: every random function takes a ``numpy.random.Generator``.
Contract: docs/design.md; mechanisms, true epsilons and the published claims that are wrong: docs/privacy.md.
"""

from fl_privtext.privacy.accountant import Accountant
from fl_privtext.privacy.amplification import ShuffleGuarantee, shuffle_guarantee
from fl_privtext.privacy.audit import AuditResult, audit_mechanism, event_lower_bound, plan_for
from fl_privtext.privacy.calibration import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    per_bit_epsilon,
    per_bit_epsilon_terms,
)
from fl_privtext.privacy.dropout import amplified_epsilon, word_dropout
from fl_privtext.privacy.encoding import decode, encode
from fl_privtext.privacy.labels import label_rr, label_rr_report
from fl_privtext.privacy.mechanisms import (
    MECHANISMS,
    Mechanism,
    Release,
    make_mechanism,
    mechanism_from_section,
    mechanism_params,
    register_mechanism,
    unregister_mechanism,
)
from fl_privtext.privacy.report import PrivacyReport
from fl_privtext.privacy.stage import Stage

__all__ = [
    "MECHANISMS",
    "Accountant",
    "AuditResult",
    "Mechanism",
    "PrivacyReport",
    "Release",
    "ShuffleGuarantee",
    "Stage",
    "amplified_epsilon",
    "analytic_gaussian_sigma",
    "audit_mechanism",
    "classic_gaussian_sigma",
    "decode",
    "encode",
    "event_lower_bound",
    "gaussian_delta",
    "label_rr",
    "label_rr_report",
    "make_mechanism",
    "mechanism_from_section",
    "mechanism_params",
    "per_bit_epsilon",
    "per_bit_epsilon_terms",
    "plan_for",
    "register_mechanism",
    "shuffle_guarantee",
    "unregister_mechanism",
    "word_dropout",
]
