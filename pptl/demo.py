"""``pptl demo``: plan and draw every example config in ``fixtures/`` (PNG + HTML each).

Each figure is written as PNG, PDF and HTML. For ``moe-1f1b-overlap`` configs that pair F and B (the
seed figures 000-002) a second figure ``<name>_compare_warmup.*`` draws the same config planned as
plain interleaved 1F1B above the "VPP + 1 warmup" plan, so the extra forward shows by contrast.

Examples are the top-level ``*.yaml``, ``*.yml``, ``*.toml`` and ``*.json`` files of the fixtures
folder; ``fixtures/invalid`` and ``fixtures/bad`` hold inputs that must be refused and are skipped.
Each figure is drawn in its family's own style (``--style auto``), so the seed figures' configs
come out looking like the seeds. A fixture that fails is reported in its row and the others go on.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pptl.errors import InputError, PptlError

if TYPE_CHECKING:
    from pptl.render.options import RenderOptions

__all__ = ["DemoItem", "EXAMPLE_SUFFIXES", "FIGURE_SUFFIXES", "default_fixtures_dir", "example_files", "run_demo"]

EXAMPLE_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


@dataclass(frozen=True)
class DemoItem:
    fixture: str
    family: str = ""
    style: str = ""
    ops: int = 0
    makespan: float = 0.0
    bubble: float = 0.0
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def default_fixtures_dir() -> Path:
    """``fixtures/`` of the source tree pptl runs from (editable install), else ``./fixtures``."""
    here = Path(__file__).resolve().parent.parent / "fixtures"
    return here if here.is_dir() else Path("fixtures")


def example_files(folder: Path) -> list[Path]:
    """The example inputs directly in ``folder`` (not in its sub-folders), sorted by name."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder}: is a file; --fixtures takes the folder of example configs")
    if not folder.is_dir():
        raise InputError(f"{folder}: fixtures folder not found (pass --fixtures DIR)")
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in EXAMPLE_SUFFIXES)
    if not found:
        raise InputError(f"{folder}: holds no example ({', '.join(sorted(EXAMPLE_SUFFIXES))}) to draw")
    return found


FIGURE_SUFFIXES = (".png", ".pdf", ".html")


def run_demo(out: Path, *, fixtures: Path | None = None, style: str = "auto",
             progress: Callable[[str], None] | None = None, options: "RenderOptions | None" = None,
             plotlyjs: str = "directory") -> list[DemoItem]:
    """Draw every example of ``fixtures`` into ``out`` as ``<name>.png``, ``.pdf`` and ``.html``.

    ``out`` itself is created when missing, its parent never (as ``-o`` anywhere in pptl: a missing
    folder in the path is a typo more often than a wish). The pages share one plotly.min.js in ``out``
    (``plotlyjs="inline"``: each page carries its own)."""
    from dataclasses import replace

    from pptl.planning import load_timeline, plain_counterpart
    from pptl.render import write_file
    from pptl.render.options import RenderOptions
    from pptl.render.styles import resolve_style

    opts = replace(options, style=style) if options is not None else RenderOptions(style=style)

    folder = fixtures if fixtures is not None else default_fixtures_dir()
    files = example_files(folder)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{out}: folder {parent} does not exist")
    try:
        out.mkdir(exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot make the folder: {e.strerror or e}") from None
    items = []
    for path in files:
        if progress is not None:
            progress(path.name)
        try:
            tl = load_timeline(path)
            written, warnings = [], []
            for suffix in FIGURE_SUFFIXES:
                target = out / f"{path.stem}{suffix}"
                warnings += write_file(tl, target, options=opts, plotlyjs=plotlyjs)
                written.append(str(target))
            if resolve_style("auto", tl).compares_warmup(tl):  # the family's style decides, not the drawing one
                plain = plain_counterpart(path)
                for suffix in (".png", ".pdf"):
                    target = out / f"{path.stem}_compare_warmup{suffix}"
                    # in the family's style too: the comparison is that style's figure, whatever draws the rest
                    warnings += write_file(tl, target, options=replace(opts, style="auto"), compare=plain)
                    written.append(str(target))
            items.append(DemoItem(path.name, tl.meta.family, resolve_style(style, tl).name, len(tl.events),
                                  tl.makespan, tl.bubble_fraction(), tuple(written), tuple(warnings)))
        except PptlError as e:
            items.append(DemoItem(path.name, error=str(e)))
    return items
