"""The Flower simulation (Ray backend) of `fl-privtext run`: Ray's start, the ServerApp around the orchestrator's main,
`run_simulation`, and the simulation's fixed costs. What runs inside is the orchestrator's
(`fl_privtext.pipeline.runner.run_points`).

The clients' randomness: secret (OS entropy) unless ``run.client-seed`` is set; then the seed reaches the Ray workers
as the ``FL_PRIVTEXT_CLIENT_SEED`` environment variable, never the ServerApp's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fl_privtext.client import CLIENT_SEED_ENV, POLICY_ENV, STATE_ENV
from fl_privtext.config import ExperimentConfig
from fl_privtext.threads import client_threads, worker_env

T = TypeVar("T")
Job = Callable[[], dict[str, Any]]
# (grid, what the driver prepared, submit a point's computation, wait until the simulation is down) -> None: every
# point's traffic, inside the ServerApp; the last point's computation calls the fourth before it starts
ServeAll = Callable[[Grid, Any, Callable[[Job], Future[dict[str, Any]]], Callable[[], None]], None]


def quiet_env() -> None:
    """Offline machines: no telemetry, no runtime dependency sync; Ray without dashboard/usage stats."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


class _DropDeprecation(logging.Filter):
    # run_simulation is the only Flower entry point that takes ray.init arguments and an in-process ServerApp;
    # its deprecation banner is noise for our users (flwr-notes.md).
    def filter(self, record: logging.LogRecord) -> bool:
        return "DEPRECATED FEATURE" not in record.getMessage()


