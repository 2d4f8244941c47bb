"""Writing files safely: to a temporary file beside the target, then renamed into place, so an
interrupted command never leaves a truncated output."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pptl.errors import InputError

__all__ = ["atomic_write", "check_writable"]


def check_writable(path: str | Path) -> Path:
    """Fail early, with one line, when ``path`` cannot be written (missing folder, a directory)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a directory, expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"{p}: folder {parent} does not exist")
    return p


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    p = check_writable(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent or "."))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        # mkstemp makes 0600 files; give the result the mode a plain open() would (0666 less umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p
