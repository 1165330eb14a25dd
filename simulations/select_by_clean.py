"""How well the server's estimate of each head's ON-DEVICE accuracy tracks the exact figure (issue #37 item 3).

    PYTHONPATH=. HF_HUB_OFFLINE=1 nice -n 5 python simulations/select_by_clean.py [--quick]

In process, no federation (the server's statistics do not depend on the transport): every record of a train or
aux user is privatized once by the configured mechanism (one round, float sampler, the stream (seed, "sim-upload")),
the server runs ``server.learner = auto`` on them (`fl_privtext.server.training.fit_learner`, the MLP left out:
CPU), every candidate is fitted on all of them, and the referee applies each candidate's exported head to the test
users' clean features (E[upload | x], as `fl_privtext.pipeline.exact_on_device` does) and counts exactly. Printed
per point and seed: each candidate's exact on-device accuracy beside its estimates, the head each rule picks and
the exact accuracy that pick ships. A simulation (the referee reads the test users' clean features): no deployed
server can compute the exact column.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep import default_data_root

from fl_privtext import rng
from fl_privtext.client.ondevice import expected_input
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.ondevice import mlp_logits
from fl_privtext.pipeline.preparation import prepare
from fl_privtext.public import PublicSpec
from fl_privtext.rng import generator
from fl_privtext.server.learners import LDA, ClassStats
from fl_privtext.server.training import fit_learner

DATA = {
    "default": {"data.name": "default"},
    "blog-glove": {"data.name": "blog", "data.options.max_rows": 10000},
}


def point(data: str, mechanism: str, epsilon: float, seed: int, root: str) -> dict[str, Any]:
    cfg = ExperimentConfig.from_flat({**DATA[data], "data.root": root, "privacy.mechanism": mechanism,
                                      "privacy.epsilon": epsilon, "privacy.sampler": "float", "run.seed": 0,
                                      "run.progress": False}, ExperimentConfig())
    prep = prepare(cfg, features="extract")
    x = np.asarray(prep.features, np.float32)
    y = np.asarray(prep.ds.labels, np.int64)
    users = prep.ds.user_index.reshape(-1)
    k = len(prep.ds.label_names)
    tr = prep.roles != "test"
    mech = mechanism_for(PublicSpec.of(cfg), x.shape[1])
    up = np.asarray(mech.privatize(x[tr], rng.generator(seed, "sim-upload")), np.float32)
    fitted: dict[str, Any] = {}
    t0 = time.perf_counter()
    _, chosen, scores = fit_learner("auto", up, y[tr], users[tr], num_classes=k, mechanism=mech,
                                    input_dim=x.shape[1], seed=seed, fit_all=fitted)
    te = prep.roles == "test"
    clean = expected_input(x[te], PublicSpec.of(cfg), cfg.server.aggregate)
    exact = {n: float(np.mean(mlp_logits(m.export(), clean).argmax(1) == y[te])) for n, m in fitted.items()}
    extra = variants(fitted, up, y[tr], users[tr], k, mech, x.shape[1], seed, scores)
    return {"extra": extra, "data": data, "mechanism": mechanism, "epsilon": epsilon, "seed": seed, "chosen": chosen,
            "exact": exact, "scores": scores, "select_s": time.perf_counter() - t0}


def linear_part(export):
    """(W, b) of a one-layer exported head on raw inputs."""
    std = np.asarray(export["std"], np.float64)
    w = np.asarray(export["weight_0"], np.float64) / std
    b = np.asarray(export["bias_0"], np.float64) - w @ np.asarray(export["mean"], np.float64)
    return w, b

def posterior_accuracy(export, x, y, k, law, seed=0, draws=4000, posterior=True):
    """A tried variant (not the platform's): the head's accuracy at James-Stein-denoised class means (each
    deviation from the grand mean shrunk by 1 - v_k tr S_w / ||dev_k||^2, `ClassStats.deviation_error`) with the
    posterior variance f_k v_k S_w added to the clean spread (the Gaussian-prior posterior of mu_k)."""
    lda = LDA(num_classes=k, noise=law)
    lda.stats = st = ClassStats.of(np.asarray(x, np.float64), np.asarray(y, np.int64), k, law.variance)
    sigma, _ = lda.clean_within()
    s_up = st.within()
    counts = np.maximum(st.counts, 1.0)
    n = counts.sum()
    pi = counts / n
    m = st.means
    grand = pi @ m
    dev = m - grand
    v = (1 - pi) ** 2 / counts + (n - counts) / n ** 2
    tr = float(np.trace(s_up))
    f = np.clip(1 - v * tr / np.maximum((dev * dev).sum(1), 1e-300), 0, 1) if posterior else np.ones(k)
    pm = grand + f[:, None] * dev
    w, b = linear_part(export)
    a = w @ sigma @ w.T
    g = generator(int(seed), "posterior-accuracy", k)
    z = g.standard_normal((draws, k))
    acc = 0.0
    for c in range(k):
        cov = a + (f[c] * v[c]) * (w @ s_up @ w.T) if posterior else a
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        root = vec * np.sqrt(np.clip(lam, 0, None))
        pred = (w @ pm[c] + b + z @ root.T).argmax(1)
        acc += pi[c] * float(np.mean(pred == c))
    return acc


def variants(fitted, up, y, groups, k, mech, dim, seed, scores):
    """The tried variant of the estimate, in-sample (``post_full``: the head fitted on every upload, the means of
    every upload) and out of fold (``post_cv``: 3 folds by user, as `select`)."""
    from sklearn.model_selection import GroupKFold

    from fl_privtext.server.learners import make_learner
    from fl_privtext.server.noise import noise_law
    law = noise_law(mech, dim, up.mean(0, dtype=np.float64), rng.generator(seed, "server", "noise"))
    out = {}
    for name, model in fitted.items():
        full = posterior_accuracy(model.export(), up, y, k, law, seed)
        folds = []
        for a, b in GroupKFold(3).split(up, y, groups):
            mdl = make_learner(name, num_classes=k, noise=law, seed=seed, linear_c=scores["linear"].get("C")).fit(up[a], y[a])
            folds.append(posterior_accuracy(mdl.export(), up[b], y[b], k, law, seed))
        out[name] = {"post_full": full, "post_cv": float(np.mean(folds))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="default,blog-glove")
    ap.add_argument("--eps", default="1,4,16")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--mechanism", default="privunitg")
    ap.add_argument("--out", default="")
    ap.add_argument("--data-root", default=default_data_root())
    args = ap.parse_args()
    rows = []
    for data in args.data.split(","):
        for eps in (float(e) for e in args.eps.split(",")):
            for seed in range(args.seeds):
                r = point(data, args.mechanism, eps, seed, args.data_root)
                rows.append(r)
                sc = r["scores"]
                cells = " ".join(f"{n}={r['exact'][n]:.3f}/{sc[n].get('clean_accuracy_estimate', float('nan')):.3f}"
                                 for n in r["exact"])
                print({n: {a: round(b, 3) for a, b in v.items()} for n, v in r["extra"].items()})
                print(f"{data} eps={eps:g} seed={seed} chosen={r['chosen']} "
                      f"clean_rule={sc['constant'].get('clean_choice')} {cells} ({r['select_s']:.0f}s)", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
