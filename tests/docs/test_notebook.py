"""docs/quickstart.ipynb runs under a real Jupyter kernel (nbclient + ipykernel) on tiny settings (its `parameters`
cell is replaced: the embedded default data, two epsilons, two seeds, no attacker), and its outputs are checked:
the sweep's Markdown display (the short table of the figures that matter, issue #36), the frontier plots embedded as
PNG outputs (so the saved notebook shows them wherever it is read), the DataFrame of the public table columns, the
pandas-free rows with rounded epsilons, and no tracebacks or widget warnings in the cells."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "quickstart.ipynb"
TINY = {"fixed": {"federation.num-clients": 2, "run.seeds": 2, "server.learner": "centroid",
                  "attack.enabled": False, "server.on-device": True, "privacy.sampler": "float"},
        "grid": {"privacy.mechanism": ["privunitg"], "privacy.epsilon": [1.0, 16.0]}}
COLUMNS = ["privacy.mechanism", "epsilon_worst_case", "on_device_exact", "on_device_exact_ci_low",
           "on_device_exact_ci_high", "accuracy", "majority_baseline", "no_privacy_on_device_exact"]


@pytest.mark.slow
def test_quickstart_notebook_runs_under_a_real_kernel(tmp_path, monkeypatch, cache_dir):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    params[0].source = f"SPEC = {TINY!r}\nSETS = {{}}\nOUTPUT = {str(tmp_path / 'sweep')!r}\n"
    for key, value in {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                       "FL_PRIVTEXT_CACHE": str(cache_dir), "HF_HUB_OFFLINE": "1", "FLWR_TELEMETRY_ENABLED": "0",
                       "RAY_USAGE_STATS_ENABLED": "0"}.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}})
    client.execute()

    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "IProgress not found" not in stderr and "Traceback" not in stderr and "ERROR" not in stderr, stderr[-2000:]
    display = code[1]["outputs"][-1]["data"]["text/markdown"]  # the SweepResult's Jupyter display
    assert display.startswith("**fl_privtext sweep**") and "(3 points)" in display and "| privunitg |" in display
    header = next(ln for ln in display.splitlines() if ln.startswith("| mechanism"))
    assert header.count("|") - 1 <= 8 and "on-device exact [95% CI]" in header, header  # short, not 26 columns
    assert "](" not in display  # no relative links to the plots (broken when read from docs/)
    pictures = [o for o in code[2]["outputs"] if "image/png" in o.get("data", {})]
    assert len(pictures) == 1 and len(pictures[0]["data"]["image/png"]) > 5000  # frontier_task.png, embedded
    frame = code[3]["outputs"][-1]["data"]["text/html"]  # df[cols]: the public columns, three rows
    assert all(f"<th>{c}</th>" in frame for c in COLUMNS) and frame.split("<tbody>")[1].count("<tr>") == 3
    lines = "".join(o.get("text", "") for o in code[4]["outputs"]).strip().splitlines()
    assert len(lines) == 3 and lines[-1].split()[0:3] == ["none", "eps", "inf"]
    assert all(len(ln.split()[2]) <= 5 for ln in lines), lines  # epsilons rounded (not 8.000000000000316)
    rows = (tmp_path / "sweep" / "table.csv").read_text().splitlines()
    assert len(rows) == 4 and all(c in rows[0].split(",") for c in COLUMNS)
