"""What the server's learner selection (``server.learner = auto``) costs against fitting the learner it chooses.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/bench_selection.py [--data default|blog-glove|ag-glove|blog-minilm|ag-minilm]
        [--mechanism privunitg] [--epsilon 4] [--mlp] [--json FILE]

Issue #38 asks that selection cost at most 2x fitting its winner. In process, no federation (the server's fit does
not depend on the transport, as simulations/select_by_clean.py): every record of a train or aux user is privatized
once by the configured mechanism (float sampler, the stream (seed, "sim-upload")), then on the SAME uploads, with the
same noise law, seed and MLP settings as `fl_privtext.server.training.train_server` passes:
- ``auto_s``: `fit_learner("auto", ...)` end to end (its cross-validation on a sample of users, then the winner's
  fit on every upload);
- ``winner_s``: `fit_learner(<winner>, ...)` alone (the explicit name; Linear chooses its L2 strength as auto does);
- ``ratio`` = auto_s / winner_s; ``auto_cpu_s``, ``winner_cpu_s``, ``ratio_cpu``: the same in this process's CPU
  seconds (`time.process_time`, one BLAS thread: what a busy machine's preemption does not inflate);
- ``each_s``: every candidate fitted once alone on all uploads (the constant's log prior included), and
  ``ratio_each`` = auto_s / each_s: what selection costs beyond trying each candidate once.
Candidates: ``server.auto-candidates``' default (centroid, lda, linear); ``--mlp`` adds the MLP.
Wall times on a shared machine: the load average is printed and written beside them; one BLAS/OpenMP thread
unless ``--threads`` (under load, oversubscribed threads made an 8k x 50 logistic fit 15x slower).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

THREADS = "--threads" in sys.argv and sys.argv[sys.argv.index("--threads") + 1] or "1"
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # before numpy loads its BLAS
    os.environ[_var] = THREADS

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fl_privtext import rng
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline.preparation import prepare
from fl_privtext.public import PublicSpec
from fl_privtext.server.learners import make_learner
from fl_privtext.server.training import AUTO_DEFAULT, fit_learner, server_mlp_config

DATA = {
    "default": {"data.name": "default"},
    "blog-glove": {"data.name": "blog", "data.options.max_rows": 10000},
    "ag-glove": {"data.name": "ag_news"},  # the staged AG news (ag_news_entities/ag_data.txt; no row option)
    # the frontier's cells (simulations/frontier.py): MiniLM features from the feature cache
    "blog-minilm": {"data.name": "blog", "data.options.max_rows": 10000, "extractor.name": "minilm"},
    "ag-minilm": {"data.name": "ag_news", "extractor.name": "minilm"},
}


def uploads(data: str, mechanism: str, epsilon: float, seed: int, root: str, rows: int = 50_000,
            dim: int = 384, classes: int = 10) -> dict[str, Any]:
    """The training uploads of one point (train and aux users), privatized once in process. ``synthetic``: ``rows``
    unit-norm features of width ``dim`` around ``classes`` random class directions, 5 uploads a user (the size of
    the selection's sample at scale, `fl_privtext.server.training.CV_MAX_UPLOADS`, at MiniLM's width)."""
    cfg = ExperimentConfig.from_flat({**DATA.get(data, {}), "data.root": root, "privacy.mechanism": mechanism,
                                      "privacy.epsilon": epsilon, "privacy.sampler": "float", "run.seed": seed,
                                      "run.progress": False}, ExperimentConfig())
    if data == "synthetic":
        g = rng.generator(seed, "bench-selection")
        y = g.integers(0, classes, rows)
        x = g.standard_normal((classes, dim))[y] * 0.3 + g.standard_normal((rows, dim))
        x = np.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), np.float32)
        groups, tr, k = np.arange(rows) // 5, np.ones(rows, bool), classes
    else:
        prep = prepare(cfg, features="extract")
        x = np.asarray(prep.features, np.float32)
        y = np.asarray(prep.ds.labels, np.int64)
        tr = prep.roles != "test"
        groups, k = prep.ds.user_index.reshape(-1), len(prep.ds.label_names)
    mech = mechanism_for(PublicSpec.of(cfg), x.shape[1])
    up = np.asarray(mech.privatize(x[tr], rng.generator(seed, "sim-upload")), np.float32)
    return {"cfg": cfg, "x": up, "y": y[tr], "groups": groups[tr], "k": k, "mechanism": mech, "input_dim": x.shape[1]}


def warm_imports() -> None:
    """Import what the fits import lazily (scikit-learn, scipy.stats, torch), so neither timing pays for it."""
    import scipy.stats  # noqa: F401
    import sklearn.linear_model
    import sklearn.model_selection  # noqa: F401

    from fl_privtext.learn import train_mlp  # noqa: F401  (torch)
    from fl_privtext.threads import apply_torch_threads

    apply_torch_threads(int(THREADS))


def fit(name: str, pt: dict[str, Any], seed: int, mlp: bool) -> tuple[float, str, dict[str, Any], float]:
    """Seconds of `fit_learner(name)` on the point's uploads, its chosen name and candidate scores, and its CPU
    seconds; a fresh MLP generator each call (the same draws for the winner alone as for auto's)."""
    cfg = pt["cfg"]
    kw = {"config": server_mlp_config(cfg.server, pt["x"].shape[1]), "generator": rng.torch_generator(seed, "server"),
          "progress": None} if mlp else None
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "constant":  # no fit_learner name: the log prior of the labels (auto's winner when none beats it)
        make_learner("constant", num_classes=pt["k"]).fit(pt["x"], pt["y"])
        return time.perf_counter() - t0, name, {}, time.process_time() - c0
    _, chosen, scores = fit_learner(name, pt["x"], pt["y"], pt["groups"], num_classes=pt["k"],
                                    mechanism=pt["mechanism"], input_dim=pt["input_dim"], seed=seed, mlp=kw,
                                    candidates=AUTO_DEFAULT + (("mlp",) if mlp else ()))
    return time.perf_counter() - t0, chosen, scores, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=sorted(DATA) + ["synthetic"], default="default")
    ap.add_argument("--rows", type=int, default=50_000, help="synthetic: uploads")
    ap.add_argument("--dim", type=int, default=384, help="synthetic: width")
    ap.add_argument("--data-root", default=os.environ.get("FL_PRIVTEXT_DATA", "/work/shared/data"))
    ap.add_argument("--mechanism", default="privunitg")
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mlp", action="store_true", help="add the MLP to auto's candidates (server.auto-candidates)")
    ap.add_argument("--no-mlp", action="store_true", help="the default now (kept for earlier command lines)")
    ap.add_argument("--repeats", type=int, default=1, help="time each fit this many times, keep the fastest")
    ap.add_argument("--threads", default="1", help="BLAS/OpenMP threads (set before numpy loads; default 1: on a "
                    "shared machine more threads than free cores slowed each fit up to 80x, measured)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    pt = uploads(args.data, args.mechanism, args.epsilon, args.seed, args.data_root, args.rows, args.dim)
    warm_imports()
    mlp = args.mlp and not args.no_mlp
    auto = [fit("auto", pt, args.seed, mlp) for _ in range(args.repeats)]
    auto_s, chosen, scores, _ = min(auto, key=lambda r: r[0])
    auto_cpu_s = min(r[3] for r in auto)
    alone = [fit(chosen, pt, args.seed, mlp) for _ in range(args.repeats)]
    winner_s, winner_cpu_s = min(r[0] for r in alone), min(r[3] for r in alone)
    each = {n: min(fit(n, pt, args.seed, mlp)[0] for _ in range(args.repeats)) for n in scores}
    each_s = sum(each.values())
    out = {"data": args.data, "mechanism": args.mechanism, "epsilon": args.epsilon, "seed": args.seed,
           "uploads": len(pt["y"]), "dim": int(pt["x"].shape[1]), "mlp": mlp, "winner": chosen,
           "auto_s": auto_s, "winner_s": winner_s, "ratio": auto_s / max(winner_s, 1e-9),
           "auto_cpu_s": auto_cpu_s, "winner_cpu_s": winner_cpu_s, "ratio_cpu": auto_cpu_s / max(winner_cpu_s, 1e-9),
           "each": each, "each_s": each_s, "ratio_each": auto_s / max(each_s, 1e-9),
           "candidates": {n: {k: v for k, v in s.items() if isinstance(v, (int, float, bool, str))}
                          for n, s in scores.items()},
           "threads": int(THREADS), "load": list(os.getloadavg())}
    print(f"{args.data} {args.mechanism} eps {args.epsilon}: {out['uploads']} uploads x {out['dim']}, "
          f"mlp {'in' if mlp else 'out'}; auto chose {chosen}")
    for n, s in scores.items():
        if not s.get("scored", True):  # lazy selection: not cross-validated, its choice did not need it
            print(f"  {n:9s} not scored ({s['why']})")
            continue
        print(f"  {n:9s} log_loss {s['log_loss']:.6f} accuracy {s['accuracy']:.4f} beats {s['beats_constant']}")
    print(f"auto {auto_s:.4f} s, {chosen} alone {winner_s:.4f} s, ratio {out['ratio']:.2f} (CPU {auto_cpu_s:.4f} / "
          f"{winner_cpu_s:.4f} s, ratio {out['ratio_cpu']:.2f}); every candidate once "
          f"{each_s:.2f} s ({', '.join(f'{n} {v:.2f}' for n, v in each.items())}), ratio {out['ratio_each']:.2f} "
          f"(load {' '.join(f'{v:.1f}' for v in out['load'])})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
