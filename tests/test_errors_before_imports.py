"""A bad configuration is refused before torch, Flower, Ray, transformers, datasets or scikit-learn are imported
(issue #38 item 4: a typo answered after 51 s at load 20, 22 s of it importing torch).

Each case runs the real entry point (`fl_privtext.cli.main`, the console script's target, or the Python API) in a
fresh interpreter and then reads that interpreter's ``sys.modules``: a behaviour test, not a timing test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fl_privtext.pipeline.preflight import HEAVY_MODULES

ROOT = Path(__file__).resolve().parents[1]

_PROBE = textwrap.dedent("""
    import json, sys
    {body}
    heavy = [m for m in {heavy!r} if m in sys.modules]
    print(json.dumps({{"rc": rc, "heavy": heavy}}))
""")

_CLI = """
from fl_privtext.cli import main
try:
    rc = main({argv!r})
except SystemExit as exc:
    rc = exc.code
"""

_API = """
import fl_privtext
try:
    fl_privtext.{call}
    rc = 0
except ValueError as exc:
    print(f"error: {{exc}}", file=sys.stderr)
    rc = 2
"""


def _probe(body: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """Run ``body`` (which sets ``rc``) in a fresh interpreter: (rc, heavy modules it imported, stderr)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    code = _PROBE.format(body=textwrap.dedent(body), heavy=HEAVY_MODULES)
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["rc"], out["heavy"], proc.stderr.strip()


def _sweep_file(tmp_path: Path, name: str, fixed: dict[str, str]) -> str:
    path = tmp_path / f"{name}.toml"
    lines = ["[fixed]", *(f'"{k}" = "{v}"' for k, v in fixed.items()), "[grid]", '"privacy.epsilon" = [1, 2]']
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    empty = tmp_path / "empty-root"
    empty.mkdir(exist_ok=True)
    return {
        "unknown_key": (["run", "--set", "privacy.epsilonn=2"], "Unknown config key 'privacy.epsilonn'"),
        "out_of_range": (["run", "--set", "privacy.epsilon=-1"], "privacy.epsilon must be a finite number > 0"),
        "bad_type": (["run", "--set", "federation.num-clients=four"], "'federation.num-clients' expects a int"),
        "missing_config": (["run", "--config", str(tmp_path / "nope.toml")], "nope.toml does not exist"),
        "unknown_mechanism": (["run", "--set", "privacy.mechanism=laplac"], "Unknown mechanism 'laplac'"),
        "mechanism_parameter": (["run", "--set", "privacy.mechanism=gaussian", "--set", "privacy.delta=2"],
                                "[privacy] (privacy.mechanism='gaussian'): delta must be in the open interval"),
        "unknown_dataset": (["run", "--set", "data.name=blogs"], "Unknown dataset 'blogs'"),
        "dataset_option": (["run", "--set", "data.options.min_topic=0.8"],
                           "Unknown option(s) ['min_topic'] for dataset 'default'"),
        "records_per_user": (["run", "--set", "data.options.records_per_user=0"],
                             "data.options.records_per_user must be an integer >= 1"),
        "data_root": (["run", "--set", "data.name=blog", "--set", f"data.root={empty}"],
                      "Dataset 'blog': 1 of 1 file(s) missing"),
        "csv_path": (["run", "--set", "data.name=csv", "--set", "data.options.path=nope.csv"],
                     "the file 'nope.csv' was not found"),
        "public_data": (["run", "--set", "privacy.mechanism=privunitg", "--set", "privacy.projection=pca",
                         "--set", "privacy.proj-dim=4", "--set", "privacy.public-data=default"],
                        "privacy.public-data must name a dataset disjoint from every simulated user"),
        "model_folder": (["run", "--set", "extractor.name=hf", "--set", f"extractor.model={tmp_path / 'no-model'}"],
                         "no such local model folder"),
        "output": (["run", "--output", "/dev/null/x"], "'/dev/null/x' is not a writable directory"),
        "sweep_data_root": (["sweep", _sweep_file(tmp_path, "root", {"data.name": "ag_news", "data.root": str(empty)}),
                             "--output", str(tmp_path / "sw"), "--quiet"], "Dataset 'ag_news': 1 of 1 file(s)"),
        "sweep_unknown_key": (["sweep", _sweep_file(tmp_path, "key", {"privacy.epsilonn": "2"}), "--quiet"],
                              "Unknown config key 'privacy.epsilonn'"),
        "privacy_report": (["privacy-report", "laplac"], "Unknown mechanism 'laplac'"),
        "audit": (["audit", "ome", "--set", "int-bitz=3"], "Mechanism 'ome' does not accept 'int-bitz'"),
    }


@pytest.mark.parametrize("case", ["unknown_key", "out_of_range", "bad_type", "missing_config", "unknown_mechanism",
                                  "mechanism_parameter", "unknown_dataset", "dataset_option", "records_per_user",
                                  "data_root", "csv_path", "public_data", "model_folder", "output",
                                  "sweep_data_root", "sweep_unknown_key", "privacy_report", "audit"])
def test_cli_refuses_before_the_heavy_imports(case, tmp_path):
    argv, needle = _cases(tmp_path)[case]
    rc, heavy, err = _probe(_CLI.format(argv=argv), tmp_path, env={"FL_PRIVTEXT_DATA": ""})
    assert rc == 2, (rc, err[-2000:])
    assert needle in err and err.startswith(f"fl-privtext {argv[0]}: error: "), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert heavy == [], f"{case}: imported {heavy} before refusing"
    assert not list(tmp_path.glob("runs/*"))


