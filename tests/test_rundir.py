"""A run directory is claimed by one run at a time and a finished run's results are never silently replaced; an
output directory that cannot be created, or a file that cannot be written, is one line naming it; an artifact that
cannot be written is a warning and the command ends "incomplete" (not 0)."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fl_privtext import cli, sweep
from fl_privtext.rundir import (
    INCOMPLETE_STATUS,
    WriteError,
    claim,
    collect,
    make_dir,
    unwritten,
    write_atomic,
)


def test_finished_results_refused_unless_overwrite(tmp_path):
    out = tmp_path / "run"
    with claim(out):
        (out / "results.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run's results.*--overwrite"), claim(out):
        pass
    with claim(out, overwrite=True) as path:
        assert path == out


def test_two_runs_never_share_a_directory(tmp_path):
    out = tmp_path / "run"
    with claim(out):
        # a second open file of the same process: the lock conflicts too
        with pytest.raises(ValueError, match="in use by another run"), claim(out):
            pass
        holder = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from fl_privtext.rundir import claim
            try:
                with claim({str(out)!r}):
                    print("claimed")
            except ValueError as exc:
                print(exc)
            """)], capture_output=True, text=True, check=True).stdout
        assert "in use by another run" in holder
    with claim(out):  # released when the first run ends (also when its process dies: flock)
        pass


def test_a_run_that_fails_before_writing_leaves_no_directory(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(RuntimeError), claim(out):
        raise RuntimeError("a check failed")
    assert not out.exists()


# ---- writing: one line naming the file; an artifact that fails is reported, not lost silently -------------------

def full_disk(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The OS, faked: every write(2) to a file whose path holds ``name`` fails with ENOSPC, as on a full disk."""
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if name in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def no_room_for_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS, faked for matplotlib's PNG writer: a nearly full disk that the small JSON and CSV files still fit."""
    import matplotlib.figure

    def savefig(self: object, fname: object, *a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(fname))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)


def test_an_output_directory_that_cannot_be_created_is_one_line_naming_it_and_why(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError) as exc:
        make_dir(tmp_path / "file" / "run")
    assert str(exc.value) == f"cannot create output directory {tmp_path}/file/run: {tmp_path}/file is not a directory."
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"cannot create output directory .*dangling/run: .*dangling is a symbolic "
                                         r"link to .*gone, which does not exist\.$"), claim(tmp_path / "dangling" / "run"):
        pass
    assert not (tmp_path / "gone").exists()


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    full_disk(monkeypatch, ".results.json.")
    with pytest.raises(WriteError) as exc:
        write_atomic(tmp_path / "results.json", "{}")
    assert str(exc.value) == f"no space left on device writing {tmp_path}/results.json"
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temp file
    write_atomic(tmp_path / "summary.md", "ok")  # the fake fails only that file
    assert (tmp_path / "summary.md").read_text() == "ok"


def _finished_sweep(tmp_path):
    """A sweep file whose points are all in its store: `fl-privtext sweep` only writes its table and plots."""
    from tests.test_sweep import _result

    path = tmp_path / "s.toml"
    path.write_text('[grid]\n"privacy.mechanism" = ["privunitg"]\n"privacy.epsilon" = [1.0, 8.0]\n')
    spec = sweep.SweepSpec.load(path)
    out = tmp_path / "out"
    store = sweep.Store(out / "points")
    points = spec.points({"run.progress": "false"})
    for cfg, od in zip(points, ([0.55, 0.56, 0.57], [0.80, 0.82, 0.81]), strict=True):
        store.put(cfg, _result(0.0, od, cfg.privacy.epsilon, "privunitg"))
    store.put(sweep.baseline_of(points[0]), _result(0.0, [0.90, 0.91, 0.92], "inf", "none"))
    return path, out


def test_a_plot_that_cannot_be_written_is_a_warning_and_the_command_ends_incomplete(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    path, out = _finished_sweep(tmp_path)
    no_room_for_plots(monkeypatch)
    status = cli.main(["sweep", str(path), "--output", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == INCOMPLETE_STATUS  # not 0: a script must not take the run for complete
    assert f"warning: frontier_task.png not written: no space left on device writing {out}/frontier_task.png" in err
    assert err.rstrip().splitlines()[-1].startswith("fl-privtext sweep: incomplete: 1 file(s) not written "
                                                    "(frontier_task.png;")
    assert "Traceback" not in err and (out / "table.csv").is_file()  # what could be written was


def test_a_table_that_cannot_be_written_fails_in_one_line(tmp_path, monkeypatch, capsys):
    path, out = _finished_sweep(tmp_path)
    full_disk(monkeypatch, ".table.csv.")
    assert cli.main(["sweep", str(path), "--output", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == f"fl-privtext sweep: error: no space left on device writing {out}/table.csv\n"
    (tmp_path / "file").write_text("x")
    assert cli.main(["sweep", str(path), "--output", str(tmp_path / "file" / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"fl-privtext sweep: error: cannot create sweep output directory "
                                       f"{tmp_path}/file/out: {tmp_path}/file is not a directory.\n")


def test_collect_lists_what_was_reported_unwritten(tmp_path, capsys):
    from fl_privtext.rundir import keep_going

    with collect() as found:
        assert keep_going(tmp_path / "no" / "x.md", lambda: write_atomic(tmp_path / "no" / "x.md", "x")) is False
        assert keep_going(tmp_path / "y.md", lambda: write_atomic(tmp_path / "y.md", "y")) is True
        assert unwritten() == found == [{"file": f"{tmp_path}/no/x.md",
                                         "reason": f"cannot write {tmp_path}/no/x.md: No such file or directory"}]
    assert unwritten() == []
    assert "warning: x.md not written: cannot write" in capsys.readouterr().err


def test_a_full_disk_anywhere_else_in_a_command_is_one_line_not_a_traceback(monkeypatch, capsys, tmp_path):
    # e.g. a command's own output, metrics.jsonl or the feature cache, written outside rundir: the OS error still
    # ends in one line. The OS is what is faked: standard output on a full disk (`fl-privtext ledger DIR > file`)
    class FullDisk(io.StringIO):
        name = "/runs/x/ledger.txt"

        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.name)

    from fl_privtext.client import Ledger

    Ledger(tmp_path, 0, "entry").release("k", 1.0, lambda _spent: ({"x": np.zeros(1)}, np.array([5]), 0.5))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", FullDisk())
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["ledger", str(tmp_path)]) == 1
    assert err.getvalue() == "fl-privtext ledger: error: no space left on device writing /runs/x/ledger.txt\n"
