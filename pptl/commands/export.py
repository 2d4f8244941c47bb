"""``pptl export``: a schedule or timeline in another tool's format."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pptl.commands._shared import Choice, Microbatches, OutFile, Placement, say

__all__ = ["export"]


def export(
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="Plan, config, torch CSV, timeline, or profiler traces (a folder).",
                                           show_default=False)],
    to: Annotated[str, typer.Option("--to", click_type=Choice("torch-csv", "chrome", "torchtitan"),
                                    help="torch-csv, chrome (Perfetto) or torchtitan (-o pp.toml: its \\[parallelism] "
                                    "lines, and the schedule CSV they name beside it).", show_default=False)],
    comms: Annotated[bool, typer.Option("--comms", help="torch-csv: write compute_comms (with SEND/RECV).")] = False,
    out_file: OutFile = None,
    microbatches: Microbatches = None,
    placement: Placement = None,
    csv: Annotated[Optional[Path], typer.Option("--csv", help="torchtitan: where the schedule CSV goes (default: "
                                                "beside -o, as NAME.csv).")] = None,
) -> None:
    """Write a schedule or timeline in another tool's format (to stdout without -o; .gz gzips)."""
    import sys

    from pptl.errors import InputError
    from pptl.export import export_file
    from pptl.fileio import atomic_write, check_writable

    if csv is not None and to != "torchtitan":
        raise InputError("--csv applies to --to torchtitan only")
    gz = out_file is not None and out_file.name.lower().endswith(".gz")  # .GZ too, as plan -o reads it
    if gz and to != "chrome":
        raise InputError(f"-o {out_file}: .gz output is for --to chrome")
    if to == "torchtitan" and out_file is not None:
        if comms:
            raise InputError("--comms applies to --to torch-csv only")
        if out_file.suffix.lower() != ".toml":
            raise InputError(f"-o {out_file}: --to torchtitan writes TOML, expected a .toml name")
        _export_torchtitan(source, out_file, csv, microbatches=microbatches, placement=placement)
        return
    if out_file is not None:
        check_writable(out_file)
        _check_name(out_file, to, f"-o {out_file}: --to {to} writes")
    result = export_file(source, to=to, comms=comms, gzip_output=gz, microbatches=microbatches, placement=placement)
    if out_file is not None:
        atomic_write(out_file, result.data)  # first: a write that fails is the one line on stderr, after no note
    for note in result.notes:
        say(f"note: {note}", stderr=True)
    if out_file is None:
        sys.stdout.write(result.data.decode("utf-8"))
        sys.stdout.flush()
        return
    say(f"wrote {out_file}", stderr=True)


def _export_torchtitan(source: Path, toml_path: Path, csv_path: Optional[Path], **options: Any) -> None:
    from pptl.errors import InputError
    from pptl.export import export_torchtitan
    from pptl.fileio import atomic_write, check_writable

    csv_path = csv_path if csv_path is not None else toml_path.with_suffix(".csv")
    _check_name(csv_path, "torch-csv", f"--csv {csv_path}: torchtitan's schedule is written as")
    if csv_path.resolve() == toml_path.resolve():
        raise InputError(f"--csv {csv_path}: is the -o file; name another")
    check_writable(toml_path)
    check_writable(csv_path)
    files = export_torchtitan(source, csv_path=str(csv_path), **options)
    atomic_write(csv_path, files.csv)
    atomic_write(toml_path, files.toml)
    for note in files.notes:  # after the writes: one that fails is the one line on stderr
        say(f"note: {note}", stderr=True)
    say(f"wrote {toml_path} and {csv_path}", stderr=True)


#: What each --to writes to -o, and the names that say so (torchtitan's .toml is checked on its own).
_WRITES = {"torch-csv": ("a CSV", (".csv",)), "chrome": ("JSON", (".json", ".json.gz"))}


def _check_name(path: Path, to: str, writes: str) -> None:
    """Refuse a name that says another format (``-o x.png`` got a CSV): :func:`pptl.fileio.named_as`."""
    from pptl.errors import InputError
    from pptl.fileio import named_as

    what, suffixes = _WRITES[to]
    if not named_as(path, suffixes):
        raise InputError(f"{writes} {what}, expected a {' or '.join(suffixes)} name")
