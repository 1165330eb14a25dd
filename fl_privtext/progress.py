"""Progress that fits where it is shown, and the run's log file.

`progress_bar` gives a tqdm bar on a terminal and in a notebook that has widgets (``tqdm.auto``); anywhere else
(stderr redirected to a file, ``flwr run --stream``, CI, a notebook without ipywidgets) it prints PLAIN lines
``[desc] 3/10 (30%) 12 s`` at most every ``every`` seconds and at the end, never carriage returns or widget warnings.

`run_log` writes the run's Python log (fl_privtext at DEBUG, with the full trace of every failing client that the
console shows as one line, and Flower's warnings) to ``<run directory>/run.log``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Self


def _in_kernel() -> bool:
    """Running inside a Jupyter kernel (not merely a process that imported ipykernel, as a notebook runner does)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - any failure means: not a kernel we can render into
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _widgetless_kernel() -> bool:
    return _in_kernel() and importlib.util.find_spec("ipywidgets") is None


# The tqdm every module uses: tqdm.auto, except in a Jupyter kernel without ipywidgets, where importing tqdm.auto
# warns "IProgress not found" into the cell and its bars would not render; there the text bar (Jupyter handles its
# carriage returns).
if _widgetless_kernel():
    from tqdm import TqdmWarning
    from tqdm.std import tqdm, trange

    # other packages (datasets, huggingface_hub) import tqdm.auto later in the same kernel: same warning, same cure
    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
else:
    from tqdm.auto import tqdm, trange
# Ray logs "Missing packages: ['ipywidgets']" at INFO into a notebook cell when imported in such a kernel
logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)

__all__ = ["LOGGERS", "RUN_LOG", "PlainProgress", "progress_bar", "run_log", "tqdm", "trange"]

RUN_LOG = "run.log"
LOGGERS = ("fl_privtext", "flwr")  # what run.log records


def _fancy(stream: IO[str]) -> bool:
    """A redrawing bar fits: a terminal, or a Jupyter kernel (widgets, else the text bar: Jupyter renders its
    carriage returns)."""
    if _in_kernel():
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class PlainProgress:
    """tqdm's small interface (update, write, close, context manager) as periodic plain lines."""

    disable = False

    def __init__(self, *, total: int | None, desc: str, unit: str = "it", every: float = 10.0,
                 file: IO[str] | None = None, initial: int = 0, final: bool = True):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.final = final  # a line at the end even when the bar never printed (short inner loops: no)
        self.printed = False
        self.file = file
        self.n = initial
        self._t0 = self._last = time.monotonic()

    def _line(self) -> str:
        elapsed = time.monotonic() - self._t0
        if self.total:
            return f"[{self.desc}] {self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%) {elapsed:.0f} s"
        return f"[{self.desc}] {self.n} {self.unit} {elapsed:.0f} s"

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        done = self.total is not None and self.n >= self.total
        if now - self._last >= self.every or (done and (self.final or self.printed)):
            self._last = now
            self.printed = True
            self.write(self._line())

    def write(self, msg: str, file: IO[str] | None = None) -> None:
        print(msg, file=file or self.file or sys.stderr, flush=True)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(*, total: int | None, desc: str, unit: str = "it", enabled: bool = True, every: float = 10.0,
                 file: IO[str] | None = None, plain_final: bool = True, **tqdm_kwargs: Any) -> Any:
    """A tqdm bar where one fits (see the module doc), `PlainProgress` lines elsewhere, nothing when not
    ``enabled``. ``plain_final = False``: plain lines only for a loop that lasts past ``every`` seconds."""
    stream = file or sys.stderr
    if not enabled:
        return tqdm(total=total, desc=desc, disable=True)
    if _fancy(stream):
        return tqdm(total=total, desc=desc, unit=unit, file=stream, **tqdm_kwargs)
    return PlainProgress(total=total, desc=desc, unit=unit, every=every, file=file,
                         initial=int(tqdm_kwargs.get("initial", 0)), final=plain_final)


@contextlib.contextmanager
def run_log(out: str | Path) -> Iterator[Path]:
    """Append the run's log records (`LOGGERS`) to ``out/run.log`` while the block runs (a finished run's
    last line says so; an empty file, a run refused before any work, is removed: the directory stays as found)."""
    path = Path(out) / RUN_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ours = logging.getLogger("fl_privtext")
    old_level = ours.level
    if ours.getEffectiveLevel() > logging.DEBUG:
        ours.setLevel(logging.DEBUG)  # the full traces are DEBUG records; the console's handlers keep their levels
    for name in LOGGERS:
        logging.getLogger(name).addHandler(handler)
    t0 = time.monotonic()
    try:
        yield path
        logging.getLogger(__name__).info("run in %s finished in %.1f s", out, time.monotonic() - t0)
    finally:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
        ours.setLevel(old_level)
        handler.close()
        if path.stat().st_size == 0:  # nothing logged (a run refused before any work): leave no file behind
            path.unlink()
