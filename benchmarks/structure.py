"""Structure metrics of the package, from its import graph (issue #35): circles, rooms, floors, climbs, private names.

Run: ``python benchmarks/structure.py [--json FILE] [--list] [--path] [--root fl_privtext]`` (stdlib only; an ast walk, so
nothing of the package is imported and it runs in well under a second).

Definitions (so that anyone can rerun and argue with them):

- A *module* is one ``.py`` file under the package (``pkg/sub/__init__.py`` is module ``pkg.sub``). An import of
  ``a.b.c`` is an edge to the most specific internal module it names: ``from a.b import c`` is an edge to ``a.b.c``
  when that is a module, else to ``a.b``. Parent packages' ``__init__`` files that Python also runs are not edges.
- *Module-level* imports are those executed when the module is imported: the module body, its ``try``/``if`` blocks
  and class bodies; not function bodies, and not ``if TYPE_CHECKING:`` blocks (never executed).
  ``importlib.import_module("literal")`` calls count as imports where they stand.
- *Import circles*: strongly connected components (more than one module) of the module-level graph.
- *Circles within a room*: the same components on the graph of all imports (imports inside functions too) keeping
  only the edges between modules of one room (the issue's "six circles", which counted the function-level ones).
- *Files in a cycle* / *rooms in a cycle*: the same on the graph of all imports (imports inside functions too), on
  modules and on rooms. A *room* is a subpackage (``client/``) or a top-level module (``api``).
- *Floors*: the number of rooms on the longest path of the room graph (all imports) once each cycle is condensed
  into one node; also given for module-level imports only, where the function-level knot does not flatten it.
- *Arrows back up*: room edges (all imports) from a lower stage to a higher one in the data-flow order
  ``STAGES`` below (ground < data < extract < privacy < client < federation < server < attacks < report <
  orchestrator < entry). ``STAGE_OF`` places every room; this list is the one definition of that order.
- *Internal imports inside functions*: imports of package modules made in a function body. One is marked *heavy*
  when the imported module pulls an optional heavy dependency (``HEAVY``) at module level, directly or through
  other package modules, that the importing module does not already pull: the only reason issue #35 accepts for
  deferring an import. Direct function-level imports
  of the heavy dependencies themselves are counted apart (they are the allowed kind).
- *Private names across modules*: ``from x import _name`` with ``x`` another package module, and ``m._name``
  where ``m`` is bound to a package module by an import. Dunders (``__version__``) are not private.
"""

from __future__ import annotations

import argparse
import ast
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The data-flow order, lowest first: a room may import rooms of its own stage or below; an import of a higher stage
# is an arrow running back up. The orchestrator (the one place that calls the stages in order) and the entry points
# sit on top.
STAGES: tuple[str, ...] = ("ground", "data", "extract", "privacy", "client", "federation", "server", "attacks",
                           "report", "orchestrator", "entry")

# Room -> stage. Subpackages are written with a trailing slash; top-level modules without. A room missing here is
# reported (and counted as "unplaced") so that a new module is placed on purpose.
STAGE_OF: dict[str, str] = {
    # small ground modules any stage may use
    "config": "ground", "rng": "ground", "constant": "ground", "names": "ground", "threads": "ground",
    "memory": "ground", "datafiles": "ground", "progress": "ground", "metrics": "ground", "bootstrap": "ground",
    "display": "ground", "rundir": "ground", "version": "ground", "traffic": "ground",
    # shared by several stages and knowing none: the on-device model format (numpy; client, server, report) and the
    # torch MLP trainer (the Phase A encoders, the server's learners, the attackers)
    "ondevice": "ground", "learn": "ground",
    "data/": "data",
    "extract/": "extract",
    "privacy/": "privacy", "public": "privacy",
    # Phase A's encoders are trained on the clients, with the client's mechanism and private generator
    "client/": "client", "encoders/": "client",
    "federation/": "federation",
    "server/": "server",
    "attacks/": "attacks",
    "report/": "report",
    "pipeline/": "orchestrator",
    "__init__": "entry", "api": "entry", "cli": "entry", "sweep": "entry",
}

