"""The op kinds the checker knows come from what family records and formats declare."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pptl.formats import torch_csv
from pptl.ir import COMM_KINDS, COMPUTE_KINDS
from pptl.kinds import is_known, known_kinds
from pptl.schedules import FAMILIES

ROOT = Path(__file__).resolve().parent.parent


def test_known_kinds_are_the_declared_ones() -> None:
    declared = set(COMPUTE_KINDS | COMM_KINDS) | set(torch_csv.OP_KINDS)
    for fam in FAMILIES.values():
        if fam.runtime is not None:
            declared |= fam.runtime.kinds
    assert known_kinds() == declared
    assert {"UNSHARD", "ATTN", "BCAST"} <= known_kinds()
    assert is_known("F") and is_known("REDUCE_GRAD") and not is_known("FWD")


def test_every_example_plan_holds_known_kinds_only() -> None:
    from pptl.demo import default_fixtures_dir, example_files
    from pptl.formats.loader import load_any

    families = set()
    for path in example_files(default_fixtures_dir()):
        s = load_any(path).schedule
        assert s is not None
        families.add(s.family)
        assert {op.kind for op in s.ops} <= known_kinds(), path
    assert {"moe-1f1b-overlap", "weight-update", "dualpipe"} <= families


def test_known_kinds_do_not_depend_on_import_order() -> None:
    # A fresh interpreter that never imports the torch CSV reader still knows its kinds (they used
    # to be registered as a side effect of importing it), and still flags a kind nobody declares.
    code = """
import sys
from pptl.checks import run_checks
from pptl.ir import Op, Schedule
ops = [Op("F", 0, "compute", 0, 0), Op("UNSHARD", 0, "compute", 0), Op("FWD", 0, "compute", 0, 0)]
s = Schedule(family="x", pp=1, num_stages=1, microbatches=1, ops=ops, lanes={(0, "compute"): [0, 1, 2]})
bad = [v.message for v in run_checks(s, select={"PP001"})]
print(bad)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    assert "unknown kind 'FWD'" in out
    assert "UNSHARD" not in out
