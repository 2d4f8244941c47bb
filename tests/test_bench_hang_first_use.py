"""bench/hang_first_use.sh end to end on CPU (gloo): a rank made to hang at the last stage's first forward is
stopped by pptl's --timeout, and the script prints the run's line, pptl diagnose's first line and the stuck
rank's own stack (from its log), and keeps them all in first_use.tar.gz."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_hang_is_reported_with_the_stuck_ranks_stack(tmp_path: Path) -> None:
    env = dict(os.environ, OUT=str(tmp_path), DEVICE="cpu", HIDDEN="32", TOKENS="8", HANG_S="8",
               PPTL_RUN_FAULT="hang:1:r1/compute/F s3 mb0")
    r = subprocess.run(["bash", str(ROOT / "bench" / "hang_first_use.sh"), "sync-send"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert "== sync-send" in out, out + r.stderr
    assert "rank 1 is stuck at op r1/compute/F s3 mb0 (step 0)" in out
    assert "exit 1" in out
    # the stuck rank's main thread stood in the fault's sleep, inside the step; its peer waited for a message
    stack = [line for line in out.splitlines() if line.startswith("  rank1.log: ")]
    assert stack and "in fire" in stack[0], out
    assert any(line.startswith("  rank0.log: ") for line in out.splitlines()), out
    with tarfile.open(tmp_path / "first_use.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"./plan.json", "./sync-send/run.txt", "./sync-send/measured.json", "./sync-send/diagnose.txt",
            "./sync-send/rank0.log", "./sync-send/rank1.log"} <= names
