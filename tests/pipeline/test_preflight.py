"""Everything checkable is checked before any work: one-line errors, exit 2, naming the key or file (CLI runs)."""

from __future__ import annotations

import gzip
import os
import signal

import pytest


def _run(*args: str) -> int:
    """``fl-privtext run --quiet ARGS`` in this process (the CLI's own entry point, as the console script calls it):
    its exit code; the test reads stderr through capfd."""
    from fl_privtext.cli import main

    handler = signal.getsignal(signal.SIGINT)  # the CLI installs its own Ctrl-C handler: give pytest back its own
    try:
        return main(["run", "--quiet", *args])
    except SystemExit as exc:  # argparse's own errors
        return int(exc.code or 0)
    finally:
        signal.signal(signal.SIGINT, handler)


def _csv_args(path) -> list[str]:
    return ["--set", "data.name=csv", "--set", f"data.options.path={path}", "--set", "data.options.text=text"]


def _cases(tmp_path):
    header_only = tmp_path / "header.csv"
    header_only.write_text("text,label\n")
    rows = b"text,label\n" + b"".join(b"a fine review number %d,pos\n" % i for i in range(3000))
    truncated = tmp_path / "reviews.csv.gz"
    blob = gzip.compress(rows)
    truncated.write_bytes(blob[: len(blob) // 2])
    cpus = os.cpu_count() or 1
    return {
        "cpus": (["--set", f"federation.client-cpus={cpus + 1}"], f"federation.client-cpus={cpus + 1} exceeds"),
        "gpus": (["--set", "federation.client-gpus=1"], "federation.client-gpus=1 but this machine has no GPU"),
        "output": (["--output", "/dev/null/x"], "'/dev/null/x' is not a writable directory"),
        "corrupt_gz": (_csv_args(truncated), "corrupt or truncated archive"),
        "model_folder": (["--set", "extractor.name=hf", "--set", f"extractor.model={tmp_path / 'no-model'}"],
                         "no such local model folder"),
        "header_only": (_csv_args(header_only), "has no rows"),
        "negative_seed": (["--set", "run.seed=-1"], "run.seed must be an integer >= 0"),
        "bad_sampler": (["--set", "privacy.sampler=exact"], "privacy.sampler must be one of float, secure"),
        "fp16_cpu": (["--set", "extractor.name=minilm", "--set", "extractor.device=cpu", "--set",
                      "extractor.precision=fp16"], "extractor.precision=fp16 needs a CUDA GPU"),
    }


@pytest.mark.parametrize("case", ["cpus", "gpus", "output", "corrupt_gz", "model_folder", "header_only",
                                  "negative_seed", "bad_sampler", "fp16_cpu"])
def test_bad_input_is_a_one_line_error_before_any_work(case, tmp_path, monkeypatch, capfd):
    if case == "gpus":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    args, needle = _cases(tmp_path)[case]
    monkeypatch.chdir(tmp_path)  # a run directory would appear under runs/ here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = _run(*args)
    err = capfd.readouterr().err.strip()
    assert rc == 2, (rc, err[-2000:])
    assert needle in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("runs/*"))
