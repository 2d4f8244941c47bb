"""Where ``pptl run`` writes a measured timeline: checked before any process starts, written
(gzip-compressed for ``.json.gz``, as ``pptl plan -o`` does) once the run is over.

A run can take minutes; a name no reader takes back, or a folder it cannot write to, must be found
before that time is spent, not after.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pptl.errors import InputError
from pptl.fileio import atomic_write, check_json_name, check_writable, is_gz

__all__ = ["check_output", "write_output"]


def _special(p: Path) -> bool:
    """An existing file that is not a regular one (/dev/stdout, a pipe): written as it is, and it
    has no name to judge the format by. A folder is not one: it cannot be written as a file, and
    taken for one it passed here and failed only when the run was over."""
    return p.exists() and not p.is_file() and not p.is_dir()


def check_output(path: str | Path) -> Path:
    """Refuse, with one line, an output the run could not write or that no reader takes back.

    Raises:
        InputError: a name not ending in .json or .json.gz, a missing folder, or a folder this
            process cannot create a file in.
    """
    p = Path(path)
    if _special(p):
        if not os.access(p, os.W_OK):
            raise InputError(f"{p}: cannot write: Permission denied")
        return p
    check_json_name(p, "a measured timeline")
    check_writable(p)
    # The write itself makes a temporary file beside the target and renames it (fileio.atomic_write):
    # making and removing one now is that same test, where os.access misjudges (read-only mounts, ACLs, root).
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=str(p.parent))
    except OSError as e:
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return p


def write_output(path: str | Path, raw: bytes) -> Path:
    """Write a measured timeline's JSON bytes to ``path``, gzip-compressed when it ends in .gz.

    Raises:
        InputError: the file cannot be written.
    """
    p = Path(path)
    if is_gz(p):
        import gzip

        raw = gzip.compress(raw, compresslevel=6, mtime=0)  # mtime 0: the same run writes the same bytes
    return atomic_write(p, raw)
