"""Renderers: a Timeline (planned or measured) drawn as a figure, a web page or a terminal view.

- :mod:`pptl.render.layout` computes what to draw once (rows, blocks, legend, title, grid);
- :mod:`pptl.render.mpl` (PNG/SVG/PDF), :mod:`pptl.render.html` (plotly) and
  :mod:`pptl.render.terminal` (rich) draw it; :mod:`pptl.render.styles` holds the shared colours
  and picks the style (``auto`` asks the family: default, dualpipe, moe, weight-update).

The renderers return objects; :func:`write_file` is the one place that encodes and writes them.
"""
from __future__ import annotations

from pathlib import Path

from pptl.errors import InputError
from pptl.timeline import Timeline

__all__ = ["OUTPUT_SUFFIXES", "load_timeline", "output_format", "parse_window", "write_file"]

OUTPUT_SUFFIXES = (".png", ".svg", ".pdf", ".html")


def output_format(path: str | Path) -> str:
    """"png", "svg", "pdf" or "html" from the file name; InputError for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix == ".htm":
        return "html"
    if suffix not in OUTPUT_SUFFIXES:
        raise InputError(f"{path}: cannot draw to '{suffix or 'no suffix'}', expected one of "
                         f"{', '.join(OUTPUT_SUFFIXES)}")
    return suffix[1:]


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"80:110"`` -> (80.0, 110.0); None passes through. InputError names the option and an example."""
    if text is None:
        return None
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        lo, hi = float(parts[0]), float(parts[1])
    except ValueError:
        lo = hi = float("nan")
    if not lo < hi:  # also false for NaN
        raise InputError(f"--time: got '{text}', expected START:END with START < END (e.g. --time 80:110)")
    return lo, hi


def load_timeline(path: str | Path) -> Timeline:
    """The timeline of a plan or timeline file; a config or bare schedule is planned on the fly."""
    from pptl.formats.loader import load_any

    loaded = load_any(path)
    if loaded.timeline is not None and loaded.timeline.events:
        return loaded.timeline
    if loaded.schedule is None:
        raise InputError(f"{path}: has no events to draw")
    from pptl.simulate import simulate

    return simulate(loaded.schedule).timeline()


def write_file(tl: Timeline, path: str | Path, *, style: str = "auto",
               window: tuple[float, float] | None = None, overwrite: bool = True) -> list[str]:
    """Draw ``tl`` into ``path`` (format from the suffix), atomically. Returns warnings to show.
    ``overwrite=False`` keeps an existing file (InputError instead).

    Raises:
        InputError: unknown suffix, unknown style, missing folder, or a timeline too big for HTML.
    """
    from pptl.fileio import atomic_write, check_writable
    from pptl.render.layout import build_layout

    fmt = output_format(path)
    check_writable(path)
    lay = build_layout(tl, style, window=window)
    warnings: list[str] = []
    if fmt == "html":
        from pptl.render.html import HtmlOptions, html_document, size_warning

        data: bytes | str = html_document(tl, HtmlOptions(style=style), layout=lay)
        w = size_warning(lay)
        if w:
            warnings.append(w)
    else:
        from pptl.render.mpl import FigureOptions, figure_from_layout, image_bytes

        data = image_bytes(figure_from_layout(lay, FigureOptions(style=style)), fmt)
    atomic_write(path, data, overwrite=overwrite)
    return warnings
