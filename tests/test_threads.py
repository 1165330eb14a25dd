"""Thread shares (`fl_privtext.threads`): actors get their CPU share, the driver the cores the actors leave free."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fl_privtext.config import ExperimentConfig
from fl_privtext.threads import (
    Task,
    client_threads,
    driver_threads,
    limited,
    local_actors,
    parallel_map,
    parallel_tasks,
    worker_env,
)


def _cfg(**sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat(sets)


@pytest.mark.parametrize(
    "sets,cores,actors,client,driver",
    [
        ({"federation.num-clients": 100}, 2, 2, 1, 1),  # this project's machine: 2 actors fill it; driver keeps 1
        ({"federation.num-clients": 100}, 16, 16, 1, 1),
        ({"federation.num-clients": 4}, 16, 4, 1, 12),  # fewer clients than cores: the rest is the driver's
        ({"federation.num-clients": 100, "federation.client-cpus": 4.0}, 16, 4, 4, 1),
        ({"federation.num-clients": 100, "federation.client-cpus": 0.5}, 2, 4, 1, 1),  # fractions: 1 thread
        ({"federation.num-clients": 3, "federation.client-cpus": 2.5}, 16, 3, 2, 10),
        ({"federation.num-clients": 100, "federation.ray-address": "auto"}, 8, 0, 1, 8),  # actors elsewhere
        ({"federation.num-clients": 100, "federation.client-threads": 3, "run.threads": 5}, 2, 2, 3, 5),  # given
    ],
)
def test_shares(sets, cores, actors, client, driver):
    cfg = _cfg(**sets)
    assert local_actors(cfg.federation, cores) == actors
    assert client_threads(cfg.federation) == client
    assert driver_threads(cfg.run, cfg.federation, cores) == driver


def test_worker_env_sizes_every_pool():
    assert worker_env(3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}


def test_limited_sets_and_restores_torch_threads():
    before = torch.get_num_threads()
    other = 2 if before != 2 else 1
    with limited(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before


def _blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}


def test_overlapping_limited_blocks_share_the_process_wide_blas_pools_until_the_last_one_closes():
    """Two threads' `limited` blocks that overlap without nesting (a sweep's no-privacy reference beside its
    federation): the process-wide BLAS pools stay at the smallest open count until the LAST block closes, then
    come back to what they were, whichever thread closes last; each thread's torch count is its own. Known-bad
    (each block restoring what it found): the first block to close hands the other, still running, the count
    found before."""
    import threading

    original = _blas_threads()
    if not original or original == {1}:
        pytest.skip("no BLAS library that threadpoolctl controls here, or it already runs one thread")
    for threads, after_first in ((1, {1}), (4, {4})):
        steps = [threading.Event() for _ in range(3)]
        seen: dict[str, object] = {}

        def first(steps: list[threading.Event] = steps, seen: dict[str, object] = seen) -> None:  # opens first
            with limited(1):
                steps[0].set()
                steps[1].wait(10)
                seen["both open"] = _blas_threads()
            steps[2].set()  # closes first

        def second(threads: int = threads, steps: list[threading.Event] = steps,
                   seen: dict[str, object] = seen) -> None:  # opens second, closes last
            steps[0].wait(10)
            with limited(threads):
                seen["torch"] = torch.get_num_threads()
                steps[1].set()
                steps[2].wait(10)
                seen["after the first closed"] = _blas_threads()

        runs = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in runs:
            t.start()
        for t in runs:
            t.join(20)
        assert seen == {"both open": {1}, "torch": threads, "after the first closed": after_first}, seen
        assert _blas_threads() == original  # back to the count found before the first block
    with limited(1):  # and from the main thread after the others
        assert _blas_threads() == {1}
    assert _blas_threads() == original


@pytest.mark.parametrize("key", ["run.threads", "federation.client-threads", "federation.max-in-flight"])
def test_negative_counts_are_refused(key):
    with pytest.raises(ValueError, match=f"{key} must be >= 0"):
        _cfg(**{key: -1})


def test_parallel_map_keeps_order_runs_side_by_side_and_sets_each_workers_torch_threads():
    """A point's seeds side by side: results in order, as many workers as the cores hold when the caller computes
    with one thread (serial above), every worker's torch at one thread (OpenMP reads it per thread), and a
    failing seed's exception raised."""
    import threading

    seen: list[tuple[str, int]] = []
    barrier = threading.Barrier(2, timeout=10)  # passes only if two items run at the same time

    def work(i: int) -> int:
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        if i < 2:
            barrier.wait()
        return i * i

    assert parallel_map(work, range(5), threads=1, cores=2, name="w") == [0, 1, 4, 9, 16]
    assert {t for t, _ in seen} <= {"w_0", "w_1"} and {n for _, n in seen} == {1}
    seen.clear()
    assert parallel_map(work, [5, 6], threads=2, cores=4) == [25, 36]  # callers above one thread: serial
    assert {t for t, _ in seen} == {threading.current_thread().name}

    def fail(i: int) -> int:
        if i == 3:
            raise ValueError("seed 3 failed")
        return i

    with pytest.raises(ValueError, match="seed 3 failed"):
        parallel_map(fail, range(5), threads=1, cores=2)


