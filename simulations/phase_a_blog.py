"""Phase A defences on the blog data: task accuracy and a fresh attacker's accuracy (gender, age) per defence.

    PYTHONPATH=. HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python simulations/phase_a_blog.py [--out /tmp/phase_a_blog] \
        [--only NAME ...]     # rows can run as parallel invocations; --table prints the table of what is done

Each row is one `fl-privtext run` (printed with its wall time); the table goes to docs/results/training.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = {
    "data.name": "blog", "data.root": "/work/shared/data", "data.options.max_rows": 10000,
    "server.epochs": 20, "attack.epochs": 15,  # fewer than the defaults (50, 30): 2 shared cores
    "federation.num-clients": 8, "run.baseline": "false", "run.progress": "false",
    "train.rounds": 10, "train.encoder": "trunk",
}
DPNR = {"privacy.mechanism": "laplace-dpnr", "privacy.epsilon": 1.0}
ROWS = {
    "frozen GloVe (no Phase A)": {"train.rounds": 0, "privacy.mechanism": "none"},
    "no defence": {"privacy.mechanism": "none"},
    "adversarial (GRL, lambda 1)": {"train.defense": "adversarial", "privacy.mechanism": "none"},
    "multidetasking": {"train.defense": "multidetask", "privacy.mechanism": "none"},
    "declustering (alpha 0.1)": {"train.defense": "declustering", "privacy.mechanism": "none"},
    # 32 characters instead of the default 64: the char decoder dominates Phase A's cost on 2 shared cores
    "adversarial generation": {"train.defense": "generation", "train.gen-chars": 32, "privacy.mechanism": "none"},
    "no defence, uploads laplace-dpnr eps 1": {**DPNR},
    "noise layer laplace-dpnr eps 1": {"train.defense": "noise", **DPNR},
    "no defence, DP-FedAvg (clip 1, z 1)": {"privacy.mechanism": "none", "train.dp-clip": 1.0,
                                            "train.dp-noise-multiplier": 1.0},
}


def command(name: str, out: Path) -> list[str]:
    sets = {**COMMON, **ROWS[name]}
    slug = "".join(c if c.isalnum() else "_" for c in name)[:40]
    args = [sys.executable, "-m", "fl_privtext.cli", "run", "--output", str(out / slug)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    return args


def table(rows: list) -> str:
    lines = [("| Phase A defence | task acc (majority) | gender acc (majority) | age acc (majority) | Phase A guarantee "
              "| Phase B upload LDP (nominal / worst-case eps) | selected round (val acc) | Phase A s | wall s |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for name, res, wall, _ in rows:
        u, a, t, p = res["utility"], res["attacks"], res["training"], res["privacy"]
        g = t["guarantee"]
        guar = "-" if not t.get("enabled") else ("none (updates unprotected)" if g == "none"
                                                 else f"eps {g['epsilon']:.2f}, delta {g['delta']:g}")
        ldp = "none" if p["mechanism"] == "none" else f"{p['mechanism']} {p['epsilon_nominal']:g} / {p['epsilon_worst_case']}"
        lines.append(
            f"| {name} | {u['accuracy']:.3f} ({u['majority_baseline']:.3f}) "
            f"| {a['gender']['accuracy']:.3f} ({a['gender']['majority_baseline']:.3f}) "
            f"| {a['age_group']['accuracy']:.3f} ({a['age_group']['majority_baseline']:.3f}) | {guar} | {ldp} "
            + (f"| {t['selected_round']} ({t['selected_val_accuracy']:.3f}) | {t['train_s']:.0f} " if t.get("enabled")
               else "| - | - ")
            + f"| {wall:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/phase_a_blog")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--table", action="store_true", help="only print the table of OUT/rows.json")
    a = ap.parse_args()
    out = Path(a.out)
    if a.table:
        done = {r[0]: r for f in sorted(out.glob("rows*.json")) for r in json.loads(f.read_text())}
        print(table([done[n] for n in ROWS if n in done]))
        return
    rows = []
    for name in ROWS:
        if a.only and name not in a.only:
            continue
        cmd = command(name, out)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        res = json.loads((Path(cmd[cmd.index("--output") + 1]) / "results.json").read_text())
        rows.append((name, res, wall, " ".join(shlex.quote(c) for c in cmd[1:])))
        print(f"{name}: {wall:.0f} s", flush=True)
        name_slug = "all" if not a.only else "".join(c if c.isalnum() else "_" for c in "_".join(a.only))[:60]
        (out / f"rows_{name_slug}.json").write_text(json.dumps([(n, r, w, c) for n, r, w, c in rows]))
    print(table(rows))


if __name__ == "__main__":
    main()
