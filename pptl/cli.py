"""The command line: a typer app whose commands parse, call the library and print.

Each command is a function in ``pptl/commands/<name>.py`` that imports what it uses inside its body
(``pptl --help`` loads none of the library); adding one is that module plus one line in
:data:`COMMANDS`. Results go to stdout, progress and errors to stderr.

:class:`_Boundary` is the one place where an error becomes a line on stderr and an exit code: a
usage error (``error: --pp: got 'x', expected an integer (see 'pptl plan --help')``) exits 2, a
:class:`pptl.errors.PptlError` (``error: ...``) its own code (2 bad input, 1 invalid schedule or
failed run), Ctrl+C 130. No traceback reaches the user.
"""
from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any, Optional, Sequence

import typer

from pptl import __version__
from pptl.commands._shared import Abort, BadParameter, ClickException, MissingParameter, UsageError, err, one_line
from pptl.errors import PptlError

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


class _Boundary(typer.core.TyperGroup):
    """The app's click group, with pptl's error contract around every command line."""

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True, **extra: Any) -> Any:
        code = self._run(args, prog_name, complete_var, **extra)
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
                err.print(f"error: {one_line(_usage_line(e))}", markup=False)
            return 2
        except ClickException as e:
            err.print(f"error: {one_line(e.format_message())}", markup=False)
            return e.exit_code
        except PptlError as e:
            err.print(f"error: {one_line(str(e))}", markup=False)
            return e.exit_code
        except (KeyboardInterrupt, Abort):  # before a command started (a command's own is handled in invoke)
            err.print("interrupted")
            return 130

    def invoke(self, ctx: Any) -> Any:
        # Plans reach 400k ops; the default collector thresholds rescan that heap thousands of times.
        gc.set_threshold(200_000, 20, 100)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # click makes it exit 130 with no word; say what happened
            err.print("interrupted")
            raise


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pptl {__version__}")
        raise typer.Exit()


app = typer.Typer(cls=_Boundary, name="pptl", no_args_is_help=True, rich_markup_mode="rich",
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan, check, draw and run pipeline-parallel training schedules.")


@app.callback()
def _top(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """Plan, check, draw and run pipeline-parallel training schedules."""


for _name, _target in COMMANDS.items():
    _module, _function = _target.split(":")
    app.command(_name)(getattr(importlib.import_module(_module), _function))


def main() -> None:
    """Console entry point (``pptl``, ``python -m pptl``)."""
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
