"""Shared fuzzing helpers: mutate a valid file, run a CLI command on it, demand a clean outcome.

A clean outcome is exit 0, 1 or 2, at most one line on stderr, and no exception escaping the CLI.
``PPTL_FUZZ_EXAMPLES`` sets the number of examples per target (``make fuzz`` raises it).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from pptl.cli import app

EXAMPLES = int(os.environ.get("PPTL_FUZZ_EXAMPLES", "40"))

_runner = CliRunner()

_NASTY: list[Any] = [
    10**30, -1, -(10**12), 0, 1.5, float("inf"), "NaN", "\u2603\u0000\ud7ff", "", [], {}, None, True,
    "x" * 10_000, [[[[[]]]]], {"kind": "F"}, 2**63, 1e308,
]


def clean_run(args: list[str]) -> tuple[int, str]:
    """Invoke the CLI; assert the outcome is clean; return (exit code, stderr)."""
    result = _runner.invoke(app, args)
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{args}: {type(exc).__name__}: {exc}"
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    err = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(err) <= 1, (args, err)
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr


def mutate_bytes(raw: bytes, rnd: random.Random) -> bytes:
    how = rnd.randrange(6)
    if how == 0 or not raw:
        return raw[: rnd.randrange(len(raw) + 1)]  # truncation
    if how == 1:
        b = bytearray(raw)
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if how == 2:
        k = rnd.randrange(len(raw))
        return raw[:k] + bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 64))) + raw[k:]
    if how == 3:
        return b""
    if how == 4:
        depth = rnd.choice([50, 5000, 100_000])
        return b"[" * depth + b"]" * depth
    return raw.replace(b"\n", b"\n" + raw[: rnd.randrange(1, 40)], 1)  # duplicate a leading key


def mutate_json(data: Any, rnd: random.Random) -> Any:
    """Replace one random value (or key) deep inside ``data`` by a nasty one."""
    if not isinstance(data, (dict, list)) or not data or rnd.random() < 0.15:
        return rnd.choice(_NASTY)
    if isinstance(data, dict):
        key = rnd.choice(list(data))
        out = dict(data)
        if rnd.random() < 0.1:
            out.pop(key)
        elif rnd.random() < 0.1:
            out[key + "_x"] = out.pop(key)
        else:
            out[key] = mutate_json(data[key], rnd)
        return out
    out_l = list(data)
    k = rnd.randrange(len(out_l))
    out_l[k] = mutate_json(out_l[k], rnd)
    return out_l


def write_json(path: Path, data: Any) -> None:
    try:
        text = json.dumps(data, allow_nan=True)
    except (ValueError, RecursionError):
        text = "{}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