def test_parallel_tasks_respects_needs_and_priority_drops_used_results_and_raises_the_first_failure():
    """A schedule of pieces with needs (the keyword inversion's, `fl_privtext.attacks.evaluate`): each task gets its
    needs' results, two run at the same time on two cores, the serial run is the list order, results not kept are
    dropped, a list whose needs come later is refused, and the first failing task (in list order) is raised."""
    import threading

    barrier = threading.Barrier(2, timeout=10)
    ran: list[str] = []

    def side(x: int) -> int:
        barrier.wait()  # passes only if "b" and "c" run at the same time
        return x + 1

    tasks = [Task("a", lambda: ran.append("a") or 1, keep=False), Task("b", side, ("a",)), Task("c", side, ("a",)),
             Task("d", lambda b, c: ran.append("d") or b * 10 + c, ("b", "c"))]
    assert parallel_tasks(tasks, threads=1, cores=2) == {"b": 2, "c": 2, "d": 22}  # "a" dropped once used
    ran.clear()
    serial = [Task("a", lambda: ran.append("a") or 1), Task("b", lambda a: ran.append("b") or a, ("a",)),
              Task("c", lambda: ran.append("c") or 3)]
    assert parallel_tasks(serial, threads=2, cores=4) == {"a": 1, "b": 1, "c": 3}  # above one thread: serial
    assert ran == ["a", "b", "c"]
    with pytest.raises(ValueError, match="needs 'z'"):
        parallel_tasks([Task("a", lambda z: z, ("z",)), Task("z", lambda: 0)], threads=1, cores=2)

    def fail(msg: str) -> Callable[[], int]:
        def run() -> int:
            raise ValueError(msg)
        return run

    with pytest.raises(ValueError, match="first"):
        parallel_tasks([Task("x", fail("first")), Task("y", fail("second")), Task("z", lambda: 0)],
                       threads=1, cores=2)


_FORK_SCRIPT = """
import os, subprocess, sys, threading, time
import numpy as np
from fl_privtext.threads import fork_safe
x = np.random.default_rng(0).standard_normal((2000, 300))
done = []
def work():
    for _ in range(10):
        np.linalg.svd(x, full_matrices=False)
    done.append(1)
t = threading.Thread(target=fork_safe(work) if sys.argv[1] == "safe" else work, daemon=True)
t.start()
end = time.time() + 10
while t.is_alive() and time.time() < end:
    subprocess.Popen(["true"], preexec_fn=lambda: None).wait()  # fork, as ray.init starts its processes
t.join(60 if sys.argv[1] == "safe" else 5)  # one BLAS thread: slow under load, never stuck
print("done" if done else "hung", flush=True)
os._exit(0)  # a thread stuck in OpenBLAS can also stall the library's exit handlers
"""


def test_blas_work_beside_a_fork_finishes_when_fork_safe_and_hangs_without():
    """`limited`'s fork hazard: a thread's multi-threaded OpenBLAS call while another thread forks never returns
    (the fork handler stops the pool under it); under `fork_safe` (one BLAS thread) the same work finishes.
    Known-bad: the same script without it hangs (seen as a 27-minute stall of a sweep's public pca beside a
    federation's Ray start)."""
    import subprocess
    import sys

    if _blas_threads() in (set(), {1}):
        pytest.skip("no multi-threaded BLAS library that threadpoolctl controls here")
    def run(mode: str) -> str:
        try:
            return subprocess.run([sys.executable, "-c", _FORK_SCRIPT, mode], check=True, capture_output=True,
                                  text=True, timeout=120 if mode == "safe" else 60).stdout.strip()
        except subprocess.TimeoutExpired:  # the whole process stuck (a fork blocked behind the stalled pool too)
            return "stuck"

    out = {mode: run(mode) for mode in ("safe", "unsafe")}
    # the known-bad script hangs either way: its BLAS thread (reported "hung"), or the process itself, its forking
    # thread blocked as well (seen on an AVX512-FP16 Xeon, 2026-11-29: the run outlived a 120 s limit; it takes 15 s when it does not stall)
    assert out["safe"] == "done" and out["unsafe"] in {"hung", "stuck"}, out


def test_the_drivers_preparation_runs_fork_safe(monkeypatch):
    """The driver's preparation (`runner._prepare_driver`), which overlaps the simulation's Ray start, runs with one
    BLAS thread; the pools come back after it."""
    from fl_privtext.pipeline import runner

    if _blas_threads() in (set(), {1}):
        pytest.skip("no multi-threaded BLAS library that threadpoolctl controls here")
    seen: list[object] = []
    monkeypatch.setattr(runner, "_snapshot", lambda cfg: seen.append(_blas_threads()) or "")
    monkeypatch.setattr(runner, "warm_up", lambda: None)
    assert runner._prepare_driver([object(), object()]) == ["", ""]  # type: ignore[list-item]
    assert seen == [{1}, {1}] and _blas_threads() != {1}
