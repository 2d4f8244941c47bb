"""pptl's command-line grammar on the standard library.

A command is a function whose parameters declare its options and arguments, as
``pp: Annotated[Optional[int], Option("--pp", help="Number of pipeline ranks.")] = None``; the
function's docstring is its ``--help``. :class:`Commands` parses a command line with argparse,
converts each value by the parameter's type (int, float, str, Path, bool; ``list[...]`` for a
repeatable option or an argument that takes many) and returns the call to make. It prints nothing:
help and version come back as :class:`Shown`, every mistake as one :class:`UsageError`; cli.py
prints both.

Why not typer: typer 0.29 imports pydantic and builds a validator per parameter at every start,
~0.08 s of CPU per process on a 2-core x86 machine (2026-11-26), paid twice on the CI path
``pptl plan -o`` then ``pptl check``.

Vocabulary: an *option* has a name (``--pp``, ``-m``); an *argument* is positional (``FILES...``);
a *flag* is an option without a value (``--verify``; ``--notes/--no-notes`` sets True or False).
"""
from __future__ import annotations

import argparse
import difflib
import inspect
import re
import shutil
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

__all__ = ["Argument", "Call", "Commands", "Option", "Shown", "UsageError"]


class UsageError(Exception):
    """A mistake on the command line; ``str()`` is the one line, ``command`` where its --help is."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


@dataclass(frozen=True)
class _OptionDecl:
    names: tuple[str, ...]
    help: str
    metavar: Optional[str]
    min: Optional[float]
    show_default: bool


@dataclass(frozen=True)
class _ArgumentDecl:
    help: str
    show_default: bool


def Option(*names: str, help: str = "", metavar: Optional[str] = None, min: Optional[float] = None,  # noqa: N802
           show_default: bool = True) -> Any:
    """An option of a command: its names (``"-o", "--out"``, or ``"--x/--no-x"`` for an on/off
    pair), its help, the metavar shown in --help (default INT, NUMBER, PATH or TEXT by type), and
    the least value it takes (``min``)."""
    return _OptionDecl(names, help, metavar, min, show_default)


def Argument(help: str = "", show_default: bool = True) -> Any:  # noqa: N802
    """A positional argument of a command; ``list[...]`` takes one or more (none if it has a default)."""
    return _ArgumentDecl(help, show_default)


@dataclass(frozen=True)
class Call:
    """What the command line asked for: ``fn(**kwargs)``."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Shown:
    """Text to print instead of running a command (--help, --version, the help of a bare ``pptl``)."""

    text: str
    stderr: bool = False
    exit_code: int = 0


_UNSET: Any = object()
_TYPE_NAMES = {int: "INT", float: "NUMBER", Path: "PATH", str: "TEXT"}
#: pydantic's words, which typer printed and scripts and tests may match.
_NOT_A = {int: "input should be a valid integer, unable to parse string as an integer",
          float: "input should be a valid number, unable to parse string as a number"}
_HELP = ("-h", "--help")
_WHOLE = re.compile(r"[+-]?[\d_]+(\.0*)?")


@dataclass(frozen=True)
class _Param:
    """One parameter of a command function, read from its annotation."""

    name: str  # the function's keyword
    type: type  # int, float, str, Path or bool
    many: bool  # list[...]: repeatable option, or an argument taking the rest
    required: bool
    default: Any
    decl: Union[_OptionDecl, _ArgumentDecl]

    @property
    def is_option(self) -> bool:
        return isinstance(self.decl, _OptionDecl)

    @property
    def on(self) -> tuple[str, ...]:
        """Option names that set the value (or True); short ones first, as --help lists them."""
        assert isinstance(self.decl, _OptionDecl)
        return tuple(sorted((n.split("/")[0] for n in self.decl.names), key=lambda n: n.startswith("--")))

    @property
    def off(self) -> tuple[str, ...]:
        """The ``--no-x`` names of an on/off pair."""
        assert isinstance(self.decl, _OptionDecl)
        return tuple(n.split("/")[1] for n in self.decl.names if "/" in n)

    @property
    def first(self) -> str:
        """The name errors use: the option's first declared name, the argument's metavar."""
        return self.decl.names[0].split("/")[0] if isinstance(self.decl, _OptionDecl) else self.name.upper()

    @property
    def metavar(self) -> str:
        if isinstance(self.decl, _OptionDecl):
            return self.decl.metavar or _TYPE_NAMES.get(self.type, "TEXT")
        return self.name.upper()


