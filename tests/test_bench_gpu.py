"""The GPU benchmarks' own logic, run end to end on CPU (gloo) so a broken suite shows up before a GPU call:
bench/gpu_suite.py (variants by message mode at every micro-batch count, the table, calibration),
bench/gpu_issue8.py (MoE and weight-update runs, calibration, rerun, figures) and bench/gpu_repeat.py (rounds of pptl against torch; torch's NCCL script cannot run here, so its cells stay
empty and only pptl's numbers are checked)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--device", "cpu", "--gpus", "2", "--hidden", "32", "--tokens", "8", "--steps", "1"]


def _bench(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_gpu_suite_runs_every_variant_at_every_count(tmp_path):
    r = _bench("gpu_suite.py", "--out", str(tmp_path), *SMALL, "--warmup", "0", "--skip-torch", "--smoke-hidden",
               "32", "--smoke-tokens", "8", "--mbs", "4,8", "--variants", "default;messages=inline",
               "--variants-at-every-m")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert "failures" not in res, res.get("failures")
    assert set(res["smoke_modes"]) == {"default", "messages=inline"}
    for mode, fams in res["smoke_modes"].items():
        assert fams and all(f["verify"]["ok"] for f in fams.values()), mode
    runs = [res["variants_by_m"]["4"]["default"], res["variants_by_m"]["4"]["messages=inline"],
            res["variants"]["default"], res["variants"]["messages=inline"]]
    assert all(set(run) == set(runs[0]) and len(run) >= 8 for run in runs)
    assert {f["messages"] for f in runs[1].values()} == {"inline"}
    assert {f["messages"] for f in runs[0].values()} == {"sync-send"}  # the default mode
    table = (tmp_path / "table.md").read_text().splitlines()
    assert len(table) == 2 + 2 * len(runs[0])  # header, rule, one row per family and count
    assert all(c != "-" for c in table[2].split("|")[-2].strip().split())  # a calibration error in each row


def test_gpu_repeat_records_every_round(tmp_path):
    r = _bench("gpu_repeat.py", "--out", str(tmp_path), *SMALL, "--rounds", "2", "--mbs", "2",
               "--torch-timeout", "60")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "repeat.json").read_text())
    assert [(x["round"], x["family"]) for x in rows] == [(0, "gpipe"), (0, "1f1b"), (1, "gpipe"), (1, "1f1b")]
    assert all(x["pptl_ms"] > 0 and x["device"] == "cpu" and x["torch_ms"] is None for x in rows)


def test_gpu_issue8_runs_every_stage(tmp_path):
    r = _bench("gpu_issue8.py", "--out", str(tmp_path), "--device", "cpu", "--hidden", "64", "--tokens", "16",
               "--dtype", "float32", "--wu-model", "8MiB", "--wu-tensor", "1MiB", "--wu-bucket", "2MiB", "--steps",
               "1", "--warmup", "0", "--microbatches", "4", "--timeout", "60")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert "failures" not in res, res.get("failures")
    runs = {"moe-overlap", "moe-offload", "moe-no-overlap", "weight-update"}
    assert set(res["calibration"]) == runs
    assert all(c["predicted_ms"] > 0 and c["measured_ms"] > 0 for c in res["calibration"].values())
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["moe_offload.png", "moe_overlap.png",
                                                             "moe_overlap_step.png", "weight_update.png"]


def test_gpu_offload_evaluate_only_renames_ops_that_only_changed_lanes():
    """A saved run whose plan had PP transfers on the comm lane is evaluated against today's plan
    (send/recv lanes): those ops are renamed, anything else that differs keeps the old plan."""
    import importlib.util
    from dataclasses import replace
    from types import SimpleNamespace

    from pptl.config import Config
    from pptl.schedules import build_schedule
    from pptl.timeline import Event, Timeline

    spec = importlib.util.spec_from_file_location("gpu_offload", ROOT / "bench" / "gpu_offload.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fresh = build_schedule(Config(schedule="moe-1f1b-overlap", pp=2, vpp=2, microbatches=2))
    p2p = ("SEND", "RECV")
    ran = SimpleNamespace(ops=[replace(op, lane="comm") if op.kind in p2p else op for op in fresh.ops])
    moved = mod._moved_lanes(ran, fresh)
    assert len(moved) == sum(op.kind in p2p for op in fresh.ops) > 0
    assert moved["r0/comm/SEND_F PP s0 mb0 ->r1"] == "r0/send/SEND_F PP s0 mb0 ->r1"
    assert mod._moved_lanes(fresh, fresh) == {}
    attn_moved = SimpleNamespace(ops=[replace(op, lane="comm") if op.kind == "ATTN" else op for op in fresh.ops])
    assert mod._moved_lanes(attn_moved, fresh) is None  # a compute op on another lane is another plan
    assert mod._moved_lanes(SimpleNamespace(ops=ran.ops[:-1]), fresh) is None
    tl = Timeline([Event(op="r1/comm/RECV_F PP s1 mb0 <-r0", rank=1, lane="comm", start=0.0, end=1.0, kind="RECV",
                         waits_on=("r0/comm/SEND_F PP s0 mb0 ->r1",))])
    [e] = mod._renamed(tl, moved, {op.id: op.lane for op in fresh.ops}).events
    assert (e.op, e.lane, e.waits_on) == ("r1/recv/RECV_F PP s1 mb0 <-r0", "recv", ("r0/send/SEND_F PP s0 mb0 ->r1",))


@pytest.mark.parametrize("planned,measured,ok", [
    (1.40, 1.15, True),    # +21.7%, but 0.25 ms: a small exposure within 0.3 ms passes
    (1.45, 1.15, True),    # 0.30 ms exactly
    (1.46, 1.15, False),   # 0.31 ms and +27%
    (2.49, 1.70, False),   # +46%, 0.79 ms (2x H200, 2026-11-26)
    (12.0, 14.9, True),    # -19.5%: 2.9 ms, within 20%
    (12.0, 15.1, False),   # -20.5% and 3.1 ms
], ids=["ms", "ms-edge", "ms-over", "both-over", "pct", "pct-over"])
def test_gpu_offload_exposed_all_to_all_is_within_20_percent_or_0_3_ms(planned, measured, ok):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_offload", ROOT / "bench" / "gpu_offload.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    side = lambda ms: {"exposed_ep_ms": ms, "makespan_ms": 100.0}  # noqa: E731
    ev = mod.evaluate({"exposure": {"moe-overlap": {"planned": side(planned), "measured": side(measured)}}})
    assert ev["checks"]["exposed_ep moe-overlap"]["ok"] is ok


def test_gpu_families_runs_the_memory_capped_v_schedules(tmp_path):
    """The default v-half and v-min at pp 2 (both capped at 2 chunks: 0.55 and 0.4 of 1F1B's 4 round
    down to 2 and 1, and a V holds at least 2) run and verify on 2 gloo ranks; every rank's plan holds
    2 chunks, half of 1F1B's 2 micro-batches on rank 0."""
    r = _bench("gpu_families.py", "--out", str(tmp_path), *SMALL, "--dtype", "float32", "--mb", "4",
               "--families", "1f1b,v-half,v-min")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {x["family"]: x for x in json.loads((tmp_path / "families.json").read_text())["rows"]}
    assert all(x["verify"]["ok"] for x in rows.values()), rows
    assert {f: x["plan_peak"] for f, x in rows.items()} == {"1f1b": [2.0, 1.0], "v-half": [2.0, 2.0],
                                                            "v-min": [2.0, 2.0]}


