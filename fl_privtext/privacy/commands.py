"""Back end of ``fl-privtext privacy-report`` and ``fl-privtext audit``: parse CLI strings, return JSON-safe dicts.

CLI parameter names use dashes (``int-bits``) or underscores; values are parsed by the type of the mechanism's
parameter. Anything wrong raises ValueError with the valid names or range (the CLI prints it and exits with 2).
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields
from typing import Any

from fl_privtext.privacy.audit import audit_mechanism
from fl_privtext.privacy.mechanisms import MECHANISMS, Mechanism, make_mechanism
from fl_privtext.rng import generator  # numpy only (torch only inside torch_generator)

AUDIT_OPTIONS = ("alpha",)


def _mechanism_class(name: str) -> type[Mechanism]:
    cls = MECHANISMS.get(name)
    if cls is None:
        raise ValueError(f"Unknown mechanism {name!r}; valid names: {', '.join(MECHANISMS)}.")
    return cls


def _parse_float(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"Parameter {key!r} expects a number, got {raw!r}.") from None
    if math.isnan(value):
        raise ValueError(f"Parameter {key!r} expects a number, got {raw!r}.")
    return value


def _parse_int(key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"Parameter {key!r} expects an integer, got {raw!r}.") from None


def parse_params(name: str, params: dict[str, str]) -> dict[str, Any]:
    """CLI strings -> typed keyword parameters of mechanism ``name`` (dashes become underscores)."""
    cls = _mechanism_class(name)
    hints = typing.get_type_hints(cls)
    accepted = {f.name for f in fields(cls) if f.init}
    out: dict[str, Any] = {}
    for key, raw in params.items():
        py = key.strip().replace("-", "_")
        if py not in accepted:
            extra = (f" {name!r} has no secure sampler (its report's float_safe says whether what it samples meets "
                     "its epsilon)." if py == "sampler" else "")
            raise ValueError(f"Mechanism {name!r} does not accept {key!r}; accepted parameters: "
                             f"{', '.join(sorted(k.replace('_', '-') for k in accepted))}.{extra}")
        hint = hints[py]
        args = set(typing.get_args(hint)) or {hint}
        text = raw.strip()
        if type(None) in args and text.lower() in ("", "none"):
            out[py] = None
        elif int in args:
            out[py] = _parse_int(key, text)
        elif float in args:
            out[py] = _parse_float(key, text)
        else:
            out[py] = text
    return out


def privacy_report(name: str, params: dict[str, str]) -> dict[str, Any]:
    """JSON privacy report of mechanism ``name`` built from CLI ``params``."""
    return make_mechanism(name, **parse_params(name, params)).report().to_json()


def audit(name: str, params: dict[str, str], *, samples: int | None, seed: int) -> dict[str, Any]:
    """Empirical epsilon audit of mechanism ``name``; ``params`` may also hold ``alpha`` (default 0.05)."""
    mech_params = dict(params)
    alpha = 0.05
    for key in list(mech_params):
        if key.strip().replace("-", "_") == "alpha":
            alpha = _parse_float("alpha", mech_params.pop(key))
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in the open interval (0, 1), got {alpha}.")
    mech = make_mechanism(name, **parse_params(name, mech_params))
    rng = generator(seed, "privacy-audit", name)
    return audit_mechanism(mech, rng, samples=samples, alpha=alpha).to_json()
