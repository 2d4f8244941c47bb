"""Shared fuzzing helpers: mutate a valid file, run a CLI command on it, demand a clean outcome.

A clean outcome is exit 0, 1 or 2, at most one line on stderr, and no exception escaping the CLI.
``PPTL_FUZZ_EXAMPLES`` sets the number of examples per target (``make fuzz`` raises it).
"""
from __future__ import annotations

import atexit
import json
import os
import random
import traceback
from collections import Counter
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


#: stderr lines that report rather than fail (a reader's notes, a renderer's warnings, "wrote FILE").
_INFO = ("note: ", "warning: ", "wrote ")


def clean_run(args: list[str]) -> tuple[int, str]:
    """Invoke the CLI; assert the outcome is clean; return (exit code, stderr).

    Clean: no exception, exit 0, 1 or 2, no traceback, and at most one line on stderr per input
    file (``check`` goes on past an unreadable file) besides notes, warnings and "wrote FILE" lines.
    """
    result = _runner.invoke(app, args)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        where = "".join(traceback.format_exception(exc)[-6:])
        raise AssertionError(f"{args}: {type(exc).__name__}: {exc}\n{where}")
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    err = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(_INFO)]
    inputs = _input_count(args)
    assert len(err) <= inputs, (args, err)
    if result.exit_code == 2:  # says why: one line each, or a GitHub annotation with --output github
        assert (1 <= len(err) <= inputs and all(e.startswith("error: ") for e in err)) or "::error " in result.stdout, \
            (args, result.stderr)
    assert "Traceback" not in result.output
    _tally(result.exit_code)
    return result.exit_code, result.stderr


def _input_count(args: list[str]) -> int:
    """Files a ``check`` call reads (globs expanded); 1 for every other command."""
    if not args or args[0] != "check":
        return 1
    import glob as _glob

    files = [a for a in args[1:] if not a.startswith("-")]
    return max(1, sum(len(_glob.glob(a)) or 1 for a in files))


#: (fuzz target, exit code) -> inputs run; written as JSON to $PPTL_FUZZ_STATS at exit (docs/reliability.md).
STATS: Counter = Counter()


def _tally(code: int) -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].split("::")[-1].split("[")[0]
    STATS[(test, code)] += 1


@atexit.register
def _dump_stats() -> None:
    path = os.environ.get("PPTL_FUZZ_STATS")
    if path and STATS:
        table: dict[str, dict[str, int]] = {}
        for (test, code), n in sorted(STATS.items()):
            table.setdefault(test, {})[str(code)] = n
        Path(path).write_text(json.dumps(table, indent=1))


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


#: Cells a torch schedule CSV should survive: huge and negative indices, wrong kinds, malformed
#: overlaps, unicode digits, quotes, whitespace and control characters.
NASTY_CELLS = [
    "", " ", "0F0", "0B0", "0I0", "0W0", "1F0", "99999999999F0", "0F99999999999", "0F-1", "-1F0", "0F", "F0", "0X0",
    "0BW0", "0SEND_F0", "0RECV_B0", "0SEND_F", "0UNSHARD", "0UNSHARD5", "0RESHARD", "0REDUCE_GRAD",
    "(0F0;1B0)OVERLAP_F_B", "(0F0;0F1)OVERLAP_F_B", "(0F0)OVERLAP_F_B", "((0F0;1B0))OVERLAP_F_B", "(;)OVERLAP_F_B",
    "(0F0;1B0;2B0)OVERLAP_F_B", "\u0663F0", "0F\u0660", "\u00a0", "\x00", "\"0F0\"", "'0F0'", "0F0\r", "0f0",
    "0F1e9", "0F" + "9" * 400, "9" * 5000 + "F0",
]


def mutate_cells(text: str, rnd: random.Random) -> str:
    """Mutate a CSV at the cell level: replace, drop, duplicate or swap cells and rows."""
    rows = [line.split(",") for line in text.splitlines()] or [[""]]
    for _ in range(rnd.randint(1, 4)):
        how = rnd.randrange(6)
        r = rnd.randrange(len(rows))
        row = rows[r]
        if how == 0 and row:
            row[rnd.randrange(len(row))] = rnd.choice(NASTY_CELLS)
        elif how == 1 and row:
            row.pop(rnd.randrange(len(row)))
        elif how == 2:
            row.insert(rnd.randrange(len(row) + 1), rnd.choice(row) if row and rnd.random() < 0.5
                       else rnd.choice(NASTY_CELLS))
        elif how == 3 and len(rows) > 1:
            a, b = rnd.randrange(len(rows)), rnd.randrange(len(rows))
            rows[a], rows[b] = rows[b], rows[a]
        elif how == 4:
            if rnd.random() < 0.5 and len(rows) > 1:
                rows.pop(r)
            else:
                rows.insert(r, list(row))
        elif row:
            i, j = rnd.randrange(len(row)), rnd.randrange(len(row))
            row[i], row[j] = row[j], row[i]
    return "\n".join(",".join(row) for row in rows) + rnd.choice(["\n", "", "\n\n\n", "\r\n"])


def gzip_bytes(raw: bytes) -> bytes:
    import gzip

    return gzip.compress(raw, compresslevel=1, mtime=0)


def gzip_bomb(size: int) -> bytes:
    """A small .gz that expands to ``size`` bytes of '[' (valid gzip, hostile content)."""
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"[" * (1 << 20)
    out = [c.compress(chunk) for _ in range(size >> 20)]
    out.append(c.flush())
    return b"".join(out)


def to_toml(data: Any) -> str:
    """A small TOML writer for fuzzing (tomllib only reads): tables for mappings at the top, inline
    tables and arrays below; every key quoted; None (which TOML lacks) left out."""

    def key(k: Any) -> str:
        return json.dumps(str(k), ensure_ascii=False)

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
        if isinstance(v, int):
            return str(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items() if x is not None) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
        return json.dumps(str(v), ensure_ascii=False)

    if not isinstance(data, dict):
        return f"value = {value(data)}\n"
    head = [f"{key(k)} = {value(v)}" for k, v in data.items() if v is not None and not isinstance(v, dict)]
    tables = [f"\n[{key(k)}]\n" + "\n".join(f"{key(k2)} = {value(v2)}" for k2, v2 in v.items() if v2 is not None)
              for k, v in data.items() if isinstance(v, dict)]
    return "\n".join(head) + "\n" + "\n".join(tables) + "\n"


def to_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
