"""A two-node Ray cluster on this machine (`ray start --head` + `ray start --address`), one federated run whose
virtual clients land on both nodes, then a clean shutdown: every process the cluster started is gone at the end.

    OMP_NUM_THREADS=1 nice -n 10 python simulations/two_node_ray.py --output runs/two_node

Each node gets 1 CPU (``--node-cpus``) and its own custom resource (``fl_node_head`` / ``fl_node_worker``), its own
temp dir and its own ports on 127.0.0.1; Flower's Ray backend then places one client actor on each node. Every
upload reply names the host and the Ray node that computed it (`fl_privtext.federation.client_app.placement`);
results.json ``federation.placement`` counts replies per Ray node, and this script prints them beside the nodes'
resources. On real machines the same commands run on each machine with ``--node-ip-address=<its address>``
(docs/deployment.md).

Never `ray stop` here: it stops every Ray on the machine, other users' included. Each `ray start --block` runs
in its own session; stopping sends it SIGTERM (Ray then stops that node's processes) and, after a grace period,
SIGKILLs whatever of that session is left.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import free_port, session_pids, stop_sessions


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen[bytes]
    temp_dir: Path
    log: Path
    resources: dict[str, float]
    ports: list[int]  # every port this node was told to listen on (GCS, raylet, agents...)


@dataclass
class LocalRayCluster:
    """A head and one worker node on 127.0.0.1, each with ``node_cpus`` CPUs and its own custom resource.

    Use as a context manager; ``address`` is what ``federation.ray-address`` takes; ``nodes()`` lists the alive
    nodes (id -> resources); ``stop()`` returns what it had to SIGKILL after the grace period ("pid command")."""

    node_cpus: int = 1
    object_store_bytes: int = 80_000_000
    start_timeout_s: float = 180.0
    env: dict[str, str] = field(default_factory=dict)
    started: list[RayNode] = field(default_factory=list)
    address: str = ""

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
                **self.env}

    def _start_node(self, name: str, head: bool) -> RayNode:
        # A short temp dir: Ray's unix socket paths must stay under 108 characters.
        temp_dir = Path(tempfile.mkdtemp(prefix=f"ray-{name}-", dir="/tmp"))
        resources = {f"fl_node_{name}": 1.0}
        flags = ["node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc",
                 "runtime-env-agent", "metrics-export"] + (["", "dashboard", "ray-client-server"] if head else [])
        ports = {f"--{flag}-port" if flag else "--port": free_port() for flag in flags}  # flag -> port
        if head:
            self.address = f"127.0.0.1:{ports['--port']}"
        cmd = ["ray", "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={self.node_cpus}",
               "--num-gpus=0", f"--resources={json.dumps(resources)}", f"--temp-dir={temp_dir}",
               f"--object-store-memory={self.object_store_bytes}", "--disable-usage-stats"]
        cmd += [f"{flag}={port}" for flag, port in ports.items()]
        cmd += ["--head", "--include-dashboard=false"] if head else [f"--address={self.address}"]
        log = temp_dir / "ray-start.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self._env(),
                                    start_new_session=True)
        node = RayNode(name, proc, temp_dir, log, resources, sorted(ports.values()))
        self.started.append(node)
        return node

    def start(self) -> None:
        self._start_node("head", head=True)
        self._wait_for(1)
        self._start_node("worker", head=False)
        self._wait_for(2)

    def _wait_for(self, n: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            for node in self.started:
                if node.process.poll() is not None:
                    raise RuntimeError(f"`ray start` of the {node.name} node exited with {node.process.returncode}:"
                                       f"\n{node.log.read_text()[-2000:]}")
            try:
                if len(self.nodes()) >= n:
                    return
            except RuntimeError:
                pass  # the head is not reachable yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"The Ray cluster at {self.address} did not show {n} alive node(s) within "
                                   f"{self.start_timeout_s:.0f} s.")
            time.sleep(2.0)

    def nodes(self) -> dict[str, dict[str, float]]:
        """Alive nodes: Ray node id -> resources (asked in a separate process, so this one stays Ray-free)."""
        code = ("import json, sys, ray; ray.init(address=sys.argv[1], include_dashboard=False, "
                "logging_level='ERROR', log_to_driver=False); print(json.dumps({n['NodeID']: n['Resources'] "
                "for n in ray.nodes() if n['Alive']}))")
        out = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True, timeout=120,
                             env=self._env(), check=False)
        if out.returncode != 0:
            raise RuntimeError(f"Cannot query the Ray cluster at {self.address}: {out.stderr[-1000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def pids(self) -> list[int]:
        """Every live process this cluster started (the sessions of its `ray start` commands)."""
        return [pid for node in self.started for pid in session_pids(node.process.pid)]

    def stop(self, grace_s: float = 30.0) -> list[str]:
        """SIGTERM the nodes, worker first; SIGKILL what is left of their sessions after ``grace_s``; remove the
        temp dirs. Returns what needed SIGKILL ("pid command" lines; empty after a clean stop)."""
        killed = stop_sessions([n.process for n in reversed(self.started)], grace_s)
        for node in self.started:
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        return killed


def run_on_cluster(address: str, output: Path, sets: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `fl-privtext run` attached to the cluster (4 virtual clients, the embedded default data)."""
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline.runner import run_experiment

    flat = {"federation.ray-address": address, "federation.num-clients": 4, "federation.rounds": 2,
            "run.progress": False, **(sets or {})}
    return run_experiment(ExperimentConfig.from_flat(flat), output=output, echo=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="runs/two_node")
    ap.add_argument("--node-cpus", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config keys")
    args = ap.parse_args()
    sets = dict(s.split("=", 1) for s in args.set)
    t0 = time.perf_counter()
    cluster = LocalRayCluster(node_cpus=args.node_cpus)
    try:
        cluster.start()
        nodes = cluster.nodes()
        t1 = time.perf_counter()
        results = run_on_cluster(cluster.address, Path(args.output), sets)
        t2 = time.perf_counter()
        placement = results["federation"]["placement"]
        for node_id, res in nodes.items():
            custom = [k for k in res if k.startswith("fl_node_")]
            print(f"Ray node {node_id[:12]} {custom}: {placement['replies_by_ray_node'].get(node_id, 0)} replies, "
                  f"clients {placement['clients_by_ray_node'].get(node_id, [])}")
    finally:
        killed = cluster.stop()
    for line in killed:
        print(f"needed SIGKILL: {line[:160]}")
    left = cluster.pids()  # after stop(): live processes of the nodes' sessions (none expected)
    print(f"cluster start {t1 - t0:.1f} s, run {t2 - t1:.1f} s, shutdown {time.perf_counter() - t2:.1f} s; "
          f"accuracy {results['utility']['accuracy']:.3f}; processes left: {len(left)}; results in {args.output}")


if __name__ == "__main__":
    main()
