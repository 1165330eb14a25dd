"""A run directory, claimed by one run at a time: nothing a finished run wrote is replaced without being asked.

`claim` takes an exclusive lock on ``<dir>/.lock`` (``fcntl.flock``: released by the OS when the process dies, so
a crashed run never leaves a stale lock) for the whole run, and refuses a directory that already holds a finished
run's ``results.json`` unless ``overwrite`` is set. Two runs started with the same ``--output`` therefore cannot
mix their ``metrics.jsonl`` or replace each other's results.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".lock"
RESULTS_FILE = "results.json"


@contextlib.contextmanager
def claim(out: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Hold ``out`` for one run (created if missing). ValueError (one line) when another run holds it, or when it
    holds a finished run's results and ``overwrite`` is false."""
    path = Path(out)
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    finished = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ValueError(f"output directory {str(out)!r} is in use by another run (pid {holder}); wait for it "
                             "to finish or choose another --output.") from None
        if (path / RESULTS_FILE).exists() and not overwrite:
            raise ValueError(f"output directory {str(out)!r} already holds a run's results ({RESULTS_FILE}); choose "
                             "another --output, or pass --overwrite to replace them.")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
        finished = True
    finally:
        if created and not finished and [p.name for p in path.iterdir()] == [LOCK_FILE]:
            with contextlib.suppress(OSError):  # a run that failed before writing anything leaves no directory
                (path / LOCK_FILE).unlink()
                path.rmdir()
        os.close(fd)  # releases the lock
