"""pptl's modules import each other without cycles.

Every ``import`` and ``from ... import`` statement of every module under pptl/ is read from its
AST, relative imports resolved, at every level: inside functions (a function-level import hides a
cycle from the interpreter's start-up but not from a reader, and the day it moves to the top the
cycle breaks the import), under ``if TYPE_CHECKING:`` (a type-only import is a dependency of the
module's meaning all the same), and ``importlib.import_module`` calls, whose module names are read
from the string constants of the module that makes them (a registry table).

On top of "no cycle", the layers: the core (op, table, facts, schedule, graph, simulator) imports
nothing above it; the readers in ``pptl.formats`` import neither the checker nor the simulator;
``pptl.render`` draws the timeline it is given and neither plans nor simulates.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "pptl"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (``if TYPE_CHECKING:`` and function bodies included)."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _dynamic(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The pptl modules an ``import_module`` call of this module may load: its string constants
    that name one, alone or after the constant head of the call's f-string argument."""
    heads = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "import_module":
            arg = n.args[0] if n.args else None
            if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                heads.add(str(arg.values[0].value))
            else:
                heads.add("")
    if not heads:
        return set()
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            found |= {h + n.value for h in heads if h + n.value in modules}
    return found


def import_graph(root: Path = ROOT, pkg: Path = PKG) -> nx.DiGraph:
    """Module -> modules it imports, for every module of the package ``pkg`` (under ``root``)."""
    files = sorted(pkg.rglob("*.py"))
    modules = {_module_name(f, root): f for f in files}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for dyn in _dynamic(tree, modules):
            if dyn != name:
                g.add_edge(name, dyn)
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    up = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                # "from pkg import mod" runs pkg.mod (pkg itself is running or done: it is mod's
                # parent); "from pkg import name" runs pkg.
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            for t in targets:
                # "import a.b.c" runs the deepest module that is ours.
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
    return g


def _cycles() -> list[list[str]]:
    g = import_graph()
    return sorted(sorted(comp) for comp in nx.strongly_connected_components(g) if len(comp) > 1)


def test_graph_sees_imports_of_every_kind():
    g = import_graph()
    assert g.has_edge("pptl.cli", "pptl.errors")  # top-level "from pptl.errors import ..."
    assert g.has_edge("pptl.checks", "pptl.checks.structure")  # function-level "from pptl.checks import structure"
    assert g.has_edge("pptl.checks.structure", "pptl.checks.base")
    assert g.has_edge("pptl.deps", "pptl.op")  # under TYPE_CHECKING
    assert g.has_edge("pptl.schedules", "pptl.schedules.gpipe")  # import_module(f"pptl.schedules.{module}")


def test_a_cycle_at_any_level_is_seen(tmp_path: Path) -> None:
    """A type-only import and a function-level one back make a cycle the graph reports."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (tmp_path / "pkg/b.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "pkg/c.py").write_text("from importlib import import_module\nNAMES = ('d',)\n"
                                       "def load(m):\n    return import_module(f'pkg.{m}')\n")
    (tmp_path / "pkg/d.py").write_text("from pkg.c import NAMES\n")
    g = import_graph(tmp_path, tmp_path / "pkg")
    cycles = sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)
    assert cycles == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


#: The layers, bottom first: a module imports only from its own layer or those below.
CORE = ("pptl.errors", "pptl.messages", "pptl.op", "pptl.optable", "pptl.deps", "pptl.ir", "pptl.dag",
        "pptl.simulate")


def test_the_core_imports_nothing_above_it() -> None:
    g = import_graph()
    below = set(CORE) | {"pptl.config", "pptl.timeline", "pptl.intervals", "pptl.kinds", "pptl.contexts",
                         "pptl.schedules._moe_meta", "pptl.schedules._meta_fields", "pptl.schedules._pipeline_meta",
                         "pptl.schedules._weight_update_meta", "pptl.fileio", "pptl.events",
                         "pptl.formats.structured", "pptl.fields",  # config files are read by the config module
                         "pptl.formats._quote"}  # a bad value quoted in an error line, as every reader quotes it
    reach = {m for c in CORE for m in nx.descendants(g, c)} | set(CORE)
    assert reach <= below, sorted(reach - below)


def test_readers_do_not_check_or_simulate_and_render_does_not_plan() -> None:
    g = import_graph()
    for mod in g:
        if mod.startswith("pptl.formats"):
            bad = {t for t in g.successors(mod) if t.startswith("pptl.checks") or t == "pptl.simulate"}
            assert not bad, (mod, sorted(bad))
        if mod.startswith("pptl.render"):
            # It may read the family registry (a family's drawing style), not plan or simulate.
            bad = {t for t in g.successors(mod) if t in ("pptl.planning", "pptl.simulate") or t.startswith(
                "pptl.schedules.") and not t.split(".")[-1].startswith("_")}
            assert not bad, (mod, sorted(bad))


def test_no_import_cycles():
    cycles = _cycles()
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
