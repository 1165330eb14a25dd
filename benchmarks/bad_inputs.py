"""Bad-input audit of the CLI: run many wrong invocations and tabulate how each ends.

    python benchmarks/bad_inputs.py [--timeout 240] [--json FILE]

Outcomes: "clear" (exit 2, one line on stderr naming what is wrong, no traceback), "traceback", "hang" (killed at
the timeout), "accepted" (exit 0: the input was not rejected; listed so that a human checks it was valid), or
"other" (any other exit). Each case runs `python -m fl_privtext.cli ...` in a fresh process, before which nothing
is cached for the bad part (a fresh temp directory per case).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    header = tmp / "header.csv"
    header.write_text("text,label\n")
    malformed = tmp / "malformed.csv"
    malformed.write_text('text,label\n"unterminated,pos\nok,neg\n')
    good = b"text,label\n" + b"".join(b"review %d is fine,pos\nreview %d is bad,neg\n" % (i, i) for i in range(400))
    gz = tmp / "t.csv.gz"
    blob = gzip.compress(good)
    gz.write_bytes(blob[: len(blob) // 2])
    notgz = tmp / "plain.csv.gz"
    notgz.write_bytes(good)
    binary = tmp / "binary.csv"
    binary.write_bytes(b"text,label\n\xff\xfe\x00bad,pos\n")
    toml_bad = tmp / "bad.toml"
    toml_bad.write_text("[privacy\nepsilon = 1\n")
    toml_unknown = tmp / "unknown.toml"
    toml_unknown.write_text("[privacy]\nepsilonn = 1\n")
    csv = ["--set", "data.name=csv", "--set", "data.options.text=text"]
    run = ["run", "--quiet"]
    out: list[tuple[str, list[str]]] = [
        ("unknown mechanism", [*run, "--set", "privacy.mechanism=ldp"]),
        ("epsilon 0", [*run, "--set", "privacy.epsilon=0"]),
        ("epsilon negative", [*run, "--set", "privacy.epsilon=-1"]),
        ("epsilon text", [*run, "--set", "privacy.epsilon=abc"]),
        ("epsilon inf", [*run, "--set", "privacy.epsilon=inf"]),
        ("epsilon nan", [*run, "--set", "privacy.epsilon=nan"]),
        ("delta 0 gaussian", [*run, "--set", "privacy.mechanism=gaussian", "--set", "privacy.delta=0"]),
        ("delta 1 gaussian", [*run, "--set", "privacy.mechanism=gaussian", "--set", "privacy.delta=1"]),
        ("bits impossible", [*run, "--set", "privacy.mechanism=bitrr", "--set", "privacy.int-bits=40"]),
        ("bits negative", [*run, "--set", "privacy.mechanism=ome", "--set", "privacy.frac-bits=-1"]),
        ("lam 0", [*run, "--set", "privacy.mechanism=ome", "--set", "privacy.lam=0"]),
        ("mu 1", [*run, "--set", "privacy.mu=1"]),
        ("label eps negative", [*run, "--set", "privacy.label-epsilon=-1"]),
        ("sampler unknown", [*run, "--set", "privacy.sampler=exact"]),
        ("calibration unknown", [*run, "--set", "privacy.mechanism=sue", "--set", "privacy.calibration=x"]),
        ("unknown dataset", [*run, "--set", "data.name=imdbb"]),
        ("unknown data option", [*run, "--set", "data.options.nosuch=1"]),
        ("missing data root", [*run, "--set", "data.name=blog", "--set", "data.root=/nonexistent"]),
        ("test-frac 1", [*run, "--set", "data.test-frac=1"]),
        ("fracs sum >= 1", [*run, "--set", "data.test-frac=0.6", "--set", "data.aux-frac=0.5"]),
        ("clients 0", [*run, "--set", "federation.num-clients=0"]),
        ("clients > users", [*run, "--set", "federation.num-clients=100000"]),
        ("partition unknown", [*run, "--set", "federation.partition=random"]),
        ("alpha 0", [*run, "--set", "federation.partition=dirichlet", "--set", "federation.alpha=0"]),
        ("rounds 0", [*run, "--set", "federation.rounds=0"]),
        ("schedule unknown", [*run, "--set", "federation.schedule=once"]),
        ("batch 0", [*run, "--set", "federation.batch-size=0"]),
        ("client cpus 3", [*run, "--set", f"federation.client-cpus={(os.cpu_count() or 1) + 1}"]),
        ("client gpus 1", [*run, "--set", "federation.client-gpus=1"]),
        ("round timeout negative", [*run, "--set", "federation.round-timeout=-1"]),
        ("unknown extractor", [*run, "--set", "extractor.name=word2vec"]),
        ("pooling unknown", [*run, "--set", "extractor.pooling=max"]),
        ("missing model folder", [*run, "--set", "extractor.name=hf", "--set", f"extractor.model={tmp}/none"]),
        ("model folder w/o config", [*run, "--set", "extractor.name=hf", "--set", f"extractor.model={tmp}"]),
        ("cuda without gpu", [*run, "--set", "extractor.name=minilm", "--set", "extractor.device=cuda"]),
        ("server epochs 0", [*run, "--set", "server.epochs=0"]),
        ("server lr 0", [*run, "--set", "server.lr=0"]),
        ("attack dropout 1", [*run, "--set", "attack.dropout=1"]),
        ("seed negative", [*run, "--set", "run.seed=-1"]),
        ("seeds 0", [*run, "--set", "run.seeds=0"]),
        ("client seed negative", [*run, "--set", "run.client-seed=-5"]),
        ("client seed text", [*run, "--set", "run.client-seed=abc"]),
        ("unknown section", [*run, "--set", "nosuch.key=1"]),
        ("unknown key", [*run, "--set", "privacy.epsilonn=1"]),
        ("set without =", [*run, "--set", "privacy.epsilon"]),
        ("output not writable", [*run, "--output", "/dev/null/x"]),
        ("config missing", [*run, "--config", str(tmp / "none.toml")]),
        ("config malformed", [*run, "--config", str(toml_bad)]),
        ("config unknown key", [*run, "--config", str(toml_unknown)]),
        ("csv missing file", [*run, *csv, "--set", f"data.options.path={tmp}/none.csv"]),
        ("csv header only", [*run, *csv, "--set", f"data.options.path={header}"]),
        ("csv malformed", [*run, *csv, "--set", f"data.options.path={malformed}", "--set", "data.options.label=label"]),
        ("csv truncated gz", [*run, *csv, "--set", f"data.options.path={gz}"]),
        ("csv not gz", [*run, *csv, "--set", f"data.options.path={notgz}"]),
        ("csv binary", [*run, *csv, "--set", f"data.options.path={binary}"]),
        ("csv missing column", [*run, *csv, "--set", f"data.options.path={header}", "--set", "data.options.text=body"]),
        ("report unknown mechanism", ["privacy-report", "ldp"]),
        ("report missing dim", ["privacy-report", "ome", "--set", "epsilon=1"]),
        ("report bad param", ["privacy-report", "laplace-l1", "--set", "lam=3"]),
        ("report huge eps bitrr", ["privacy-report", "bitrr", "--set", "epsilon=1e4", "--set", "dim=1", "--set",
                                   "int-bits=0", "--set", "frac-bits=1"]),
        ("report tiny eps laplace", ["privacy-report", "laplace-l1", "--set", "epsilon=1e-40"]),
        ("report huge eps gaussian", ["privacy-report", "gaussian", "--set", "epsilon=1e300", "--set", "delta=1e-5"]),
        ("report secure without dim", ["privacy-report", "laplace-l1", "--set", "epsilon=1", "--set", "sampler=secure"]),
        ("audit few samples", ["audit", "laplace-l1", "--set", "epsilon=1", "--samples", "10"]),
        ("audit alpha 2", ["audit", "laplace-l1", "--set", "epsilon=1", "--set", "alpha=2"]),
        ("audit unknown", ["audit", "ldp"]),
        ("no command", []),
        ("unknown command", ["train"]),
    ]
    return out


def classify(proc: subprocess.CompletedProcess | None) -> str:
    if proc is None:
        return "hang"
    err = proc.stderr.strip()
    if "Traceback" in err:
        return "traceback"
    if proc.returncode == 2 and err and len(err.splitlines()) <= 3 and "error" in err:
        return "clear"  # argparse usage errors print usage + one error line
    return "accepted" if proc.returncode == 0 else "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, argv in cases(tmp):
            t = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-m", "fl_privtext.cli", *argv], capture_output=True, text=True,
                                      timeout=args.timeout, env=env, cwd=tmp, check=False)
            except subprocess.TimeoutExpired:
                proc = None
            outcome = classify(proc)
            last = "" if proc is None else (proc.stderr.strip().splitlines() or [""])[-1][:150]
            rows.append({"case": name, "outcome": outcome, "seconds": round(time.perf_counter() - t, 1),
                         "message": last})
            print(f"{outcome:9s} {name:28s} {last}", flush=True)
    counts = collections.Counter(r["outcome"] for r in rows)
    print(f"\n{len(rows)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": rows, "counts": counts}, indent=2))


if __name__ == "__main__":
    main()
