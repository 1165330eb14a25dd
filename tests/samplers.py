"""`float_mechanism(name, **params)`: the mechanism with the float sampler, for tests of the float sampler.

The secure sampler is the default wherever a mechanism is built (issue #35); tests of what the float sampler does
(its closed-form noise moments, its low-bit leak, calibrations beyond the secure samplers' ranges) ask for it by
name. Mechanisms without a sampler parameter are built as they are; an explicit ``sampler`` is kept.
"""

from __future__ import annotations

from typing import Any

from fl_privtext.privacy import Mechanism, make_mechanism, mechanism_params


def float_mechanism(name: str, **params: Any) -> Mechanism:
    """``make_mechanism(name, sampler="float", **params)`` where ``name`` takes a sampler and none is given."""
    if "sampler" in mechanism_params(name) and "sampler" not in params:
        params["sampler"] = "float"
    return make_mechanism(name, **params)
