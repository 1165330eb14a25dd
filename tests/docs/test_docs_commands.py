"""Docs that run (issue #36, item 3): every shell command and python block of README.md and docs/*.md is run here on
small data, validated here, or listed below with why it cannot run here and which test runs its code path; a
command added to the docs and not listed fails `test_every_doc_command_is_listed`, and so does a listed command
that the docs no longer hold. docs/quickstart.ipynb is run under a real kernel by tests/docs/test_notebook.py.

Cost: two tiny Flower simulations (the README's `--config` run and the datasets page's CSV run, which
`fl-privtext compare` then reads); everything else is parsing, preflight, loading and splitting the data, and
the cheapest real step (a 2-text extraction, the audits, the sweeps' `--list`)."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_blocks import ROOT, blocks, doc_commands, python_blocks

from fl_privtext import names  # the registries (stdlib only): the component blocks must leave them as found

E2E, RUN, VALIDATED, SKIPPED, ELSEWHERE = "e2e", "run", "validated", "skipped", "elsewhere"

# Appended to the commands run end to end: fewer clients, a fast learner and attacker, no no-privacy twin, one
# server epoch. The code path is the documented one (CLI, preflight, Flower simulation, report).
SHRINK = ("--set federation.num-clients=2 --set server.learner=centroid --set server.epochs=1 --set attack.epochs=1 "
          "--set attack.families=logistic --set attack.extra=false --set run.baseline=false --quiet")

# Placeholders of the docs -> what the test substitutes ({data}: the staged data root; the rest are written in the
# test's working directory, tmp; configs/ is read from the repository).
SUBSTITUTE = {
    "/path/to/shared/data": "{data}",
    "reviews.tsv": "{tmp}/reviews.tsv",  # a tiny TSV with the page's columns
    "my_reviews_saved": "{tmp}/my_reviews_saved",  # a tiny `save_to_disk` folder with the same columns
    "runs/a runs/b": "runs/mine runs/csv",  # the two runs this module produces
    "configs/": "{root}/configs/",
    # the hub is not reachable here (HF_HUB_OFFLINE): a local folder and a hub id both go through from_pretrained
    "/models/my-bert": "{minilm}",  # the packaged all-MiniLM-L6-v2 folder
    "sentence-transformers/all-mpnet-base-v2": "{minilm}",
}

HERE = "tests/docs/test_docs_commands.py::"
TLS = ("tests/federation/test_deployment_tls.py::"
       "test_authenticated_tls_run_succeeds_and_an_unregistered_supernode_is_refused")
FLWR = "tests/federation/test_flwr_cli.py::test_flwr_run_dot_works_offline"
SWEEP = "tests/test_sweep.py::test_killed_sweep_resumes_with_only_the_missing_points"


def _cmd(*parts: str) -> str:
    """A long command of the docs, written in parts (joined with single spaces, as doc_commands joins them)."""
    return " ".join(parts)


# Every shell command of the docs -> (how it is checked, why so, the test that runs its code path end to end).
#   e2e: run here with SHRINK appended;  run: run here as written (after SUBSTITUTE), in full;
#   validated: here, the CLI's parser, the preflight (fl_privtext.pipeline.preflight), runner.validate (the data loaded,
#     roles, shards) and the cheapest real step; end to end by the named test;
#   skipped: not run here, for the reason given; the named test runs the same code path.
COMMANDS: dict[str, tuple[str, str, str]] = {
    # README.md, "Set up"
    "pip install torch==2.13.0": (
        VALIDATED, ("installs packages (network, changes the environment); checked: the pin is constraints.txt's "
                   "and the installed torch's version"),
        "every test (the suite runs on the environment this line installs)"),
    'pip install -e ".[dev,plots]"': (
        VALIDATED, ("installs packages; checked: pyproject declares the extras dev and plots, and fl_privtext "
                   "imports from this checkout"), "every test"),
    "fl-privtext run": (
        VALIDATED, ("the full main job (about a minute); its config equals configs/default.toml's, which the "
                   "README's --config line runs end to end here"), HERE + "test_cli_runs_end_to_end"),
    "python -m pytest -q": (SKIPPED, "the suite itself", HERE + "test_every_doc_command_is_listed"),
    # README.md, "Choosing data, extractor and mechanism"
    _cmd("fl-privtext run --set data.name=blog --set data.root=/path/to/shared/data --set extractor.name=minilm",
         "--set privacy.mechanism=gaussian --set privacy.epsilon=2"): (
        VALIDATED, ("MiniLM over the blog corpus takes minutes on CPU; here: blog loaded and split, 2 texts "
                   "extracted with MiniLM, the gaussian mechanism built"),
        FLWR + " + tests/extract/test_transformer.py::test_paraphrases_are_closer_than_unrelated_texts"),
    "fl-privtext run --config configs/default.toml --set run.seeds=5 --output runs/mine": (
        E2E, ("the main job's file with 2 seeds instead of 5 and no attacker (SHRINK, run.seeds=2, "
             "attack.enabled=false: the CSV run below runs the attacker)"), HERE + "test_cli_runs_end_to_end"),
    _cmd("fl-privtext privacy-report ome --set epsilon=1 --set lam=100 --set dim=50 --set int-bits=4",
         "--set frac-bits=5"): (RUN, "milliseconds", HERE + "test_privacy_report_and_audits"),
    "fl-privtext audit laplace-l1 --set epsilon=1 --set dim=8 --set sampler=float --samples 200000": (
        RUN, "about a second", HERE + "test_privacy_report_and_audits"),
    "fl-privtext audit laplace-l1 --set epsilon=1 --set dim=4 --set sampler=secure": (
        RUN, "about a second", HERE + "test_privacy_report_and_audits"),
    # README.md, "Sweeps, comparisons, notebooks, tracking"
    "fl-privtext sweep configs/quickstart_frontier.toml": (
        VALIDATED, ("minutes (10,000 users); here: every point through the sweep's preflight, the first point's "
                   "users generated and split"), SWEEP),
    "fl-privtext sweep configs/sweep_epsilon.toml": (
        VALIDATED, ("16 points in two simulations; here: every point through the sweep's preflight, the data "
                   "loaded and split, and its --list (below)"), SWEEP),
    "fl-privtext sweep configs/sweep_epsilon.toml --list": (
        RUN, "no simulation: lists the points", HERE + "test_sweeps_validate_and_list"),
    "fl-privtext compare runs/a runs/b": (
        RUN, "reads the two runs this module produced", HERE + "test_cli_runs_end_to_end"),
    # docs/datasets.md
    _cmd("fl-privtext run --set data.name=csv --set data.options.path=reviews.tsv --set data.options.text=review",
         "--set data.options.label=stars --set data.options.attributes=gender,age_band",
         "--set data.options.user=author"): (
        E2E, "a tiny TSV (120 users) with the page's columns (SHRINK)", HERE + "test_cli_runs_end_to_end"),
    _cmd("fl-privtext run --set data.name=hf --set data.options.path=my_reviews_saved --set data.options.label=stars",
         "--set data.options.attributes=gender --set data.options.user=author"): (
        VALIDATED, ("the CSV line's pipeline once loaded; here: a tiny save_to_disk folder loaded, split and 2 "
                   "texts extracted"), HERE + "test_cli_runs_end_to_end"),
    # docs/extractors.md
    "fl-privtext run --set extractor.name=minilm --set extractor.precision=bf16": (
        VALIDATED, ("MiniLM over the default data takes minutes on CPU; here: the data loaded and split, 2 texts "
                   "extracted in bf16"),
        "tests/extract/test_transformer.py::test_bf16_on_cpu_is_close_to_float32_but_not_identical"),
    "python benchmarks/bench_extract.py --device cuda --precision fp16 --minilm-rows 0": (
        SKIPPED, "needs a CUDA GPU (fp16 is refused on CPU) and extracts all of AG news",
        "tests/extract/test_transformer.py::test_half_precision_on_cuda_is_close_to_float32"),
    # docs/design.md, "Measuring the structure"
    "python benchmarks/structure.py": (RUN, "an ast walk, under a second", HERE + "test_structure_commands_run"),
    "python benchmarks/structure.py --list": (RUN, "the same walk", HERE + "test_structure_commands_run"),
    "python benchmarks/structure.py --path": (RUN, "the same walk", HERE + "test_structure_commands_run"),
    "python benchmarks/structure.py --json structure.json": (
        RUN, "the same walk, the JSON written in tmp", HERE + "test_structure_commands_run"),
    "python -m pytest -q tests/test_golden.py": (
        SKIPPED, "a test file of the suite (a Flower simulation, 1-2 minutes)", "tests/test_golden.py"),
    "FL_PRIVTEXT_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py": (
        SKIPPED, "rewrites the golden files (only after a deliberate change of results)", "tests/test_golden.py"),
    # docs/deployment.md: servers on fixed ports, background processes, a second machine; the named tests run the
    # same sequences on free ports and stop every process they start
    "export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1": (
        SKIPPED, "environment of the flwr command below; the covering test sets it", FLWR),
    _cmd("flwr run . --federation-config 'num-supernodes=4' -c 'privacy.epsilon=2.0 run.output=\"runs/flwr\"'",
         "--stream"): (
        VALIDATED, ("a full main job through Flower's CLI (minutes); here: the -c overrides parsed by Flower's "
                   "parser into a valid config"), FLWR),
    "export FLWR_HOME=$PWD/.flwr-deploy FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1": (
        SKIPPED, "environment of the deployment below", TLS),
    "flower-superlink --insecure &": (SKIPPED, "a SuperLink on the fixed port 8000, in the background", TLS),
    "cat > policy.toml <<'TOML'\n# the SuperNodes' own policy: what they release, whatever the ServerApp asks "
    "(keys as in `fl-privtext run --set`)\n[privacy]\nepsilon = 1.0\n[client]\nmax-epsilon = inf\nTOML": (
        VALIDATED, ("here: the file written and read by the SuperNode's policy loader, which refuses another "
                   "epsilon"), "tests/client/test_policy_groups.py::test_a_policy_file_and_node_config_set_a_supernodes_policy"),
    _cmd("flower-supernode --insecure --superlink 127.0.0.1:8000 --port 9094 --node-config",
         "\"partition-id=0 num-partitions=2 policy-file='$PWD/policy.toml'\" &"): (
        SKIPPED, "a SuperNode on a fixed port, in the background", TLS),
    _cmd("flower-supernode --insecure --superlink 127.0.0.1:8000 --port 9095 --node-config",
         "\"partition-id=1 num-partitions=2 policy-file='$PWD/policy.toml'\" &"): (
        SKIPPED, "a SuperNode on a fixed port, in the background", TLS),
    "mkdir -p $FLWR_HOME": (SKIPPED, "the flwr CLI's home of the deployment", TLS),
    "cat > $FLWR_HOME/config.toml <<'TOML'\n[superlink]\ndefault = \"deploy\"\n[superlink.deploy]\n"
    "address = \"127.0.0.1:8000\"\ninsecure = true\nTOML": (
        SKIPPED, "the flwr CLI's connection to the SuperLink above", TLS),
    _cmd("flwr run . deploy -c 'federation.num-clients=2 run.baseline=false server.on-device=false",
         "run.output=\"'$PWD'/runs/deploy\"' --stream"): (
        SKIPPED, "needs the SuperLink and SuperNodes above", TLS),
    "export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_HOME=$PWD/.flwr-tls": (
        SKIPPED, "environment of the TLS deployment below", TLS),
    "python simulations/deploy_keys.py --dir certs --nodes 2 --host 127.0.0.1": (
        SKIPPED, "the covering test writes the same CA and keys with deploy_keys' functions", TLS),
    _cmd("flower-superlink --ssl-ca-certfile certs/ca.crt --ssl-certfile certs/server.crt",
         "--ssl-keyfile certs/server.key --enable-supernode-auth --disable-runtime-dependency-installation &"): (
        SKIPPED, "a SuperLink on the fixed port 8000, in the background", TLS),
    "cat > $FLWR_HOME/config.toml <<TOML\n[superlink]\ndefault = \"deploy\"\n\n[superlink.deploy]\n"
    "address = \"127.0.0.1:8000\"\nroot-certificates = \"$PWD/certs/ca.crt\"\nTOML": (
        SKIPPED, "the flwr CLI's TLS connection to the SuperLink above", TLS),
    "flwr supernode register certs/node-0.pub deploy": (SKIPPED, "needs the SuperLink above", TLS),
    "flwr supernode register certs/node-1.pub deploy": (SKIPPED, "needs the SuperLink above", TLS),
    _cmd("FLWR_HOME=$PWD/.flwr-node0 flower-supernode --superlink 127.0.0.1:8000 --root-certificates certs/ca.crt",
         "--auth-supernode-private-key certs/node-0 --port 9094 --node-config \"partition-id=0 num-partitions=2\" &"): (
        SKIPPED, "a SuperNode on a fixed port, in the background", TLS),
    _cmd("FLWR_HOME=$PWD/.flwr-node1 flower-supernode --superlink 127.0.0.1:8000 --root-certificates certs/ca.crt",
         "--auth-supernode-private-key certs/node-1 --port 9095 --node-config \"partition-id=1 num-partitions=2\" &"): (
        SKIPPED, "a SuperNode on a fixed port, in the background", TLS),
    "flwr supernode list deploy": (SKIPPED, "needs the SuperLink above", TLS),
    _cmd("flwr run . deploy -c 'federation.num-clients=2 run.baseline=false server.on-device=false",
         "run.output=\"'$PWD'/runs/deploy-tls\"' --stream"): (
        SKIPPED, "needs the SuperLink and SuperNodes above", TLS),
    _cmd("OMP_NUM_THREADS=1 nice -n 10 python simulations/two_node_ray.py --output runs/two_node",
         "--set run.baseline=false --set attack.enabled=false --set server.epochs=5"): (
        SKIPPED, "starts a two-node Ray cluster (ray start twice; about 80 s)",
        "tests/federation/test_two_node_ray.py::test_virtual_clients_land_on_both_nodes_and_the_cluster_stops_cleanly"),
}

# Every python block (file, its first line of code) -> (how, why, the test that runs it).
#   run: exec'd here as written, its placeholders (names it uses but does not define) bound to tiny objects
#   (`_bindings`) and SUBSTITUTE applied;  elsewhere: run by the named test, which reads it from the docs.
PYTHON: dict[tuple[str, str], tuple[str, str, str]] = {
    ("docs/api.md", "import fl_privtext"): (
        ELSEWHERE, "a Flower simulation; exec'd as written", "tests/test_api.py::test_docs_api_example_runs"),
    ("docs/api.md", 'sweep = fl_privtext.run_sweep("configs/quickstart_frontier.toml")'): (
        ELSEWHERE, ("the quickstart sweep (3 minutes); the notebook makes the same calls on tiny settings, and the "
                   "sweep file is validated by test_sweeps_validate_and_list"),
        "tests/docs/test_notebook.py::test_quickstart_notebook_runs_under_a_real_kernel"),
    ("docs/datasets.md", "from fl_privtext.data import load_dataset, assign_roles, source_roles, partition_users"): (
        RUN, "loads blog and snips from the data root", ""),
    ("docs/datasets.md", "from fl_privtext.data import from_hf"): (RUN, "hf_dataset: a tiny datasets.Dataset", ""),
    ("docs/design.md", "from fl_privtext.privacy import make_mechanism, MECHANISMS, PrivacyReport, Accountant"): (
        RUN, "x, rng: 4 rows", ""),
    ("docs/design.md",
     "from fl_privtext.data import load_dataset, TextDataset, AttributeSpec, assign_roles, partition_users"): (
        RUN, "no placeholders", ""),
    ("docs/design.md", "from fl_privtext.extract import make_extractor, Extractor, EmbeddingCache, extract_cached"): (
        RUN, "texts, ds (6 rows), cache_dir (tmp)", ""),
    ("docs/design.md", "from fl_privtext.ondevice import mlp_logits, on_device_counts, summarize"): (
        RUN, "model: a 1-epoch MLP on 40 rows", ""),
    # "How to add a component": each block registers its toy and removes it at its end (PROMISES checks both)
    ("docs/design.md", "import math"): (RUN, "no placeholders; a 20,000-sample audit", ""),
    ("docs/design.md", "from typing import Any"): (RUN, "no placeholders", ""),
    ("docs/design.md", "import hashlib"): (RUN, "no placeholders", ""),
    ("docs/design.md", "import numpy as np"): (RUN, "no placeholders", ""),
    ("docs/extractors.md", "from fl_privtext.extract import make_extractor, extract_cached, EmbeddingCache"): (
        RUN, "sentences_a/b, ds (6 rows); the cache in tmp", ""),
    ("docs/extractors.md", "class Extractor(Protocol):"): (
        RUN, "and compared with fl_privtext.extract.Extractor", ""),
    ("docs/extractors.md", 'make_extractor("hf", model="/models/my-bert")'): (
        RUN, "both names: the packaged MiniLM folder (SUBSTITUTE); its config is read, no weights", ""),
    ("docs/extractors.md", "feats = extract_cached(ds, ext, cache_dir, progress=False)"): (
        RUN, "ds (6 rows), ext (GloVe), cache_dir (tmp), array, rows", ""),
    ("docs/mechanisms.md", "from fl_privtext.privacy import make_mechanism"): (RUN, "x, rng: 4 rows", ""),
    ("docs/privacy.md",
     "from fl_privtext.privacy import make_mechanism, Accountant, audit_mechanism, word_dropout, label_rr"): (
        RUN, "x, rng: 4 rows", ""),
}

# What a block's comments promise, checked after it ran (the key's file and the start of its first line).
PROMISES: dict[tuple[str, str], Any] = {
    ("docs/datasets.md", "from fl_privtext.data import load_dataset"): lambda ns: (
        len(ns["shards"]) == 10 and set(ns["roles"]) == {"test", "aux"} and ns["ds"].name == "blog"),
    ("docs/datasets.md", "from fl_privtext.data import from_hf"): lambda ns: (
        ns["ds"].attribute_names == ("gender",) and ns["ds"].num_users == 3 and len(ns["ds"]) == 4),
    ("docs/design.md", "from fl_privtext.privacy"): lambda ns: (
        ns["y"].shape == (4, ns["mech"].output_dim) and ns["y"].dtype == np.float32
        and ns["rep"].to_json()["epsilon_worst_case"] > 3000),  # README: OME at lambda 100 is 3451-LDP
    ("docs/design.md", "from fl_privtext.data"): lambda ns: len(ns["ds"]) == 2960,
    ("docs/design.md", "from fl_privtext.extract"): lambda ns: (
        ns["X"].shape == (2, 50) and ns["feats"].shape == (6, 50) and not ns["feats"].flags.writeable),
    ("docs/design.md", "from fl_privtext.ondevice"): lambda ns: (
        ns["counts"].shape == (2, 2) and 0 <= ns["summary"]["accuracy"] <= 1),
    ("docs/design.md", "import math"): lambda ns: (
        type(ns["mech"]).__name__ == "SignRR" and ns["mech"].dim == 6 and ns["audit"].verdict == "pass"
        and "sign-rr" not in names.MECHANISMS),
    ("docs/design.md", "from typing import Any"): lambda ns: (
        ns["cfg"].server.learner == "nearest-mean" and ns["cfg"].attack.families == "logistic,prior"
        and not {"nearest-mean", "prior", "count"} & {*names.LEARNERS, *names.ATTACK_FAMILIES, *names.ATTACKS}),
    ("docs/design.md", "import hashlib"): lambda ns: (
        ns["X"].shape == (2, 64) and ns["X"].dtype == np.float32 and "hashed-words" not in names.EXTRACTORS),
    ("docs/design.md", "import numpy as np"): lambda ns: "class-counts" not in names.SECAGG_TASKS,
    ("docs/extractors.md", "from fl_privtext.extract"): lambda ns: (
        ns["X"].shape == (2, 100) and ns["feats"].shape == (6, 50)),  # pairs: [mean(a), mean(b)]
    ("docs/extractors.md", "feats = extract_cached"): lambda ns: ns["cache"].metadata(ns["key"]) is not None,
    ("docs/mechanisms.md", "from fl_privtext.privacy"): lambda ns: ns["y"].shape == (4, ns["mech"].output_dim),
    ("docs/privacy.md", "from fl_privtext.privacy"): lambda ns: (
        ns["y"].shape == (4, 384) and ns["y"].dtype == np.float32),
}

NOTEBOOK = ("docs/quickstart.ipynb", "tests/docs/test_notebook.py::test_quickstart_notebook_runs_under_a_real_kernel")


def _doc_command(cmd: str, how: str) -> str:
    assert cmd in doc_commands(), f"{cmd!r} is no longer in the docs: update COMMANDS"
    assert COMMANDS[cmd][0] == how, f"{cmd!r} is listed as {COMMANDS[cmd][0]!r}, run here as {how!r}"
    return cmd


def _substitute(cmd: str, **where: Any) -> str:
    for placeholder, value in SUBSTITUTE.items():
        if placeholder in cmd:
            cmd = cmd.replace(placeholder, value.format(**where))
    return cmd


def _cli(cmd: str) -> tuple[int, str, str]:
    """``fl-privtext ...`` in this process (the installed entry point is fl_privtext.cli:main)."""
    from fl_privtext.cli import main

    argv = shlex.split(cmd)
    assert argv[0] == "fl-privtext", cmd
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv[1:])
    return rc, out.getvalue(), err.getvalue()


# ---- the table ---------------------------------------------------------------------------------------------------


def _drift(found: dict[Any, Any], table: dict[Any, Any]) -> tuple[list[Any], list[Any]]:
    """(in the docs but not in the table, in the table but not in the docs)."""
    return sorted(set(found) - set(table)), sorted(set(table) - set(found))


def test_every_doc_command_is_listed():
    found = doc_commands()
    new, stale = _drift(found, COMMANDS)
    assert not new, ("commands in the docs that no test runs: add each to COMMANDS in tests/docs/"
                     f"test_docs_commands.py (run it, or say why not and which test covers it): "
                     f"{[(c, found[c]) for c in new]}")
    assert not stale, f"COMMANDS lists commands the docs no longer hold (remove them): {stale}"
    new, stale = _drift(python_blocks(), PYTHON)
    assert not new, f"python blocks in the docs that no test runs: add each to PYTHON: {new}"
    assert not stale, f"PYTHON lists blocks the docs no longer hold (remove them): {stale}"


def test_the_extraction_finds_a_new_command_and_a_stale_entry(tmp_path):
    """The known-bad variants: a command added to a page is found (joined, uncommented, split at &&, with its
    heredoc), and a table entry whose command left the docs is reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("```bash\nfl-privtext run  # the main job\n```\n")
    (tmp_path / "docs" / "new.md").write_text(
        "text\n```bash\n# a comment line\nfl-privtext run --set a=1 \\\n    --set b='x # y'   # why\n"
        "mkdir -p d && cat > d/p.toml <<'TOML'\n[privacy]\nepsilon = 1.0\nTOML\n```\n"
        "```python\n# setup\nimport fl_privtext  # the API\n```\n```\nfl-privtext diagram\n```\n")
    found = doc_commands(tmp_path)
    assert list(found) == ["fl-privtext run", "fl-privtext run --set a=1 --set b='x # y'", "mkdir -p d",
                           "cat > d/p.toml <<'TOML'\n[privacy]\nepsilon = 1.0\nTOML"]
    assert found["mkdir -p d"] == ["docs/new.md:2"]
    table = {"fl-privtext run": (SKIPPED, "x", "y"), "fl-privtext sweep gone.toml": (SKIPPED, "x", "y")}
    new, stale = _drift(found, table)
    assert new == sorted(set(found) - {"fl-privtext run"}) and stale == ["fl-privtext sweep gone.toml"]
    assert list(python_blocks(tmp_path)) == [("docs/new.md", "import fl_privtext")]


