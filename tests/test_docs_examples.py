"""Every ``pptl ...`` command the README and docs/*.md show runs as they say.

Commands are read from fenced and indented code blocks, run in the order written, one shell per doc
in a folder of its own (what one command writes, the next may read, as it would for a reader going
down the page). A command exits 0 unless its comment says ``exits N``. The folder holds what the
docs assume a reader has at hand: ``fixtures/``, profiler ``traces/`` of torch's 1F1B, a torch
``sched.csv``, and ``plan.json``/``measured.json`` of one run.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_EXITS = re.compile(r"#.*\bexits (\d)\b")
#: Commands this test leaves to others: a server runs until stopped (tests/test_serve_server.py starts
#: one), `pptl demo` draws every fixture for a minute (`make demo` runs it; tests/test_demo.py runs its
#: code on two configs), a synopsis names placeholders.
_NOT_RUN = re.compile(r"^pptl (serve|demo)\b|[A-Z]{4,}\.\.\.|\[--")


def documented(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of each ``pptl`` line in a code block of ``path``."""
    found, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if text.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            text = text[2:] if text.startswith("$ ") else text
            if text.startswith("pptl "):
                found.append((n, text))
    return found


def expected_exit(command: str) -> int:
    m = _EXITS.search(command)
    return int(m.group(1)) if m else 0


def _sandbox(tmp: Path) -> Path:
    (tmp / "fixtures").symlink_to(ROOT / "fixtures")
    shutil.copytree(ROOT / "tests" / "data" / "traces" / "Schedule1F1B", tmp / "traces")
    shutil.copy(ROOT / "fixtures" / "csv" / "interleaved1f1b_pp4_v2_m8_comms.csv", tmp / "sched.csv")
    shutil.copy(ROOT / "tests" / "data" / "runs" / "1f1b_plan.json", tmp / "plan.json")
    shutil.copy(ROOT / "tests" / "data" / "runs" / "1f1b_h200.measured.json", tmp / "measured.json")
    shutil.copy(ROOT / "fixtures" / "tune" / "uneven.yaml", tmp / "model.yaml")
    (tmp / "schedules" / "a").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "runs" / "1f1b_plan.json", tmp / "schedules" / "a" / "plan.json")
    return tmp


def test_the_docs_show_commands() -> None:
    assert sum(len(documented(p)) for p in DOCS) >= 40
    assert expected_exit("pptl check a.json   # exits 1: violations") == 1
    assert expected_exit("pptl check a.json   # exit 0 valid") == 0


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_each_documented_command_exits_as_the_doc_says(doc: Path, tmp_path: Path) -> None:
    commands = [(n, c) for n, c in documented(doc) if not _NOT_RUN.search(c)]
    if not commands:
        pytest.skip(f"{doc.name} shows no command to run")
    cwd = _sandbox(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    has_torch = importlib.util.find_spec("torch") is not None
    for n, command in commands:
        if command.startswith("pptl run ") and not has_torch:
            continue
        shell = f"{sys.executable} -m pptl {command[len('pptl '):]}"
        r = subprocess.run(["bash", "-c", shell], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == expected_exit(command), f"{doc.name}:{n}: {command}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, f"{doc.name}:{n}: {command}\n{r.stderr[-2000:]}"
