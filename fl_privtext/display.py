"""How a number is shown to a reader (console, summary.md, plots, notebook): one rule per kind of number.

Why: epsilons come out of closed forms and compositions as 0.9999999999904077 or 8.000000000000316; printed raw
they read as precise claims and hide the figure. results.json keeps the full value; what a reader sees is rounded
here, the same way everywhere. Stdlib only (the notebook and the plots import it).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_epsilon"]


def fmt_epsilon(x: Any) -> str:
    """An epsilon for display: 3 significant digits without trailing zeros (0.9999999999904077 -> "1",
    8.000000000000316 -> "8", 0.12345 -> "0.123"), "inf" for no finite guarantee (float inf or results.json's
    string "inf"), "-" for None; any other string is shown as it is."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    v = float(x)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    return f"{float(f'{v:.3g}'):g}"
