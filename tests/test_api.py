"""The notebook example of docs/api.md runs as written (a real Flower simulation on the embedded default data, two
rounds), and what it returns and writes is checked: results, metrics.jsonl (one line per round and seed), the
privacy-utility plot linked from summary.md, and the uploads the eavesdropper observed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import fl_privtext
from fl_privtext.api import resolve
from fl_privtext.config import ExperimentConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks, "docs/api.md must hold a python example"
    return blocks[0]


def test_resolve_accepts_dotted_and_nested_dicts_paths_and_configs(tmp_path):
    assert resolve({"privacy.epsilon": 2}) == resolve({"privacy": {"epsilon": 2}})
    path = tmp_path / "c.toml"
    path.write_text("[privacy]\nepsilon = 3.0\n")
    assert resolve(str(path)).privacy.epsilon == 3.0
    cfg = ExperimentConfig()
    assert resolve(cfg, {"run.seeds": 2}).run.seeds == 2 and resolve(None) == cfg
    with pytest.raises(ValueError, match="valid keys of \\[privacy\\]"):
        resolve({"privacy.epsilonn": 1})
    with pytest.raises(ValueError, match="config must be"):
        resolve(3)  # type: ignore[arg-type]


@pytest.mark.slow
def test_docs_api_example_runs(tmp_path, monkeypatch, cache_dir, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(cache_dir))
    namespace: dict = {}
    exec(compile(_example(), str(DOC), "exec"), namespace)  # noqa: S102 - the documented example, as written
    result = namespace["result"]
    assert isinstance(result, fl_privtext.Result)
    out = tmp_path / "runs" / "notebook-demo"
    assert result.output_dir.resolve() == out.resolve()
    assert json.loads((out / "results.json").read_text())["utility"]["accuracy"] == result.accuracy
    # the secure sampler's grid rounding adds ~1e-6 to the true epsilon (privacy/exact.py)
    assert result["privacy"]["epsilon_worst_case"] == pytest.approx(2.0, abs=1e-5) and 0 <= result.accuracy <= 1

    # metrics.jsonl: one line per round and seed of each served point, then the final lines
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rounds = [m for m in lines if m["event"] == "round"]
    assert [(m["point"], m["seed"], m["round"]) for m in rounds if m["point"] == "main"] == [("main", 0, 0),
                                                                                         ("main", 0, 1)]
    assert [m["round"] for m in rounds if m["point"] == "baseline"] == [0, 1]
    n_records = result["federation"]["num_records"]
    assert all(m["uploads"] == n_records and m["failures"] == 0 and m["round_s"] > 0 for m in rounds)
    assert [m["event"] for m in lines[-4:]] == ["utility", "attack", "attack", "final"]
    assert lines[-1]["accuracy"] == pytest.approx(result.accuracy)

    # the plot is written and linked from summary.md
    assert result.plots == (out / "privacy_utility.png",) or [p.name for p in result.plots] == ["privacy_utility.png"]
    assert (out / "privacy_utility.png").stat().st_size > 5000
    assert "](privacy_utility.png)" in result.summary
    assert (out / "run.log").is_file()  # the run's log file (fl_privtext.progress.run_log)

    # the uploads: what crossed the network, two rounds of every record, privatized (never the raw features)
    up = result.uploads
    assert up["features"].shape == (2 * n_records, result["federation"]["upload_dim"])
    assert sorted(up) == ["features", "labels", "node", "rows"] and len(set(up["node"].tolist())) == 2
    printed = capsys.readouterr().out
    assert "rounds;" in printed and "true worst-case epsilon: 2.0000" in printed

    # the same output again: refused before any work, through the API and the CLI, the results untouched
    from fl_privtext.cli import main

    before = (out / "results.json").read_bytes()
    with pytest.raises(ValueError, match="--overwrite"):
        fl_privtext.run({"federation.rounds": 1}, output=out)
    capsys.readouterr()
    assert main(["run", "--output", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fl-privtext run: error:") and "--overwrite" in err[0]
    assert (out / "results.json").read_bytes() == before

def test_result_displays_as_a_table_in_a_terminal_and_in_jupyter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    plot = tmp_path / "r" / "privacy_utility.png"
    plot.write_bytes(b"png")
    results = {"utility": {"accuracy": 0.7, "majority_baseline": 0.6, "on_device": {"available": True,
                                                                                   "accuracy": 0.81}},
               "privacy": {"mechanism": "laplace-l1", "epsilon_worst_case": 2.0},
               "attacks": {"gender": {"accuracy": 0.5, "majority_baseline": 0.52}},
               "faults": {"failed_clients": [{"node": 3, "kind": "error", "reason": "boom"}]},
               "warnings": ["the private model is below the majority"]}
    r = fl_privtext.Result(results=results, output_dir=tmp_path / "r", config=ExperimentConfig(), plots=(plot,))
    assert repr(r).startswith("Result(mechanism='laplace-l1', epsilon_worst_case=2.0, accuracy=0.7")
    text = str(r)
    assert "accuracy (on device)" in text and "0.810" in text and "failed clients" in text
    assert "warning: the private model is below the majority" in text and "{" not in text  # not a dict dump
    md = r._repr_markdown_()
    assert "| accuracy (per upload) | 0.700 |" in md and "| attack gender (prior 0.520) | 0.500 |" in md
    assert "| failed clients | 1 |" in md and "- the private model is below the majority" in md
    assert "![privacy_utility.png](r/privacy_utility.png)" in md
