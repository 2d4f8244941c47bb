from __future__ import annotations

import os
from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.fileio import atomic_write


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "out.json"
    p.write_text("old")
    atomic_write(p, "new")
    assert p.read_text() == "new"
    assert [f.name for f in tmp_path.iterdir()] == ["out.json"]


def test_atomic_write_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        p = atomic_write(tmp_path / "f.txt", b"x")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("name, match", [("missing/f.txt", "folder .* does not exist"), (".", "is a directory")])
def test_atomic_write_bad_target(tmp_path: Path, name: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        atomic_write(tmp_path / name, "x")
