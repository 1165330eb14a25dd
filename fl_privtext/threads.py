"""Thread counts: how many torch / BLAS / OpenMP threads each process of a run may use.

On a machine with C cores, a federation starts min(clients, C / client-cpus) Ray actors, and the driver trains the
server's model and the attackers. Left alone, every process sizes its thread pools to all C cores: 2 actors and the
driver on 2 cores run 6 compute threads, and OpenMP's spinning threads then slow small torch models by 10-40x
(measured on this project's loaded 2-core machines). Here each process gets its share instead:

- an actor: ``federation.client-threads``, or (0 = auto) its CPU share floor(client-cpus), at least 1. It reaches
  the Ray workers as OMP_NUM_THREADS / MKL_NUM_THREADS / OPENBLAS_NUM_THREADS in their environment, so numpy's BLAS
  and torch read it when they load; `apply_torch_threads` sets torch too where it is already loaded.
- the driver: ``run.threads``, or (0 = auto) the cores the local actors leave free, at least 1. It applies around the
  server's training and the attacks (`limited`), in the Flower path and the plain loop alike, so both compute the
  same numbers (torch's reductions may depend on the thread count).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import threadpoolctl
from threadpoolctl import threadpool_limits

from fl_privtext.config import FederationConfig, RunConfig

T = TypeVar("T")
R = TypeVar("R")

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_actors(federation: FederationConfig, cores: int | None = None) -> int:
    """Actors Flower starts on this machine: as many as the cores hold (Ray gets every core), at most one per
    client; none here when the federation attaches to a Ray cluster (``federation.ray-address``)."""
    if federation.ray_address:
        return 0
    cores = usable_cores() if cores is None else cores
    return max(1, min(federation.num_clients, math.floor(cores / federation.client_cpus)))


def client_threads(federation: FederationConfig) -> int:
    """Threads of one virtual-client actor: ``federation.client-threads`` or its CPU share (at least 1)."""
    return share(federation.client_threads, federation.client_cpus)


def share(threads: int, cpus: float) -> int:
    """``threads`` if set (> 0), else the CPU share floor(cpus), at least 1."""
    return threads or max(1, math.floor(cpus))


def driver_threads(run: RunConfig, federation: FederationConfig, cores: int | None = None) -> int:
    """Threads of the driver's training and attacks: ``run.threads`` or the cores the local actors leave free."""
    if run.threads:
        return run.threads
    cores = usable_cores() if cores is None else cores
    return max(1, cores - local_actors(federation, cores) * client_threads(federation))


def worker_env(threads: int) -> dict[str, str]:
    """Environment variables that size a fresh process's thread pools (read when numpy / torch load)."""
    return {name: str(threads) for name in THREAD_ENV}


def apply_torch_threads(threads: int) -> None:
    """Set torch's intra-op threads in this process if torch is loaded (never imports it: the ClientApp stays light)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


_SHARED_LOCK = threading.Lock()
_SHARED_COUNTS: list[int] = []  # the counts of the `limited` blocks open now, in every thread of the process
_SHARED_ORIGINAL: list[threadpool_limits] = []  # the process-wide BLAS pools' settings before the first block opened


def _set_shared_blas() -> None:
    """Size the process-wide BLAS pools for the blocks open now (`_SHARED_COUNTS`): the smallest count asked, or
    back to the settings found before the first block once none is open. Called with `_SHARED_LOCK` held, from
    whichever thread opens or closes a block: threadpoolctl (3.8) lets only one "controlling" thread change
    OpenBLAS's pthreads pool and silently ignores the others (a block closed in another thread than the one that
    opened the first would leave the pools limited), so each change here takes and then releases that control."""
    _blas_control()
    if _SHARED_COUNTS:
        limits = threadpool_limits(limits=min(_SHARED_COUNTS), user_api="blas")
        if not _SHARED_ORIGINAL:
            _SHARED_ORIGINAL.append(limits)  # remembers what it replaced: the settings before any block
    elif _SHARED_ORIGINAL:
        _SHARED_ORIGINAL.pop().restore_original_limits()
    _blas_control()


def _blas_control() -> None:
    """Release threadpoolctl's controlling thread of the shared BLAS pools (absent before threadpoolctl 3.8)."""
    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


