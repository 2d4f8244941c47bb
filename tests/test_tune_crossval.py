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
    # The pick ran (the launch runs it whatever its family), and the calibrating run marked every B's
    # I part, which calibration took for I and W.
    assert saved["pick"] in {x["label"] for x in rows}
    assert set(saved["base"]["meta"]["extra"]["b_input_ms"]) == {e["op"] for e in saved["base"]["events"]
                                                                 if e["kind"] == "B"}
    assert any(n.startswith("I and W measured inside the run's B") for n in saved["notes"])
    summary = json.loads((tmp_path / "crossval.json").read_text())
    assert set(summary["shapes"]) == {"tiny-b"}
    # The saved shape re-ranks offline (what the GPU shapes below go through).
    ev = tune_crossval._evaluate(saved)
    assert ev["pick"] is not None and ev["rows"]


#: Shapes where today's model misses the issue's accuracy targets on the saved run (docs/benchmarks.md
#: "pptl tune on models it was not built on" says why); the test fails when one starts passing, so the list shrinks.
MISSES = {
    # 0.12 ms layers: every op is short and the runtime's per-op costs, which the model does not
    # have, dominate interleaved and DualPipe(V) (-8..-9%) and GPipe (-5%).
    "h2048-t1024-l16-m8": ("spearman", "families"),
    # ZB-V with one layer on its first and last stage measured 6.9% over the model.
    "h2048-t2048-l4-m32": ("spearman", "families"),
    # Run again 2026-11-27 with RECVs where the plan issues them under sync-send: every family within
    # 2.0% (looped-bfs -1.6%, was -12.3%), the pick 0.5% from the fastest; thirteen candidates within
    # 3.5% of each other, where Spearman is 0.79.
    "h2048-t3072-l12-m24": ("spearman",),
    # every family +1..4% (GPipe +4.3%, ZB-H2 +4.0%): the duty fitted from this run (0.19) is high here.
    "h2048-t6144-l4-m10": ("families",),
    # V-Min, the fastest that fits (8991 MiB measured, limit 9294), is predicted at 9398 and ruled out; the
    # pick, a synthesised order (425.7 ms predicted against 1F1B's 434.7 measured), never ran. The busy
    # plans are +3..5% slow: the fitted duty exponent 0.35 over-slows them.
    "h3584-t8192-l4-m8": ("pick", "families"),
    # the split-backward families -3..-4%: W runs 2-11% over the model, I under it (the I:W split of a
    # run of full backwards).
    "h5120-t1024-l10-m6": ("families",),
    # Measured after I and W were learned from the calibrating run's B (2026-11-27). Thirteen
    # candidates within 3.4% of each other (317.5-327.1 ms predicted): the pick, ZB-V, measured 2.4%
    # over V-Half (its W on rank 1 +4.3% over the model), Spearman 0.74 in so narrow a field, and
    # GPipe -3.0% (its first rank's B -6.7%, F +6.4%). GPipe's peaks (10 micro-batches in flight, far
    # over the limit) measured 1.9% over the model's.
    "h4608-t2048-l7-m10": ("pick", "spearman", "families", "peaks"),
    # Run again as h2048-t3072-l12-m24: every family within 1.9% (looped-bfs -0.5%, was -10.3%), the
    # pick the fastest; fourteen candidates within 4%, Spearman 0.78.
    "h2304-t2560-l14-m20": ("spearman",),
}
#: Largest error of any candidate today, per shape where it is above the 9.5% bound of the others.
MAX_ERR: dict[str, float] = {}


@pytest.fixture(scope="module")
def evaluated() -> dict:
    return {p.stem: tune_crossval._evaluate(json.loads(p.read_text())) for p in SHAPES}