def test_covering_tests_exist_and_untagged_blocks_hold_no_code():
    named = [v[2] for v in COMMANDS.values()] + [v[2] for v in PYTHON.values() if v[2]] + [NOTEBOOK[1]]
    for ref in (r for refs in named for r in refs.split(" + ") if "::" in r):
        path, name = ref.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{ref}: no such test"
    assert all(how in (E2E, RUN, VALIDATED, SKIPPED) and why for how, why, _ in COMMANDS.values())
    for file, start in PROMISES:  # each promise checks a block that is run here
        assert [k for k, v in PYTHON.items() if k[0] == file and k[1].startswith(start) and v[0] == RUN], start
    code = ("fl-privtext ", "flwr ", "python ", "pip ", "import ", "from fl_privtext", "fl_privtext.", "sweep = ")
    for b in blocks():  # a block without a language tag is a diagram or an output sample, never a command
        if b.lang in ("", "text"):
            bad = [x for x in b.text.splitlines() if x.lstrip().startswith(code)]
            assert not bad, f"{b.file}:{b.line}: an untagged block holds code, tag it ```bash or ```python: {bad}"


def test_other_tests_run_the_blocks_they_are_named_for():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_test_api", ROOT / "tests" / "test_api.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._example() == python_blocks()[("docs/api.md", "import fl_privtext")].text
    notebook = (ROOT / "tests" / "docs" / "test_notebook.py").read_text()
    assert 'NOTEBOOK = ROOT / "docs" / "quickstart.ipynb"' in notebook and "client.execute()" in notebook
    sweep_block = python_blocks()[("docs/api.md", 'sweep = fl_privtext.run_sweep("configs/quickstart_frontier.toml")')]
    for call in ("fl_privtext.run_sweep(", "sweep.to_pandas()"):  # the notebook makes the block's calls
        assert call in sweep_block.text and call in (ROOT / NOTEBOOK[0]).read_text()


