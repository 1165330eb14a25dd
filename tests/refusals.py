"""`refused(reason, detail)`: a `Refused` whose reply text is exactly ``refused: <reason>`` (the closed list) and
whose client-side detail (never sent) matches ``detail``."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fl_privtext.client import REASONS, Refused


@contextlib.contextmanager
def refused(reason: str, detail: str = "") -> Iterator[Any]:
    assert reason in REASONS, reason
    with pytest.raises(Refused) as err:
        yield err
    assert str(err.value) == f"refused: {reason}", str(err.value)
    assert re.search(detail, err.value.detail), (detail, err.value.detail)
