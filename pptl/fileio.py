"""Files, safely: outputs written to a temporary file beside the target, then renamed into place,
so an interrupted command never leaves a truncated output; inputs read with a bound on their size."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pptl.errors import InputError

__all__ = ["MAX_FILE_BYTES", "atomic_write", "check_json_name", "named_as", "is_gz", "is_pickle", "check_new", "check_regular", "check_writable", "read_bounded",
           "read_error", "utf8_text"]

#: Inputs larger than this are refused before parsing (a plan of 400k ops is ~60 MB).
MAX_FILE_BYTES = 512 * 2**20


def read_error(path: str | Path, e: OSError) -> InputError:
    """The one wording of a file that cannot be read: ``PATH: no such file``, ``PATH: is a folder``,
    or ``PATH: cannot read: REASON``."""
    if isinstance(e, FileNotFoundError):
        return InputError(f"{path}: no such file")
    if isinstance(e, IsADirectoryError):
        return InputError(f"{path}: is a folder, expected a file")
    return InputError(f"{path}: cannot read: {e.strerror or e}")


def utf8_text(raw: bytes, path: str | Path) -> str:
    """``raw`` (the bytes of ``path``) decoded as UTF-8, without a leading byte-order mark.

    Raises:
        InputError: not UTF-8. Gzip data is named as such, with the name that reads it: a trace
            gzipped by hand or by torch keeps its ``.json`` name often enough, and "not UTF-8 text"
            sends the user looking for an encoding problem.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:  # a byte-order mark (what Windows editors put first) is no part of the text: JSON and TOML refuse it
        return text[1:] if text.startswith("\ufeff") else text
    if raw[:2] == b"\x1f\x8b":  # gzip's magic number (RFC 1952)
        name = Path(path).name
        fix = (f"name it {name}.gz, as pptl reads .json.gz files gunzipped" if name.lower().endswith(".json")
               else "gunzip it first (pptl reads gzip only in .json.gz files)")
        raise InputError(f"{path}: gzip data, not text: {fix}")
    if is_pickle(raw):
        raise InputError(f"{path}: a pickle, not text (a flight-recorder dump? pptl diagnose reads those)")
    raise InputError(f"{path}: not UTF-8 text")


