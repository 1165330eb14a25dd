"""The package's structure does not get worse (issue #35): a ratchet on benchmarks/structure.py's figures.

An ast walk, no import of the package: about a second. When a change improves a figure, lower its ceiling in
``RATCHET`` to the new value in the same commit, so that the gain is kept.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ceilings, measured on main at the start of issue #35 (python benchmarks/structure.py). The goals are
# 0 for every count here, <= 20 function imports (each for a heavy optional dependency) and <= 9 floors.
RATCHET: dict[str, int] = {
    "import_circles": 0,
    "room_circles": 0,
    "files_in_cycle": 0,
    "rooms_in_cycle": 0,
    "rooms_in_cycle_module_level": 0,
    "arrows_back_up": 0,
    "function_imports": 14,
    "function_imports_not_heavy": 0,
    "private_imports": 0,
}
# Floors are capped at the goal, not at today's count: today's 5 (all imports) is low only because 16 rooms
# are one knot, and untying it (the point of the issue) makes the true height visible.
MAX_FLOORS = 9


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("structure", ROOT / "benchmarks" / "structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


structure = _load()


@pytest.fixture(scope="module")
def figures() -> dict:
    return structure.measure(ROOT / "fl_privtext")


@pytest.mark.parametrize("key", sorted(RATCHET))
def test_structure_figure_does_not_get_worse(figures: dict, key: str) -> None:
    value, ceiling = figures[key], RATCHET[key]
    assert value <= ceiling, (f"{key} rose to {value} (ceiling {ceiling}); run `python benchmarks/structure.py "
                              "--list` to see which import did it.")
    assert value == ceiling, (
        f"{key} improved to {value} (ceiling {ceiling}): lower RATCHET[{key!r}] in tests/test_structure.py to "
        f"{value} so that the gain is kept.")


def test_floors_within_goal_and_every_room_placed(figures: dict) -> None:
    assert figures["floors"] <= MAX_FLOORS and figures["floors_module_level"] <= MAX_FLOORS, (
        f"floors {figures['floors']} / module-level {figures['floors_module_level']} exceed {MAX_FLOORS}.")
    assert figures["unplaced_rooms"] == [], (
        f"rooms {figures['unplaced_rooms']} have no stage: add them to STAGE_OF in benchmarks/structure.py.")


def test_metrics_see_a_circle_a_climb_a_deferred_import_and_a_private_name(tmp_path: Path) -> None:
    """Known-bad toy package: every figure the ratchet relies on must count what it claims to."""
    pkg = tmp_path / "toy"
    (pkg / "data").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "config.py": "from toy.cli import main\n",  # ground -> entry: a climb, and a module-level circle
        "cli.py": "from toy.config import _secret\n\ndef main():\n    from toy.data import load\n    import torch\n",
        "data/__init__.py": "from toy.data.io import load\n",
        "data/io.py": "import toy.config as c\n\ndef load():\n    return c._secret\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text), encoding="utf-8")
    toy = structure.measure(pkg)
    assert toy["import_circle_members"] == [["cli", "config"]]
    assert "config -> cli" in toy["arrows_back_up_list"] and "data/ -> config" not in toy["arrows_back_up_list"]
    assert [(f["importer"], f["target"], f["heavy"]) for f in toy["function_imports_list"]] == [
        ("cli", "data", False)]
    assert toy["function_imports_of_heavy_deps"] == 1
    assert {(p["importer"], p["name"]) for p in toy["private_imports_list"]} == {("cli", "_secret"),
                                                                                ("data.io", "_secret")}
