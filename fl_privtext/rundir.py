"""A run directory, claimed by one run at a time: nothing a finished run wrote is replaced without being asked;
and the one place its files are created and written, so that a failure is one line naming the file.

`claim` takes an exclusive lock on ``<dir>/.lock`` (``fcntl.flock``: released by the OS when the process dies, so
a crashed run never leaves a stale lock) for the whole run, and refuses a directory that already holds a finished
run's ``results.json`` unless ``overwrite`` is set. Two runs started with the same ``--output`` therefore cannot
mix their ``metrics.jsonl`` or replace each other's results.

Writing (`make_dir`, `write_atomic`, `keep_going`): an output directory that cannot be created is a ValueError
naming it and its first missing or unusable parent; a file that cannot be written is a `WriteError` whose text
names the file and the reason ("no space left on device writing DIR/results.json"). A run's essential file
(results.json) that cannot be written fails the run; any other artifact (the plot, summary.md, a sweep's table)
that cannot be written is reported as a warning and listed by `collect`, so the command ends "incomplete" with a
non-zero status (`INCOMPLETE_STATUS`) instead of exiting 0 without it, as rsync's "partial transfer" status does.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_FILE = ".lock"
RESULTS_FILE = "results.json"
INCOMPLETE_STATUS = 3  # the command's exit status when it finished but some artifact was not written


# OSErrors that are about writing a file (a full disk, a quota, a read-only or forbidden place) and how to say them
WRITE_REASONS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                 errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                 errno.EPERM: "permission denied"}


class WriteError(Exception):
    """A file of the run that could not be written; its text is one line naming the file and the reason."""


def describe(path: str | os.PathLike[str], exc: BaseException) -> str:
    """One line: what went wrong writing ``path`` (the OS's reason when it is an OSError)."""
    code = getattr(exc, "errno", None)
    if code in WRITE_REASONS:
        return f"{WRITE_REASONS[code]} writing {path}"
    if isinstance(exc, WriteError):
        return str(exc)
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    return f"cannot write {path}: {why}"


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write a temp file beside ``path`` and rename it over ``path`` (a reader never sees half a file; an
    interrupted run leaves none). `WriteError` (one line) when it cannot be written; the temp file is removed."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(describe(path, exc)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


_UNWRITTEN: contextvars.ContextVar[list[dict[str, str]] | None] = contextvars.ContextVar("unwritten", default=None)


@contextlib.contextmanager
def collect() -> Iterator[list[dict[str, str]]]:
    """The artifacts reported unwritten (`report_unwritten`) inside the block, as ``{"file", "reason"}``; nested
    blocks share the outermost list (the command's)."""
    current = _UNWRITTEN.get()
    if current is not None:
        yield current
        return
    found: list[dict[str, str]] = []
    token = _UNWRITTEN.set(found)
    try:
        yield found
    finally:
        _UNWRITTEN.reset(token)


def unwritten() -> list[dict[str, str]]:
    """The artifacts reported unwritten so far in the current `collect` block (empty outside one)."""
    return list(_UNWRITTEN.get() or [])


def report_unwritten(path: str | os.PathLike[str], exc: BaseException) -> str:
    """An artifact that could not be written: a warning on stderr now, and an entry in the current `collect`
    list (the command's final line and exit status, results.json's ``incomplete``). Returns the reason."""
    reason = describe(path, exc)
    print(f"warning: {Path(path).name} not written: {reason}", file=sys.stderr, flush=True)
    found = _UNWRITTEN.get()
    if found is not None:
        found.append({"file": str(path), "reason": reason})
    return reason


def keep_going(path: str | os.PathLike[str], write: Callable[[], object]) -> bool:
    """Run ``write`` (which writes ``path``); a failure to write is reported (`report_unwritten`), not raised:
    for the artifacts a run can finish without. True when written."""
    try:
        write()
    except (OSError, WriteError) as exc:
        report_unwritten(path, exc)
        return False
    return True


def make_dir(out: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Create ``out`` (and its parents); ValueError in one line naming it and what stands in the way: the first
    parent that is missing and cannot be created, is not a directory, or is not writable."""
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create {what} {out}: {_obstacle(path, exc)}.") from None
    return path


def _obstacle(path: Path, exc: OSError) -> str:
    """Why ``path`` cannot be created, in terms of its parents."""
    full = path.expanduser().absolute()
    for parent in [full, *full.parents]:
        if os.path.islink(parent) and not parent.exists():
            return f"{parent} is a symbolic link to {os.readlink(parent)}, which does not exist"
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory" if parent != full else "it exists and is not a directory"
            if parent != full and not os.access(parent, os.W_OK | os.X_OK):
                return f"parent {parent} is not writable"
            break
    if exc.errno == errno.ENOENT:
        missing = next((p for p in reversed(full.parents) if not p.exists()), full.parent)
        return f"parent {missing} does not exist"
    return describe(full, exc).replace(f" writing {full}", "")


@contextlib.contextmanager
def claim(out: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Hold ``out`` for one run (created if missing). ValueError (one line) when another run holds it, or when it
    holds a finished run's results and ``overwrite`` is false."""
    path = Path(out)
    created = not path.exists()
    make_dir(path)
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WriteError(describe(path / LOCK_FILE, exc)) from None
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
        with collect():  # the run's unwritten artifacts, for results.json's "incomplete" (report.finalize)
            yield path
        finished = True
    finally:
        if created and not finished and [p.name for p in path.iterdir()] == [LOCK_FILE]:
            with contextlib.suppress(OSError):  # a run that failed before writing anything leaves no directory
                (path / LOCK_FILE).unlink()
                path.rmdir()
        os.close(fd)  # releases the lock