@contextlib.contextmanager
def limited(threads: int) -> Iterator[None]:
    """torch runs with ``threads`` intra-op threads inside the block (set in the calling thread, which is where
    OpenMP reads it), and so do the BLAS / OpenMP pools numpy, scipy and scikit-learn call (threadpoolctl); the
    previous counts are restored afterwards. The BLAS pools matter as much as torch's: the driver's plain-logistic
    floor and linear fits ran with every core's BLAS thread beside the actors', and oversubscribed BLAS threads
    made each fit many times slower (issue #38: the quickstart's no-privacy reference point attacked in 22.4 s
    unbounded, 6.3 s bounded, load ~2.5, same results).

    Blocks may overlap in several threads (a sweep computes its no-privacy reference beside the federation,
    `fl_privtext.sweep`): torch's and OpenMP's counts are per thread (each block sets and restores its own
    thread's), while OpenBLAS's (pthreads) and MKL's pools are one per process, so they are shared: sized to the
    smallest count among the blocks open at the moment and restored to the settings found before the first block
    only when the last one closes. (Each block restoring what it found, as before, let the first block to close
    hand the other, still running, every core's BLAS threads.) Blocks that overlap should ask for the same count:
    a block of 4 threads that another thread's block of 1 overlaps runs its BLAS calls on 1 thread meanwhile.

    Fork hazard: a thread that calls a MULTI-threaded OpenBLAS routine while another thread forks (``ray.init``
    starts its processes through ``subprocess`` with a ``preexec_fn``, i.e. ``fork``) never returns: OpenBLAS's
    fork handler stops the pool's workers under the call in flight, which then spins in ``exec_blas`` forever (seen: a
    trust-models sweep's driver thread in the ``svd`` of the public pca beside a federation's Ray start, 27 minutes
    at 100% CPU; tests/test_threads.py reproduces it). A single-threaded call runs in its own thread and is not
    affected. So work that overlaps a Ray start runs inside ``limited(1)`` (`fork_safe`): the driver's preparation
    (`fl_privtext.pipeline.runner`) and a sweep's no-privacy references (`fl_privtext.sweep`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    with _SHARED_LOCK:
        _SHARED_COUNTS.append(threads)
        _set_shared_blas()
    try:
        with threadpool_limits(limits=threads, user_api="openmp"):
            yield
    finally:
        with _SHARED_LOCK:
            _SHARED_COUNTS.remove(threads)
            _set_shared_blas()
        torch.set_num_threads(before)


def fork_safe(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn`` run inside ``limited(1)``: for work on a thread that may overlap a fork in another one (a Ray start):
    its BLAS calls single-threaded, which a fork cannot stop (`limited`'s fork hazard). Blocks opened inside keep
    their torch / OpenMP counts; the process-wide BLAS pools stay at one thread while this block is open."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> R:
        with limited(1):
            return fn(*args, **kwargs)

    return run


_WORKER = threading.local()  # .inside: this thread is a `parallel_map` worker


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int, cores: int | None = None,
                 name: str = "fl-privtext-work") -> list[R]:
    """``[fn(x) for x in items]``, on up to ``cores`` worker threads (`usable_cores`) when the caller computes with
    ONE thread (``threads``, inside its ``limited(1)`` block), else serially. Why: a point's seeds are independent
    computations (each its own random streams), and the driver's share on a machine its
    actors fill is one core, which it kept while the other sat idle once the uploads were in (the actors wait
    for the next point); numpy, scipy and torch release the GIL in their heavy loops. The numbers are those of the
    serial loop: same streams, and every operation with one thread, as each worker sets torch's count (OpenMP's is
    per thread) and the BLAS pools are process-wide at the caller's 1 (a count above 1 stays serial: one worker
    restoring its `limited` block would change another's pools mid-way). A seed's attacks use its sibling
    `parallel_tasks` (`fl_privtext.attacks.evaluate._run_attacks`): at 50,000 users two attributes side by side
    gained nothing (134.0 s serial, 130.9 s; the MLP family's small torch steps and lbfgs's Python callbacks hold
    the GIL), but the keyword inversion's large numpy products and partitions overlap the attributes (1M users,
    quiet: the attack stage 307.8 s serial, 205.7 s side by side, tenth session; 218.1 s with the inversion as one
    task, 153-157 s in pieces on the eleventh session's machine; same results; benchmarks/README.md). A call from
    inside a worker runs serially. Results come back in order; the first exception is raised."""
    cores = usable_cores() if cores is None else cores
    workers = _workers(len(items), threads, cores)
    if workers <= 1:
        return [fn(x) for x in items]

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=_start_worker) as pool:
        return list(pool.map(fn, items))


def _start_worker() -> None:
    """A worker of `parallel_map` / `parallel_tasks`: nested calls run serially, torch at one thread."""
    _WORKER.inside = True
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)



def _workers(items: int, threads: int, cores: int) -> int:
    """Worker threads for ``items`` pieces: up to ``cores`` when the caller computes with one thread, else 1. A call
    from inside a worker runs serially: the outer map already fills the cores (a point's seeds side by side, each
    seed's attacks inside)."""
    return min(items, cores) if threads == 1 and not getattr(_WORKER, "inside", False) else 1


@dataclass(frozen=True)
class Task(Generic[R]):
    """One piece of a `parallel_tasks` schedule: ``run(*results of after)``, the results of the tasks it needs.
    ``keep``: its result is returned; otherwise it is dropped as soon as every task that needs it is done (a
    fitted model, a matrix of intermediate scores: not held to the end of the schedule)."""

    key: Hashable
    run: Callable[..., R]
    after: tuple[Hashable, ...] = ()
    keep: bool = True


def parallel_tasks(tasks: Sequence[Task[Any]], threads: int, cores: int | None = None,
                   name: str = "fl-privtext-work") -> dict[Hashable, Any]:
    """The results of ``tasks`` (key -> result, the ``keep`` ones), on up to ``cores`` worker threads under the
    same rule as `parallel_map` (one thread asked, not itself inside a worker; else serially, in list order).

    ``tasks`` are in priority order, each after the tasks it needs (checked): a free worker takes the first task
    whose needs are all done, so the list order is the schedule's (the longest first, with what they wait for
    before them) and a serial run is the list itself. Why not `parallel_map` per stage: a seed's keyword inversion
    is a graph (its public texts privatized once, then six decoder fits, then the targets scored per decoder and
    chunk), and a barrier per stage leaves a core idle while the stage's longest piece runs. The numbers are those
    of the serial run as long as each task reads only its needs' results and draws only from its own seeded
    streams (`tests/attacks/test_attack_schedule.py`, with the known-bad of pieces sharing one stream). The first
    exception (in list order, among the tasks that failed) is raised once the running tasks are done; no task
    starts after a failure."""
    keys = [t.key for t in tasks]
    where = {k: i for i, k in enumerate(keys)}
    if len(where) != len(keys):
        raise ValueError("parallel_tasks: two tasks have the same key.")
    for i, t in enumerate(tasks):
        for need in t.after:
            if where.get(need, len(tasks)) >= i:
                raise ValueError(f"parallel_tasks: task {t.key!r} needs {need!r}, which is not listed before it.")
    waiting = Counter(need for t in tasks for need in t.after)  # tasks not yet done that need each key
    results: dict[Hashable, Any] = {}

    def finish(t: Task[Any], result: Any) -> None:  # records a result, drops needs no longer needed
        results[t.key] = result
        for need in t.after:
            waiting[need] -= 1
            if waiting[need] == 0 and not tasks[where[need]].keep:
                del results[need]
        if not waiting[t.key] and not t.keep:
            del results[t.key]

    workers = _workers(len(tasks), threads, usable_cores() if cores is None else cores)
    if workers <= 1:
        for t in tasks:
            finish(t, t.run(*(results[need] for need in t.after)))
        return results
    todo = list(range(len(tasks)))  # not started, in priority order
    done: set[Hashable] = set()
    failed: dict[int, BaseException] = {}
    cond = threading.Condition()

    def ready() -> int | None:  # the first task not started whose needs are done (called holding cond)
        for n, i in enumerate(todo):
            if all(need in done for need in tasks[i].after):
                return todo.pop(n)
        return None

    def work() -> None:
        _start_worker()
        while True:
            with cond:
                i = None
                while not failed and todo:
                    i = ready()
                    if i is not None:
                        break
                    cond.wait()
                if i is None:  # a task failed, or every task has started
                    return
                t = tasks[i]
                args = [results[need] for need in t.after]
            try:
                result = t.run(*args)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread below
                with cond:
                    failed[i] = exc
                    cond.notify_all()
                return
            del args
            with cond:
                finish(t, result)
                done.add(t.key)
                cond.notify_all()

    pool = [threading.Thread(target=work, name=f"{name}_{n}", daemon=True) for n in range(workers)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    if failed:
        raise failed[min(failed)]
    return results
