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


#: Shapes where today's model misses the issue's accuracy targets on the saved run (docs/benchmarks.md
#: "pptl tune cross-validation" says why); the test fails when one starts passing, so the list shrinks.
MISSES = {
    # 0.12 ms layers: every op is short and the runtime's per-op costs, which the model does not
    # have, dominate interleaved and DualPipe(V) (-8..-9%) and GPipe (-5%).
    "h2048-t1024-l16-m8": ("spearman", "families"),
    # ZB-V with one layer on its first and last stage measured 5.9% over the model.
    "h2048-t2048-l4-m32": ("spearman", "families"),
    # every family +1..4% (GPipe +4.3%, ZB-H2 +4.0%): the duty fitted from this run (0.19) is high here.
    "h2048-t6144-l4-m10": ("families",),
}


@pytest.fixture(scope="module")
def evaluated() -> dict:
    return {p.stem: tune_crossval._evaluate(json.loads(p.read_text())) for p in SHAPES}


def test_seven_shapes_unlike_the_bench_were_measured() -> None:
    shapes = [json.loads(p.read_text())["shape"] for p in SHAPES]
    assert len(shapes) == 7
    assert {s["hidden"] for s in shapes} >= {2048, 4096, 8192}
    assert {s["tokens"] for s in shapes} >= {1024, 8192 - 2048, 4096}
    assert {s["layers"] // 2 for s in shapes} >= {4, 16}
    assert {s["microbatches"] for s in shapes} >= {4, 32}
    assert all(s["head"] >= s["embedding"] for s in shapes)


@pytest.mark.parametrize("name", [p.stem for p in SHAPES])
def test_gpu_shape_re_ranked_offline(evaluated: dict, name: str) -> None:
    ev = evaluated[name]
    c = ev["checks"]
    # Every shape: the pick ran and measured within 2% (or the launch-to-launch spread) of the fastest
    # candidate that fit, and no candidate reported as fitting went over the limit.
    assert not ev["pick"].endswith("(not measured)"), ev["pick"]
    assert c["pick_ok"], (ev["pick"], c["pick_gap"], c["launch_spread"])
    assert not c["fitting_over_limit"], c["fitting_over_limit"]
    assert c["peak_err_min"] >= -0.01, c["peak_err_min"]  # predicted peaks stay upper bounds (1% of noise)
    misses = MISSES.get(name, ())
    assert (c["spearman"] >= 0.9) is ("spearman" not in misses), c["spearman"]
    assert c["families_ok"] is ("families" not in misses), c["family_err"]
    assert c["max_abs_err"] <= 0.095, c["family_err"]
