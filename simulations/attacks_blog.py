"""Issue #10 closing note: the eavesdropper on the blog data, per upload vs per user, with re-identification,
membership and keyword inversion, next to the LDP ceilings of the true epsilon.

    PYTHONPATH=. HF_HUB_OFFLINE=1 nice -n 10 python simulations/attacks_blog.py --data-root /work/shared/data

GloVe features (extracted once into the cache), 4 clients, 1 round, seed 0, default attack settings. Uploads come
from the plain in-process clients (`fl_privtext.client.client_upload`, identical to the Flower path, see
tests/federation/test_simulation.py); the server's task training is skipped (only the eavesdropper is measured).
Writes docs/results/attacks/blog.json (or ``--out``) and prints a markdown table. ``--max-rows`` subsamples posts
(uniformly: it cuts posts per user, so per-user gains shrink); ``--points`` restricts to e.g.
``laplace-l1:1,none:0``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from fl_privtext import pipeline
from fl_privtext.client import client_upload, mechanism_for, merge_uploads
from fl_privtext.config import ExperimentConfig
from fl_privtext.privacy.report import json_safe as _json_safe
from fl_privtext.public import PublicSpec

POINTS = [("none", 0.0)] + [(m, e) for m in ("laplace-l1", "gaussian") for e in (1.0, 4.0, 16.0)]
OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "attacks"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--max-rows", type=int, default=0)
    ap.add_argument("--points", default="")
    ap.add_argument("--set", action="append", default=[], help="extra KEY=VALUE config overrides")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    ap.add_argument("--out", type=Path, default=OUT / "blog.json", help="where the JSON results go")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(max(1, args.threads))
    points = POINTS if not args.points else [(p.split(":")[0], float(p.split(":")[1])) for p in args.points.split(",")]
    base = {"data.name": "blog", "data.root": args.data_root, "extractor.name": "glove", "run.progress": False,
            "federation.num-clients": 4}
    if args.max_rows:
        base["data.options.max_rows"] = args.max_rows
    base.update(dict(s.split("=", 1) for s in args.set))
    t0 = time.perf_counter()
    prep = pipeline.prepare(ExperimentConfig.from_flat(base), features="extract")
    print(f"prepare (load + split + GloVe extraction/cache): {time.perf_counter() - t0:.1f} s; "
          f"{len(prep.ds)} posts, {len(np.unique(prep.ds.user_ids))} users")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    for mech_name, eps in points:
        flat = {**base, "privacy.mechanism": mech_name}
        if mech_name != "none":
            flat["privacy.epsilon"] = eps
        cfg = ExperimentConfig.from_flat(flat)
        t1 = time.perf_counter()
        ups = [client_upload(prep.client, c, 0, cfg.run.seed, cfg) for c in range(cfg.federation.num_clients)]
        up = merge_uploads([u.arrays() for u in ups])
        mech = mechanism_for(PublicSpec.of(cfg), max(u.input_dim for u in ups))
        t2 = time.perf_counter()
        attacks, extra = pipeline.attack(prep, up["features"], up["rows"], cfg.run.seed, cfg,
                                         labels=up["labels"], mechanism=mech, report=mech.report())
        t3 = time.perf_counter()
        results.append({"mechanism": mech_name, "epsilon": eps if mech_name != "none" else "inf",
                        "attacks": attacks, "attacks_extra": extra,
                        "timing": {"privatize_s": t2 - t1, "attack_s": t3 - t2}})
        print(f"{mech_name} eps={eps}: privatize {t2 - t1:.1f} s, attacks {t3 - t2:.1f} s", flush=True)
        args.out.write_text(json.dumps(_json_safe({"config": base, "points": results}), indent=1))
    print(table(results))
    print(f"total {time.perf_counter() - t0:.1f} s")


def _f(x: object) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def table(results: list[dict]) -> str:
    head = ("| mechanism | eps | attribute | per-upload acc [95% CI] | majority / given label | ceiling | "
            "per-user acc [95% CI] | majority / given labels | ceiling (median user eps) | learned attackers: verdict |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        for name, a in r["attacks"].items():
            pu = a["per_user"]
            # the learned attackers chosen out of fold (they answer only when their leak test passes)
            la, lu = a.get("learned_attacker", a["attacker"]), pu.get("learned_attacker", pu["attacker"])
            lines.append(
                f"| {r['mechanism']} | {r['epsilon']} | {name} | {_f(a['accuracy'])} [{_f(a['accuracy_ci95'][0])}, "
                f"{_f(a['accuracy_ci95'][1])}] | {_f(a['majority_baseline'])} / "
                f"{_f(a.get('majority_given_label_baseline', '-'))} | "
                f"{'vacuous' if a['ceiling_vacuous'] else _f(a['ceiling'])} | {_f(pu['accuracy'])} "
                f"[{_f(pu['ci95'][0])}, {_f(pu['ci95'][1])}] | {_f(pu['majority_baseline'])} / "
                f"{_f(pu.get('majority_given_label_baseline', '-'))} | "
                f"{'vacuous' if pu['ceiling_vacuous'] else _f(pu['ceiling'])} ({_f(pu['median_epsilon'])}) | "
                f"{'VIOLATION' if a['violation'] else la + ' / ' + lu}"
                f"{'' if a['leak_test']['leak_detected'] or pu['test']['leak_detected'] else ': no leak detected'} |")
    lines += ["", ("| mechanism | eps | re-id top-1 (chance, ceiling) | top-5 | membership AUC (ceiling) | "
                   "TPR@1%FPR (ceiling) | inversion F1 (baseline) | P / R | entity recall (baseline) |"),
              "|" + "---|" * 9]
    for r in results:
        re_, me, inv = (r["attacks_extra"].get(k, {}) for k in ("reidentification", "membership", "inversion"))
        if "top1" not in re_:
            continue
        lines.append(
            f"| {r['mechanism']} | {r['epsilon']} | {_f(re_['top1'])} ({_f(re_['chance'])}, "
            f"{'vacuous' if re_['ceiling_vacuous'] else _f(re_['ceiling'])}) | {_f(re_['topk'])} | "
            f"{_f(me['auc'])} ({_f(me['ceiling_auc'])}) | {_f(me['tpr_at_1pct_fpr'])} ({_f(me['ceiling'])}) | "
            f"{_f(inv.get('f1'))} ({_f(inv.get('f1_baseline'))}) | {_f(inv.get('precision'))} / {_f(inv.get('recall'))} | "
            f"{_f(inv.get('entity_recall'))} ({_f(inv.get('entity_recall_baseline'))}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
