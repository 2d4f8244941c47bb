"""What the commands share: the consoles, the options declared once, the value types with pptl's
wording, and small helpers for printing and for checking output paths.

Vocabulary: an *option* has a name (``--pp``); an *argument* is positional (``FILES...``); a *flag*
is an option without a value (``--verify``). Every value a user types is checked by one of the types
below, whose complaint reads as every other pptl error does: ``--pp: got 'x', expected an integer``.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator, Optional

import typer

# typer names Abort and Exit itself in every version; 0.28 moved them out of its copy of click, so they are
# not taken from there (a failed import here would fall back to the click package, whose errors typer's
# parser neither raises nor catches: an unknown option became a traceback)
from typer import Abort, Exit

try:  # typer 0.2x carries its own copy of click; older ones use the click package
    from typer._click.exceptions import BadParameter, ClickException, MissingParameter, UsageError
    from typer._click.types import ParamType
    from typer._click.utils import PacifyFlushWrapper
except ImportError:  # pragma: no cover - typer < 0.2x
    from click import BadParameter, ClickException, MissingParameter, ParamType, UsageError  # type: ignore
    from click.utils import PacifyFlushWrapper  # type: ignore

from pptl.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["out", "err", "say", "Abort", "BadParameter", "ClickException", "Exit", "MissingParameter",
           "PacifyFlushWrapper", "UsageError", "Whole", "Number", "Choice", "OutputFmt", "OutFile", "MemoryLimit",
           "Microbatches", "Placement", "PlotlyJs", "one_line", "print_json", "print_lines", "typed_options",
           "figure_format", "progress", "without_cycle_scans", "wide", "IMAGES", "other_kind", "not_a_config"]

class _LazyConsole:
    """A rich ``Console`` made on first use: a command that prints only plain lines (``say``)
    does not import rich's console (about 20 ms of every start-up)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def _made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    @property
    def is_terminal(self) -> bool:
        # what rich answers, without making the console when none of its overrides is set
        if self._console is None and not _RICH_TTY_OVERRIDES.intersection(os.environ):
            return (sys.stderr if self._options.get("stderr") else sys.stdout).isatty()
        return self._made().is_terminal


_RICH_TTY_OVERRIDES = frozenset({"FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES"})


out: Console = _LazyConsole(highlight=False, soft_wrap=True)  # type: ignore[assignment]
err: Console = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)  # type: ignore[assignment]


