"""Every script outside the package (simulations/, benchmarks/) imports only names the package has: a module moved
by a refactor must not leave a reproduction script that fails on its first line (four did: `fl_privtext.prepare`
and `fl_privtext.report._json_safe` after the house's move). Static: the scripts are parsed, not run; the named
modules are imported and the names looked up, function-level imports included."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("simulations/*.py"), *ROOT.glob("benchmarks/*.py")])


def missing_imports(source: str) -> list[str]:
    """The ``fl_privtext`` modules and names that ``source`` imports and the package does not have."""
    missing: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            mods = [(a.name, []) for a in node.names if a.name.split(".")[0] == "fl_privtext"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "fl_privtext":
            mods = [(str(node.module), [a.name for a in node.names])]
        else:
            continue
        for mod, names in mods:
            if importlib.util.find_spec(mod) is None:
                missing.append(mod)
                continue
            module = importlib.import_module(mod)
            for name in names:
                if name != "*" and not hasattr(module, name) and importlib.util.find_spec(f"{mod}.{name}") is None:
                    missing.append(f"{mod}.{name}")
    return missing


def test_the_checker_finds_a_moved_module_and_a_missing_name():  # the known-bad variants
    assert missing_imports("from fl_privtext.prepare import prepare") == ["fl_privtext.prepare"]
    assert missing_imports("def f():\n    from fl_privtext.report import _json_safe\n") == [
        "fl_privtext.report._json_safe"]
    assert missing_imports("from fl_privtext.pipeline.preparation import prepare\nimport fl_privtext.rng") == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_imports_resolve(script: Path):
    assert SCRIPTS, "no scripts found"
    assert missing_imports(script.read_text()) == [], f"{script.name} imports names the package does not have"
