"""bench/tune_crossval.py: end to end on CPU (a tiny shape on gloo), and the GPU shapes it measured
re-ranked offline from tests/data/tune_crossval/ (calibrating timeline, every candidate's measured
step and peaks): the pick, the rank correlation and every family's error, without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tune_crossval"
sys.path.insert(0, str(ROOT / "bench"))

import tune_crossval  # noqa: E402

SHAPES = sorted(DATA.glob("*.json"))


def test_crossval_script_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tune_crossval.py"), str(tmp_path), "--device", "cpu",
                        "--shapes", "tiny-b", "--steps", "1", "--warmup", "0"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    saved = json.loads((tmp_path / "shapes" / "tiny-b.json").read_text())
    rows = saved["rows"]
    fams = {x["family"] for x in rows}
    # Every family's fastest candidate ran (DualPipe needs an even count: 6 is).
    assert {"gpipe", "1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "synth"} <= fams
    assert len(rows) >= len(fams)
    assert all(x["measured_ms"] > 0 and x["predicted_ms"] > 0 and x["spread"] is not None for x in rows)
    assert saved["again_ms"] > 0 and saved["base"]["events"]
    summary = json.loads((tmp_path / "crossval.json").read_text())
    assert set(summary["shapes"]) == {"tiny-b"}
    # The saved shape re-ranks offline (what the GPU shapes below go through).
    ev = tune_crossval._evaluate(saved)
    assert ev["pick"] is not None and ev["rows"]


@pytest.mark.skipif(not SHAPES, reason="no GPU cross-validation data")
@pytest.mark.parametrize("path", SHAPES, ids=[p.stem for p in SHAPES])
def test_gpu_shape_re_ranked_offline(path: Path) -> None:
    saved = json.loads(path.read_text())
    ev = tune_crossval._evaluate(saved)
    c = ev["checks"]
    assert not c["fitting_over_limit"], c["fitting_over_limit"]
    assert c["pick_ok"], (ev["pick"], c)
    assert c["spearman"] >= 0.9, c
    assert c["families_ok"], c["family_err"]