def test_gpu_families_plans_runs_and_verifies_every_family(tmp_path):
    """bench/gpu_families.py on 2 gloo ranks as the GPU run (v-half and v-min unsqueezed): every family
    verifies; the plan's peaks (chunk activations with w_activation 1, and bytes) are the ones worked
    out by hand."""
    r = _bench("gpu_families.py", "--out", str(tmp_path), *SMALL, "--dtype", "float32", "--mb", "8", "--no-squeeze")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {x["family"]: x for x in json.loads((tmp_path / "families.json").read_text())["rows"]}
    assert all(x["verify"]["ok"] for x in rows.values()), rows
    # 1f1b: rank 0 holds p=2 stages, rank 1 one; zbv and v-half (p+2)//2 = 2 micro-batches of 2 chunks;
    # v-min rank 1 holds 2 chunks to I and two more to W; looped BFS all 8 x 2 chunks.
    assert {f: x["plan_peak"] for f, x in rows.items()} == {
        "1f1b": [2.0, 1.0], "zbv": [4.0, 4.0], "v-half": [4.0, 4.0], "v-min": [2.0, 4.0],
        "looped-bfs": [16.0, 16.0], "interleaved-zb": [4.0, 4.0], "inference": [1.0, 1.0]}
    assert rows["v-min"]["plan_peak_w0"] == [2.0, 2.0] and rows["v-min"]["plan_peak_w1"] == [2.0, 4.0]
    # Bytes (8 tokens x 32 hidden x 4 bytes = 1 KiB a unit): a chunk of 8 blocks saves 71 units (72 on
    # the last stage); one of 4 blocks 35 (36), and 38 (39) from I to W. A B (I then W) holds L + 7 units
    # more while it runs: 15 KiB for 8 blocks, 11 for 4; on the last stage the same (the float32
    # residual that goes is the unit that comes), above the loss's 4 KiB. looped BFS: 16 x 35 on rank
    # 0, 8 x 35 + 8 x 36 on rank 1, at its first B; v-min rank 1: two chunks of stages 1 and 2 waiting
    # for W, two for I.
    kib = {f: [round(m * 1024, 6) for m in x["plan_mib"]] for f, x in rows.items()}
    assert kib["1f1b"] == [142 + 15, 72 + 15] and kib["looped-bfs"] == [560 + 11, 568 + 11]
    assert kib["v-min"][1] == 2 * 38 + 2 * 35
    assert kib["inference"] == [0, 0]  # no graph: only the messages
    assert "measured_vs_plan" not in rows["zbv"]  # CPU runs measure no memory
    assert (tmp_path / "families.md").read_text().startswith("| family | step ms |")