def is_pickle(raw: bytes) -> bool:
    """Whether ``raw`` opens as a pickle of protocol 2 to 5 does (PROTO and its number): what torch's
    flight recorder dumps, which have no file suffix, are."""
    return raw[:1] == b"\x80" and raw[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


def check_writable(path: str | Path) -> Path:
    """Fail early, with one line, when ``path`` cannot be written (missing folder, a directory)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a directory, expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"{p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{p}: {parent} is not a folder")
    return p


def is_gz(path: str | Path) -> bool:
    """Whether ``path`` names a gzip file: ``.gz`` in any case, as every reader and writer here takes it."""
    return Path(path).name.lower().endswith(".gz")


def named_as(path: str | Path, suffixes: tuple[str, ...]) -> bool:
    """Whether ``path``'s name ends with one of ``suffixes`` (any case), the name a file of that format
    is written under; an existing non-regular file (/dev/stdout, a pipe) has no name to judge and passes."""
    p = Path(path)
    return p.name.lower().endswith(suffixes) or (p.exists() and not p.is_file())


def check_json_name(path: str | Path, what: str) -> Path:
    """Refuse a name other than ``.json`` or ``.json.gz`` for a file pptl's commands read back
    (``what``: "a plan", "a measured timeline"): :func:`named_as`."""
    p = Path(path)
    if not named_as(p, (".json", ".json.gz")):
        raise InputError(f"{p}: {what} is written as .json (or .json.gz), which is how pptl's commands read it back")
    return p


def check_new(path: str | Path, *, option: str = "-o") -> Path:
    """Fail early when ``path`` exists: pptl overwrites only files the user names (``-o``); a name
    pptl makes up itself (``render --html``, ``run``'s default output) never replaces a file."""
    from pptl.formats._quote import shell_word

    p = check_writable(path)
    if p.exists():
        raise InputError(f"{p}: exists, and pptl does not overwrite a file it named itself; pass {option} {shell_word(p)} "
                         "to overwrite it")
    return p


def atomic_write(path: str | Path, data: bytes | str, *, overwrite: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    An interrupted write leaves ``path`` as it was (and at worst a hidden ``.NAME.*.tmp`` file if
    the process is killed outright). With ``overwrite=False`` an existing ``path`` is kept and
    InputError raised (see :func:`check_new`); the check and the write are one step (a hard link).
    """
    p = check_writable(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if p.exists() and not p.is_file():
        # A device, a pipe, /dev/stdout: written as they are. A rename would put a regular file in
        # their place (under root, in /dev), and there is no partial file to protect.
        if not overwrite:
            raise InputError(f"{p}: exists, and pptl does not overwrite a file it named itself")
        try:
            with open(p, "wb") as f:
                f.write(raw)
        except OSError as e:
            raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
        return p
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent or "."))
    except OSError as e:  # a read-only or pseudo file system (/proc), no permission
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())  # the rename must not reach the disk before the data (power loss)
        # mkstemp makes 0600 files; give the result the mode a plain open() would (0666 less umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if overwrite:
            os.replace(tmp, p)
        else:
            _link_new(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, FileExistsError):
            raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
        raise
    return p


def _link_new(tmp: str, p: Path) -> None:
    """Move ``tmp`` to ``p`` unless ``p`` exists, atomically where the file system has hard links."""
    try:
        os.link(tmp, p)
    except FileExistsError:
        check_new(p)
        raise
    except OSError:  # no hard links here (some network and FAT file systems): check, then rename
        check_new(p)
        os.replace(tmp, p)
        return
    os.unlink(tmp)


def check_regular(path: str | Path) -> None:
    """Refuse a path that is not a regular file (a device, pipe or socket, or a link to one): its size,
    which every reader checks before reading, says nothing of what reading it yields: ``/dev/zero``
    never ends and a pipe blocks until someone writes to it.

    Raises:
        InputError: ``PATH: not a regular file (a device, pipe or socket); expected a file``.
    """
    p = Path(path)
    if p.exists() and not p.is_dir() and not p.is_file():  # a missing path or a folder: the caller words it
        raise InputError(f"{p}: not a regular file (a device, pipe or socket); expected a file")


def read_bounded(path: str | Path, limit: int, *, gunzip: bool | None = None) -> bytes:
    """The bytes of ``path``, gunzipped when ``gunzip`` says so (by default, when its name ends in
    ``.gz``); at most ``limit`` bytes either way, so a small file cannot expand into gigabytes (a gzip
    bomb).

    Raises:
        InputError: unreadable, too large, or not valid gzip.
    """
    import zlib

    p = Path(path)
    try:
        size = p.stat().st_size
        if size > limit:
            raise InputError(f"{p}: file is {size} bytes, larger than the {limit} accepted")
        check_regular(p)
        with p.open("rb") as f:  # at most limit + 1 bytes: a file that grows while read stays bounded
            raw = f.read(limit + 1)
    except OSError as e:
        raise read_error(p, e) from None
    if len(raw) > limit:
        raise InputError(f"{p}: file is larger than the {limit} bytes accepted")
    if not (is_gz(p) if gunzip is None else gunzip):
        return raw
    if not raw:
        raise InputError(f"{p}: the file is empty")
    if raw[:2] != b"\x1f\x8b":  # gzip's magic number: zlib's "incorrect header check" says less
        raise InputError(f"{p}: not gzip data (named .gz, but it does not start as gzip does); gzip it, or name it "
                         f"without .gz")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as e:
        raise InputError(f"{p}: not valid gzip: {e}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise InputError(f"{p}: decompresses to more than the {limit} bytes accepted")
    if not d.eof:  # cut short: gzip's trailer (length and CRC) never came
        raise InputError(f"{p}: truncated gzip (the file ends before its compressed data does)")
    return out
