"""The command line: a typer app whose commands parse, call the library and print.

Each command is a function in ``pptl/commands/<name>.py`` that imports what it uses inside its body
(``pptl --help`` loads none of the library); adding one is that module plus one line in
:data:`COMMANDS`. Results go to stdout, progress and errors to stderr.

:class:`_Boundary` is the one place where an error becomes a line on stderr and an exit code: a
usage error (``error: --pp: got 'x', expected an integer >= 1``; an unknown option or command adds
``(see 'pptl plan --help')``) exits 2, a
:class:`pptl.errors.PptlError` (``error: ...``) its own code (2 bad input, 1 invalid schedule or
failed run), Ctrl+C 130, a reader of stdout that left early (``| head``) 141, quietly. No traceback
reaches the user.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import gc
import importlib
import inspect
import os
import select
import sys
import types
from typing import Any, Iterator, Optional, Sequence

import typer

from pptl import __version__
from pptl.commands._shared import (
    Abort,
    BadParameter,
    ClickException,
    Exit,
    MissingParameter,
    PacifyFlushWrapper,
    UsageError,
    one_line,
    say,
)
from pptl.errors import PptlError
from pptl.fileio import read_error

__all__ = ["app", "main", "COMMANDS"]

#: Command name -> "module:function" of its function, in the order ``pptl --help`` lists them.
COMMANDS = {
    "plan": "pptl.commands.plan:plan",
    "check": "pptl.commands.check:check",
    "render": "pptl.commands.render:render",
    "export": "pptl.commands.export:export",
    "schedules": "pptl.commands.schedules:schedules",
    "demo": "pptl.commands.render:demo",
    "run": "pptl.commands.run:run",
    "compare": "pptl.commands.compare:compare",
    "explain": "pptl.commands.explain:explain",
    "diagnose": "pptl.commands.diagnose:diagnose",
    "tune": "pptl.commands.tune:tune",
    "whatif": "pptl.commands.whatif:whatif",
    "serve": "pptl.commands.serve:serve",
}


def _usage_line(e: Any) -> str:
    """A click usage error in pptl's words: the option first, then what was got and expected."""
    ctx = getattr(e, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    if isinstance(e, BadParameter) and not isinstance(e, MissingParameter) and e.param is not None:
        opts = getattr(e.param, "opts", None) or [e.param.name or "?"]
        name = opts[0] if opts[0].startswith("-") else opts[0].upper()
        return f"{name}: {e.message}"  # what was got and what is expected: no need for --help
    return f"{e.format_message().rstrip('.')}{where}"


#: The exit code when stdout's reader leaves before pptl is done (``pptl check a.json | head -1``): 128 + SIGPIPE,
#: what a shell tool stopped by that signal reports. click's 1 would read as "invalid schedule" under pipefail.
READER_GONE = 128 + 13


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it: poll() flags an error on such a write end."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # 0: only the events always reported (error, hang-up)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or no file behind stdout (a test's)
        return False


def _stdout_is_devnull() -> bool:
    """Whether stdout is /dev/null: where rich points it when its reader has gone."""
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def _reader_may_leave() -> Iterator[None]:
    """A closed stdout ends the command with :data:`READER_GONE` and no word: the reader chose to stop.

    A broken pipe elsewhere (a rank's, a socket's) is a real failure and goes on as raised.
    """
    was_devnull = _stdout_is_devnull()
    try:
        yield
    except OSError as e:  # a plain write (say, print_json)
        if e.errno != errno.EPIPE or not _stdout_reader_gone():
            raise
        # what is still buffered cannot be written either: later flushes (the exit's) must not raise
        sys.stdout = PacifyFlushWrapper(sys.stdout)
        raise Exit(READER_GONE) from None
    except SystemExit as e:
        # rich's consoles (tables, drawings, help) meet a closed stdout by pointing it at /dev/null and
        # exiting 1 (Console.on_broken_pipe); pptl raises no SystemExit of its own
        if e.code != 1 or was_devnull or not _stdout_is_devnull():
            raise
        raise Exit(READER_GONE) from None


def _ignore_unusable_columns() -> None:
    """Forget a COLUMNS that is not a positive width.

    rich takes ``COLUMNS=0`` (what ``tput cols`` gives some terminal-less CI shells) as a width of 0 and
    prints every help page, table and drawing as nothing, with exit 0; without it rich measures the
    terminal, or uses 80 columns.
    """
    columns = os.environ.get("COLUMNS")
    if columns is not None and not (columns.strip().isdigit() and int(columns) > 0):
        del os.environ["COLUMNS"]


class _Boundary(typer.core.TyperGroup):
    """The app's click group, with pptl's error contract around every command line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # typer suggests a close name from these keys ("Did you mean 'plan'?"); the commands are made on use
        self.commands = dict.fromkeys(COMMANDS)  # type: ignore[assignment]

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        argv = sys.argv[1:] if args is None else list(args)
        _ignore_unusable_columns()
        if not argv or any(a in _CONTEXT["help_option_names"] for a in argv):
            _help_without_unused_imports()
        code = self._run(argv, prog_name, complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, args: Optional[Sequence[str]], prog_name: Optional[str], complete_var: Optional[str],
             **extra: Any) -> int:
        try:
            rv = super().main(args, prog_name or "pptl", complete_var, standalone_mode=False, **extra)
            return rv if isinstance(rv, int) else 0
        except UsageError as e:
            if e.format_message():  # a bare `pptl` printed the help and has nothing to add
                say(f"error: {one_line(_usage_line(e))}", stderr=True)
            return 2
        except ClickException as e:
            say(f"error: {one_line(e.format_message())}", stderr=True)
            return e.exit_code
        except PptlError as e:
            say(f"error: {one_line(str(e))}", stderr=True)
            return e.exit_code
        except OSError as e:
            # A path the system refuses before any reader can word it (a name too long for the file
            # system, met by a glob's or a folder's test): one line about the path, not a traceback.
            if e.filename is None:
                raise
            say(f"error: {one_line(str(read_error(e.filename, e)))}", stderr=True)
            return 2
        except (KeyboardInterrupt, Abort):  # before a command started (a command's own is handled in invoke)
            say("interrupted", stderr=True)
            return 130

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _reader_may_leave():  # `pptl --help | head -1`: the help is printed while parsing
            return super().make_context(*args, **kwargs)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        if name not in COMMANDS:
            return None
        return _summary(name) if getattr(self, "_listing", False) else _command(name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # The command list needs each command's name and docstring only, not its options.
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: Any) -> Any:
        # Plans reach 400k ops; the default collector thresholds rescan that heap thousands of times.
        gc.set_threshold(200_000, 20, 100)
        try:
            with _reader_may_leave():
                return super().invoke(ctx)
        except KeyboardInterrupt:  # click makes it exit 130 with no word; say what happened
            say("interrupted", stderr=True)
            raise


def _help_without_unused_imports() -> None:
    """Load typer's help formatter without the two modules it imports for features pptl leaves off.

    ``typer.rich_utils`` imports ``rich.markdown`` (markdown-it) for the "markdown" markup mode and
    ``rich.traceback`` (pygments) for pretty exceptions; pptl uses the "rich" mode and plain errors.
    The two were about 70 ms of the 120 ms that ``pptl --help`` took on a 2-core machine
    (docs/benchmarks.md). Stand-ins take their place while the formatter loads, then leave: a later
    import gets the real modules, and a stand-in class, if ever used, loads its real one.
    """
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {}
    for name, cls in (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            setattr(module, cls, _deferred(name, cls))
            stand_ins[name] = sys.modules[name] = module
    try:
        importlib.import_module("typer.rich_utils")
    except ImportError:  # pragma: no cover - a typer without it formats help its own way
        pass
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class _Deferred(type):
    """The class of a stand-in: attribute lookups go to the real class."""

    def __getattr__(cls, attr: str) -> Any:
        return getattr(cls._real(), attr)


def _deferred(module: str, name: str) -> type:
    def real() -> Any:
        return getattr(importlib.import_module(module), name)

    return _Deferred(name, (), {"_real": staticmethod(real), "__new__": lambda cls, *a, **k: real()(*a, **k)})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pptl {__version__}")
        raise typer.Exit()


_CONTEXT = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(cls=_Boundary, name="pptl", no_args_is_help=True, rich_markup_mode="rich",
                  pretty_exceptions_enable=False, context_settings=_CONTEXT,
                  help="Plan, check, draw and run pipeline-parallel training schedules.")


@app.callback()
def _top(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """Plan, check, draw and run pipeline-parallel training schedules."""


def _function(name: str) -> Any:
    module, function = COMMANDS[name].split(":")
    return getattr(importlib.import_module(module), function)


def _summary(name: str) -> Any:
    """What ``pptl --help`` lists for a command: its name and docstring (no options read)."""
    return typer.core.TyperCommand(name, help=inspect.cleandoc(_function(name).__doc__ or ""))


@functools.lru_cache(maxsize=None)
def _command(name: str) -> Any:
    """The click command of ``name``, made when the command line names it: reading a command's
    signature costs typer a few ms, which a run of another command need not pay."""
    one = typer.Typer(add_completion=False, rich_markup_mode="rich", pretty_exceptions_enable=False,
                      context_settings=_CONTEXT)
    one.command(name)(_function(name))
    command = typer.main.get_command(one)
    command.name = name
    return command


def main() -> None:
    """Console entry point (``pptl``, ``python -m pptl``)."""
    if "OPENBLAS_NUM_THREADS" not in os.environ and sys.argv[1:2] != ["run"]:
        # pptl's arrays never multiply matrices, yet numpy's import starts OpenBLAS's thread pool:
        # about 70 ms of CPU per command on a 2-core machine (`pptl run` keeps torch's default).
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    code = typer.main.get_command(app).main(sys.argv[1:], prog_name="pptl", standalone_mode=False)
    # Skip the interpreter's teardown: freeing a 400k-op plan object by object takes ~3 s.
    # Exit handlers (temporary folders, multiprocessing) still run first.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
