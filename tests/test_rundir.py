"""A run directory is claimed by one run at a time and a finished run's results are never silently replaced."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from fl_privtext.rundir import claim


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
