"""Diagnostic (NOT a paper table, NOT the federated path): why OME lands below NPNN on the sentiment sets.

    nice -n 10 python simulations/ome_diagnostic.py --data-root ../shared/data

In-process, on the same cached GloVe features and the same 5 user splits as Table 1 (run.seed 0, 10, 20, 30, 40;
one seed each), always the paper's MLP width (128 hidden):
  A. NPNN with the platform's default server (inputs standardised per feature), i.e. the earlier page's classifier,
  B. the clean OME code (z-score per vector, 10-bit fixed point, no randomisation), raw bits: the ceiling of the
     noise-free code (randomising it can only remove information),
  C. OME lam=100, eps=1 with the inputs standardised per feature (the earlier page's classifier),
  D. the same uploads, MLP on the raw 0/1 bits (the paper's classifier, as in Table 1),
  E. OME with the code computed from a per-FEATURE z-score (the other reading of the paper's "z-score
     normalisation"), raw bits,
  F. the same uploads as C/D with only the even bits (odd bits carry ~nothing: p2 = 1e-6, q ~ 0.01).
Writes docs/results/ome/diagnostic.json and prints a table; the summary (ome.md) shows it when present.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import ome
import sweep

VARIANTS = {
    "A": "NPNN, inputs standardised (earlier classifier)",
    "B": "clean OME code (no randomisation), raw bits: the noise-free ceiling",
    "C": "OME λ=100 ε=1, inputs standardised (earlier classifier)",
    "D": "OME λ=100 ε=1, raw bits (the paper's classifier)",
    "E": "OME λ=100 ε=1 on a per-feature z-score code, raw bits",
    "F": "OME λ=100 ε=1, even bits only, raw bits",
}


def run(root: str) -> dict:
    from fl_privtext import pipeline, rng
    from fl_privtext.learn import MLPConfig, train_mlp
    from fl_privtext.privacy import make_mechanism
    from fl_privtext.privacy.encoding import encode

    out: dict = {}
    for ds in ome.SENTIMENT:
        res: dict[str, list[float]] = {k: [] for k in VARIANTS}
        for split in ome.SPLITS:
            cfg = ome.ome(ds, root, 1.0, 100.0, **{"run.seed": split})
            prep = pipeline.prepare(cfg, features="extract")
            x = np.asarray(prep.features, np.float32)
            y = prep.ds.labels
            te = prep.roles == "test"
            tr = ~te
            mech = make_mechanism("ome", epsilon=1.0, lam=100.0, dim=x.shape[1])
            p1, p2, q = mech.probabilities()
            keep = np.where(np.arange(x.shape[1] * 10) % 2 == 0, p1, p2)
            mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-12
            clean = encode((x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)).values.astype(np.float32)
            feat_code = encode((x - mu) / sd).values.astype(np.float32)
            g = np.random.default_rng([split, 2024])
            b = mech.privatize(x, g)
            u = g.random(feat_code.shape)
            b_feat = np.where(feat_code > 0, u < keep, u < q).astype(np.float32)
            even = np.arange(b.shape[1]) % 2 == 0
            for key, feats, std in (("A", x, True), ("B", clean, False), ("C", b, True), ("D", b, False),
                                    ("E", b_feat, False), ("F", b[:, even], False)):
                conf = MLPConfig(hidden=128, standardize=std)
                m = train_mlp(feats[tr], y[tr], num_classes=2, config=conf,
                              generator=rng.torch_generator(split, "server", key))
                res[key].append(float((m.predict(feats[te]) == y[te]).mean()))
        out[ds] = {k: {"per_run": v} for k, v in res.items()}
        print(ds, {k: round(100 * float(np.mean(v)), 1) for k, v in res.items()}, flush=True)
    return out


def main() -> None:
    args = sweep.common_args(__doc__).parse_args()
    sweep.setup_threads(args.threads)
    data = run(args.data_root)
    ome.OUT.mkdir(parents=True, exist_ok=True)
    (ome.OUT / "diagnostic.json").write_text(json.dumps({"variants": VARIANTS, "results": data}, indent=1) + "\n")
    print(ome.diagnostic_table(VARIANTS, data))
    print(ome.write_summary(args.data_root))


if __name__ == "__main__":
    main()
