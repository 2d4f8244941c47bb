"""Run pptl's command line in-process and capture what it prints.

``CliRunner().invoke(app, ["plan", ...])`` returns a :class:`Result` with the exit code, stdout,
stderr, both interleaved as a terminal shows them (``output``), and the exception that escaped the
CLI, if any (a test of pptl's error contract wants ``None``).
"""
from __future__ import annotations

import io
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

__all__ = ["CliRunner", "Result"]


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str
    output: str
    exception: Optional[BaseException]
    exc_info: Optional[tuple[Any, ...]] = None


class _Copying(io.BytesIO):
    """A stream's bytes, each write also appended to the shared ``both``."""

    def __init__(self, both: io.BytesIO) -> None:
        super().__init__()
        self._both = both

    def write(self, b: Any) -> int:
        self._both.write(b)
        return super().write(b)


def _text(raw: io.BytesIO) -> io.TextIOWrapper:
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


@contextmanager
def _environ(env: Optional[dict[str, Optional[str]]]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env or {}}
    try:
        for k, v in (env or {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class CliRunner:
    """In-process runs of a command-line entry point ``app(args) -> exit code``."""

    def invoke(self, app: Callable[[list[str]], Any], args: list[str], input: Optional[str | bytes] = None,
               env: Optional[dict[str, Optional[str]]] = None, terminal_width: Optional[int] = None) -> Result:
        """Run ``app(args)`` with ``input`` on stdin, ``env`` set (None unsets) and, given
        ``terminal_width``, COLUMNS set to it (what rich and the help read)."""
        if terminal_width is not None:
            env = {**(env or {}), "COLUMNS": str(terminal_width)}
        both = io.BytesIO()
        out_raw, err_raw = _Copying(both), _Copying(both)
        data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        # held until the end: a wrapper that is collected closes the bytes under it
        out_text, err_text = _text(out_raw), _text(err_raw)
        sys.stdout, sys.stderr = out_text, err_text
        exception: Optional[BaseException] = None
        exc_info = None
        try:
            with _environ(env):
                code = app(list(args))
            code = 0 if code is None else code
        except SystemExit as e:
            exception = e
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # noqa: BLE001 - reported in the result, as a terminal would show it
            exception, exc_info, code = e, sys.exc_info(), 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdin, sys.stdout, sys.stderr = saved

        def decode(raw: io.BytesIO) -> str:
            return raw.getvalue().decode("utf-8", errors="replace").replace("\r\n", "\n")

        result = Result(code, decode(out_raw), decode(err_raw), decode(both), exception, exc_info)
        out_text.detach(), err_text.detach()
        return result