def test_fifteen_shapes_unlike_the_bench_were_measured() -> None:
    shapes = [json.loads(p.read_text())["shape"] for p in SHAPES]
    assert len(shapes) == 15
    assert {s["hidden"] for s in shapes} >= {2048, 4096, 8192}
    assert {s["tokens"] for s in shapes} >= {1024, 8192}
    assert {s["layers"] // 2 for s in shapes} >= {4, 16}
    assert {s["microbatches"] for s in shapes} >= {4, 32}
    assert all(s["head"] >= s["embedding"] for s in shapes)
    # The eight held out from the cost model's making keep every candidate's measured ops.
    held_out = {s.name for s in tune_crossval.NEW_SHAPES + tune_crossval.FRESH_SHAPES}
    assert len(held_out) == 8
    for p in SHAPES:
        rows = json.loads(p.read_text())["rows"]
        assert all(bool(x.get("ops")) is (p.stem in held_out) for x in rows), p.stem


@pytest.mark.parametrize("name", [p.stem for p in SHAPES])
def test_gpu_shape_re_ranked_offline(evaluated: dict, name: str) -> None:
    ev = evaluated[name]
    c = ev["checks"]
    # Every shape: the pick ran and measured within 2% (or the launch-to-launch spread) of the fastest
    # candidate that fit, and no candidate reported as fitting went over the limit.
    misses = MISSES.get(name, ())
    # Every shape: no candidate reported as fitting went over the limit, and predicted peaks stay upper
    # bounds (1% of noise).
    assert not c["fitting_over_limit"], c["fitting_over_limit"]
    assert (c["peak_err_min"] >= -0.01) is ("peaks" not in misses), c["peak_err_min"]
    # The pick ran and measured within 2% (or the launch-to-launch spread) of the fastest candidate that fit.
    assert c["pick_ok"] is ("pick" not in misses), (ev["pick"], c["pick_gap"], c["launch_spread"])
    assert (c["spearman"] >= 0.9) is ("spearman" not in misses), c["spearman"]
    assert c["families_ok"] is ("families" not in misses), c["family_err"]
    assert c["max_abs_err"] <= MAX_ERR.get(name, 0.095), c["family_err"]


def test_split_backward_w_runs_over_the_model_and_i_under() -> None:
    """The I:W split derived from a run of full backwards (FLOPs and bytes at one GEMM rate) gives W
    too little of B: on h5120-t1024-l10-m6 every rank of every plan with I and W ran its W further over
    the model than its I (W +1.9..+10.6%, I -11.3..+0.2%)."""
    saved = json.loads((DATA / "h5120-t1024-l10-m6.json").read_text())
    rows = [a for a in tune_crossval.attribute(saved) if any(k == "W" for _, k in a.kinds)]
    assert len(rows) >= 9
    for a in rows:
        for r in (0, 1):
            assert a.kinds[(r, "W")] > 0.01 and a.kinds[(r, "W")] > a.kinds[(r, "I")], (a.label, a.kinds)


FRESH = [s.name for s in tune_crossval.FRESH_SHAPES]


@pytest.mark.parametrize("name", FRESH)
def test_fresh_shapes_ran_their_pick_and_learned_i_and_w_from_the_run(name: str) -> None:
    """The four shapes of 2026-11-27: the launch ran the pick (a row of its own, measured), and the
    calibrating 1F1B run marked every B's I part, which calibration took for I and W; the share of
    I it measured inside B is within 2 points of what the same shape's ZB-H1 measured for its own I
    and W ops (0.2-1.4 points on these four)."""
    saved = json.loads((DATA / f"{name}.json").read_text())
    assert saved["pick"] in {x["label"] for x in saved["rows"]}
    base = saved["base"]
    bs = [e["op"] for e in base["events"] if e["kind"] == "B"]
    assert bs and set(base["meta"]["extra"]["b_input_ms"]) == set(bs)
    tc = tune_crossval._calibrated(saved)
    share = tc.model.layer.I / (tc.model.layer.I + tc.model.layer.W)
    # Each stage's I and W parts sum to its B; a layer's, fitted per kind (the first block's B and I
    # lack one GEMM), within 0.1%.
    assert tc.model.layer.I + tc.model.layer.W == pytest.approx(tc.model.layer.B, rel=1e-3)
    zb = next(x for x in saved["rows"] if x["family"] == "zb-h1")
    i = sum(end - start for _, kind, _, _, start, end in zb["ops"] if kind == "I")
    w = sum(end - start for _, kind, _, _, start, end in zb["ops"] if kind == "W")
    assert abs(share - i / (i + w)) < 0.02, (share, i / (i + w))


@pytest.mark.parametrize("name", ["h2048-t3072-l12-m24", "h2304-t2560-l14-m20"])
def test_looped_bfs_sends_no_longer_wait_for_the_receivers_consumer(name: str) -> None:
    """Under sync-send a SEND runs on its producer's compute stream, and NCCL lets only about four
    sends to one peer finish before their receives are posted. Before 3654d42 a RECV was issued right
    before its consumer, so on these shapes (20 and 24 micro-batches: rank 0 sends stage 2's gradients
    while rank 1 runs every stage-3 backward) rank 0's fifth backward send held its compute 56.2 and
    40.2 ms, looped-bfs measured 12.3% and 10.3% over the model. Run again with RECVs where the plan
    issues them: its longest SEND is what every other family's is, and it is within 3% of the model."""
    saved = json.loads((DATA / f"{name}.json").read_text())
    row = next(x for x in saved["rows"] if x["family"] == "looped-bfs")
    assert max(o[5] - o[4] for o in row["ops"] if o[1] == "SEND") < 0.5
    assert abs(row["predicted_ms"] / row["measured_ms"] - 1) < 0.03


def test_every_send_of_every_candidate_is_short() -> None:
    """Every SEND of every candidate (every family) of the eight shapes with ops takes under 2 ms (the
    median one 0.06 ms), which is what the calibrating run's ``send_hold`` says."""
    held_out = {s.name for s in tune_crossval.NEW_SHAPES + tune_crossval.FRESH_SHAPES}
    seen = 0
    for p in SHAPES:
        if p.stem not in held_out:
            continue
        for x in json.loads(p.read_text())["rows"]:
            assert all(o[5] - o[4] < 2.0 for o in x["ops"] if o[1] == "SEND"), (p.stem, x["label"])
            seen += 1
    assert seen >= 8 * 9