def test_the_module_entry_point_answers_a_typo_with_exit_2(tmp_path):
    """The exact command of the issue: ``python -m fl_privtext.cli run --set privacy.epsilonn=2``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "fl_privtext.cli", "run", "--set", "privacy.epsilonn=2"],
                          check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "'privacy.epsilonn'" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("call", "needle"), [
    ("run({'privacy.epsilonn': 2})", "Unknown config key 'privacy.epsilonn'"),
    ("run({'data': {'name': 'blog', 'root': '/nonexistent-root'}})", "Dataset 'blog': the data root"),
    ("run({'privacy.mechanism': 'laplac'})", "Unknown mechanism 'laplac'"),
    (("run_sweep({'fixed': {'data.name': 'snips', 'data.root': '/nonexistent-root'}, "
      "'grid': {'privacy.epsilon': [1, 2]}}, output='sw')"), "Dataset 'snips': the data root"),
])
def test_api_refuses_before_the_heavy_imports(call, needle, tmp_path):
    rc, heavy, err = _probe(_API.format(call=call), tmp_path)
    assert rc == 2 and needle in err, err
    assert heavy == [], f"imported {heavy} before refusing"


def test_good_configurations_pass_the_checks_without_the_heavy_imports(data_root, tmp_path):
    """The checks themselves import nothing heavy on a configuration that goes on to run (staged blog, a pca
    projection fitted on public AG News)."""
    body = f"""
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline.preflight import check_run
    check_run(ExperimentConfig.from_flat({{"data.name": "blog", "data.root": {str(data_root)!r},
                                           "privacy.mechanism": "ome"}}))
    check_run(ExperimentConfig.from_flat({{"data.name": "blog", "data.root": {str(data_root)!r},
                                           "privacy.mechanism": "privunitg", "privacy.projection": "pca",
                                           "privacy.proj-dim": "auto", "privacy.public-data": "ag_news"}}))
    check_run(ExperimentConfig.from_flat({{"data.name": "synthetic", "data.options.users": 1000,
                                           "data.options.records_per_user": 1}}))
    rc = 0
    """
    rc, heavy, err = _probe(body, tmp_path)
    assert rc == 0, err
    assert heavy == []


def test_the_package_face_and_the_config_are_light(tmp_path):
    rc, heavy, err = _probe("import fl_privtext, fl_privtext.config, fl_privtext.api, fl_privtext.cli\n"
                            "assert fl_privtext.__version__\nrc = 0", tmp_path)
    assert rc == 0 and heavy == [], (heavy, err)


# ---- the light lists of names agree with the registries they stand in for ------------------------------------------


def test_light_names_match_the_registries():
    from fl_privtext import names
    from fl_privtext.data import DATASETS, dataset_options
    from fl_privtext.extract import EXTRACTORS
    from fl_privtext.privacy.mechanisms import MECHANISMS
    from fl_privtext.server.learners import LEARNERS

    # the registries themselves (no copies), each lazy built-in the class registered under its name
    assert names.MECHANISMS is MECHANISMS and names.EXTRACTORS is EXTRACTORS and names.LEARNERS is LEARNERS
    assert all(MECHANISMS[n].name == n for n in MECHANISMS)
    assert names.DATASETS == tuple(DATASETS)
    assert {n: dataset_options(n) for n in DATASETS} == names.DATASET_OPTIONS
    # every dataset that reads no `path` option and needs a data root has its file list
    assert set(names.DATASET_FILES) == set(DATASETS) - {"default", "synthetic", "csv", "hf"}


@pytest.mark.parametrize("name", ["blog", "ag_news", "trustpilot_us", "trustpilot_dk", "imdb", "amazon", "yelp",
                                  "snips", "mrpc"])
def test_light_file_lists_match_what_each_loader_reads(name, tmp_path):
    """Every staged loader, pointed at an empty data root, names exactly the files of `names.DATASET_FILES`."""
    from fl_privtext.data import DataNotFoundError, load_dataset
    from fl_privtext.names import DATASET_FILES

    with pytest.raises(DataNotFoundError) as e:
        load_dataset(name, data_root=tmp_path)
    looked = str(e.value).split("Looked for: ", 1)[1].split(". Pass data_root", 1)[0].split("; ")
    assert [s.removesuffix(" (MISSING)") for s in looked] == [str(tmp_path / p) for p in DATASET_FILES[name]]


@pytest.mark.parametrize("flat", [
    {"data.name": "blog", "data.root": "/nonexistent-root"},
    {"data.name": "ag_news", "data.options.label": "x"},
    {"data.name": "csv"},
    {"data.name": "csv", "data.options.path": "nope.csv"},
    {"data.name": "hf", "data.options.path": "nope-folder"},
    {"data.name": "default", "data.options.records_per_user": "1.5"},
    {"data.name": "nope"},
])
def test_the_early_check_says_what_the_loader_says(flat, tmp_path, monkeypatch):
    """Same refusal, same words: the check before the imports and the loader after them."""
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline import preparation as prepare
    from fl_privtext.pipeline.preflight import check_data

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = ExperimentConfig.from_flat(flat)
    with pytest.raises(ValueError) as early:
        check_data(cfg)
    with pytest.raises(ValueError) as late:
        prepare.load(cfg)
    assert str(early.value) == str(late.value)
