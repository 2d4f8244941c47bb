"""pptl's exports run in torch's own runtime (_PipelineScheduleRuntime, gloo, 4 CPU ranks): bench/torch_runtime.py
end to end at a tiny size for two families, one looped and one V-shaped, with gradients against one process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def test_exports_train_in_torch_runtime_with_reference_gradients(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "torch_runtime.py"), "--out", str(tmp_path),
                        "--device", "cpu", "--gpus", "4", "--families", "1f1b,zbv", "--mb", "4", "--hidden", "16",
                        "--tokens", "4", "--verify-hidden", "8", "--verify-tokens", "2", "--steps", "1",
                        "--warmup", "0", "--family-timeout", "60"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "torch_runtime.json").read_text())
    for fam in ("1f1b", "zbv"):
        t = res["torch"][fam]
        assert t["verify"]["ok"] and t["verify"]["max_rel_err"] <= 1e-4, t
        assert t["csv_ms"] > 0 and t["builtin_ms"] > 0, t
        assert res["pptl"][fam]["ms"] > 0, res["pptl"][fam]
    rows = (tmp_path / "torch_runtime.md").read_text().splitlines()
    assert rows[0].startswith("| family | torch built-in ms | pptl CSV in torch runtime ms | pptl run ms | gradients ok")
    assert [row.split("|")[1].strip() for row in rows[2:]] == ["1f1b", "zbv"]


def test_newer_families_train_in_torch_runtime(tmp_path):
    """looped-bfs and interleaved-zb beside torch's own classes, v-half and v-min (no torch class), 2 ranks."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    fams = ["looped-bfs", "interleaved-zb", "v-half", "v-min"]
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "torch_runtime.py"), "--out", str(tmp_path),
                        "--device", "cpu", "--gpus", "2", "--families", ",".join(fams), "--mb", "4", "--hidden", "16",
                        "--tokens", "4", "--verify-hidden", "8", "--verify-tokens", "2", "--steps", "1",
                        "--warmup", "0", "--family-timeout", "60"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "torch_runtime.json").read_text())
    for fam in fams:
        t = res["torch"][fam]
        assert t["verify"]["ok"] and t["verify"]["max_rel_err"] <= 1e-4, t
        assert t["csv_ms"] > 0, t
        assert (t.get("builtin_ms", 0) > 0) == (fam in ("looped-bfs", "interleaved-zb")), t


def test_pptl_run_against_torch_before_and_after(tmp_path):
    """bench/pp_vs_torch.py on 2 gloo ranks: torch's class timed before and after one pptl run launch
    per micro-batch count; torch's time is the median of both passes' steps."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "pp_vs_torch.py"), "--out", str(tmp_path),
                        "--device", "cpu", "--gpus", "2", "--families", "1f1b,dualpipe", "--mbs", "4,6",
                        "--hidden", "16", "--tokens", "4", "--steps", "2", "--warmup", "0",
                        "--family-timeout", "60"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "pp_vs_torch.json").read_text())
    rows = {(x["family"], x["mb"]): x for x in res["rows"]}
    assert set(rows) == {("1f1b", 4), ("1f1b", 6)}  # dualpipe: no torch class, not compared
    for x in rows.values():
        assert len(x["torch_steps"]) == 4 and len(x["pptl_steps"]) == 2
        assert sorted(x["torch_steps"])[1] <= x["torch_ms"] <= sorted(x["torch_steps"])[2]
        assert x["delta"] == pytest.approx(x["pptl_ms"] / x["torch_ms"] - 1)
    lines = (tmp_path / "pp_vs_torch.md").read_text().splitlines()
    assert [ln.split("|")[1:3] for ln in lines[2:]] == [[" 1f1b ", " 4 "], [" 1f1b ", " 6 "]]
    assert not (tmp_path / "pp_vs_torch.partial.json").exists()