def simulate(first: ExperimentConfig, *, client_app: ClientApp, serve_all: ServeAll, prepared: Future[T],
             policy: str, state_dir: str, keep_state: bool, mark: Callable[[str], None]) -> list[dict[str, Any]]:
    """One Flower simulation of ``first``'s federation (every point of it shares that federation): Ray starts in
    this thread while the caller's driver thread computes ``prepared`` (the orchestrator fills the feature cache and
    saves the client-data snapshots), then the ServerApp runs ``serve_all`` with its result (an error in it, or
    Ctrl-C while Ray starts, shuts Ray down here; the caller owns the driver thread); each point's computation goes
    to a worker thread (``submit``), overlapping the next point's uploads. The last point's computation waits
    until the simulation is down, Ray's processes exited (`wait_exited`), not only asked to stop: at 10M users
    its attacks allocated ~0.5 GB in the second Ray's actors (0.49 GB) and own processes (~0.55 GB) took to exit,
    the run's peak (issue #38); the wait is that second.
    Returns the points' results in order. ``state_dir``: the clients' state (removed after unless ``keep_state``).
    ``mark(name)`` records the simulation's clock (`fixed_costs`)."""
    f = first.federation
    init_args: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
    if f.ray_address:
        init_args["address"] = f.ray_address  # attach to an existing cluster (resources are the cluster's)
    else:
        init_args["num_cpus"] = os.cpu_count() or 1
        init_args["num_gpus"] = _num_gpus() if f.client_gpus > 0 else 0
    # Ray starts in this thread while the driver thread fills the cache: Ray ties its processes' lives to the thread
    # that started them (Linux parent-death signal), so it must not be started from a short-lived thread.
    started = False
    try:
        started = init_ray(init_args, client_seed=first.run.client_seed, threads=client_threads(first.federation),
                           policy=policy, state_dir=state_dir)
        mark("ray_started")
        ready = prepared.result()
        mark("driver_prepared")
    except BaseException:
        if started:  # e.g. an extractor's model files are missing: no half-started Ray is left behind
            import ray  # heavy optional dependency (the Ray backend)

            ray.shutdown()
        raise

    server_app = ServerApp()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fl-privtext-server")
    futures: list[Future[dict[str, Any]]] = []
    down = threading.Event()  # set once the simulation returned and Ray's processes of this machine exited
    ray_procs: dict[int, int] = {}

    def submit(job: Job) -> Future[dict[str, Any]]:
        for done in futures:  # a failed computation stops the sweep before more traffic is simulated
            if done.done() and done.exception() is not None:
                raise done.exception()  # type: ignore[misc]
        futures.append(pool.submit(job))
        return futures[-1]

    def settle() -> None:
        down.wait()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        mark("server_app_started")
        serve_all(grid, ready, submit, settle)
        ray_procs.update(ray_processes())  # Ray's processes before Flower shuts them down (actors included)
        mark("last_round_done")

    backend_config = {
        "client_resources": {"num_cpus": f.client_cpus, "num_gpus": f.client_gpus},
        "init_args": init_args,
    }
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.setLevel(logging.WARNING)
    if not any(isinstance(flt, _DropDeprecation) for flt in flwr_logger.filters):
        flwr_logger.addFilter(_DropDeprecation())
    try:
        mark("simulation_called")
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=f.num_clients,
                       backend_config=backend_config)
        mark("simulation_shut_down")
        wait_exited(ray_procs)
        down.set()
        results = [fut.result() for fut in futures]
        mark("results_ready")
    finally:
        down.set()  # an error: the last computation, if any, is not left waiting
        pool.shutdown(wait=True, cancel_futures=True)
        if not keep_state:
            shutil.rmtree(state_dir, ignore_errors=True)  # this call's ledgers and stored answers
    return results


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of a process from /proc, or None when it is gone (or there is
    no /proc: off Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def ray_processes() -> dict[int, int]:
    """Ray's processes that this process started (its local node's: GCS, raylet, ... and every process below them:
    the workers and Flower's actors): pid -> start time (ticks, so that a reused pid is not waited on). Empty when
    Ray runs elsewhere (``federation.ray-address``: the cluster's processes are not this run's) or off Linux."""
    try:
        # Ray's own record of the node processes it started (a private module: any change of it is guarded)
        from ray._private import worker

        node = getattr(worker, "_global_node", None)
        roots = {info.process.pid for infos in node.all_processes.values() for info in infos
                 if getattr(info, "process", None) is not None} if node is not None else set()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except (ImportError, AttributeError, OSError):
        return {}
    stats = {pid: st for pid in pids if (st := _proc_stat(pid)) is not None}
    found, todo = set(), [p for p in roots if p in stats]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += [c for c, st in stats.items() if st[0] == pid]
    return {pid: stats[pid][2] for pid in found}


def wait_exited(procs: dict[int, int], timeout: float = 30.0, poll: float = 0.05) -> bool:
    """Wait until every process of ``procs`` (pid -> start time, `ray_processes`) has exited (gone, a zombie, or its
    pid reused), at most ``timeout`` seconds: ``ray.shutdown`` asks them to stop and returns before they exit (their
    memory is held until then). Whether they all did."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid, start in procs.items()
                 if (st := _proc_stat(pid)) is not None and st[1] != "Z" and st[2] == start]
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def fixed_costs(clock: dict[str, float]) -> dict[str, float]:
    """The simulation's fixed costs from ``run_points``' clock (seconds since it was called): Ray start (``ray.init``,
    overlapping the driver's preparation), the wait for both, Flower's start until the ServerApp runs, the first
    round less a steady round (actors' start-up), and the shutdown after the last round (Flower stops its workers,
    Ray shuts down; overlapping the server's training). Keys ending in ``_s``."""
    c = dict(clock)
    c.setdefault("first_round_done", c.get("last_round_done", c["server_app_started"]))  # secagg: no upload rounds
    return {
        "ray_start_s": c["ray_started"] - c["validated"],
        "until_driver_ready_s": c["driver_prepared"] - c["validated"],
        "flower_start_s": c["server_app_started"] - c["simulation_called"],
        "first_round_s": c["first_round_done"] - c["server_app_started"],
        "until_first_round_s": c["first_round_done"],
        "shutdown_s": c["simulation_shut_down"] - c["last_round_done"],
        "results_after_shutdown_s": c["results_ready"] - c["simulation_shut_down"],
    }


def init_ray(init_args: dict[str, Any], *, client_seed: int | None = None, threads: int = 1, policy: str = "",
              state_dir: str = "") -> bool:
    """Initialise Ray as Flower's Ray backend would (``init_args`` plus the driver's sys.path for the actors);
    the backend then reuses it, and shuts it down at the end. False when Ray was already initialised.

    ``client_seed`` (reproducible mode), the clients' ``policy`` and their ledgers' ``state_dir`` go to the workers'
    environment only, not to the driver's, where the ServerApp runs. ``threads``: each worker's OpenMP / MKL / OpenBLAS threads (`fl_privtext.threads`), set in its
    environment so that numpy and torch size their pools by it when they load.

    A fresh local Ray gets these variables through the environment its processes inherit (set in this process for
    the duration of ``ray.init`` only, then restored), not through a job ``runtime_env``: with one, Ray cannot give
    the actors the workers it prestarts at ``ray.init`` and starts new ones (the actors came up ~2 s later on 2
    cores; docs/federation.md). An existing cluster (``address``) has its processes already: there the job's
    ``runtime_env`` carries them."""
    import ray

    if ray.is_initialized():
        return False
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    env_vars = {"PYTHONPATH": pythonpath, CLIENT_SEED_ENV: "" if client_seed is None else str(client_seed),
                POLICY_ENV: policy, STATE_ENV: state_dir, **worker_env(threads)}
    if init_args.get("address"):
        ray.init(runtime_env={"env_vars": env_vars}, **init_args)
        return True
    with _environ(env_vars), _lean_head():
        ray.init(**init_args)
    return True


@contextlib.contextmanager
def _lean_head() -> Iterator[None]:
    """Inside the block, a local Ray head starts without its autoscaler monitor and its log monitor (Ray's own
    ``ray start --no-monitor --include-log-monitor=false``; ``ray.init`` has no argument for them): one machine's
    simulation does not autoscale, and its workers' logs are not sent to the driver (``log_to_driver`` False). Two
    Python processes fewer: 163 MB of RSS while Ray runs (issue #38: Ray's own processes were ~0.55 GB of the 10M
    run's peak) and their start's CPU on 2 cores. Ray's private `Node` is wrapped only for this ``ray.init``; where
    it is not there (another Ray), the head starts as Ray's default."""
    try:
        from ray._private import node
    except ImportError:
        yield
        return
    plain = node.Node.__init__

    def lean(self: Any, ray_params: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("head", args[0] if args else False):
            ray_params.no_monitor = True
            ray_params.include_log_monitor = False
        plain(self, ray_params, *args, **kwargs)

    node.Node.__init__ = lean  # type: ignore[method-assign]
    try:
        yield
    finally:
        node.Node.__init__ = plain  # type: ignore[method-assign]


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """``env`` in this process's environment inside the block; every variable restored (or removed) after it."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _num_gpus() -> int:
    import torch

    return torch.cuda.device_count()
