"""pptl's modules import each other without cycles.

Every ``import`` and ``from ... import`` statement of every module under pptl/ is read from its
AST, relative imports resolved, including imports inside functions: a function-level import
hides a cycle from the interpreter's start-up but not from a reader, and the day it moves to the
top the cycle breaks the import. Imports under ``if TYPE_CHECKING:`` are left out: they never run
and exist only for annotations.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "pptl"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    walk(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)

    walk(tree)
    return out


def import_graph() -> nx.DiGraph:
    """Module -> modules it imports, for every module of the pptl package."""
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(f): f for f in files}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
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
    assert not g.has_edge("pptl.deps", "pptl.ir")  # under TYPE_CHECKING only


def test_no_import_cycles():
    cycles = _cycles()
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
