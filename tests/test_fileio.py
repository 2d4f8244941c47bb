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


def test_atomic_write_to_a_pipe_writes_into_it_and_keeps_it(tmp_path: Path) -> None:
    """A target that is not a regular file (a FIFO here; /dev/stdout, /dev/null alike) is written as it
    is: a rename would have put a regular file in its place."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    atomic_write(fifo, "a,b\n")
    reader.join(timeout=10)
    assert got == [b"a,b\n"]
    assert fifo.is_fifo() and not list(tmp_path.glob(".pipe.*"))


def test_atomic_write_to_a_full_device_is_one_line(tmp_path: Path) -> None:
    """A device that refuses the bytes (a node of /dev/full's numbers, made here so nothing outside the
    test is at stake): one line naming it, and the node stays a device."""
    import stat

    full = tmp_path / "full"
    try:
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    with pytest.raises(InputError, match=rf"^{full}: cannot write: No space left on device$"):
        atomic_write(full, "x" * 10)
    assert full.is_char_device()


def test_atomic_write_under_a_file_is_one_line(tmp_path: Path) -> None:
    """``-o p.json/x.json`` where p.json is a file: one line naming it, not a NotADirectoryError."""
    (tmp_path / "p.json").write_text("{}")
    with pytest.raises(InputError, match=r"p\.json is not a folder"):
        atomic_write(tmp_path / "p.json" / "x.json", b"x")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_atomic_write_where_no_file_can_be_made_is_one_line() -> None:
    """/proc takes no new files: the temporary file cannot be made, and that is an InputError."""
    with pytest.raises(InputError, match=r"^/proc/pptl-out\.png: cannot write: "):
        atomic_write("/proc/pptl-out.png", b"x")


def test_a_cut_gzip_is_named_truncated(tmp_path: Path) -> None:
    """A gzip cut anywhere, even just its 8-byte trailer (CRC and length), is refused as truncated;
    the whole file reads back."""
    import gzip

    from pptl.fileio import read_bounded

    data = b'{"a": 1}' * 1000
    whole = gzip.compress(data)
    (tmp_path / "ok.json.gz").write_bytes(whole)
    assert read_bounded(tmp_path / "ok.json.gz", 10**6) == data
    for cut in (8, 1, len(whole) // 2):
        (tmp_path / "cut.json.gz").write_bytes(whole[:-cut])
        with pytest.raises(InputError, match="truncated gzip"):
            read_bounded(tmp_path / "cut.json.gz", 10**6)