def _unwrap(annotation: Any) -> tuple[Any, Any]:
    """(the type, the Option/Argument declaration) of ``Annotated[Optional[list[T]], decl]``."""
    decl = next(m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, (_OptionDecl, _ArgumentDecl)))
    base = typing.get_args(annotation)[0]
    while typing.get_origin(base) in (Union, types.UnionType):
        base = next(a for a in typing.get_args(base) if a is not type(None))
    return base, decl


def _params(fn: Callable[..., Any]) -> list[_Param]:
    hints = typing.get_type_hints(fn, include_extras=True)
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        base, decl = _unwrap(hints[name])
        many = typing.get_origin(base) is list
        kind = typing.get_args(base)[0] if many else base
        required = p.default is inspect.Parameter.empty
        out.append(_Param(name, kind, many, required, None if required else p.default, decl))
    return out


@dataclass(frozen=True)
class _Command:
    name: str
    fn: Callable[..., Any]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "")


class _Parser(argparse.ArgumentParser):
    """argparse that never prints or exits: its complaints become one UsageError line."""

    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(message, self.prog)

    def exit(self, status: int = 0, message: Optional[str] = None) -> typing.NoReturn:  # pragma: no cover
        raise UsageError(message or f"exit {status}", self.prog)


class Commands:
    """The commands of a program, its --help and --version, and the parsing of its command line.

    Example:
        >>> cli = Commands("pptl", help="...", version="pptl 0.1.0")
        >>> @cli.command("plan")
        ... def plan(pp: Annotated[Optional[int], Option("--pp", help="Ranks.")] = None) -> None: ...
        >>> cli.parse(["plan", "--pp", "4"])  # Call(fn=plan, kwargs={'pp': 4})
    """

    def __init__(self, prog: str, *, help: str, version: str) -> None:
        self.prog = prog
        self.help = help
        self.version = version
        self._commands: dict[str, _Command] = {}

    def command(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``fn`` as the command ``name`` (its parameters are read when it is called)."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._commands[name] = _Command(name, fn)
            return fn

        return register

    def parse(self, argv: list[str]) -> Call | Shown:
        """The call ``argv`` asks for, or the text it asks to see.

        Raises:
            UsageError: an unknown command or option, a value of the wrong type, a missing argument.
        """
        if not argv:
            return Shown(self._top_help(), stderr=True, exit_code=2)
        i = 0
        wants_help = wants_version = False
        while i < len(argv) and argv[i].startswith("-"):
            if argv[i] in _HELP:
                wants_help = True
            elif argv[i] == "--version":
                wants_version = True
            else:
                raise UsageError(f"No such option: {argv[i].split('=')[0]}", self.prog)
            i += 1
        if wants_version:
            return Shown(self.version + "\n")
        if wants_help or i == len(argv):
            return Shown(self._top_help())
        cmd = self._commands.get(argv[i])
        if cmd is None:
            close = difflib.get_close_matches(argv[i], list(self._commands))
            hint = f". Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"No such command {argv[i]!r}{hint}", self.prog)
        return self._parse_command(cmd, argv[i + 1:])

    # ------------------------------------------------------------------------------------------
    # one command

    def _parse_command(self, cmd: _Command, argv: list[str]) -> Call | Shown:
        path = f"{self.prog} {cmd.name}"
        params = _params(cmd.fn)
        options = [p for p in params if p.is_option]
        parser = _Parser(prog=path, add_help=False, allow_abbrev=False, exit_on_error=False)
        takes_value: dict[str, str] = {}  # option name -> its longest name
        for p in options:
            if p.type is bool:
                parser.add_argument(*p.on, dest=p.name, action="store_const", const=True, default=_UNSET)
                if p.off:
                    parser.add_argument(*p.off, dest=p.name, action="store_const", const=False, default=_UNSET)
            else:
                # append adds to its default: None, read as not given
                parser.add_argument(*p.on, dest=p.name, action="append" if p.many else "store",
                                    default=None if p.many else _UNSET)
                takes_value.update(dict.fromkeys(p.on, max(p.on, key=len)))
        parser.add_argument(*_HELP, dest="_help", action="store_true")
        try:
            ns, rest = parser.parse_known_args(_with_values_joined(argv, takes_value))
        except argparse.ArgumentError as e:
            raise UsageError(_argparse_message(e, argv), path) from None
        positional = self._positionals(rest, options, path)
        if ns._help:
            return Shown(self._command_help(cmd, params))
        return Call(cmd.fn, self._values(params, vars(ns), positional, path))

    @staticmethod
    def _positionals(rest: list[str], options: list[_Param], path: str) -> list[str]:
        """The arguments among what argparse left, after refusing an unknown option (naming the
        known ones it resembles). Everything after ``--`` is an argument."""
        cut = rest.index("--") if "--" in rest else len(rest)
        for tok in rest[:cut]:
            if tok.startswith("-") and len(tok) > 1 and not _WHOLE.fullmatch(tok):
                name = tok.split("=")[0]
                known = [n for p in options for n in (*p.on, *(p.off if p.type is bool else ()))] + ["--help"]
                close = difflib.get_close_matches(name, known)
                hint = f" (Possible options: {', '.join(sorted(close))})" if close else ""
                raise UsageError(f"No such option: {name}{hint}", path)
        return rest[:cut] + rest[cut + 1:]

    @staticmethod
    def _values(params: list[_Param], given: dict[str, Any], positional: list[str], path: str) -> dict[str, Any]:
        """Each parameter's value: converted, checked against its minimum, or its default."""
        values: dict[str, Any] = {}
        for p in params:
            if p.is_option:
                raw = _UNSET if given[p.name] is None else given[p.name]
            elif p.many:
                raw, positional = (positional or _UNSET), []
            else:
                raw, positional = (positional[0], positional[1:]) if positional else (_UNSET, positional)
            if raw is _UNSET:
                if p.required:
                    what = "option " + " / ".join(f"'{n}'" for n in p.on) if p.is_option else f"argument '{p.first}'"
                    raise UsageError(f"Missing {what}", path)
                values[p.name] = p.default
            elif p.type is bool:
                values[p.name] = raw
            elif p.many:
                values[p.name] = [_convert(p, r, path) for r in raw]
            else:
                values[p.name] = _convert(p, raw, path)
        if positional:
            raise UsageError(f"Got unexpected extra argument(s) ({' '.join(positional)})", path)
        return values

    # ------------------------------------------------------------------------------------------
    # help

    def _top_help(self) -> str:
        width = _width()
        rows = [(name, _first_sentence(c.doc)) for name, c in self._commands.items()]
        return "\n".join([
            f"Usage: {self.prog} [OPTIONS] COMMAND [ARGS]...", "", _paragraphs(self.help, width), "",
            "Options:", _rows([("--version", "Print the version and exit."),
                               ("-h, --help", "Show this message and exit.")], width), "",
            "Commands:", _rows(rows, width), ""])

    def _command_help(self, cmd: _Command, params: list[_Param]) -> str:
        width = _width()
        usage = [f"Usage: {self.prog} {cmd.name} [OPTIONS]"]
        arg_rows, opt_rows = [], []
        for p in params:
            if not p.is_option:
                shown = p.metavar + ("..." if p.many else "")
                usage.append(shown if p.required else f"[{shown}]")
                arg_rows.append((shown, _with_extra(p.decl.help, "[required]" if p.required else "")))
                continue
            names = ", ".join(p.on) if not (p.type is bool and p.off) else " / ".join((*p.on, *p.off))
            left = names if p.type is bool else f"{names} {p.metavar}"
            extra = "[required]" if p.required else ""
            if not p.required and p.decl.show_default and p.default not in (None, False, "") and p.type is not bool:
                extra = f"[default: {p.default}]"
            opt_rows.append((left, _with_extra(p.decl.help, extra)))
        opt_rows.append(("-h, --help", "Show this message and exit."))
        text = [" ".join(usage), "", _paragraphs(cmd.doc, width), ""]
        if arg_rows:
            text += ["Arguments:", _rows(arg_rows, width), ""]
        return "\n".join(text + ["Options:", _rows(opt_rows, width), ""])


def _with_values_joined(argv: list[str], takes_value: dict[str, str]) -> list[str]:
    """``--title -x`` as ``--title=-x``: an option that takes a value takes the next word whatever
    it looks like (argparse would read ``-x`` as an option). Nothing after ``--`` is touched."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return out + argv[i:]
        if tok in takes_value and i + 1 < len(argv):
            out.append(f"{takes_value[tok]}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def _argparse_message(e: argparse.ArgumentError, argv: list[str]) -> str:
    """argparse's two complaints left to it, in the words pptl has always used."""
    names = (e.argument_name or "").split("/")
    typed = next((t.split("=")[0] for t in reversed(argv) if t.split("=")[0] in names), names[0])
    if "expected one argument" in e.message:
        return f"Option '{typed}' requires an argument"
    if "ignored explicit argument" in e.message:
        return f"Option '{typed}' does not take a value"
    return f"{typed}: {e.message}"  # pragma: no cover - argparse has no other error for these actions


def _convert(p: _Param, raw: str, path: str) -> Any:
    """``raw`` as the parameter's type: whole numbers such as ``4.0`` and ``4_000`` count as ints."""
    try:
        if p.type is int:
            text = raw.strip()
            value: Any = int(text.split(".")[0]) if _WHOLE.fullmatch(text) else int(text)
        elif p.type is float:
            value = float(raw)
        elif p.type is Path:
            value = Path(raw)
        else:
            value = raw
    except ValueError:
        raise UsageError(f"{p.first}: got {raw!r}: {_NOT_A[p.type]}", path) from None
    if isinstance(p.decl, _OptionDecl) and p.decl.min is not None and not value >= p.decl.min:  # NaN fails too
        raise UsageError(f"{p.first}: got {raw!r}: input should be greater than or equal to {p.decl.min:g}", path)
    return value


def _width() -> int:
    """Help lines fit the terminal, at most 78 columns, at least 50."""
    return max(min(shutil.get_terminal_size().columns, 80) - 2, 50)


def _first_sentence(doc: str) -> str:
    para = " ".join(doc.split("\n\n")[0].split())
    end = para.find(". ")
    return para if end < 0 else para[:end + 1]


def _with_extra(help_text: str, extra: str) -> str:
    return f"{help_text}  {extra}" if extra else help_text


def _paragraphs(doc: str, width: int) -> str:
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width, initial_indent="  ", subsequent_indent="  ",
                                         break_on_hyphens=False)
                       for p in doc.split("\n\n") if p.strip())


def _rows(rows: list[tuple[str, str]], width: int) -> str:
    """A two-column list: names left (at most 30 wide; longer ones get a line of their own), help right."""
    col = min(max(len(left) for left, _ in rows), 30) + 2
    lines = []
    for left, right in rows:
        wrapped = textwrap.wrap(right, max(width - col - 2, 10), break_on_hyphens=False) or [""]
        if len(left) > col - 2:
            lines.append(f"  {left}")
            lines += [" " * (col + 2) + w for w in wrapped]
        else:
            lines.append(f"  {left.ljust(col)}{wrapped[0]}".rstrip())
            lines += [" " * (col + 2) + w for w in wrapped[1:]]
    return "\n".join(lines)
