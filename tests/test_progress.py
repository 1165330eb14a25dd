"""Progress where stderr is not a terminal is plain periodic lines (no carriage returns); the run's log file gets
the DEBUG records (the full traces) that the console does not show."""

from __future__ import annotations

import io
import logging

from fl_privtext import progress


def test_plain_lines_when_the_stream_is_not_a_terminal():
    buf = io.StringIO()  # isatty() is False: a log file, a pipe, CI
    bar = progress.progress_bar(total=4, desc="rounds", unit="round", file=buf, every=3600.0, leave=False)
    assert isinstance(bar, progress.PlainProgress)
    for _ in range(4):
        bar.update()
    bar.close()
    text = buf.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines() == [text.splitlines()[0]] and text.startswith("[rounds] 4/4 round (100%)")
    fast = io.StringIO()
    bar = progress.progress_bar(total=3, desc="x", file=fast, every=0.0)
    for _ in range(3):
        bar.update()
    assert [line.split(" s")[0].rsplit(" ", 1)[0] for line in fast.getvalue().splitlines()] == [
        "[x] 1/3 it (33%)", "[x] 2/3 it (67%)", "[x] 3/3 it (100%)"]


def test_a_terminal_gets_a_tqdm_bar_and_disabled_progress_prints_nothing():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    bar = progress.progress_bar(total=2, desc="rounds", file=tty)
    bar.update(2)
    bar.close()
    assert not isinstance(bar, progress.PlainProgress) and "\r" in tty.getvalue()
    quiet = io.StringIO()
    bar = progress.progress_bar(total=2, desc="rounds", file=quiet, enabled=False)
    bar.update(2)
    bar.close()
    assert quiet.getvalue() == ""


def test_run_log_records_debug_traces_and_detaches_afterwards(tmp_path):
    log = logging.getLogger("fl_privtext.federation.server_app")
    level = logging.getLogger("fl_privtext").level
    with progress.run_log(tmp_path) as path:
        log.debug("client node %d failed; full trace:\n%s", 7, "Traceback ...\nValueError: boom")
        logging.getLogger("flwr").warning("flower says")
    log.debug("after the run")
    text = path.read_text()
    assert path == tmp_path / "run.log"
    assert "client node 7 failed; full trace:" in text and "ValueError: boom" in text and "flower says" in text
    assert "after the run" not in text and logging.getLogger("fl_privtext").level == level


def test_short_inner_loops_print_nothing_in_plain_mode():
    buf = io.StringIO()
    bar = progress.progress_bar(total=3, desc="server: task MLP", unit="epoch", file=buf, plain_final=False)
    for _ in range(3):
        bar.update()
    assert buf.getvalue() == ""  # finished within the interval: no line (a terminal's bar would vanish too)


def test_a_refused_run_leaves_no_log_and_a_finished_one_says_so(tmp_path):
    try:
        with progress.run_log(tmp_path) as path:
            assert path.is_file()
            raise ValueError("refused before any work")
    except ValueError:
        pass
    assert not path.exists() and list(tmp_path.iterdir()) == []
    with progress.run_log(tmp_path) as path:
        pass
    assert f"run in {tmp_path} finished in" in path.read_text()