# Optional heavy dependencies: the one accepted reason for an import inside a function.
HEAVY: tuple[str, ...] = ("torch", "transformers", "ray", "flwr", "matplotlib", "sklearn", "datasets", "opendp",
                          "sentence_transformers", "pandas", "mlflow", "wandb")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: who imports what, where, and which names."""

    importer: str
    target: str  # a module name; internal when it starts with the package name
    line: int
    in_function: bool
    names: tuple[str, ...] = ()


@dataclass
class Graph:
    """What the ast walk collects over the package."""

    package: str
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    private: list[tuple[str, int, str, str]] = field(default_factory=list)  # (importer, line, module, name)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``node`` with whether it runs inside a function; TYPE_CHECKING blocks are skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield sub, in_function
                yield from _walk(sub, in_function)
            continue
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield child, in_function
        yield from _walk(child, inner)


def _resolve(graph: Graph, importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def build(root: Path) -> Graph:
    """Walk every module under ``root`` (the package directory) and collect its imports and private accesses."""
    graph = Graph(package=root.name)
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        graph.modules[module_name(root, path)] = path
    for path in files:
        name = module_name(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> internal module it is bound to
        for node, in_function in _walk(tree, False):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    graph.imports.append(Import(name, alias.name, node.lineno, in_function))
                    if alias.name.startswith(graph.package):
                        aliases[alias.asname or alias.name] = alias.name  # `import a.b` binds `a`; handled below
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(graph, name, path.name == "__init__.py", node)
                internal = source.split(".")[0] == graph.package
                submodules = [a for a in node.names if f"{source}.{a.name}" in graph.modules] if internal else []
                for alias in submodules:
                    graph.imports.append(Import(name, f"{source}.{alias.name}", node.lineno, in_function))
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                rest = tuple(a.name for a in node.names if a not in submodules)
                if rest or not submodules:
                    graph.imports.append(Import(name, source, node.lineno, in_function, rest))
                if internal and source != name:
                    graph.private.extend((name, node.lineno, source, n) for n in rest if _private(n))
            elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                  and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                graph.imports.append(Import(name, node.args[0].value, node.lineno, in_function))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                dotted = _dotted(node.value)
                target = aliases.get(dotted) if dotted else None
                if target is None and dotted and dotted.startswith(graph.package + ".") and dotted in graph.modules:
                    target = dotted  # `import fl_privtext.a.b` then `fl_privtext.a.b._x`
                if target is not None and target != name and target in graph.modules:
                    graph.private.append((name, node.lineno, target, node.attr))
    graph.imports = [i for i in graph.imports if i.target]
    return graph


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def internal_target(graph: Graph, target: str) -> str | None:
    """The package module an import names (its longest prefix that is a module), or None when external."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in graph.modules:
            return candidate
        parts.pop()
    return None


