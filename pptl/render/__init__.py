"""Renderers: a Timeline (planned or measured) drawn as a figure, a web page or a terminal view.

- :mod:`pptl.render.layout` computes what to draw once (rows, blocks, legend, title, grid);
- :mod:`pptl.render.mpl` (PNG/SVG/PDF), :mod:`pptl.render.html` (plotly) and
  :mod:`pptl.render.terminal` (rich) draw it; :mod:`pptl.render.styles` holds the shared colours
  and picks the style (``auto`` asks the family: default, dualpipe, moe, weight-update).

The renderers return objects; :func:`write_file` is the one place that encodes and writes them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from pptl.errors import InputError
from pptl.timeline import Timeline

if TYPE_CHECKING:
    from pptl.render.options import RenderOptions

__all__ = ["OUTPUT_SUFFIXES", "encode", "output_format", "parse_window",
           "static_figure",
           "write_file"]

OUTPUT_SUFFIXES = (".png", ".svg", ".pdf", ".html")


def output_format(path: str | Path) -> str:
    """"png", "svg", "pdf" or "html" from the file name; InputError for anything else (a folder too)."""
    if Path(path).is_dir():  # -o out/: its suffix, or its lack of one, is not what is wrong
        raise InputError(f"{path}: is a directory, expected a file name")
    suffix = Path(path).suffix.lower()
    if suffix == ".htm":
        return "html"
    if suffix not in OUTPUT_SUFFIXES:
        got = f"'{suffix}'" if suffix else "a name with no suffix"  # as figure_format words it
        raise InputError(f"{path}: cannot draw to {got}, expected one of {', '.join(OUTPUT_SUFFIXES)}")
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
    if not (math.isfinite(lo) and math.isfinite(hi)):  # an endless window draws every op too thin to see
        raise InputError(f"--time: got '{text}', expected a finite START and END (e.g. --time 80:110)")
    return lo, hi


def write_file(tl: Timeline, path: str | Path, *, style: str = "auto",
               window: tuple[float, float] | None = None, overwrite: bool = True,
               options: "RenderOptions | None" = None, compare: Timeline | None = None,
               plotlyjs: str = "inline") -> list[str]:
    """Draw ``tl`` into ``path`` (format from the suffix), atomically. Returns warnings to show.
    ``overwrite=False`` keeps an existing file (InputError instead). ``compare`` (MoE only) is the
    plain interleaved plan of the same config: the figure becomes the +1 warmup comparison.
    ``plotlyjs="directory"`` (HTML) writes plotly.js once beside the page instead of into it.

    Raises:
        InputError: unknown suffix, unknown style, missing folder, bad --device, or a timeline too
            big for HTML.
    """
    from pptl.fileio import atomic_write, check_writable

    fmt = output_format(path)
    check_writable(path)
    data, warnings = encode(tl, fmt, style=style, window=window, options=options, compare=compare,
                            plotlyjs=plotlyjs)
    if fmt == "html" and plotlyjs == "directory":
        from pptl.render.html import write_plotlyjs

        write_plotlyjs(Path(path).parent)
    atomic_write(path, data, overwrite=overwrite)
    return warnings


def encode(tl: Timeline, fmt: str, *, style: str = "auto", window: tuple[float, float] | None = None,
           options: "RenderOptions | None" = None, compare: Timeline | None = None,
           plotlyjs: str = "inline") -> tuple[bytes | str, list[str]]:
    """The file :func:`write_file` writes, in memory: (data, warnings) for ``fmt`` (png, svg, pdf, html).
    With ``plotlyjs="directory"`` the HTML refers to plotly.min.js beside it (the caller writes that file).

    Raises:
        InputError: as :func:`write_file`.
    """
    from pptl.render.layout import build_layout
    from pptl.render.options import RenderOptions

    opts = options if options is not None else RenderOptions(style=style)
    style = opts.style if options is not None else style
    lay = build_layout(tl, style, window=window, split=opts.split, reverse_ids=opts.reverse_ids)
    warnings: list[str] = []
    seed_fig = _moe_figures(tl, lay, opts, compare) if window is None else None
    if fmt == "html":
        from pptl.render.html import HtmlOptions, html_document, size_warning

        data: bytes | str = html_document(tl, HtmlOptions(style=style, plotlyjs=plotlyjs), layout=lay, render=opts,
                                          moe=seed_fig)
        w = size_warning(lay)
        if w:
            warnings.append(w)
    else:
        from pptl.render.mpl import image_bytes

        data = image_bytes(_mpl_figure(tl, lay, opts, seed_fig), fmt)
    return data, warnings


def static_figure(tl: Timeline, options: "RenderOptions | None" = None, *,
                  window: tuple[float, float] | None = None, compare: Timeline | None = None):
    """The matplotlib Figure that :func:`write_file` encodes as PNG, SVG or PDF (nothing is written)."""
    from pptl.render.layout import build_layout
    from pptl.render.options import RenderOptions

    opts = options if options is not None else RenderOptions()
    lay = build_layout(tl, opts.style, window=window, split=opts.split, reverse_ids=opts.reverse_ids)
    return _mpl_figure(tl, lay, opts, _moe_figures(tl, lay, opts, compare) if window is None else None)


def _mpl_figure(tl: Timeline, lay, opts, seed_fig):
    from pptl.render.mpl import figure_from_layout, figure_options

    if seed_fig is None:
        return figure_from_layout(lay, figure_options(opts, lay))
    from pptl.render.moe_mpl import compare_mpl_figure, moe_mpl_figure

    draw = _moe_draw(tl, lay, opts)
    return compare_mpl_figure(seed_fig[1], seed_fig[0], draw) if seed_fig[1] is not None else \
        moe_mpl_figure(seed_fig[0], draw)


def _moe_figures(tl: Timeline, lay, opts, compare: Timeline | None):
    """(the seed figure's data, the plain plan's or None) for the MoE style, else None."""
    if lay.style.name != "moe":
        if compare is not None:
            raise InputError("--compare-warmup: draws moe-1f1b-overlap plans only (use --style moe)")
        return None
    from pptl.render.moe_figure import moe_figure

    try:
        main = moe_figure(tl, opts.device)
        plain = moe_figure(compare, None) if compare is not None else None
    except ValueError as e:
        raise InputError(str(e)) from None
    if main is None:
        if opts.device is not None or compare is not None:
            raise InputError("--device/--compare-warmup: the timeline has no MoE forward/backward sub-ops to draw")
        return None
    return main, plain


def _moe_draw(tl: Timeline, lay, opts):
    from pptl.render.moe_mpl import MoEDraw
    from pptl.render.options import COLUMN_IN, DEFAULT_FONT_PT, resolve_title

    w, h = opts.size if opts.size is not None else (COLUMN_IN, None)
    legend = "bottom" if opts.legend in ("auto", "right") else opts.legend
    return MoEDraw(width=w, height=h, font=opts.font_size or DEFAULT_FONT_PT, dpi=opts.dpi,
                   title=resolve_title(opts.title, True, lay.title), legend=legend)
