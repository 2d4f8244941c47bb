"""Moved to :mod:`pptl.render.compare` (the figures of ``pptl compare`` live with the other renderers);
this name stays importable for code written against it."""
from pptl.render.compare import overlay_bytes, overlay_figure, overlay_html

__all__ = ["overlay_figure", "overlay_bytes", "overlay_html"]
