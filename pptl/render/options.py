"""Options every figure takes (paper-ready output), parsed once for matplotlib, plotly and the CLI."""
from __future__ import annotations

from dataclasses import dataclass

from pptl.errors import InputError

#: Figure resolution (dots per inch) and font size (points) a figure takes; the CLI's option types use them too.
DPI_RANGE = (30, 1200)
FONT_SIZE_RANGE = (4, 30)

__all__ = ["RenderOptions", "LEGEND_PLACES", "COLUMN_IN", "MIN_PRINT_PT", "DEFAULT_FONT_PT", "parse_size",
           "resolve_title"]

LEGEND_PLACES = ("auto", "bottom", "top", "right", "none")

#: Width of a paper column the default figures are drawn for, inches: a figure is drawn at the size it
#: prints, so a font size in points is the size the reader sees.
COLUMN_IN = 7.0
#: No text of a default figure is smaller than this (points at COLUMN_IN): labels that would need less
#: room are left out of their block instead (the HTML hover, or a wider --size, shows them).
MIN_PRINT_PT = 6.0
#: The figures' body text (row names, legend) when --font-size is not given.
DEFAULT_FONT_PT = 7.0


@dataclass(frozen=True)
class RenderOptions:
    style: str = "auto"
    dpi: int = 200
    """Raster resolution (PNG); vector formats keep text as text whatever it is."""
    size: tuple[float, float] | None = None
    """Figure size in inches (width, height); None: :data:`COLUMN_IN` wide, as tall as the content."""
    font_size: float | None = None
    """Points; None: :data:`DEFAULT_FONT_PT` (no text under :data:`MIN_PRINT_PT` at a 7-inch column)."""
    title: str = ""
    """"" (the style's default: none for seed styles), "auto" (config summary), "none", or the text."""
    notes: bool | None = None
    """Per-row notes (bubble %); None: the style's default (off for seed styles)."""
    legend: str = "auto"
    """One of :data:`LEGEND_PLACES`."""
    device: int | None = None
    """MoE figure: the device whose steps the three sections show (default: the last)."""
    split: str = "side"
    """DualPipe's overlapped F&B block: "side" (halves side by side, the seed) or "stack"."""
    reverse_ids: bool = False
    """DualPipe: number reverse-direction blocks too (the seed omits them)."""

    def __post_init__(self) -> None:
        if not DPI_RANGE[0] <= self.dpi <= DPI_RANGE[1]:
            raise InputError(f"--dpi: got {self.dpi}, expected {DPI_RANGE[0]}..{DPI_RANGE[1]}")
        if self.font_size is not None and not FONT_SIZE_RANGE[0] <= self.font_size <= FONT_SIZE_RANGE[1]:
            raise InputError(f"--font-size: got {self.font_size:g}, expected {FONT_SIZE_RANGE[0]:g}..{FONT_SIZE_RANGE[1]:g} points")
        if self.legend not in LEGEND_PLACES:
            raise InputError(f"--legend: got '{self.legend}', expected one of {', '.join(LEGEND_PLACES)}")
        if self.split not in ("side", "stack"):
            raise InputError(f"--split: got '{self.split}', expected side or stack")
        if self.device is not None and self.device < 0:
            raise InputError(f"--device: got {self.device}, expected a rank >= 0")


def parse_size(text: str | None) -> tuple[float, float] | None:
    """``"7,4.5"`` -> (7.0, 4.5) inches; None passes through. InputError names the option."""
    if text is None:
        return None
    parts = text.replace("x", ",").split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        w, h = float(parts[0]), float(parts[1])
    except ValueError:
        w = h = float("nan")
    if not (1.0 <= w <= 60.0 and 1.0 <= h <= 60.0):  # also false for NaN
        raise InputError(f"--size: got '{text}', expected W,H in inches between 1 and 60 (e.g. --size 7,4.5)")
    return w, h


def resolve_title(option: str, seed_style: bool, auto_text: str) -> str:
    """The title to draw: none by default for seed styles (the seed has none), else the summary."""
    key = option.strip()
    if key.lower() == "none" or (not key and seed_style):
        return ""
    if not key or key.lower() == "auto":
        return auto_text
    return key
