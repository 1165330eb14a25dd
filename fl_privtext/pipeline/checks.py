"""Up-front checks of a run: everything that can be checked is, before any extraction, Ray or Flower start.

Each failure is a ValueError whose message names the key or file and what is expected; the CLI prints it on one
line and exits with 2.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from fl_privtext.config import ExtractorConfig, FederationConfig


def check_output(output: str | os.PathLike[str]) -> Path:
    """The output directory can be created and written, checked without creating anything (a run that fails a later
    check leaves no empty directory behind)."""
    out = Path(output).expanduser().absolute()
    probe = out
    while not os.path.lexists(probe):
        probe = probe.parent
    problem = None
    if probe.is_symlink() and not probe.exists():
        problem = f"{probe} is a symbolic link to {os.readlink(probe)}, which does not exist"
    elif not probe.is_dir():
        problem = f"{probe} is not a directory"
    elif not os.access(probe, os.W_OK | os.X_OK):
        problem = f"{probe} is not writable"
    elif probe == out:
        try:
            with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
                pass
        except OSError as exc:
            problem = str(exc.strerror or exc)
    if problem:
        raise ValueError(f"--output / run.output {str(output)!r} is not a writable directory ({problem}); choose a "
                         "directory you can write to.")
    return out


def available_resources(ray_address: str) -> tuple[float, float]:
    """(CPUs, GPUs) the simulation can use: this machine's, or the running Ray cluster's when attaching."""
    if ray_address:
        import ray

        started = not ray.is_initialized()
        if started:
            try:
                ray.init(address=ray_address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - any failure to connect is a configuration error here
                raise ValueError(f"federation.ray-address={ray_address!r}: no Ray cluster could be reached ({exc}); "
                                 "start one with `ray start --head` or leave the key empty.") from None
        try:
            res = ray.cluster_resources()
        finally:
            if started:
                ray.shutdown()
        return float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
    return float(os.cpu_count() or 1), float(_local_gpus())


def _local_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch / no driver: no GPU
        return 0


def check_resources(federation: FederationConfig, extractor: ExtractorConfig) -> None:
    """A virtual client's CPU/GPU request fits on the machine (or the cluster); otherwise Ray would wait
    forever. The extractor's device and precision are checked here too: they depend on the machine's GPUs."""
    f, x = federation, extractor
    cpus, gpus = available_resources(f.ray_address)
    where = f"the Ray cluster at {f.ray_address!r}" if f.ray_address else "this machine"
    if f.client_cpus > cpus:
        raise ValueError(f"federation.client-cpus={f.client_cpus:g} exceeds the {cpus:g} CPU(s) of {where}; a "
                         f"virtual client could never be scheduled. Use at most {cpus:g}.")
    if f.client_gpus > 0 and gpus == 0:
        raise ValueError(f"federation.client-gpus={f.client_gpus:g} but {where} has no GPU; set "
                         "federation.client-gpus=0.")
    if f.client_gpus > gpus:
        raise ValueError(f"federation.client-gpus={f.client_gpus:g} exceeds the {gpus:g} GPU(s) of {where}.")
    if x.device.startswith("cuda") and _local_gpus() == 0 and not f.ray_address:
        raise ValueError(f"extractor.device={x.device!r} but this machine has no CUDA GPU; leave it empty "
                         "(CUDA when available, else CPU) or set it to 'cpu'.")
    on_cpu = x.device == "cpu" or (not x.device and _local_gpus() == 0 and not f.ray_address)
    if x.precision == "fp16" and x.name != "glove" and on_cpu:
        raise ValueError("extractor.precision=fp16 needs a CUDA GPU and extraction would run on the CPU here; use "
                         "extractor.precision=bf16 or float32 on CPU.")


def check_extractor(extractor: ExtractorConfig) -> None:
    """A local model folder named in extractor.model exists and holds a model."""
    model = extractor.model
    if not model or extractor.name == "glove":
        return
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"extractor.model={model!r}: the folder has no config.json; it is not a transformers "
                             "model folder.")
        return
    if model.startswith((".", "/", "~")) or path.suffix or os.sep + os.sep in model:
        raise ValueError(f"extractor.model={model!r}: no such local model folder (expected a folder with "
                         "config.json and the weights, e.g. a save_pretrained() output).")
