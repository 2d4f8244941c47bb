"""bench/tune_crossval.py: end to end on CPU (a tiny shape on gloo), and the GPU shapes it measured
re-ranked offline from tests/data/tune_crossval/ (calibrating timeline, every candidate's measured
step and peaks): the pick, the rank correlation and every family's error, without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tune_crossval"
sys.path.insert(0, str(ROOT / "bench"))

import tune_crossval  # noqa: E402

SHAPES = sorted(DATA.glob("*.json"))
#: Shapes measured after the cost model's per-op terms were settled, with every candidate's ops.
HELD_OUT = (tune_crossval.NEW_SHAPES + tune_crossval.FRESH_SHAPES + tune_crossval.LATER_SHAPES
            + tune_crossval.STEADY_SHAPES + tune_crossval.BALANCED_SHAPES)


def _cpu_launch(out: Path, shape: str) -> dict:
    """bench/tune_crossval.py on CPU (gloo) for one tiny shape, one timed step: its saved launch."""
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tune_crossval.py"), str(out), "--device", "cpu",
                        "--shapes", shape, "--steps", "1", "--warmup", "0"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((out / "shapes" / f"{shape}.json").read_text())


def test_crossval_script_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    saved = _cpu_launch(tmp_path, "tiny-b")
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


def test_crossval_script_runs_a_pp4_shape_on_four_ranks(tmp_path: Path) -> None:
    """A shape of pp 4 is calibrated, ranked and run on four ranks (gloo), and its saved launch re-ranks."""
    saved = _cpu_launch(tmp_path, "tiny-p4")
    assert saved["config"]["pp"] == 4 and saved["shape"]["pp"] == 4
    assert {e["rank"] for e in saved["base"]["events"]} == {0, 1, 2, 3}
    for row in saved["rows"]:
        assert {op[0] for op in row["ops"]} == {0, 1, 2, 3}, row["label"]
    ev = tune_crossval._evaluate(saved)
    assert ev["pick"] is not None and len(ev["rows"]) == len(saved["rows"])


def test_a_call_of_two_pps_is_refused() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tune_crossval.py"), "/tmp/never-written", "--device",
                        "cpu", "--shapes", "tiny-b,tiny-p4"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 2 and "one pp a call" in r.stderr


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
    # every family +1..4% (GPipe +4.3%, ZB-H2 +4.0%): the duty fitted from this run (0.20, busy 0.50 and
    # 0.94) is high here.
    "h2048-t6144-l4-m10": ("families",),
    # V-Min, the fastest that fits (8991 MiB measured, limit 9294), is predicted over the limit and ruled
    # out; the pick, a synthesised order, never ran. ZB-H1 +3.0% (3.02; at the exponent this run fitted,
    # 0.35, the busy plans were +3..5%).
    "h3584-t8192-l4-m8": ("pick", "families"),
    # the split-backward families -2.6..-3.0% (V-Half -3.02%): W runs 1-10% over the model, I under it
    # (the I:W split of a run of full backwards).
    # h5120-t1024-l10-m6: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # The four LATER_SHAPES, fixed before their run (2026-11-27 04:56 UTC) with the model unchanged.
    # Twelve of fourteen candidates predicted within 5.5% of each other (502.8-530.3 ms), errors
    # -2.0..+0.3%: Spearman 0.85. GPipe's peaks (14 micro-batches in flight, far over the limit) 1.2%
    # over the model's.
    "h3328-t3584-l9-m14": ("spearman", "peaks"),
    # Every plan but the synthesised ones +1..+4% (V-Min +3.8%, DualPipe +3.1%): the duty exponent fitted
    # from the run, 0.33 with its rank 0 busy 0.56 of the step, slows the busier candidates too much.
    # GPipe's peaks (28 micro-batches in flight) 7.3% over the model's, looped-bfs's 4.8%.
    "h2688-t3072-l6-m28": ("families", "peaks"),
    # h7680 (busy 0.64 and 0.89, a ratio of 1.39) passes every line at the device's 0.25 (every family
    # within 1.9%); the 0.34 it fitted put the families +1..+3.8%.
    # Measured after I and W were learned from the calibrating run's B (2026-11-27). Thirteen
    # candidates within 3.4% of each other (317.5-327.1 ms predicted): the pick, ZB-V, measured 2.4%
    # over V-Half (its W on rank 1 +4.3% over the model), Spearman 0.74 in so narrow a field, and
    # GPipe -3.0% (its first rank's B -6.7%, F +6.4%). GPipe's peaks (10 micro-batches in flight, far
    # over the limit) measured 1.9% over the model's.
    "h4608-t2048-l7-m10": ("pick", "spearman", "families", "peaks"),
    # Run again as h2048-t3072-l12-m24: every family within 1.9% (looped-bfs -0.5%, was -10.3%), the
    # pick the fastest; fourteen candidates within 4%, Spearman 0.78.
    "h2304-t2560-l14-m20": ("spearman",),
    # Seven timed steps a candidate from here on (STEADY_SHAPES, fixed before their run, 2026-11-27 05:10
    # UTC). h3840: GPipe's peak (12 micro-batches in flight, far over the limit) 1.2% over the model's,
    # and V-Min +3.04% at the device's exponent (busy 0.68 and 0.94: 1.38); every check passed at the
    # 0.34 the run fitted.
    # Under the clock law (alpha 0.3025) every family within 1.9%; GPipe's peaks as before.
    "h3840-t2560-l8-m12": ('peaks',),
    # h6656: every family within 2.7% (all -1.1..-2.7%), the pick 0.4% from the fastest; the eleven
    # plans that fit measured within 3.1% of each other, and Spearman is 0.8996 (the launch's own
    # order, even steps against odd, 0.97).
    # h6656-t1536-l5-m10: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # h2304 again with seven steps (05:19 UTC): Spearman 0.97 (0.78 with two steps). The V schedules'
    # default orders, capped at pp 2 to one micro-batch at a time, fit the bench's limit where no other
    # named family does, and the pick (v-half) is the fastest that fits; the plans that hold one
    # micro-batch measure slower than the model: v-half and v-min -3.1%, synth -6.9% (a message
    # latency per hop the model does not carry, over every hop of every micro-batch). At the device's
    # exponent (busy 0.78 and 0.96) DualPipe -4.3%, interleaved-zb -4.2%, synth within its 5%.
    "h2304-t2560-l14-m20-s7": ("families",),
    # BALANCED_SHAPES (fixed before their run, 2026-11-27 07:14 UTC) and four shapes again (07:27 UTC),
    # calibrated at the balanced split. As run (exponents fitted from busy-share ratios down to 1.15),
    # h2560-t5120 missed by looped-bfs -3.27%, h3584 by V-Half's pattern +4.8%, h7680 by ZB-V -3.7%:
    # fitted at 0.36, 0.17 and 0.16 from ranks 1.2 apart, where the last stage's own slowness moves the
    # exponent by 0.2; at the device's 0.25 each passes its families line. Left: h2048-t6144 (every family
    # -3.8..+0.2%, interleaved-1f1b -3.8%, looped-bfs -3.5%), h2688 (V-Half +4.6% at the device's
    # exponent, +1.8% at the 0.34 it fitted) and h7680's pick, ZB-V 2.4% over ZB-H2 (0.4% launch spread).
    "h2048-t6144-l4-m10-bal": ("families",),
    # h2688-t3072-l6-m28-bal: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # h7680-t2048-l4-m6-bal: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # The user model (USER_SHAPES, 6 and 12 micro-batches) and ten shapes again at the balanced
    # split, 2026-11-27 09:11-09:36 UTC, the model unchanged since the 1.4 ratio. The user model and
    # h2304, h3328, h5120 pass every line. Layers of 0.12 and 0.25 ms (h2048-t1024, h2048-t2048): the
    # plans with two chunks a rank measured 5-16% slower than ranked (more cross-rank waits, each one
    # the host's to refill), the one-chunk ones 4-6% faster on h2048-t1024 (launch spread 4.0%), and
    # the pick, the capped V-Half at one micro-batch in flight, 7.9% over the synthesised order.
    "h2048-t1024-l16-m8-bal": ("pick", "spearman", "families"),
    "h2048-t2048-l4-m32-bal": ("spearman", "families"),
    # Narrow fields (every candidate within 2.5% and 2.2%): Spearman 0.81 and 0.85.
    "h2048-t3072-l12-m24-bal": ("spearman",),
    # Under the clock law the pick, the synthesised order, measured 2.5% over ZB-H2 (ranked 1.0% under it).
    "h4096-t1024-l8-m8-bal": ('pick', 'spearman'),
    # The capped V orders at one micro-batch in flight 3.1% and 4.1% faster than ranked (h2688's was
    # 4.6% slower: the law below the run's duties, either way by shape); h6656's DualPipe -3.1%.
    # h3840-t2560-l8-m12-bal: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # h4608-t2048-l7-m10-bal: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # h6656-t1536-l5-m10-bal: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # SIXTH_SHAPES (fixed before their run, 2026-11-27 11:56 UTC, the model unchanged): h5888 passes every
    # line; h2944 every line but Spearman (0.82): thirteen of fourteen candidates within 4.3% of each other,
    # every family within 2.9% (capped V-Half +2.9%), the launch's own order against itself 0.92.
    "h2944-t3584-l10-m18": ("spearman",),
    # SEVENTH_SHAPES and EIGHTH_SHAPES (fixed before their run, 2026-11-27 14:16 and 14:24 UTC, the model
    # unchanged, every rank's SM clock recorded): h4864 and h2432 pass every line; h3200 every line but the
    # families: the capped V-Half +4.2%, its ranks at 1875 and 1815 MHz against the calibrating run's 1515
    # and 1485 (test below).
    # Under the clock law (alpha 0.3025, each rank no faster than at its top clock) every family within 2.4%, but
    # Spearman 0.882 (fourteen candidates, the launch's own retest below 0.95).
    "h3200-t5632-l5-m14": ('spearman',),
    # h2048-t1024-l16 a third time (2026-11-27 14:44 UTC), with the clock record: as before, the host sets the
    # pace of 0.12 ms layers, and every plan but DualPipe ran 1-22% slower than ranked (looped-bfs -21.8%,
    # the capped V-Half -18.3%); the pick, V-Half, 7.5% over the synthesised order. The record shows no
    # power cap at work: the calibrating run's ranks at 1830 and 1935 MHz, 417 and 407 W of 700 (yet the
    # cap reason set in 90-100% of samples: bursts over the limit), every V order's at 1980 MHz.
    "h2048-t1024-l16-m8-clk": ("pick", "spearman", "families"),
    # NINTH_SHAPES (fixed before their run, 2026-11-27 14:57 UTC, the model unchanged): h6400 passes every
    # line; h3712 every line but the families, by the capped V-Half and V-Min alone (+3.3% each, their ranks
    # at 1800-1890 MHz), the rest -2.6..-0.1%.
    # h3712-t3072-l6-m12: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # TENTH_SHAPES (drawn and committed before their run, 2026-11-27 17:57 UTC, the model unchanged; only the
    # first ran in the time the GPUs were lent): every line but the families, by the two plans that hold all
    # 24 micro-batches at once (peaks 66 GB against a limit of 11 GB), GPipe -2.8% and looped-BFS -3.2%;
    # every plan that fits within 1.2%, the pick the fastest that fits.
    "h3840-t5376-l4-m24": ("families",),
    # The tenth group's other two, and h3840 again, on 2 H100s (2026-11-27 20:15-20:39 UTC, the model
    # unchanged): h3328 every line but the families, by the capped V-Half alone (+3.3%; every other plan
    # -2.5..-1.1%); h3200-t3840-l11 every line but Spearman (0.79: eleven plans within 2.6% of each other,
    # the launch's own order against itself 0.99), GPipe and looped-BFS not run (peaks of 96 GB predicted,
    # over the card); h3840 as on the H200s, GPipe -3.1% and looped-BFS -3.7% holding all 24 micro-batches.
    # h3328-t4352-l6-m26: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    "h3200-t3840-l11-m32": ("spearman",),
    "h3840-t5376-l4-m24-h100": ("families",),
    # ELEVENTH_SHAPES (drawn by `bench/draw_shapes.py tune 202611280000 3` and committed before their run, 2 H200s,
    # 2026-11-27 22:58-23:10 UTC, the model unchanged): h2688-t1792-l12-m6 and h3968-t1792-l16-m5 pass every line
    # (h3968's pick, V-Half, 0.35% over V-Min, within the launch spread); h2048-t6912-l7-m20 every line but the
    # families, by DualPipe alone (-3.07%; every other plan -2.2..+1.0%), until the clock rule (its ranks busy
    # 0.96 and 0.82 at 1515 and 1665 MHz: alpha 0.32) brought it within 3%.
    # TWELFTH_SHAPES (drawn the same way, seed 202611280100, 2 H200s, 23:18-23:25 UTC) and THIRTEENTH_SHAPES
    # (seed 202611280200, 23:32 UTC): all three pass every line.
    # FOURTEENTH_SHAPES, the first at pp 4 (4 H200s, 2026-11-28; drawn by `draw_shapes.py tune 202611280300 3 --pp 4`
    # and committed before their run, the model unchanged): all three pick within 1.3% of the fastest that fits,
    # Spearman 0.989-0.996, nothing over the limit; h3456 passes every line. h3584-t5888 (m = 5: its calibrating
    # run's ranks 0.60-0.65 busy) predicts every busy plan 3-6% slow (V-Half +5.6%, V-Min +5.0%): the device's
    # exponent 0.25 between 0.63 and 0.9 busy is more than these ranks slowed. h2176-t1792 (0.25 ms layers, under
    # the 0.3 ms the host keeps pace with) measured the synthesised order 10.8% and V-Min 7.0% slower than ranked.
    "h3584-t5888-l9-m5-p4": ("families",),
    "h2176-t1792-l11-m15-p4": ("families",),
    # SIXTEENTH_SHAPES and SEVENTEENTH_SHAPES' second (2 H200s, drawn and committed before their run): every line.
    # SEVENTEENTH_SHAPES' first, which hung `pptl run` until sync-send stopped holding every SEND (2026-11-28
    # 03:58 UTC): every line but the families, DualPipeV and ZB-V -3.1% (their second rank at 1455 MHz at its
    # power cap), the capped V-Half and V-Min +3.2% and +3.1% (1815-1920 MHz): the device's 0.25 between the
    # calibrating run's 0.86-0.93 busy and the V orders' is less than the clocks moved.
    "h2816-t5632-l6-m13": ("families",),
    # EIGHTEENTH_SHAPES (drawn by `draw_shapes.py tune 202611280700 2` and committed before their run, 2 H200s,
    # 04:09-04:16 UTC): h2816-t3584 passes every line; h3456-t1792 every line but the families, ZB-H2 -3.38% and
    # ZB-H1 -3.30% (the rest -2.5..+1.8%), until the clock rule: every line.
    # NINETEENTH_SHAPES (drawn by `draw_shapes.py tune 202611280800 2` and committed before their run, 2 H200s,
    # 07:40-07:47 UTC, the ranks at CUDA_DEVICE_MAX_CONNECTIONS=32): h2048-t2560 passes every line (V-Half +2.8%
    # its worst family); h3712-t2048 every line but the families, V-Half +4.6% and V-Min +3.6% (the rest
    # -2.0..+0.7%): the V orders again, measured slower than ranked. The clock rule, fixed before this group was
    # drawn and adopted after its run, brings them within 3%: V-Half +1.5%, V-Min +0.6%, the synthesised order
    # -3.2% (its bound 5%), the rest -0.9..+1.1%.
    # TWENTIETH_SHAPES (seed 202611280900, committed before their run with the clock rule adopted, 2 H200s,
    # 08:00-08:08 UTC): h2304-t6656 passes every line; h2688-t6656 every line but the limit: V-Half and V-Min,
    # ranked at 7,820 MiB on rank 0 under the 8,075 MiB limit, measured 8,127. Its run (and this group's and
    # the nineteenth's) measured base_mib after Executor.prime had dropped the zeroed gradient buffers, so the
    # fit read an input as 4.3 MiB (34.1 MiB); rank 0 of a V order holds 40 of them
    # (test_the_v_orders_fit_with_the_base_a_fixed_run_records).
    "h2688-t6656-l5-m20": ("limit", "peaks"),
    # Run again (2026-11-28 09:45 UTC) once prime kept the gradient buffers: nothing fitting over the limit (8,014
    # MiB), pick and Spearman 0.98 pass; the capped V orders (one micro-batch in flight, [3, 3, 3, 1]) ran 4.0% and
    # 4.7% faster than ranked, where the first launch had them within 3%: its clocks went as duty^-0.59 (alpha
    # 0.33), this one's as duty^-0.43 (alpha 0.24). The rest within 2.9%.
    # h2688-t6656-l5-m20-fixed: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # TWENTYFIRST_SHAPES' first (drawn and committed before its run): a layer's forward 0.31 ms, at the edge of
    # the host-bound layers (docs/tune.md "Short layers"); the candidate launch ran 1.7% slower than the calibrating
    # one and every candidate 1-5% over the model (interleaved -5.2%, its rank 1's F +14%); twelve candidates
    # within 10% where the launch's own retest gives 0.78: Spearman 0.88.
    "h2688-t1536-l6-m25": ("spearman", "families"),
    # TWENTYFIRST_SHAPES' second: every family within 2.2% and the pick the fastest, but fourteen candidates
    # measured within 3% of each other (331.6-341.1 ms), where the launch's own retest gives 0.81: Spearman 0.80.
    "h3072-t1536-l7-m30": ("spearman",),
    # TWENTYSECOND_SHAPES (drawn and committed before their run, 2026-11-28 10:38 UTC): the capped V-Half +3.6%
    # (the calibrating run's ranks busy 1.09 apart, under the clock rule's 1.1: the device's 0.25); and DualPipe -3.6% with Spearman
    # 0.885 (retest 0.896), its prediction (357.9 ms) under its own p05 (359.5): the dense plan's many
    # near-critical paths lengthen the step under the run's per-op jitter (measured 371.1).
    # h3712-t2304-l10-m5: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock).
    # h3456-t5120-l5-m10: every line under the clock law (alpha 0.3025, each rank no faster than at its top clock) (Spearman 0.901, DualPipe -2.0%).
    # Under the clock law (alpha 0.3025, each rank no faster than at its top clock), where the old device exponent
    # passed: the capped V-Half +3.25% on h2048-t2560 (ranks at 0.84 and 0.93 of the top clock); on h3456-t3072
    # Spearman 0.889 (every family within 2.2%); on h4096-t1024 (0.25 ms layers, the host) the synthesised order
    # -5.8%.
    "h2048-t2560-l15-m5": ("families",),
    "h3456-t3072-l7-m12": ("spearman",),
    "h4096-t1024-l8-m8": ("families",),
    # TWENTYFIFTH to TWENTYSEVENTH_SHAPES (drawn by `draw_shapes.py tune 202611281400/1500/1600 2` and committed before
    # their run with the clock law adopted, 2 H200s, 2026-11-28 12:29-12:42 UTC): h4736-t3328 and h2560-t5376 pass
    # every line; h3328-t1792 every line but Spearman (0.88, every candidate within 2.7%, the launch's retest 0.97);
    # h2048-t3584 every line but the families, the capped V-Half +3.6% (at the balanced split +3.0%); h3840-t4608 by
    # looped-BFS alone (-4.1%, all twelve micro-batches in flight, far over the limit); h2176-t2048 (0.295 ms layers,
    # warned of) interleaved 1F1B -4.6%, looped-BFS -3.9%, DualPipe -3.6%.
    "h3328-t1792-l5-m13": ("spearman",),
    "h2048-t3584-l10-m8": ("families",),
    "h3840-t4608-l5-m12": ("families",),
    "h2176-t2048-l5-m24": ("families",),
    # TWENTYEIGHTH and TWENTYNINTH_SHAPES (seeds 202611281700 and 1800, committed before their run, 2 H200s,
    # 13:04-13:12 UTC): three pass every line; h2816-t2816 every line but the families, GPipe -3.1% (twelve
    # candidates -3.6..-0.4%, the launch spread 1.4%).
    "h2816-t2816-l9-m7": ("families",),
    # THIRTIETH_SHAPES (seed 202611281900, committed before its run, 2 H200s, 13:42-13:47 UTC): both picks the fastest
    # that fits; h2944-t1792 Spearman 0.88 with the capped V-Half +4.3% and interleaved 1F1B -4.5% (the old rule:
    # V-Half +6.3%, V-Min +4.3%); h5248-t2048 GPipe -3.1% (all seven micro-batches in flight, far over the limit).
    "h2944-t1792-l10-m21": ("spearman", "families"),
    "h5248-t2048-l12-m7": ("families",),
    # THIRTY-FOURTH to THIRTY-SIXTH_SHAPES (seeds 202611282300-2500, committed before their run, 2 H200s,
    # 17:11-17:47 UTC): five pass every line; h4096-t1536-l7-m26 every line but Spearman (0.84, the launch's own
    # order against itself 0.93): twelve of its fourteen candidates measured within 4.0% of each other (554.4-576.5
    # ms), every family within 2.1%.
    "h4096-t1536-l7-m26": ("spearman",),
    # THIRTY-SEVENTH_SHAPES (seed 202611282600, committed before its run, 2 H200s, 20:39 UTC): h2176-t1536-l7-m8
    # passes every line; h2816-t1280-l13-m6 every line but families: its 0.30 ms layers measured under the model
    # on every family (0.0..3.3%), interleaved ZB the furthest (+3.3%, 89.12 predicted against 86.32).
    "h2816-t1280-l13-m6": ("families",),
    # THIRTY-EIGHTH_SHAPES (seed 202611282700, committed before its run, 20:50-20:53 UTC): h3968-t1536-l7-m9 passes
    # every line; h2304-t3584-l5-m22 misses Spearman (0.46; the launch's own order against itself 0.57) and
    # families (DualPipe -4.6%, ZB-H2 -4.5%, 1F1B -3.4%): its candidates' 255 ms steps alternated, the 1st, 3rd,
    # 5th and 7th timed steps 2-6% slower than the others (1F1B 263-271 against 252-254 ms, where the calibrating
    # run of the same plan ran 251-259 without alternating), on 690 W of a 700 W cap.
    "h2304-t3584-l5-m22": ("spearman", "families"),
}
#: Largest error of any candidate today, per shape where it is above the 9.5% bound of the others: the short
#: layers the host paces. The clock law took h2176-t1792-l11-m15-p4's synthesised order from -13.8% to within 3.4%.
MAX_ERR: dict[str, float] = {"h2048-t1024-l16-m8-bal": 0.168, "h2048-t2048-l4-m32-bal": 0.14,
                             "h2048-t1024-l16-m8-clk": 0.216, "h2048-t1024-l16-m8": 0.112}


@pytest.fixture(scope="module")
def evaluated() -> dict:
    return {p.stem: tune_crossval._evaluate(json.loads(p.read_text())) for p in SHAPES}


def test_every_shape_unlike_the_bench_that_was_measured_is_kept() -> None:
    shapes = [json.loads(p.read_text())["shape"] for p in SHAPES]
    # h2304 measured twice at the even split; fourteen shapes again at the balanced split (<name>-bal);
    # the user model at two micro-batch counts; the sixth group's two, the seventh's two, the eighth's
    # one; h2048-t1024-l16 a third time with the clock record (<name>-clk); the ninth group's two, the tenth's
    # three, the first of them again on H100s (<name>-h100); the eleventh's three, the twelfth's two and the
    # thirteenth's one (bench/draw_shapes.py); the fourteenth's three at pp 4 on 4 GPUs, the sixteenth's two and the
    # seventeenth's two (its first hung the run until tests/test_run_held_sends.py's fix), the eighteenth's two,
    # the nineteenth's two, the twentieth's two; the twentieth's second again (<name>-fixed), the twenty-first's
    # two, the twenty-second's two, the twenty-third's one, the twenty-fourth's one, and the twenty-fifth to
    # thirty-ninth's two each
    assert len(shapes) == 111 and len({s["name"] for s in shapes}) == 93
    assert sorted(s["name"] for s in shapes if s.get("pp", 2) == 4) == [
        "h2176-t1792-l11-m15-p4", "h3456-t2560-l7-m19-p4", "h3584-t5888-l9-m5-p4"]
    assert {s["hidden"] for s in shapes} >= {2048, 4096, 8192}
    assert {s["tokens"] for s in shapes} >= {1024, 8192}
    assert {s["layers"] // 2 for s in shapes} >= {4, 16}
    assert {s["microbatches"] for s in shapes} >= {4, 32}
    assert all(s["head"] >= s["embedding"] for s in shapes)
    # The nineteen held out from the cost model's making keep every candidate's measured ops.
    held_out = {s.name for s in HELD_OUT}
    assert len(held_out) == 19
    for p in SHAPES:
        saved = json.loads(p.read_text())
        kept = saved["shape"]["name"] in held_out or saved.get("calibrate") == "balanced"
        assert all(bool(x.get("ops")) is kept for x in saved["rows"]), p.stem


@pytest.mark.parametrize("name", [p.stem for p in SHAPES])
def test_gpu_shape_re_ranked_offline(evaluated: dict, name: str) -> None:
    ev = evaluated[name]
    c = ev["checks"]
    # Every shape: the pick ran and measured within 2% (or the launch-to-launch spread) of the fastest
    # candidate that fit, and no candidate reported as fitting went over the limit.
    misses = MISSES.get(name, ())
    # Every shape: no candidate reported as fitting went over the limit, and predicted peaks stay upper
    # bounds (1% of noise).
    assert (not c["fitting_over_limit"]) is ("limit" not in misses), c["fitting_over_limit"]
    assert (c["peak_err_min"] >= -0.01) is ("peaks" not in misses), c["peak_err_min"]
    # The pick ran and measured within 2% (or the launch-to-launch spread) of the fastest candidate that fit.
    assert c["pick_ok"] is ("pick" not in misses), (ev["pick"], c["pick_gap"], c["launch_spread"])
    assert (c["spearman"] >= 0.9) is ("spearman" not in misses), c["spearman"]
    assert c["families_ok"] is ("families" not in misses), c["family_err"]
    assert c["max_abs_err"] <= MAX_ERR.get(name, 0.095), c["family_err"]


def test_split_backward_w_runs_over_the_model_and_i_under() -> None:
    """The I:W split derived from a run of full backwards (FLOPs and bytes at one GEMM rate) gives W
    too little of B: on h5120-t1024-l10-m6 every rank of every plan with I and W ran its W over the model
    and further over it than its I, by 5.8 points or more (W +0.2..+9.4%, I -12.8..+0.7% under the clock
    law; +1.0..+9.5% and -12.1..-0.6% at the device's old 0.25)."""
    saved = json.loads((DATA / "h5120-t1024-l10-m6.json").read_text())
    rows = [a for a in tune_crossval.attribute(saved) if any(k == "W" for _, k in a.kinds)]
    assert len(rows) >= 9
    for a in rows:
        for r in (0, 1):
            assert a.kinds[(r, "W")] > 0.001 and a.kinds[(r, "W")] > a.kinds[(r, "I")] + 0.055, (a.label, a.kinds)


FRESH = [s.name for s in tune_crossval.FRESH_SHAPES + tune_crossval.LATER_SHAPES]


@pytest.mark.parametrize("name", FRESH)
def test_fresh_shapes_ran_their_pick_and_learned_i_and_w_from_the_run(name: str) -> None:
    """The eight shapes of 2026-11-27: the launch ran the pick (a row of its own, measured), and the
    calibrating 1F1B run marked every B's I part, which calibration took for I and W; the share of
    I it measured inside B is within 2 points of what the same shape's ZB-H1 measured for its own I
    and W ops."""
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
    """Every SEND of every candidate (every family) of the twelve shapes with ops takes under 2 ms (the
    median one 0.06 ms), which is what the calibrating run's ``send_hold`` says."""
    held_out = {s.name for s in HELD_OUT}
    seen = 0
    for p in SHAPES:
        if p.stem not in held_out:
            continue
        for x in json.loads(p.read_text())["rows"]:
            assert all(o[5] - o[4] < 2.0 for o in x["ops"] if o[1] == "SEND"), (p.stem, x["label"])
            seen += 1
    assert seen >= 12 * 9


def test_rank_error_parts_by_hand() -> None:
    """A rank measured 9.5 ms busy in a 10 ms step (duty 0.95) that the model timed at 10 ms full-duty and
    duty 1.0, alpha 0.3: the law at the measured duty gives 10 * 0.95 ** 0.3, so the level is
    ln 0.95 - 0.3 ln 0.95 = 0.7 ln 0.95 = -0.035905 and the duty part 0.3 ln 0.95 = -0.015388; together
    ln(9.5 / 10)."""
    p = tune_crossval.rank_error_parts(9.5, 10.0, 10.0, 1.0, 0.3)
    assert p.measured_duty == pytest.approx(0.95)
    assert p.level == pytest.approx(-0.0359052, abs=1e-6)
    assert p.duty == pytest.approx(-0.0153879, abs=1e-6)
    assert p.total == pytest.approx(-0.0512933, abs=1e-6)
    # Predicted duty exactly the measured one: no duty part, the whole error is the level.
    q = tune_crossval.rank_error_parts(8.0, 10.0, 10.0, 0.8, 0.3)
    assert q.duty == 0.0
    assert q.level == pytest.approx(0.7 * -0.2231436, abs=1e-6)
    # alpha 0: duty does not enter; a rank busy the whole step (duty 1): the level is ln(measured / full).
    z = tune_crossval.rank_error_parts(8.0, 10.0, 10.0, 0.5, 0.0)
    assert (z.level, z.duty) == (pytest.approx(-0.2231436, abs=1e-6), 0.0)
    w = tune_crossval.rank_error_parts(10.0, 10.5, 10.0, 0.9, 0.3)
    assert w.level == pytest.approx(-0.0487902, abs=1e-6)
    assert w.duty == pytest.approx(-0.3 * -0.1053605, abs=1e-6)


def _ev(rank: int, kind: str, stage: int, start: float, end: float, lane: str = "compute") -> dict:
    return {"rank": rank, "lane": lane, "kind": kind, "stage": stage, "start": start, "end": end}


def test_early_speedup_by_hand() -> None:
    """Window 5 ms from the first event (a receive posted at 0). Rank 0: F of stage 0 took 0.9 early and
    1.0, 1.2 later (mean 1.1); B took 2.0 starting at 4.99 (early) and 2.5 later; its W only early (no
    later W to compare: left out). (0.9 + 2.0) / (1.1 + 2.5) - 1 = -0.194444. Rank 1's first F starts at
    exactly 5.0: late, so rank 1 has no early op and no entry."""
    events = [_ev(0, "RECV", 0, 0.0, 50.0, lane="recv"),
              _ev(0, "F", 0, 0.1, 1.0), _ev(0, "F", 0, 10.0, 11.0), _ev(0, "F", 0, 20.0, 21.2),
              _ev(0, "B", 0, 4.99, 6.99), _ev(0, "B", 0, 30.0, 32.5), _ev(0, "W", 0, 1.0, 2.0),
              _ev(1, "F", 1, 5.0, 6.0), _ev(1, "F", 1, 7.0, 8.0)]
    assert tune_crossval.early_speedup(events, 5.0) == {0: pytest.approx(2.9 / 3.6 - 1)}
    # The F alone: 0.9 against 1.1.
    assert tune_crossval.early_speedup(events[:4], 5.0) == {0: pytest.approx(0.9 / 1.1 - 1)}
    assert tune_crossval.early_speedup([], 5.0) == {}


#: The twelve two-step shapes with every candidate's ops, where the per-rank analysis below was made.
#: The twelve shapes with every op and an even-split calibrating run, which the duty analyses below read.
WITH_OPS = sorted(s.name for s in HELD_OUT
                  if s not in tune_crossval.STEADY_SHAPES + tune_crossval.BALANCED_SHAPES)


@pytest.fixture(scope="module")
def duty_splits() -> dict[str, list]:
    return {n: tune_crossval.duty_split(json.loads((DATA / f"{n}.json").read_text())) for n in WITH_OPS}


def test_two_chunk_rank0_error_is_the_shapes_level_not_the_family(duty_splits: dict[str, list]) -> None:
    """Rank 0 of the families holding two stages a rank measured faster than the model; per shape, its mean
    error (busy time, in logs) against the one-chunk families' rank 0 on the same shape: on eight of the
    twelve shapes with ops within 1.5 points (the error is the shape's, as the calibrating run set the
    rank's level); on h2048-t3072, h2304, h3328 and h5120 (6-24 micro-batches, hidden 2048-5120) 2.1, 2.9,
    2.4 and 2.0 points under the clock law, of which 23-46% (1.0, 1.2, 1.0 and 0.45) is the duty part: the
    model ranks rank 0 busier than it measured, because rank 1, which bounds these steps, ran over its level.
    (At the device's old 0.25 the first three were 2.0, 2.9 and 2.5 points, 34-40% duty, and h5120 within 1.5.)"""
    gaps = {}
    for name, rows in duty_splits.items():
        one = [d.ranks[0] for d in rows if d.chunks == 1]
        two = [d.ranks[0] for d in rows if d.chunks == 2]
        assert one and two, name

        def mean(xs: list[float]) -> float:
            return sum(xs) / len(xs)

        gaps[name] = (mean([p.total for p in one]) - mean([p.total for p in two]),
                      mean([p.duty for p in one]) - mean([p.duty for p in two]))
    long = {"h2048-t3072-l12-m24", "h2304-t2560-l14-m20", "h3328-t3584-l9-m14", "h5120-t1024-l10-m6"}
    assert len(gaps) == 12
    for name, (gap, duty) in gaps.items():
        if name in long:
            assert 0.019 < gap < 0.03 and 0.2 * gap < duty < 0.5 * gap, (name, gap, duty)
        else:
            assert abs(gap) < 0.015, (name, gap)


def test_timing_at_the_measured_duty_does_not_mend_the_steps(duty_splits: dict[str, list]) -> None:
    """Each rank's factor at the duty it measured (``u ** alpha``) in place of the predicted one, on every
    measured candidate of the twelve shapes with ops: the steps' RMS error is 1.66% against 1.59% as ranked
    (1.91 against 1.85 with the exponent fitted from busy-share ratios down to 1.15). Predicting the duty
    better cannot fix the per-rank errors; they are in the rank's level."""
    import math

    rows = [d for ds in duty_splits.values() for d in ds]
    assert len(rows) == 168

    def rms(xs: list[float]) -> float:
        return math.sqrt(sum(x * x for x in xs) / len(xs))

    ranked, at = rms([d.error for d in rows]), rms([d.error_at_measured_duty for d in rows])
    assert ranked == pytest.approx(0.0159, abs=5e-4) and at == pytest.approx(0.0166, abs=5e-4)
    assert at > ranked


@pytest.mark.parametrize("name", [p.stem for p in SHAPES])
def test_calibrating_runs_busier_rank_opens_fast(name: str) -> None:
    """Every calibrating 1F1B run at the even split: its busier rank (1: the head's stage) ran its ops of
    the first 60 ms 2.7-12.5% faster than its later ops of the same stage and kind (the GPU's clock falls
    once its power reaches the cap). The exception is h2048-t1024-l16-m8, whose 74 ms step is nearly all
    opening (-0.1%). At the balanced split (eighteen runs) rank 0, which starts the step, opens 1.0-15.0% fast
    whichever rank is the busier (h3456: rank 1 at 0.93 busy against 0.87, +0.8%); the opening's size is
    no constant of a shape: h2048-t6144 and h2688 open by 2.3-3.7 and 1.0 at the balanced split. At pp 4, 5
    micro-batches (h3584-t5888-l9-m5-p4), rank 0 is the exception: 7.9% slower early, its other three ranks 8.5-9.6%
    faster; the other two pp-4 runs open fast on every rank (2.2-12.1%). At the balanced split with 5
    micro-batches of a 630 ms step (h5632-t2304-l15-m5, drawn later) it is rank 1 that opens fast (11.5%),
    rank 0 1.0% slower early, and so again on two drawn later still (h4736-t3328-l15-m5, 5 micro-batches: 11.1%,
    rank 0 0.4% slower; h2944-t6400-l7-m11, 11: 11.8%, rank 0 0.4% slower; h4992-t3840-l15-m4, 4: 10.9%, rank 0
    0.9% faster): which rank opens fast is no constant of the split either, but one of them does, by 1-15%, on
    every balanced run."""
    saved = json.loads((DATA / f"{name}.json").read_text())
    early = tune_crossval.early_speedup(saved["base"]["events"], tune_crossval.EARLY_MS)
    if name == "h3584-t5888-l9-m5-p4":
        assert early[0] > 0.07 and all(-0.1 < early[r] < -0.08 for r in (1, 2, 3)), early
    elif name.endswith("-p4"):
        assert all(-0.13 < v < -0.02 for v in early.values()) and len(early) == 4, early
    elif name == "h2048-t1024-l16-m8":
        assert abs(early[1]) < 0.01
    elif name in ("h2048-t1024-l16-m8-clk", "h2176-t2048-l15-m4", "h2176-t1536-l7-m8"):
        # their steps (64.4 and 69.0 ms) end 4.4 and 9.0 ms after the window, and each (stage, kind)'s last op
        # starts inside it (h2176-t2048's at 59.8 ms): no (stage, kind) has an op on both sides of it;
        # h2176-t1536's 58.1 ms step ends inside it
        assert early == {}
    elif name == "h4992-t3840-l15-m4":
        # rank 1 opens 10.9% fast, rank 0 0.90% (on the 0.9% line the others are held to, to the fifth digit)
        assert -0.115 < early[1] < -0.10 and -0.0095 < early[0] < -0.0085, early
    elif saved.get("calibrate") == "balanced":
        assert -0.151 < min(early.values()) < -0.009, early
        rank1_opens = ("h5632-t2304-l15-m5", "h4736-t3328-l15-m5", "h2944-t6400-l7-m11")
        assert (early[0] < -0.009) is (name not in rank1_opens), early
    else:
        assert -0.13 < early[1] < -0.025, early


def test_retest_ranks_the_even_steps_against_the_odd() -> None:
    from _tune_common import retest

    rows = [{"step_ms": [1.0, 2.0]}, {"step_ms": [3.0, 4.0]}, {"step_ms": [5.0, 6.0]}]
    assert retest(rows) == pytest.approx(1.0)
    # the odd steps in the other order: medians (1, 3, 5) against (6, 4, 2)
    assert retest([{"step_ms": [1.0, 6.0]}, {"step_ms": [3.0, 4.0]}, {"step_ms": [5.0, 2.0]}]) == pytest.approx(-1.0)
    # three steps: the even ones' median is the mean of two (10, 20 -> 15), the odd one alone
    rows3 = [{"step_ms": [10.0, 0.0, 20.0]}, {"step_ms": [1.0, 9.0, 1.0]}, {"step_ms": [30.0, 5.0, 30.0]}]
    assert retest(rows3) == pytest.approx(-0.5)  # even (15, 1, 30) ranks (1, 0, 2); odd (0, 9, 5) ranks (0, 2, 1)
    # a row with one step does not count, and fewer than three rows with two give no value
    assert retest(rows[:2] + [{"step_ms": [7.0]}, {"step_ms": None}]) is None


def test_two_step_launches_did_not_reproduce_their_own_order() -> None:
    """Why the cross-validation times seven steps: in the stored two-step launches (three on one), the
    candidates' order from their even steps against their odd ones is under 0.9 on six shapes."""
    from _tune_common import retest

    values = {p.stem: retest(json.loads(p.read_text())["rows"]) for p in SHAPES
              if json.loads(p.read_text()).get("steps", 2) <= 3}
    assert sum(v < 0.9 for v in values.values()) == 6
    assert round(min(values.values()), 2) == 0.62  # h4608-t2048-l7-m10, three steps


@pytest.mark.parametrize("name", [s.name for s in tune_crossval.BALANCED_SHAPES])
def test_balanced_shapes_calibrated_on_the_plan_tune_writes_and_read_it_back(name: str) -> None:
    """BALANCED_SHAPES' calibrating run is `pptl tune --calibration-plan`'s plan (1F1B at the balanced
    split, the embedding and head as run blocks), and calibration reads that split from the run."""
    from pptl.tune.model import tune_config_from_mapping
    from pptl.tune.split import balanced_split
    from pptl.tune.write import calibration_config

    saved = json.loads((DATA / f"{name}.json").read_text())
    assert saved["calibrate"] == "balanced"
    tc = tune_config_from_mapping(saved["config"], source=name)
    ran = saved["base"]["meta"]["extra"]["workload"]["stage_layers"]
    assert ran == list(calibration_config(tc).workload.stage_layers)
    split = list(balanced_split(tc.model, 2))
    assert ran == [split[0] + saved["shape"]["embedding"], split[1] + saved["shape"]["head"]]
    assert split != [saved["shape"]["layers"] // 2] * 2  # the head outweighs the embedding: not the even split
    assert any(f"split {split}" in n for n in saved["notes"]), saved["notes"]


@pytest.mark.parametrize("name,short", [("h2048-t1024-l16-m8-bal", True), ("h2048-t2048-l4-m32-bal", True),
                                        ("h2048-t3072-l12-m24-bal", False), ("h4096-t1024-l8-m8-bal", False)])
def test_short_layers_are_named_where_two_chunk_plans_ran_slow(name: str, short: bool, tmp_path: Path) -> None:
    """The two stored shapes whose layers run 0.12 and 0.25 ms get the note (their two-chunk plans ran
    5-16% slower than ranked); those of 0.37 and 0.44 ms, every family within 3%, do not."""
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((DATA / f"{name}.json").read_text())
    base = tmp_path / "base.measured.json"
    base.write_text(json.dumps(saved["base"]))
    _, _, notes = calibrate_tune(tune_config_from_mapping(saved["config"], source=name), base)
    assert any(n.startswith("a layer's forward takes") for n in notes) is short, notes
    worst_two_chunk = min(tune_crossval._evaluate(saved)["checks"]["family_err"][f]
                          for f in ("interleaved-zb", "looped-bfs", "v-half"))
    assert (worst_two_chunk < -0.05) is short


def _busy(ops: list, rank: int, span: float) -> float:
    """Share of the step the rank computed (its compute ops' union over the step)."""
    spans = sorted((o[4], o[5]) for o in ops if o[0] == rank and o[1] in ("F", "B", "I", "W", "FB"))
    total, end = 0.0, float("-inf")
    for a, b in spans:
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total / span


def test_the_clock_follows_the_busy_share_under_the_power_cap() -> None:
    """The seventh launch recorded each rank's SM clock (`pptl run`, NVML): every rank of every plan sat on
    the 700 W cap (the power-cap reason set in every sample), and its clock followed how busy it was. Ranks
    busy 0.85 or more ran at 1425-1575 MHz; the capped V orders' ranks, busy 0.64-0.66, at 1725-1875 MHz;
    the calibrating runs' ranks (busy 0.88-0.93) at 1470-1515 MHz. That is why the capped V orders run
    faster than ranked (docs/tune.md, "The clock says it is the power cap")."""
    points = []
    for name in ("h4864-t2304-l8-m10", "h3200-t5632-l5-m14"):
        saved = json.loads((DATA / f"{name}.json").read_text())
        base = saved["base"]["meta"]["extra"]["gpu"]
        assert all(1470 <= base[r]["sm_mhz"] <= 1515 and base[r]["power_capped"] == 1.0 for r in ("0", "1"))
        for row in saved["rows"]:
            for r in (0, 1):
                g = row["gpu"][str(r)]
                assert g["power_limit_w"] == 700.0 and g["power_capped"] == 1.0
                points.append((_busy(row["ops"], r, row["measured_ms"]), g["sm_mhz"], row["family"]))
    busy = [(u, f) for u, f, _ in points if u >= 0.85]
    assert len(busy) == 46 and all(1425 <= f <= 1575 for _, f in busy)
    v_half = [(u, f) for u, f, fam in points if fam in ("v-half", "v-min") and u < 0.7]
    assert len(v_half) == 6 and all(0.63 <= u <= 0.67 and 1725 <= f <= 1875 for u, f in v_half)


def test_offline_rerank_with_the_exponent_fixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # h3712-t3072-l6-m12 missed the families line at the old device exponent 0.25 by the capped V-Half and V-Min
    # alone (+3.3%, their ranks at 1800-1890 MHz); under the clock law (0.3025, each rank no faster than at its
    # top clock) their busier rivals slow more and every family is within 3%: what docs/benchmarks.md's offline
    # study counts. Fixed at 0.25 (the floor kept) it misses again.
    (tmp_path / "h3712-t3072-l6-m12.json").write_text((DATA / "h3712-t3072-l6-m12.json").read_text())
    assert tune_crossval._offline(tmp_path) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 launches: pick 1, spearman >= 0.9 1, families 1"
    assert tune_crossval._offline(tmp_path, 0.25) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 launches: pick 1, spearman >= 0.9 1, families 0"


def test_the_clock_law_holds_each_rank_at_its_top_clock(tmp_path: Path) -> None:
    """h4864-t2304-l8-m10's calibrating run: ranks busy 0.8985 and 0.9049 at 1470 and 1485 MHz of 1980, held by
    the cap. alpha 0.55 x 0.55 = 0.3025; rank 1's floor (1485 / 1980) ** 0.55 = 0.75 ** 0.55 = 0.85366, times
    its busy share's 0.9049 ** 0.3025 = 0.97022: 0.82824 of its full-duty time. Given in the config, the
    exponent is the config's and the floor follows it: 0.85366 x 0.9049 ** 0.1 = 0.84515."""
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((DATA / "h4864-t2304-l8-m10.json").read_text())
    base = tmp_path / "base.measured.json"
    base.write_text(json.dumps(saved["base"]))
    cfg = {k: v for k, v in saved["config"].items() if k != "families"}
    tc, _, notes = calibrate_tune(tune_config_from_mapping(cfg, source="t"), base)
    assert tc.alpha == pytest.approx(0.3025)
    assert tc.duty_floor[1] == pytest.approx(0.82824, abs=2e-5)
    assert tc.duty_floor[0] == pytest.approx((1470 / 1980) ** 0.55 * 0.89853 ** 0.3025, abs=2e-5)
    said = [n for n in notes if n.startswith("each rank no faster")]
    assert said == ["each rank no faster than at its top clock: rank 0 ran at 1470 of 1980 MHz (its ops at least "
                    "x0.822 of their full-duty time), rank 1 ran at 1485 of 1980 MHz (its ops at least x0.828 of "
                    "their full-duty time)"]
    tc, _, _ = calibrate_tune(tune_config_from_mapping({**cfg, "device": {"duty_exponent": 0.1}}, source="t"), base)
    assert tc.alpha == 0.1 and tc.duty_floor[1] == pytest.approx(0.84515, abs=2e-5)


def test_a_rank_is_timed_no_faster_than_its_floor() -> None:
    """The same candidate timed with every rank's floor at 1 (no rank faster than at full duty) takes the
    full-duty step, whatever alpha says; floors at 0 leave the duty law alone: an idle rank's ops shorter."""
    from pptl.tune import tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((DATA / "h4864-t2304-l8-m10.json").read_text())
    cfg = {k: v for k, v in saved["config"].items() if k != "families"}
    cfg["families"] = ["gpipe"]
    full = tune(tune_config_from_mapping({**cfg, "device": {"duty_exponent": 0.0}}, source="t")).best
    law = tune_config_from_mapping({**cfg, "device": {"duty_exponent": 0.3}}, source="t")
    held = tune(replace(law, duty_floor={0: 1.0, 1: 1.0})).best
    free = tune(law).best
    assert full is not None and held is not None and free is not None
    assert held.step == pytest.approx(full.step, rel=1e-12)
    assert free.step < full.step


def test_clock_exponent_reads_how_the_clocks_went_with_duty() -> None:
    """Ranks busy 0.5 and 1.0 at 2000 and 1000 MHz: clock ~ duty^-1 (ln 2 / ln 2), busy ratio 2. A third rank
    busy 0.25 at 4000 MHz keeps a = 1 (every point on the line) and makes the ratio 4."""
    from pptl.power import clock_exponent

    two = {"0": {"sm_mhz": 2000.0}, "1": {"sm_mhz": 1000.0}}
    ratio, a = clock_exponent(two, {0: 0.5, 1: 1.0})
    assert ratio == pytest.approx(2.0) and a == pytest.approx(1.0)
    ratio, a = clock_exponent({**two, "2": {"sm_mhz": 4000}}, {0: 0.5, 1: 1.0, 2: 0.25})
    assert ratio == pytest.approx(4.0) and a == pytest.approx(1.0)


@pytest.mark.parametrize("gpu,duty", [
    ({"0": {"sm_mhz": 2000.0}, "1": {"sm_mhz": 1000.0}}, {0: 0.7, 1: 0.7}),      # equally busy: no slope
    ({"0": {"sm_mhz": 2000.0}}, {0: 0.5, 1: 1.0}),                                 # one rank with a clock
    ({"0": {"sm_mhz": True}, "1": {"sm_mhz": 1000.0}}, {0: 0.5, 1: 1.0}),          # a bool is no clock
    ({"0": {"sm_mhz": -5.0}, "1": {"sm_mhz": 1000.0}}, {0: 0.5, 1: 1.0}),
    ({"0": {"sm_mhz": 2000.0}, "1": {"sm_mhz": 1000.0}}, {0: 0.0, 1: 1.0}),      # busy 0: no log
    ({"x": {"sm_mhz": 2000.0}, "1": {"sm_mhz": 1000.0}}, {0: 0.5, 1: 1.0}),        # not a rank
    ([1, 2], {0: 0.5, 1: 1.0}), (None, {0: 0.5, 1: 1.0})])
def test_clock_exponent_needs_two_ranks_with_clocks_and_different_duty(gpu: object, duty: dict) -> None:
    from pptl.power import clock_exponent

    assert clock_exponent(gpu, duty) is None


@pytest.mark.parametrize("gpu,want", [
    ({"0": {"sm_mhz": 1485.0, "max_sm_mhz": 1980}, "1": {"sm_mhz": 1980, "max_sm_mhz": 1980}},
     {0: (1485.0, 1980.0), 1: (1980.0, 1980.0)}),
    ({"0": {"sm_mhz": 1995.0, "max_sm_mhz": 1980}, "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}},   # a median
     {0: (1980.0, 1980.0), 1: (1500.0, 1980.0)}),                                                  # over the top
    ({"0": {"sm_mhz": 1485.0, "max_sm_mhz": 1980}}, None),                                     # rank 1 missing
    ({"0": {"sm_mhz": 1485.0, "max_sm_mhz": None}, "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}}, None),
    ({"0": {"sm_mhz": True, "max_sm_mhz": 1980}, "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}}, None),
    ({"0": {"sm_mhz": 0.0, "max_sm_mhz": 1980}, "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}}, None),
    ({"0": {"sm_mhz": 1485.0, "max_sm_mhz": 1e5}, "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}}, None),
    ({"0": [1485.0], "1": {"sm_mhz": 1500.0, "max_sm_mhz": 1980}}, None),
    ([1, 2], None), (None, None)])
def test_rank_clocks_needs_every_ranks_clock_and_top(gpu: object, want: dict | None) -> None:
    from pptl.power import rank_clocks

    assert rank_clocks(gpu, [0, 1]) == want


#: h2688-t6656-l5-m20: a block's weights, 8 h^2 + 5 h bf16 elements, (8 x 2688^2 + 5 x 2688) x 2 B in MiB; as much
#: again for its zeroed gradient buffer.
H2688_BLOCK_MIB = (8 * 2688**2 + 5 * 2688) * 2 / 2**20


def _with_grad_buffers(saved: dict) -> None:
    """h2688-t6656-l5-m20's saved launch with the base a fixed run records: its calibrating 1F1B's [7, 6] blocks'
    gradient buffers added to each rank's base_mib."""
    for rank, blocks in (("0", 7), ("1", 6)):
        saved["base"]["meta"]["extra"]["memory"][rank]["base_mib"] += blocks * H2688_BLOCK_MIB


def test_the_v_orders_fit_with_the_base_a_fixed_run_records() -> None:
    """h2688-t6656-l5-m20's calibrating 1F1B ran [7, 6] blocks; a block's weights are 8 h^2 + 5 h bf16
    elements, (8 x 2688^2 + 5 x 2688) x 2 B = 110.28 MiB, and make_chunk's zeroed gradient buffers as much
    again. Its base_mib (1,519.4 and 1,409.2) lacked the buffers: with them added (771.9 and 661.7 MiB,
    what a run now records), the fit reads an input as 37.4 MiB (34.1 MiB each, plus 65 MiB of workspaces
    over 20) and no candidate ranked as fitting goes over the limit; the pick, Spearman and families unchanged."""
    saved = json.loads((DATA / "h2688-t6656-l5-m20.json").read_text())
    assert abs(H2688_BLOCK_MIB - 110.276) < 1e-3
    before = tune_crossval._evaluate(saved)
    _with_grad_buffers(saved)
    mm = tune_crossval._calibrated(saved).memory
    assert 37.3 < mm.data < 37.5
    after = tune_crossval._evaluate(saved)
    assert before["checks"]["fitting_over_limit"] == ["v-half vpp=2 m=20 split=even", "v-min vpp=2 m=20 split=even"]
    assert after["checks"]["fitting_over_limit"] == [] and after["checks"]["peak_err_min"] > 0
    assert after["pick"] == before["pick"] and after["checks"]["families_ok"] and after["checks"]["spearman"] > 0.97


def test_a_base_below_the_weights_it_holds_is_said() -> None:
    """The same run: rank 0 ran 6 layers and the embedding, 7 x 220.55 = 1,543.9 MiB of weights and gradients
    by the model, but held 1,519.4 before its first step: the note warns that the input size read from it is
    not to be trusted. With the gradient buffers in the base (a fixed run) there is no warning."""
    import tempfile

    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((DATA / "h2688-t6656-l5-m20.json").read_text())

    def warnings(base: dict) -> list[str]:
        tc = tune_config_from_mapping(saved["config"], source="h2688")
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "base.measured.json"
            path.write_text(json.dumps(base))
            _, _, notes = calibrate_tune(tc, path)
        return [n[n.index("warning:"):] for n in notes if "warning:" in n]

    assert warnings(saved["base"]) == [
        "warning: rank 0 held 1519.4 before its first step, less than the 1543.9 of weights (and their gradients) "
        "the model counts for its stages, so the size of an input or target read from it is not to be trusted (was "
        "the run's base measured without its gradient buffers?)"]
    _with_grad_buffers(saved)
    assert warnings(saved["base"]) == []


def test_the_short_layer_note_on_the_stored_runs_either_side_of_its_bound(tmp_path: Path) -> None:
    """h2688-t1536-l6-m25's calibrating run (a layer's forward at full duty 0.308 ms under the clock law, 0.307 at
    the old 0.25; its two-chunk plans ran 3-5% over the model, interleaved's rank 1 F 14%) is warned of;
    h2688-t1792-l12-m6's (0.365 ms, 0.362 at 0.25; every family within 3%) is not."""
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    seen = {}
    for name in ("h2688-t1536-l6-m25", "h2688-t1792-l12-m6"):
        saved = json.loads((DATA / f"{name}.json").read_text())
        base = tmp_path / f"{name}.measured.json"
        base.write_text(json.dumps(saved["base"]))
        tc, _, notes = calibrate_tune(tune_config_from_mapping(saved["config"], source=name), base)
        seen[name] = (round(tc.model.layer.F, 3), [n for n in notes if n.startswith("a layer's forward takes")])
    assert seen["h2688-t1536-l6-m25"][0] == 0.308
    assert seen["h2688-t1536-l6-m25"][1] and "0.308 ms, under 0.35" in seen["h2688-t1536-l6-m25"][1][0]
    assert seen["h2688-t1792-l12-m6"] == (0.365, [])


def test_the_duty_exponent_is_named_once_with_where_it_came_from(tmp_path: Path) -> None:
    """h2688-t1536-l6-m25's calibrating run recorded capped clocks: the clock law's 0.55 x 0.55 = 0.3025, said once
    with how this run's clocks went (ranks busy 0.97 and 0.81, clocks as duty^-0.480); a second note once called it
    device.duty_exponent, which the config did not set. Given in the config, it is named as the config's, once."""
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((DATA / "h2688-t1536-l6-m25.json").read_text())
    base = tmp_path / "base.measured.json"
    base.write_text(json.dumps(saved["base"]))
    for device, want in ((None, "duty exponent 0.303 from the clock law: under its power cap a GPU clocks as "
                                "duty^-0.55 and an op takes clock^-0.55; this run's ranks, busy 0.97, 0.81 of the "
                                "step, clocked as duty^-0.48 (set device.duty_exponent to fix it)"),
                         (0.3, "duty exponent 0.300 (device.duty_exponent): ranks busy 0.97, 0.81 of the step")):
        config = dict(saved["config"], **({"device": {"duty_exponent": device}} if device is not None else {}))
        tc, _, notes = calibrate_tune(tune_config_from_mapping(config, source="t"), base)
        said = [n for n in notes if n.startswith("duty exponent")]
        assert len(said) == 1 and said[0].startswith(want), said
        assert tc.alpha == pytest.approx(0.3025 if device is None else 0.3, abs=5e-4)


def test_whatif_of_the_plan_tune_wrote_from_the_run_that_calibrated_it(tmp_path: Path) -> None:
    """The flow a user runs: ``pptl tune --costs-from run -o best.json`` picks ZB-H1 on h2688-t1536-l6-m25
    (185.9 ms; measured 186.99 on 2 H200s), then ``pptl whatif best.json --from run``. The run is 1F1B (its B as
    I then W, each marked): whatif takes I and W from those marks and their variation from the B they were
    parts of, where it stopped with "the run has no I on stage 0" before. With the marks removed the run has
    nothing for I and W, and says so in one line (exit 2)."""
    import yaml
    from typer.testing import CliRunner

    from pptl.cli import app

    saved = json.loads((DATA / "h2688-t1536-l6-m25.json").read_text())
    run, cfg, best = tmp_path / "run.measured.json", tmp_path / "t.yaml", tmp_path / "best.json"
    run.write_text(json.dumps(saved["base"]))
    cfg.write_text(yaml.safe_dump({**saved["config"], "memory_limit": saved["limit_mib"]}))
    res = CliRunner().invoke(app, ["tune", str(cfg), "--costs-from", str(run), "-o", str(best)])
    assert res.exit_code == 0, res.output
    assert "best: zb-h1 m=25 split=balanced: step 185.9" in res.stdout
    res = CliRunner().invoke(app, ["whatif", str(best), "--from", str(run), "-n", "400", "--seed", "0",
                                   "--output", "json"])
    assert res.exit_code == 0, res.output
    p50 = json.loads(res.stdout)["plans"][0]["makespan"]["p50"]
    assert abs(p50 / 186.99 - 1) < 0.03, p50
    bare = dict(saved["base"], meta={**saved["base"]["meta"],
                                     "extra": {k: v for k, v in saved["base"]["meta"]["extra"].items()
                                               if k != "b_input_ms"}})
    run.write_text(json.dumps(bare))
    res = CliRunner().invoke(app, ["whatif", str(best), "--from", str(run), "-n", "50"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "the run has no I on stage 0 or rank 0" in res.output
