"""A failing client's error as one console line: ``faults.failed_clients[].reason`` in results.json.

Flower hands the server a client's error as text; through Ray that text is a whole traceback with terminal colour
codes (``ray::ClientAppActor.run() ... ValueError: ...``). `one_line` keeps what a reader needs (the final
exception line, without colour codes, at most `MAX_REASON` characters); the full text goes to the log at DEBUG
level (the run's log file when one is configured), never into results.json.
"""

from __future__ import annotations

import re

MAX_REASON = 300
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b.*")


def one_line(text: str) -> str:
    """The last exception line with a message of ``text`` (else its last non-empty line), colour codes removed, whitespace
    collapsed, at most `MAX_REASON` characters."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(text)).splitlines() if ln.strip()]
    if not lines:
        return "unknown error (no message)"
    exc = [ln for ln in lines if _EXC_LINE.match(ln) and not ln.startswith(("Traceback", "File "))]
    # Flower wraps the client's exception in a bare "ClientAppException:" line: prefer a line with a message
    exc = [ln for ln in exc if ln.partition(":")[2].strip()] or exc
    line = " ".join((exc[-1] if exc else lines[-1]).split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."