def say(line: str, *, stderr: bool = False) -> None:
    """One plain line on stdout (or stderr), written as is: no markup, no emoji codes, no wrapping."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(line + "\n")
    stream.flush()  # as rich's console does: a line a watcher waits for (serve's address) is not held back

_WHOLE = re.compile(r"[+-]?\d+(?:_\d+)*(\.0*)?")  # underscores only where int() takes them: 1_000, not 1__2, _4 or 4_


def _shown(value: Any) -> str:
    """A typed value as messages quote it: numbers bare, text in quotes (as the config errors do)."""
    text = str(value).strip()
    try:
        float(text)
    except ValueError:
        return repr(value)
    return text


class Whole(ParamType):
    """An integer (``4``, ``4_000``, ``4.0``), at least ``min`` and at most ``max`` when given."""

    name = "integer"

    def __init__(self, min: Optional[int] = None, max: Optional[int] = None) -> None:
        self.min, self.max = min, max

    def get_metavar(self, param: Any, ctx: Any = None) -> str:
        return "INT"

    def _expected(self) -> str:
        if self.min is not None and self.max is not None:
            return f"an integer from {self.min} to {self.max}"
        if self.min is not None:
            return f"an integer >= {self.min}"
        return f"an integer <= {self.max}" if self.max is not None else "an integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        expected = self._expected()
        if isinstance(value, int):
            number = value
        else:
            text = str(value).strip()
            if not _WHOLE.fullmatch(text):
                self.fail(f"got {_shown(value)}, expected {expected}", param, ctx)
            number = int(text.split(".")[0])
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(f"got {_shown(value)}, expected {expected}", param, ctx)
        return number


class Number(ParamType):
    """A finite number, above ``above`` or at least ``min``, and at most ``max``, when given."""

    name = "number"

    def __init__(self, min: Optional[float] = None, above: Optional[float] = None,
                 max: Optional[float] = None) -> None:
        self.min, self.above, self.max = min, above, max

    def get_metavar(self, param: Any, ctx: Any = None) -> str:
        return "NUMBER"

    def _expected(self) -> str:
        if self.min is not None and self.max is not None:
            return f"a number from {self.min:g} to {self.max:g}"
        return ("a number" + (f" >= {self.min:g}" if self.min is not None else "")
                + (f" > {self.above:g}" if self.above is not None else "")
                + (f" <= {self.max:g}" if self.max is not None else ""))

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        expected = self._expected()
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"got {_shown(value)}, expected {expected}", param, ctx)
        # `not x >= min` rather than `x < min`: NaN fails every comparison and must be refused too
        if (not math.isfinite(number) or (self.min is not None and not number >= self.min)
                or (self.above is not None and not number > self.above)
                or (self.max is not None and not number <= self.max)):
            self.fail(f"got {_shown(value)}, expected {expected}", param, ctx)
        return number


class Choice(ParamType):
    """One of a few words."""

    name = "choice"

    def __init__(self, *choices: str) -> None:
        self.choices = choices

    def get_metavar(self, param: Any, ctx: Any = None) -> str:
        return "|".join(self.choices)

    def shell_complete(self, ctx: Any, param: Any, incomplete: str) -> list[Any]:
        try:
            from typer._click.shell_completion import CompletionItem
        except ImportError:  # pragma: no cover - typer < 0.2x
            from click.shell_completion import CompletionItem  # type: ignore[assignment]
        return [CompletionItem(c) for c in self.choices if c.startswith(incomplete)]

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        if value not in self.choices:
            self.fail(f"got {_shown(value)}, expected one of {', '.join(self.choices)}", param, ctx)
        return str(value)


# ----------------------------------------------------------------------------------------------
# Options declared once

OutputFmt = Annotated[str, typer.Option("--output", click_type=Choice("text", "json"), help="text or json.")]
OutFile = Annotated[Optional[Path], typer.Option("-o", "--out", help="Write the result to this file (replaced if "
                                                 "it exists).", show_default=False)]
MemoryLimit = Annotated[Optional[float], typer.Option("--memory-limit", click_type=Number(min=0),
                                                      help="Peak activation per rank allowed (>= 0).")]
Microbatches = Annotated[Optional[int], typer.Option("--microbatches", "-m", click_type=Whole(min=1),
                                                     help="Micro-batches per step.")]
Placement = Annotated[Optional[str], typer.Option("--placement", click_type=Choice("loop", "v"),
                                                  help="torch CSV: stage placement, loop or v (default: inferred "
                                                  "from the file).")]
PlotlyJs = Annotated[str, typer.Option("--plotlyjs", click_type=Choice("inline", "directory"),
                                       help="HTML: inline (plotly.js in the page: one file that opens offline) or "
                                       "directory (plotly.min.js written once beside it, loaded by a relative path).")]


def typed_options(ctx: Any, *names: str) -> list[str]:
    """Which of the parameters ``names`` the command line gave, as their options read (``--dpi``).

    For refusing options that would change nothing: a default can't tell ``--dpi 200`` from no ``--dpi``.
    """
    try:
        from typer._click.core import ParameterSource
    except ImportError:  # pragma: no cover - typer < 0.2x
        from click.core import ParameterSource  # type: ignore[assignment]
    return ["/".join(p.opts[:1] + p.secondary_opts) for p in ctx.command.params  # --notes/--no-notes: either
            if p.name in names and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]


# ----------------------------------------------------------------------------------------------
# Printing

#: What str.splitlines() (and a terminal) breaks a line at: an error must stay one line even when it
#: quotes a value from the input that holds one.
_BREAKS: dict[str, str | int | None] = {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with its line breaks written as escapes (``\\n``)."""
    return text.translate(str.maketrans(_BREAKS)) if any(c in text for c in _BREAKS) else text


