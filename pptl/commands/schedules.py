"""``pptl schedules``: the families of the registry, with their constraints and formulas."""
from __future__ import annotations

from pptl.commands._shared import OutputFmt, out, print_json

__all__ = ["schedules"]


def schedules(output: OutputFmt = "text") -> None:
    """List the schedule families with their constraints and textbook formulas."""
    from rich.console import Console
    from rich.table import Table

    from pptl.schedules import FAMILIES

    if output == "json":
        print_json([{"name": f.name, "summary": f.summary, "constraints": f.constraints, "bubble": f.bubble_formula,
                     "memory": f.memory_formula, "source": f.source, "aliases": list(f.aliases)}
                    for f in FAMILIES.values()])
        return
    # Narrow terminals wrap every cell (overflow="fold") instead of cutting names or formulas with "…";
    # a pipe gets the full width so scripts see whole lines.
    console = out if out.is_terminal else Console(file=out.file, width=240, highlight=False)
    table = Table(show_lines=True)
    longest = max(len(f.name) for f in FAMILIES.values())
    for col in ("name", "what", "constraints", "bubble (idle per rank)", "peak activation"):
        table.add_column(col, overflow="fold", min_width=longest if col == "name" else None)
    for f in FAMILIES.values():
        table.add_row(f.name, f.summary, f.constraints, f.bubble_formula, f.memory_formula)
    console.print(table)