# ---- run end to end: two tiny simulations, then compare ---------------------------------------------------------


def _write_reviews(path: Path, users: int = 120) -> dict[str, list[Any]]:
    """A tiny review table with the docs' columns (review, stars, gender, age_band, author); words GloVe knows."""
    rng = random.Random(0)
    good = ["great", "excellent", "love", "perfect", "happy", "works"]
    bad = ["terrible", "broken", "awful", "waste", "poor", "returned"]
    cols: dict[str, list[Any]] = {"review": [], "stars": [], "gender": [], "age_band": [], "author": []}
    for u in range(users):
        gender, age = rng.choice(["female", "male"]), rng.choice(["young", "old"])
        for _ in range(2):
            stars = rng.choice([1, 5])
            words = rng.sample(good if stars == 5 else bad, 3) + ["my", "wife" if gender == "male" else "husband"]
            cols["review"].append(" ".join(words + ["the", "product"]))
            for k, v in (("stars", stars), ("gender", gender), ("age_band", age), ("author", f"u{u}")):
                cols[k].append(v)
    lines = ["\t".join(cols)] + ["\t".join(str(cols[c][i]) for c in cols) for i in range(len(cols["review"]))]
    path.write_text("\n".join(lines) + "\n")
    return cols


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, cache_dir) -> Iterator[Path]:
    """The commands' working directory (relative outputs land here), with the docs' tiny inputs."""
    work = tmp_path_factory.mktemp("docs")
    cols = _write_reviews(work / "reviews.tsv")
    import datasets

    hf = {("text" if k == "review" else k): v for k, v in cols.items()}  # the page's hf line takes `text`
    datasets.Dataset.from_dict(hf).save_to_disk(str(work / "my_reviews_saved"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("FL_PRIVTEXT_CACHE", str(cache_dir))
        yield work


@pytest.mark.slow
def test_cli_runs_end_to_end(workdir):
    where = {"root": ROOT, "tmp": workdir, "data": ""}
    main_job = _doc_command("fl-privtext run --config configs/default.toml --set run.seeds=5 --output runs/mine", E2E)
    # not about the attacker (the CSV line below runs it): attack.enabled=false; 2 seeds instead of 5
    rc, out, err = _cli(_substitute(main_job, **where) + f" {SHRINK} --set run.seeds=2 --set attack.enabled=false")
    assert rc == 0, err[-3000:]
    res = json.loads((workdir / "runs" / "mine" / "results.json").read_text())
    assert res["config"]["run.seeds"] == 2 and len(res["utility"]["per_seed"]) == 2
    assert res["config"]["privacy.mechanism"] == "laplace-l1" and res["dataset"]["name"] == "default"
    assert 0 <= res["utility"]["accuracy"] <= 1 and res["utility"]["on_device"]["available"]
    assert "wrote runs/mine/results.json" in out + err

    csv_run = _doc_command(next(c for c in COMMANDS if "data.name=csv" in c), E2E)
    rc, out, err = _cli(_substitute(csv_run, **where) + " " + SHRINK + " --output runs/csv")
    assert rc == 0, err[-3000:]
    res = json.loads((workdir / "runs" / "csv" / "results.json").read_text())
    assert res["federation"]["num_users"] == 120 and res["config"]["data.options.label"] == "stars"
    assert set(res["attacks"]) == {"gender", "age_band"} and 0 <= res["utility"]["accuracy"] <= 1

    rc, out, err = _cli(_substitute(_doc_command("fl-privtext compare runs/a runs/b", RUN), **where))
    assert rc == 0, err
    assert out.splitlines()[0] == "|  | mine | csv |" and "| config data.name | default | csv |" in out
    assert "| config run.seeds | 2 | 1 |" in out


# ---- run as written ----------------------------------------------------------------------------------------------


def test_privacy_report_and_audits():
    rc, out, _err = _cli(_doc_command(
        "fl-privtext privacy-report ome --set epsilon=1 --set lam=100 --set dim=50 --set int-bits=4 "
        "--set frac-bits=5", RUN))
    rep = json.loads(out)
    assert rc == 0 and rep["epsilon_nominal"] == 1 and round(rep["epsilon_worst_case"]) == 3451  # README: 3451-LDP
    rc, out, _ = _cli(_doc_command(
        "fl-privtext audit laplace-l1 --set epsilon=1 --set dim=8 --set sampler=float --samples 200000", RUN))
    float_audit = json.loads(out)
    assert rc == 0 and float_audit["verdict"] == "violation" and float_audit["epsilon_lower_bound"] > 2
    rc, out, _ = _cli(_doc_command("fl-privtext audit laplace-l1 --set epsilon=1 --set dim=4 --set sampler=secure",
                                   RUN))
    secure_audit = json.loads(out)
    assert rc == 0 and secure_audit["verdict"] == "pass" and secure_audit["epsilon_lower_bound"] <= 1


def test_structure_commands_run(tmp_path):
    """docs/design.md's structure commands, from another directory (the script finds the package by its own path)."""
    import subprocess

    out = {}
    for cmd in ("python benchmarks/structure.py", "python benchmarks/structure.py --list",
                "python benchmarks/structure.py --path", "python benchmarks/structure.py --json structure.json"):
        script, *args = shlex.split(_doc_command(cmd, RUN))[1:]
        proc = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0 and "arrows running back up" in proc.stdout, (cmd, proc.stderr)
        out[cmd] = proc.stdout
    assert "floors, top first: cli -> " in out["python benchmarks/structure.py --path"]
    figures = json.loads((tmp_path / "structure.json").read_text())
    assert figures["arrows_back_up"] == 0 and figures["floors_path"][0] == ["cli"]  # the map's claims


# ---- validated: parser, preflight, data loaded and split, the cheapest real step --------------------------------


def _validate_run(cmd: str, output: Path) -> Any:
    """`fl-privtext run ...` up to the federation: the CLI's parser, the preflight, runner.validate (the data
    loaded, roles and shards); returns the prepared point."""
    from fl_privtext.cli import _build_parser, _parse_sets
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline import runner
    from fl_privtext.pipeline.preflight import check_run

    args = _build_parser().parse_args(shlex.split(cmd)[1:])
    cfg = ExperimentConfig.load(args.config, _parse_sets(args.set))
    check_run(cfg, output=args.output or output, overwrite=False)
    return cfg, runner.validate(cfg)


def _two_texts(cfg: Any, prep: Any) -> np.ndarray:
    from fl_privtext.extract import make_extractor_from

    x = make_extractor_from(cfg).extract(list(prep.ds.texts[:2]), progress=False)
    assert x.shape[0] == 2 and np.isfinite(x).all()
    return x


@pytest.mark.slow
def test_run_commands_validate(workdir, data_root):
    from fl_privtext.client.upload import mechanism_for
    from fl_privtext.config import ExperimentConfig
    from fl_privtext.public import PublicSpec

    where = {"root": ROOT, "tmp": workdir, "data": data_root}
    cfg, prep = _validate_run(_doc_command("fl-privtext run", VALIDATED), workdir / "v0")
    assert cfg == ExperimentConfig.load(str(ROOT / "configs" / "default.toml"), {})  # the e2e --config line's
    blog = _doc_command(next(c for c in COMMANDS if "data.name=blog" in c), VALIDATED)
    cfg, prep = _validate_run(_substitute(blog, **where), workdir / "v1")
    assert prep.ds.name == "blog" and _two_texts(cfg, prep).shape == (2, 384)
    assert mechanism_for(PublicSpec.of(cfg), 384).report().to_json()["mechanism"] == "gaussian"
    bf16 = _doc_command("fl-privtext run --set extractor.name=minilm --set extractor.precision=bf16", VALIDATED)
    cfg, prep = _validate_run(bf16, workdir / "v2")
    assert cfg.extractor.precision == "bf16" and _two_texts(cfg, prep).shape == (2, 384)
    hf = _doc_command(next(c for c in COMMANDS if "data.name=hf" in c), VALIDATED)
    cfg, prep = _validate_run(_substitute(hf, **where), workdir / "v3")
    assert prep.ds.num_users == 120 and prep.ds.attribute_names == ("gender",)
    _two_texts(cfg, prep)


def test_install_lines_and_flwr_overrides_validate():
    import tomllib

    import torch

    _doc_command("pip install torch==2.13.0", VALIDATED)
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text() and torch.__version__.startswith("2.13.0")
    _doc_command('pip install -e ".[dev,plots]"', VALIDATED)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"dev", "plots"} <= set(extras)
    import fl_privtext

    assert Path(fl_privtext.__file__).resolve().is_relative_to(ROOT)
    flwr = next(c for c in COMMANDS if c.startswith("flwr run . --federation-config"))
    _doc_command(flwr, VALIDATED)
    from flwr.common.config import parse_config_args

    from fl_privtext.config import ExperimentConfig

    overrides = parse_config_args([shlex.split(flwr)[shlex.split(flwr).index("-c") + 1]])
    cfg = ExperimentConfig.from_flat(overrides)
    assert cfg.privacy.epsilon == 2.0 and cfg.run.output == "runs/flwr"


def test_supernode_policy_file_validates(tmp_path, monkeypatch):
    from fl_privtext.client.policy import Refused, policy_from
    from fl_privtext.config import ExperimentConfig

    cat = _doc_command(next(c for c in COMMANDS if c.startswith("cat > policy.toml")), VALIDATED)
    monkeypatch.chdir(tmp_path)
    body = cat.split("\n", 1)[1].rsplit("\n", 1)[0]
    (tmp_path / "policy.toml").write_text(body + "\n")
    policy = policy_from({"policy-file": str(tmp_path / "policy.toml"), "partition-id": 0, "num-partitions": 2})
    entry = policy.entry_for(ExperimentConfig.from_flat({"privacy.epsilon": 1.0, "federation.num-clients": 2}))
    assert entry.client.max_epsilon == float("inf") and entry.pinned["privacy.epsilon"] == 1.0
    with pytest.raises(Refused, match="^refused: policy mismatch$"):  # the SuperNode releases only its policy
        policy.entry_for(ExperimentConfig.from_flat({"privacy.epsilon": 2.0, "federation.num-clients": 2}))


@pytest.mark.slow
def test_sweeps_validate_and_list(workdir):
    from fl_privtext import sweep
    from fl_privtext.pipeline import runner
    from fl_privtext.pipeline.preflight import check_point

    where = {"root": ROOT, "tmp": workdir, "data": ""}
    cells = json.loads((ROOT / NOTEBOOK[0]).read_text())["cells"]
    [nb_params] = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    notebook: dict[str, Any] = {}
    exec("".join(nb_params["source"]), notebook)  # noqa: S102 - the notebook's own parameters: its sweep file
    files = {"configs/quickstart_frontier.toml": ({}, True), "configs/sweep_epsilon.toml": ({}, True),
             notebook["SPEC"]: (notebook["SETS"], False)}
    for file, (sets, documented) in files.items():
        if documented:
            _doc_command(f"fl-privtext sweep {file}", VALIDATED)
        spec = sweep.SweepSpec.load(ROOT / file)
        points = sweep.with_baselines(spec.points({**sets, "run.progress": "false"}))
        for cfg in points:  # what the sweep checks before it imports torch, Flower and Ray
            check_point(cfg)
        runner.validate(points[0])  # the data generated / loaded, roles and shards
    listed = _doc_command("fl-privtext sweep configs/sweep_epsilon.toml --list", RUN)
    rc, out, err = _cli(_substitute(listed, **where))
    spec = sweep.SweepSpec.load(ROOT / "configs" / "sweep_epsilon.toml")
    assert rc == 0 and len(out.splitlines()) == len(sweep.with_baselines(spec.points())) == 16, err
    assert all(line.startswith("todo ") for line in out.splitlines())


# ---- python blocks -----------------------------------------------------------------------------------------------


def _bindings(key: tuple[str, str], tmp: Path) -> dict[str, Any]:
    """The names a block uses without defining them, bound to tiny objects."""
    from fl_privtext.data import load_dataset

    rng = np.random.default_rng(0)
    file, first = key
    tiny = load_dataset("default").select(range(6))
    if file in ("docs/mechanisms.md", "docs/privacy.md"):
        return {"x": rng.normal(size=(4, 384)).astype(np.float32), "rng": rng}
    if first.startswith("from fl_privtext.privacy import make_mechanism, MECHANISMS"):
        return {"x": rng.random((4, 50), dtype=np.float32), "rng": rng}
    if first == "from fl_privtext.data import from_hf":
        import datasets

        return {"hf_dataset": datasets.Dataset.from_dict({
            "sentence": ["good", "bad", "fine", "poor"], "label": [1, 0, 1, 0], "sex": ["f", "m", "m", "f"],
            "author": ["a", "a", "b", "c"]})}
    if first.startswith("from fl_privtext.extract import make_extractor, Extractor"):
        return {"texts": ["a text", "another"], "ds": tiny, "cache_dir": tmp / "cache"}
    if first.startswith("from fl_privtext.ondevice"):
        import torch

        from fl_privtext.config import MLPConfig
        from fl_privtext.learn import train_mlp
        from fl_privtext.ondevice import on_device_counts
        from fl_privtext.privacy import make_mechanism

        x = rng.normal(size=(40, 8)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        mech = make_mechanism("laplace-l1", epsilon=1.0, dim=8)
        model = train_mlp(mech.privatize(x, rng), y, num_classes=2, config=MLPConfig(epochs=1),
                          generator=torch.Generator().manual_seed(0))
        one = on_device_counts(x, y, mech, model.export(), 2)
        return {"model": model, "x_clean": x, "y": y, "mech": mech, "k": 2, "all_counts": [one, one],
                "majority_class": 0, "clients": 2}
    if first.startswith("from fl_privtext.extract import make_extractor, extract_cached"):
        return {"sentences_a": ["a text", "another"], "sentences_b": ["a reply", "one more"], "ds": tiny}
    if first == "class Extractor(Protocol):":
        from collections.abc import Sequence
        from typing import Protocol

        return {"Protocol": Protocol, "Sequence": Sequence, "np": np}
    if first.startswith('make_extractor("hf"'):
        from fl_privtext.extract import make_extractor

        return {"make_extractor": make_extractor}
    if first.startswith("feats = extract_cached"):
        from fl_privtext.extract import EmbeddingCache, extract_cached, make_extractor

        return {"extract_cached": extract_cached, "EmbeddingCache": EmbeddingCache, "ds": tiny,
                "ext": make_extractor("glove"), "cache_dir": tmp / "cache", "rows": np.array([0, 2]),
                "array": np.zeros((6, 50), np.float32)}
    return {}


@pytest.mark.parametrize("key", [k for k, v in PYTHON.items() if v[0] == RUN], ids=lambda k: f"{k[0]}:{k[1][:40]}")
def test_python_block_runs(key, tmp_path, monkeypatch, request):
    block = python_blocks()[key]
    # the staged data only where the block reads it (the fixture skips without it)
    data_root = request.getfixturevalue("data_root") if "/path/to/shared/data" in block.text else None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FL_PRIVTEXT_CACHE", str(tmp_path / "cache"))  # never the session's cache: a block stores
    namespace = _bindings(key, tmp_path)
    from fl_privtext.extract.transformer import default_model_dir

    text = _substitute(block.text, root=ROOT, tmp=tmp_path, data=data_root, minilm=default_model_dir())
    exec(compile(text, f"{block.file}:{block.line}", "exec"), namespace)  # noqa: S102 - the documented block, its placeholders bound
    for (file, start), promise in PROMISES.items():
        if key[0] == file and key[1].startswith(start):
            assert promise(namespace), f"{block.file}:{block.line}: the block ran but does not do what it says"
    if key[1] == "class Extractor(Protocol):":
        from fl_privtext.extract import Extractor

        doc = namespace["Extractor"]
        assert set(doc.__annotations__) == set(Extractor.__annotations__) and all(
            hasattr(Extractor, m) for m in ("identity", "extract"))
        import inspect

        assert list(inspect.signature(doc.extract).parameters) == list(inspect.signature(Extractor.extract).parameters)
