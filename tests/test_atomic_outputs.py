"""Every file pptl writes goes through ``pptl.fileio.atomic_write`` (a temporary file, then a rename),
so an interrupted command never leaves a truncated output; and the overwrite policy:

- a path the user names (``-o``/``--out``) is replaced: naming it is consent;
- ``pptl demo --out DIR`` replaces its own outputs in DIR (``<example>.png``/``.html``), nothing else;
- a name pptl makes up itself (``render --html`` without ``-o``, ``run`` without ``-o``) never
  replaces an existing file: exit 2, one line, the file untouched.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pptl.fileio
from pptl.cli import app
from pptl.errors import InputError
from pptl.fileio import atomic_write, check_new

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "fixtures" / "1f1b_few_microbatches.toml")
OLD = b"the previous output, which must survive\n"

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("plan") / "plan.json"
    r = runner.invoke(app, ["plan", CONFIG, "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


# Every command that writes a file, as (args with OUT for the output, output suffix).
WRITERS = [
    pytest.param(["plan", CONFIG, "-o", "OUT"], ".json", id="plan"),
    pytest.param(["render", CONFIG, "-o", "OUT"], ".png", id="render-png"),
    pytest.param(["render", CONFIG, "-o", "OUT"], ".svg", id="render-svg"),
    pytest.param(["render", CONFIG, "-o", "OUT"], ".pdf", id="render-pdf"),
    pytest.param(["render", CONFIG, "-o", "OUT"], ".html", id="render-html"),
    pytest.param(["render", CONFIG, "--html", "-o", "OUT"], ".html", id="render-html-flag"),
    pytest.param(["export", CONFIG, "--to", "chrome", "-o", "OUT"], ".json", id="export-chrome"),
    pytest.param(["export", CONFIG, "--to", "chrome", "-o", "OUT"], ".json.gz", id="export-chrome-gz"),
    pytest.param(["export", CONFIG, "--to", "torch-csv", "-o", "OUT"], ".csv", id="export-torch-csv"),
    pytest.param(["compare", CONFIG, "PLAN", "-o", "OUT"], ".png", id="compare-png"),
    pytest.param(["compare", CONFIG, "PLAN", "-o", "OUT"], ".html", id="compare-html"),
]


def _args(args: list[str], out: Path, plan_file: Path) -> list[str]:
    return [str(out) if a == "OUT" else str(plan_file) if a == "PLAN" else a for a in args]


@pytest.mark.parametrize("args,suffix", WRITERS)
def test_a_named_output_is_replaced_whole(tmp_path: Path, plan_file: Path, args: list[str], suffix: str) -> None:
    out = tmp_path / f"out{suffix}"
    out.write_bytes(OLD)
    r = runner.invoke(app, _args(args, out, plan_file))
    assert r.exit_code == 0, r.output
    assert out.read_bytes() != OLD and out.stat().st_size > 100
    assert _leftovers(tmp_path) == []
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # a plain file's mode, not mkstemp's 0600


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


class _HalfThenInterrupt:
    """A file whose write stores half the data, then raises as Ctrl-C would."""

    def __init__(self, f) -> None:
        self._f = f

    def write(self, data: bytes) -> int:
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise KeyboardInterrupt

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


@pytest.mark.parametrize("args,suffix", WRITERS)
def test_an_interrupted_write_leaves_the_old_file(tmp_path: Path, plan_file: Path, monkeypatch, args: list[str],
                                                  suffix: str) -> None:
    out = tmp_path / f"out{suffix}"
    out.write_bytes(OLD)
    real = os.fdopen
    monkeypatch.setattr(pptl.fileio.os, "fdopen", lambda *a, **k: _HalfThenInterrupt(real(*a, **k)))
    r = runner.invoke(app, _args(args, out, plan_file))
    assert r.exit_code == 130 and r.stderr.splitlines()[-1] == "interrupted", r.output
    assert out.read_bytes() == OLD
    assert _leftovers(tmp_path) == []  # the half-written temporary file is removed too


def test_an_interrupted_write_of_a_new_file_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "new.json"
    real = os.fdopen
    monkeypatch.setattr(pptl.fileio.os, "fdopen", lambda *a, **k: _HalfThenInterrupt(real(*a, **k)))
    r = runner.invoke(app, ["plan", CONFIG, "-o", str(out)])
    assert r.exit_code == 130
    assert list(tmp_path.iterdir()) == []


def test_a_process_killed_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    """SIGKILL halfway through the data: no cleanup can run, yet the output is the old one, whole."""
    out = tmp_path / "plan.json"
    out.write_bytes(OLD)
    script = (
        "import os, signal, sys\n"
        "import pptl.fileio as fio\n"
        "real = os.fdopen\n"
        "class F:\n"
        "    def __init__(self, f): self.f = f\n"
        "    def write(self, b):\n"
        "        self.f.write(b[: len(b) // 2]); self.f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "    def __enter__(self): return self\n"
        "    def __exit__(self, *e): self.f.close()\n"
        "fio.os.fdopen = lambda *a, **k: F(real(*a, **k))\n"
        "from pptl.cli import main\n"
        "sys.argv = ['pptl', 'plan', sys.argv[1], '-o', sys.argv[2]]\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, CONFIG, str(out)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert out.read_bytes() == OLD
    (tmp,) = _leftovers(tmp_path)  # what a kill can leave: one hidden temporary file, never the output
    assert tmp.startswith(".plan.json.") and (tmp_path / tmp).stat().st_size > 0


# ----------------------------------------------------------------------------------------------
# Names pptl makes up are never overwritten


def test_render_html_does_not_replace_a_file_it_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "1f1b_few_microbatches.html"
    existing.write_bytes(OLD)
    r = runner.invoke(app, ["render", CONFIG, "--html"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == ("error: 1f1b_few_microbatches.html: exists, and pptl does not overwrite a file it "
                                "named itself; pass -o 1f1b_few_microbatches.html to overwrite it")
    assert existing.read_bytes() == OLD
    r = runner.invoke(app, ["render", CONFIG, "--html", "-o", "1f1b_few_microbatches.html"])  # named: consent
    assert r.exit_code == 0, r.output
    assert existing.read_bytes() != OLD


def test_run_does_not_replace_its_default_output(tmp_path: Path, plan_file: Path, monkeypatch) -> None:
    """Refused before any process starts (no torch needed)."""
    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "plan.measured.json"
    existing.write_bytes(OLD)
    r = runner.invoke(app, ["run", str(plan_file), "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == ("error: plan.measured.json: exists, and pptl does not overwrite a file it named "
                                "itself; pass -o plan.measured.json to overwrite it")
    assert existing.read_bytes() == OLD


def test_demo_replaces_its_own_outputs_and_nothing_else(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    (fixtures / "one.toml").write_text(Path(CONFIG).read_text())
    out = tmp_path / "out"
    out.mkdir()
    (out / "one.png").write_bytes(OLD)
    (out / "notes.txt").write_bytes(OLD)
    r = runner.invoke(app, ["demo", "--out", str(out), "--fixtures", str(fixtures)])
    assert r.exit_code == 0, r.output
    assert (out / "one.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "one.html").stat().st_size > 1000
    assert (out / "notes.txt").read_bytes() == OLD
    assert (out / "one.pdf").read_bytes().startswith(b"%PDF")
    # demo shares one plotly.js among its pages (--plotlyjs directory)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "one.html", "one.pdf", "one.png", "plotly.min.js"]


def test_atomic_write_without_overwrite(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    atomic_write(p, "first", overwrite=False)
    with pytest.raises(InputError, match=r"x\.json: exists, and pptl does not overwrite a file it named itself"):
        atomic_write(p, "second", overwrite=False)
    assert p.read_text() == "first" and _leftovers(tmp_path) == []
    atomic_write(p, "third")
    assert p.read_text() == "third"
    with pytest.raises(InputError, match=r"pass --out .*x\.json to overwrite it"):
        check_new(p, option="--out")


# ----------------------------------------------------------------------------------------------
# The audit, kept: no module writes a file but through atomic_write

#: Files that may write directly: the writer itself, and the run's private folder (job, plan copies,
#: progress board, receive gates, per-rank exit codes), which is never a user's output.
_DIRECT_OK = {"pptl/fileio.py", "pptl/run/launcher.py", "pptl/run/spawner.py", "pptl/run/progress.py",
              "pptl/run/gates.py"}
_WRITES = re.compile(r"""open\([^)]*['"][wax]b?['"]|\.write_text\(|\.write_bytes\(|json\.dump\(|write_html\(|"""
                     r"""savefig\((?!buf)|os\.open\(.*O_(WRONLY|RDWR|CREAT)""")


def test_every_writer_goes_through_atomic_write() -> None:
    offenders = []
    for path in sorted((ROOT / "pptl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in _DIRECT_OK:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            # /dev/null is no output (the HiGHS banner is sent there)
            if _WRITES.search(line) and not line.lstrip().startswith("#") and "os.devnull" not in line:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == [], "write through pptl.fileio.atomic_write:\n" + "\n".join(offenders)
