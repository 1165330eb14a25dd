"""Process hygiene for scripts and tests that start long-lived servers (Ray nodes, Flower SuperLink/SuperNodes).

Each server is started in its own session (``start_new_session=True``); its helpers (raylets, Ray workers,
SuperExec, ClientApp/ServerApp processes) inherit that session, so stopping by session id ends exactly what was
started, never another user's processes (no `ray stop`, no `pkill -f`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # after the name: state, ppid, pgrp, session
            out.append(int(proc.name))
    return out


def command_of(pid: int) -> str:
    """The command line of process ``pid`` ("" once it is gone)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def stop_sessions(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 30.0) -> list[str]:
    """SIGTERM each process (in the order given); SIGTERM what is left of a session once its leader has exited, or
    after half of ``grace_s`` (helpers a server leaves behind, e.g. a SuperNode's SuperExec retrying a link that is
    gone); SIGKILL whatever is still alive after ``grace_s``; reap. Returns what needed SIGKILL, as "pid command"
    lines (empty after a clean stop)."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    termed: set[int] = {p.pid for p in procs}

    def alive() -> list[int]:
        return [pid for p in procs for pid in session_pids(p.pid)]

    while alive() and time.monotonic() < t0 + grace_s:
        for p in procs:
            if p.poll() is not None or time.monotonic() > t0 + grace_s / 2:
                for pid in set(session_pids(p.pid)) - termed:
                    _signal(pid, signal.SIGTERM)
                    termed.add(pid)
        time.sleep(0.5)
    killed = [f"{pid} {command_of(pid)}" for pid in alive()]
    for pid in alive():
        _signal(pid, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    return killed


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
