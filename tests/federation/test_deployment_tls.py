"""The Flower Deployment Engine on loopback with TLS and SuperNode authentication (docs/deployment.md, as run here).

The test writes its own CA, SuperLink certificate and SuperNode key pairs (simulations/deploy_keys.py), starts a
SuperLink with ``--enable-supernode-auth``, registers two SuperNodes' public keys with `flwr supernode register`,
starts those two and a third whose key was never registered, then runs the app with `flwr run . deploy`. Every
process runs in its own session, on its own ports, with its own FLWR_HOME, and is stopped by session at the end.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "simulations"))

from deploy_keys import write_node_keys, write_tls
from processes import free_port, listening, session_pids, stop_sessions

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    any(shutil.which(c) is None for c in ("flwr", "flower-superlink", "flower-supernode")),
    reason="Flower's CLIs are not on PATH")]

# Two clients, one round, no baseline, no attacks, no on-device evaluation, a short server fit.
RUN_CONFIG = ("federation.num-clients=2 federation.rounds=1 run.baseline=false attack.enabled=false "
              "server.on-device=false server.epochs=2 run.progress=false")


def _wait(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"Timed out after {timeout_s:.0f} s waiting for {what}.")
        time.sleep(0.5)


def _pem_body_lines(ssh_public_key: Path) -> list[str]:
    """The base64 lines of the key's PEM (SubjectPublicKeyInfo) form, as the SuperLink logs a refused key."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_public_key(ssh_public_key.read_bytes())
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    b64 = base64.b64encode(der).decode()
    return [b64[i:i + 64] for i in range(0, len(b64), 64)]


def test_authenticated_tls_run_succeeds_and_an_unregistered_supernode_is_refused(tmp_path, cache_dir):
    certs = tmp_path / "certs"
    tls = write_tls(certs, host="127.0.0.1")
    keys = [write_node_keys(certs, f"node-{i}") for i in range(3)]  # node-2 is never registered
    cli_home, out, port = tmp_path / "flwr_home", tmp_path / "out", free_port()
    base_env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
                "FL_PRIVTEXT_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    cli_env = {**base_env, "FLWR_HOME": str(cli_home)}
    procs: dict[str, subprocess.Popen[bytes]] = {}  # name -> process, in start order

    def start(name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as fh:  # own session (stopped by it), own FLWR_HOME
            procs[name] = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path,
                                           start_new_session=True,
                                           env={**base_env, "FLWR_HOME": str(tmp_path / f"home-{name}")})
        return procs[name]

    def supernode(i: int) -> subprocess.Popen[bytes]:
        return start(f"supernode-{i}", [
            "flower-supernode", "--superlink", f"127.0.0.1:{port}", "--root-certificates", str(tls.ca_cert),
            "--auth-supernode-private-key", str(keys[i][0]), "--port", str(free_port()),
            # each SuperNode's own ledger directory (issue #22); its policy: the defaults (what RUN_CONFIG requests)
            "--node-config", f"partition-id={i % 2} num-partitions=2 state-dir='{tmp_path / f'state{i}'}'"])

    def flwr(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["flwr", *args], cwd=ROOT, env=cli_env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def log_of(name: str) -> str:
        return (tmp_path / f"{name}.log").read_text(errors="replace")

    try:
        superlink = start("superlink", [
            "flower-superlink", "--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert),
            "--ssl-keyfile", str(tls.server_key), "--enable-supernode-auth", "--port", str(port),
            "--disable-runtime-dependency-installation"])
        _wait(lambda: listening(port) or superlink.poll() is not None, 120, "the SuperLink's port")
        assert superlink.poll() is None, log_of("superlink")

        # The SuperLink speaks TLS with the test's certificate: verified against the test's CA, and not against
        # the system's CAs.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ssl.create_default_context(
                cafile=str(tls.ca_cert)).wrap_socket(raw, server_hostname="127.0.0.1") as tls_sock:
            assert ("IP Address", "127.0.0.1") in tls_sock.getpeercert()["subjectAltName"]
        with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection(
                ("127.0.0.1", port), timeout=10) as raw:
            ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")

        intruder = supernode(2)  # refused whenever it dials: its key is never registered

        cli_home.mkdir()
        (cli_home / "config.toml").write_text(
            f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\n'
            f'root-certificates = "{tls.ca_cert}"\n')
        registered = []
        for _, public in keys[:2]:
            reg = flwr("supernode", "register", str(public), "deploy", "--format", "json")
            assert reg.returncode == 0, reg.stdout + reg.stderr
            registered.append(str(json.loads(reg.stdout)["node-id"]))

        supernode(0), supernode(1)
        _wait(lambda: all("SuperNode ID:" in log_of(f"supernode-{i}") for i in (0, 1)), 180,
              "the registered SuperNodes")
        _wait(lambda: intruder.poll() is not None, 180, "the unregistered SuperNode to give up")

        # The unregistered SuperNode was refused: it exits with an error, the SuperLink logged its key as unknown,
        # and it is never listed; the two registered ones are online under the ids registration gave them.
        assert intruder.returncode != 0
        assert "Failed to activate SuperNode" in log_of("supernode-2") and "SuperNode ID:" not in log_of("supernode-2")
        refusals = [line for line in log_of("superlink").splitlines()
                    if "No SuperNode found with the given public key" in line]
        assert len(refusals) >= 1 and all(chunk in refusals[0] for chunk in _pem_body_lines(keys[2][1]))
        listed = flwr("supernode", "list", "deploy", "--format", "json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        nodes = {n["node-id"]: n["status"] for n in json.loads(listed.stdout)["nodes"]}
        assert nodes == dict.fromkeys(registered, "online")

        # An authenticated run over TLS: both registered SuperNodes serve it and results.json is written.
        run = flwr("run", ".", "deploy", "-c", f'{RUN_CONFIG} run.output="{out}"', "--stream", timeout=420)
        assert (out / "results.json").is_file(), run.stdout[-3000:] + run.stderr[-3000:]
        res = json.loads((out / "results.json").read_text())
        fed = res["federation"]
        assert fed["num_clients"] == 2 and fed["placement"]["replies"] == 2
        assert fed["uploads_received"] == fed["uploads_observed"] == fed["num_records"] > 0
        assert fed["placement"]["replies_by_ray_node"] == {}  # real SuperNodes, no Ray
    finally:
        killed = stop_sessions(reversed(procs.values()))  # SuperNodes first, then the SuperLink
    # Nothing of the sessions is left. SIGTERM is normally enough (stop_sessions also signals the SuperExec a
    # SuperNode leaves behind); a straggler that needed SIGKILL is reported, not failed on.
    if killed:
        warnings.warn(f"SIGKILL was needed after SIGTERM for: {killed}", stacklevel=1)
    assert not [pid for p in procs.values() for pid in session_pids(p.pid)]
    assert not listening(port)