def room_of(graph: Graph, module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    sub = graph.package + "." + parts[1]
    is_package = graph.modules.get(sub, Path()).name == "__init__.py"
    return parts[1] + "/" if is_package else parts[1]


def edges(graph: Graph, *, include_functions: bool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {m: set() for m in graph.modules}
    for imp in graph.imports:
        if imp.in_function and not include_functions:
            continue
        target = internal_target(graph, imp.target)
        if target is not None and target != imp.importer:
            out[imp.importer].add(target)
    return out


def components(nodes: Iterable[str], out: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative), each sorted; every node appears in exactly one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(out.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(out.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                result.append(sorted(comp))
    return result


def room_graph(graph: Graph, out: dict[str, set[str]], rooms: list[str]) -> dict[str, set[str]]:
    room_out: dict[str, set[str]] = {r: set() for r in rooms}
    for module, targets in out.items():
        for target in targets:
            a, b = room_of(graph, module), room_of(graph, target)
            if a != b:
                room_out[a].add(b)
    return room_out


def longest_path(nodes: list[str], out: dict[str, set[str]]) -> int:
    """Nodes on the longest path once each strongly connected component is condensed into one node."""
    return len(tallest_path(nodes, out))


def tallest_path(nodes: list[str], out: dict[str, set[str]]) -> list[list[str]]:
    """One longest path of the condensed graph, top first: each step a strongly connected component (its nodes)."""
    comps = components(nodes, out)
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    comp_out: dict[int, set[int]] = {}
    for a, targets in out.items():
        for b in targets:
            if comp_of[a] != comp_of[b]:
                comp_out.setdefault(comp_of[a], set()).add(comp_of[b])
    depth: dict[int, int] = {}
    below: dict[int, int | None] = {}
    for i in sorted(set(comp_of.values())):  # Tarjan emits sinks first: every successor is already measured
        below[i] = max(sorted(comp_out.get(i, ())), key=lambda j: depth[j], default=None)
        depth[i] = 1 + (0 if below[i] is None else depth[below[i]])
    step = max(sorted(depth), key=lambda i: depth[i], default=None)
    path = []
    while step is not None:
        path.append(comps[step])
        step = below[step]
    return path


def heavy_deps(graph: Graph) -> dict[str, set[str]]:
    """Per package module: the HEAVY dependencies that importing it loads (module-level imports, transitively)."""
    pulled: dict[str, set[str]] = {m: set() for m in graph.modules}
    for imp in graph.imports:
        if not imp.in_function and imp.target.split(".")[0] in HEAVY:
            pulled[imp.importer].add(imp.target.split(".")[0])
    module_level = edges(graph, include_functions=False)
    changed = True
    while changed:
        changed = False
        for module, targets in module_level.items():
            for target in targets:
                if not pulled[target] <= pulled[module]:
                    pulled[module] |= pulled[target]
                    changed = True
    return pulled


def measure(root: Path) -> dict[str, Any]:
    """Every figure of the module docstring, as a JSON-ready dict."""
    graph = build(root)
    short = {m: m.split(".", 1)[1] if "." in m else "__init__" for m in graph.modules}

    module_level = edges(graph, include_functions=False)
    circles = [[short[m] for m in c] for c in components(graph.modules, module_level) if len(c) > 1]
    every = edges(graph, include_functions=True)
    knots = [c for c in components(graph.modules, every) if len(c) > 1]

    rooms = sorted({room_of(graph, m) for m in graph.modules})
    room_out = room_graph(graph, every, rooms)
    same_room = {m: {t for t in targets if room_of(graph, t) == room_of(graph, m)} for m, targets in every.items()}
    room_circles = [[short[m] for m in c] for c in components(graph.modules, same_room) if len(c) > 1]
    room_knots = [c for c in components(rooms, room_out) if len(c) > 1]

    floors = longest_path(rooms, room_out)
    room_out_module_level = room_graph(graph, module_level, rooms)
    unplaced = [r for r in rooms if r not in STAGE_OF]
    rank = {r: STAGES.index(STAGE_OF[r]) for r in rooms if r in STAGE_OF}
    climbs = sorted(f"{a} -> {b}" for a, targets in room_out.items() for b in targets
                    if a in rank and b in rank and rank[a] < rank[b])

    pulled = heavy_deps(graph)
    function_imports = []
    heavy_direct = []
    for imp in graph.imports:
        if not imp.in_function:
            continue
        target = internal_target(graph, imp.target)
        if target is not None:
            extra = sorted(pulled[target] - pulled[imp.importer])
            function_imports.append({"importer": short[imp.importer], "line": imp.line, "target": short[target],
                                     "heavy": bool(extra), "pulls": extra})
        elif imp.target.split(".")[0] in HEAVY:
            heavy_direct.append({"importer": short[imp.importer], "line": imp.line, "target": imp.target})

    private = sorted({(short[a], line, short[m], n) for a, line, m, n in graph.private})
    return {
        "modules": len(graph.modules),
        "lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in graph.modules.values()),
        "import_circles": len(circles),
        "import_circle_members": circles,
        "files_in_cycle": sum(len(c) for c in knots),
        "file_cycles": [[short[m] for m in c] for c in knots],
        "rooms": len(rooms),
        "rooms_in_cycle": sum(len(c) for c in room_knots),
        "room_cycles": room_knots,
        "room_edges": sum(len(t) for t in room_out.values()),
        "floors": floors,
        "floors_path": tallest_path(rooms, room_out),
        "floors_module_level": longest_path(rooms, room_out_module_level),
        "rooms_in_cycle_module_level": sum(len(c) for c in components(rooms, room_out_module_level) if len(c) > 1),
        "room_circles": len(room_circles),
        "room_circle_members": room_circles,
        "stages": list(STAGES),
        "unplaced_rooms": unplaced,
        "arrows_back_up": len(climbs),
        "arrows_back_up_list": climbs,
        "internal_imports": sum(1 for i in graph.imports if internal_target(graph, i.target) is not None),
        "function_imports": len(function_imports),
        "function_imports_heavy": sum(1 for f in function_imports if f["heavy"]),
        "function_imports_not_heavy": sum(1 for f in function_imports if not f["heavy"]),
        "function_imports_list": function_imports,
        "function_imports_of_heavy_deps": len(heavy_direct),
        "private_imports": len(private),
        "private_import_files": len({p[0] for p in private}),
        "private_imports_list": [{"importer": a, "line": line, "module": m, "name": n} for a, line, m, n in private],
    }


TABLE = [
    ("import circles (module-level imports)", "import_circles"),
    ("circles within a room (imports in functions too)", "room_circles"),
    ("files in an import cycle (imports in functions too)", "files_in_cycle"),
    ("rooms (subpackages + top-level modules)", "rooms"),
    ("rooms in a cycle (same counting)", "rooms_in_cycle"),
    ("room arrows", "room_edges"),
    ("floors (longest path, condensed room graph)", "floors"),
    ("floors, module-level imports only", "floors_module_level"),
    ("rooms in a cycle, module-level imports only", "rooms_in_cycle_module_level"),
    ("arrows running back up (data-flow order)", "arrows_back_up"),
    ("internal imports (all)", "internal_imports"),
    ("internal imports inside functions", "function_imports"),
    ("  ... of which pull a heavy optional dependency", "function_imports_heavy"),
    ("  ... of which do not", "function_imports_not_heavy"),
    ("imports of heavy deps inside functions (allowed kind)", "function_imports_of_heavy_deps"),
    ("private names imported across modules", "private_imports"),
    ("  ... in files", "private_import_files"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1] / "fl_privtext",
                        help="the package directory to measure (default: this checkout's fl_privtext/)")
    parser.add_argument("--json", type=Path, help="also write every figure and list to this JSON file")
    parser.add_argument("--list", action="store_true", help="list circles, climbs, function imports, private names")
    parser.add_argument("--path", action="store_true", help="print one longest path of rooms (the floors)")
    args = parser.parse_args(argv)
    figures = measure(args.root)
    print(f"{args.root.name}: {figures['modules']} modules, {figures['lines']} lines")
    width = max(len(label) for label, _ in TABLE)
    for label, key in TABLE:
        print(f"  {label:<{width}}  {figures[key]:>5}")
    for circle in figures["import_circle_members"]:
        print("  circle: " + " <-> ".join(circle))
    for circle in figures["room_circle_members"]:
        print("  circle within a room: " + " <-> ".join(circle))
    if figures["room_cycles"]:
        print("  rooms in a cycle: " + "; ".join(", ".join(c) for c in figures["room_cycles"]))
    if figures["unplaced_rooms"]:
        print("  rooms not placed in STAGE_OF: " + ", ".join(figures["unplaced_rooms"]))
    if args.path:
        print("  floors, top first: " + " -> ".join("{" + ", ".join(c) + "}" if len(c) > 1 else c[0]
                                                    for c in figures["floors_path"]))
    if args.list:
        print("\narrows running back up (" + " < ".join(STAGES) + "):")
        for climb in figures["arrows_back_up_list"]:
            print("  " + climb)
        print("\ninternal imports inside functions (H: pulls a heavy optional dependency):")
        for f in figures["function_imports_list"]:
            pulls = f" ({', '.join(f['pulls'])})" if f["heavy"] else ""
            print(f"  {'H' if f['heavy'] else ' '} {f['importer']}:{f['line']} -> {f['target']}{pulls}")
        print("\nprivate names across modules:")
        for p in figures["private_imports_list"]:
            print(f"  {p['importer']}:{p['line']} -> {p['module']}.{p['name']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