def print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout (rich's highlighter takes seconds on large metrics)."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def print_lines(lines: Any) -> None:
    """Each line: a string as is (:func:`say`), anything else (a rich table) through rich."""
    for line in lines:
        if isinstance(line, str):
            say(line)
        else:
            out.print(line, markup=False)


def wide() -> Console:
    """stdout for a table: the terminal's width, or 200 columns in a pipe (whole lines for scripts)."""
    from rich.console import Console

    return out if out.is_terminal else Console(file=out.file, width=200, highlight=False)


class _Quiet:
    def update(self, what: str) -> None:
        pass


@contextlib.contextmanager
def progress(what: str, *, json_output: bool = False) -> Iterator[Any]:
    """A spinner on stderr with ``what`` (``.update(text)`` changes it) while long work runs; nothing
    when stderr is not a terminal or the output is JSON, so pipes and scripts see only results."""
    if json_output or not err.is_terminal:
        yield _Quiet()
        return
    with err.status(what) as status:
        yield status


@contextlib.contextmanager
def without_cycle_scans() -> Iterator[None]:
    """The cycle collector off while one plan or check runs (then back as it was).

    A schedule, its checks and its simulation are lists, tuples and frozen records that refcounting
    frees; the collector found nothing to collect in them, yet its scans of the young objects were
    10-20% of `pptl plan -o` and `pptl check` on a 400k-op plan (2026-11-26, docs/benchmarks.md).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


IMAGES = ("png", "svg", "pdf")


def figure_format(path: Optional[Path], allowed: tuple[str, ...] = IMAGES, *, name: str = "") -> str | None:
    """The drawing format PATH's suffix names (None without PATH), after checking PATH can be written;
    ``name`` prefixes the message with the option (``--figure``) where ``-o`` is not the one."""
    if path is None:
        return None
    from pptl.fileio import check_writable

    check_writable(path)  # a folder or a missing parent is named before the suffix
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in allowed:
        expected = ", ".join(f".{f}" for f in allowed[:-1]) + f" or .{allowed[-1]}"
        got = f"'.{fmt}'" if fmt else "a name with no suffix"
        raise InputError(f"{f'{name} ' if name else ''}{path}: cannot draw to {got}, expected {expected}")
    return fmt


def other_kind(path: Path, error: InputError) -> tuple[str, Any] | None:
    """When ``error`` says ``path`` has an unknown field or file type, what pptl reads it as instead.

    A plan given to ``pptl tune``, a measured timeline or a torch CSV given to ``pptl plan``: the config
    reader's "unknown field 'events'" names a field the user never wrote. Returns (words, loaded): e.g.
    ("a measured timeline", Loaded), ("a pptl tune config", None); None when the file is none of
    those (a config with a misspelt key keeps its own message). Runs on the error path only.
    """
    if not str(error).startswith(f"{path}: unknown f"):  # "unknown field 'x'", "unknown file type '.csv'"
        return None
    from pptl.errors import PptlError
    from pptl.formats.loader import load_any

    try:
        loaded = load_any(path)
    except PptlError:
        from pptl.formats.structured import read_structured

        try:
            data = read_structured(path)
        except PptlError:
            return None
        if isinstance(data, dict) and "model" in data and "schedule" not in data:
            return "a pptl tune config (a model description)", None
        if isinstance(data, dict) and "traceEvents" in data:  # a profiler's would have loaded: an export's
            return "a Chrome trace for Perfetto (what pptl export writes)", None
        return None
    if loaded.kind == "plan":
        return "a plan", loaded
    if loaded.kind == "config":
        return "a schedule config", loaded
    if loaded.kind == "torch-csv":
        return "a torch CSV schedule", loaded
    if loaded.kind == "profiler":
        return "a profiler trace (a measured timeline)", loaded
    if loaded.timeline_source() == "measured":
        return "a measured timeline", loaded
    if loaded.kind == "timeline":
        return "a timeline", loaded
    return f"a {loaded.kind} file", loaded


def not_a_config(path: Path, error: InputError, hint: Callable[[str], str]) -> InputError:
    """``error``, or for a file that is not a config or plan (what :func:`other_kind` reads it as: a
    measured timeline, a torch CSV, a tune model file) one line that says what it is and, by
    ``hint(what)``, which command or option takes it."""
    found = other_kind(path, error)
    if found is None or found[0] in ("a plan", "a schedule config"):
        return error
    return InputError(f"{path}: is {found[0]}, not a config or plan; {hint(found[0])}")
