"""The GPU proof of ``pptl whatif`` replayed offline (tests/data/whatif_gpu, docs/whatif.md).

Eleven calls of ``bench/whatif_gpu.sh`` on 2 H200s (fourteen launches) kept their plans and measured timelines: a
calibrating 1F1B run, 50 later steps of three families, and 20 steps each with one rank slowed
(call 3 on two shapes: the bench's and hidden 2560, 2048 tokens, 4 blocks a stage, run after the
model was settled; call 4 on hidden 3584 and 2048, the first runs whose B ran as I then W; call 5, after the
loss-bounded exponent was written, on hidden 3072 (3072 tokens, 3 blocks, rank 1 x1.3) and again on hidden
2560, 2048 tokens, 4 blocks, rank 1 x1.2; call 6, the model unchanged, on hidden 3584, 2560 tokens, 4 blocks,
rank 1 x1.2, after sync-send's receives moved to where the plan issues them; call 7, the model unchanged,
on hidden 3072, 2048 tokens, 4 blocks, rank 1 x1.25; call 8, after the step's opening was modelled, on
hidden 2816, 2560 tokens, 4 blocks, rank 1 x1.3; call 9, the model unchanged, on hidden 3328, 3072 tokens,
3 blocks, rank 1 x1.2; call 10, the model unchanged, on hidden 3840, 2560 tokens, 3 blocks, rank 0 x1.25; call 11, the model
unchanged, on hidden 4352, 2048 tokens, 3 blocks, rank 1 x1.3; call 12 on hidden 3328, 2048 tokens, 4 blocks, rank 1
x1.2; calls 13 and 14, the first on 2 H100s, on hidden 3328 with 1536 tokens and 6 blocks and with 3072 tokens and
4 blocks, rank 1 x1.1, each drawn before its run; calls 15 and 16, drawn by bench/draw_shapes.py before their run, on
hidden 3200, 1280 tokens, 4 blocks, rank 0 x1.21 and hidden 2432, 3328 tokens, 6 blocks, rank 1 x1.28; call 17, drawn the
same way, on hidden 3968, 3072 tokens, 2 blocks, rank 1 x1.3; call 18 on hidden 2816, 2048 tokens, 3 blocks, rank 1
x1.29); calls 19-21 drawn the same way, 19 at pp 4 on 4 H200s (hidden 2176, 4096 tokens, 5 blocks, rank 3 x1.13),
20 on hidden 3712, 3072 tokens, 3 blocks, rank 1 x1.26 and 21 on hidden 2304, 3328 tokens, 2 blocks, rank 1 x1.18;
calls 22-25 drawn the same way: hidden 3968 rank 0 x1.28, hidden 3584 rank 1 x1.19, hidden 2304 rank 1 x1.23, and
hidden 3072, 1536 tokens, 3 blocks, rank 0 x1.11).
Every prediction comes from the calibrating run alone (as ``pptl whatif --from``, its defaults);
every check is against the measured steps read straight from the timelines' ``step_ms``. The
checks pinned here are the ones the model passes; the ones it fails are named in comments. The
ranking by straggler sensitivity is compared up to ties (:mod:`pptl.whatif.ranking`): two measured
sensitivities closer than the call's launch spread (the same 1F1B plan's mean step in its two launches)
have no order to check.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from pptl.whatif.ranking import launch_spread, rank_agreement
from pptl.whatif.spread import Straggler
from pptl.whatif.study import study_plans

DATA = Path(__file__).parent / "data" / "whatif_gpu"
PLANS = ("gpipe", "1f1b", "interleaved")
SAMPLES = 2000


def _steps(call: str, name: str) -> np.ndarray:
    meta = json.loads((DATA / call / f"measured_{name}.json").read_text())["meta"]
    return np.asarray(meta["extra"]["step_ms"], dtype=np.float64)


def _held(call: str, name: str, rank: int) -> float:
    """How long the slowed rank's lane was held per compute op over the op's time (the straggler's
    real factor): the median of (next op's start - op's start) / op time where the next op on the
    rank's compute stream followed within the hold."""
    events = json.loads((DATA / call / f"measured_{name}_slow.json").read_text())["events"]
    evs = sorted((e for e in events if e["rank"] == rank and (e["lane"] == "compute" or e["kind"] == "SEND")),
                 key=lambda e: e["start"])
    r = [(b["start"] - a["start"]) / (a["end"] - a["start"]) for a, b in zip(evs, evs[1:])
         if a["lane"] == "compute" and a["end"] > a["start"] and b["start"] - a["end"] < 0.6 * (a["end"] - a["start"])]
    return statistics.median(r)


def _predict(call: str, stragglers: list[Straggler] | None = None) -> dict[str, np.ndarray]:
    out = {}
    for name in PLANS:
        o = study_plans([DATA / call / f"plan_{name}.json"], measured=DATA / call / "measured_calibrate.json",
                        samples=SAMPLES, seed=0, stragglers=stragglers or (), duty_exponent=None)[0]
        out[name] = o.samples.makespan
    return out


_STRAGGLER = {"call2": 1.3, "call3": 1.3, "call3_h2560": 1.2, "call4_h3584": 1.25, "call4_h2048": 1.35,
              "call5_h3072": 1.3, "call5_h2560": 1.2, "call6_h3584": 1.2, "call7_h3072": 1.25, "call8_h2816": 1.3,
              "call9_h3328": 1.2, "call10_h3840": 1.25, "call11_h4352": 1.3,
              "call12_h3328": 1.2, "call13_h3328": 1.1, "call14_h3328": 1.1, "call15_h3200": 1.21,
              "call16_h2432": 1.28, "call17_h3968": 1.3, "call18_h2816": 1.29, "call19_h2176_p4": 1.13,
              "call20_h3712": 1.26, "call21_h2304": 1.18, "call22_h3968": 1.28,
              "call23_h3584": 1.19, "call24_h2304": 1.23, "call25_h3072": 1.11,
              "call26_h2432": 1.24, "call27_h3072": 1.17,
              "call28_h4096": 1.16, "call29_h3072": 1.15, "call30_h2560": 1.15,
              "call31_h2432": 1.27, "call32_h3584": 1.23, "call33_h2176": 1.28,
              "call34_h2048": 1.22, "call35_h3840": 1.14}
#: The rank each call slowed, where not rank 1.
_SLOW_RANK = {"call10_h3840": 0, "call15_h3200": 0, "call19_h2176_p4": 3, "call22_h3968": 0, "call25_h3072": 0,
              "call27_h3072": 0, "call28_h4096": 0, "call29_h3072": 0, "call32_h3584": 0}
_OUTCOMES: dict[str, dict[str, dict[str, np.ndarray]]] = {}


def _outcome(call: str) -> dict[str, dict[str, np.ndarray]]:
    """Predicted step times per plan, as run ("base") and with the straggler ("slow"), computed once.

    call1: interleaved-1f1b V=2 m=4, 1f1b m=8, gpipe m=16; rank 0 slowed by a hook whose hold was off:
    predicted with the factor each lane held (1.19-1.31 for 1.3). The others: gpipe m=4, 1f1b m=8,
    interleaved-1f1b V=2 m=16; rank 1 slowed by the factor asked (its lane held it within 0.5%)."""
    if call not in _OUTCOMES:
        if call == "call1":
            slow = {n: _predict(call, [Straggler(0, round(_held(call, n, 0), 3))])[n] for n in PLANS}
        else:
            slow = _predict(call, [Straggler(_SLOW_RANK.get(call, 1), _STRAGGLER[call])])
        _OUTCOMES[call] = {"base": _predict(call), "slow": slow}
    return _OUTCOMES[call]


# What the model passes, pinned; what it fails is named in the comments at the end.
MEDIANS = ([("call2", n) for n in PLANS] + [("call1", "gpipe"), ("call1", "1f1b"), ("call3", "gpipe"),
                                            ("call3", "interleaved"), ("call3_h2560", "gpipe"), ("call3_h2560", "1f1b"),
                                            ("call4_h3584", "gpipe"), ("call4_h3584", "1f1b"),
                                            ("call4_h2048", "1f1b"), ("call4_h2048", "interleaved"),
                                            ("call5_h3072", "gpipe"), ("call5_h3072", "1f1b"),
                                            ("call5_h2560", "gpipe"), ("call5_h2560", "interleaved"),
                                            ("call6_h3584", "gpipe"), ("call6_h3584", "1f1b"),
                                            ("call6_h3584", "interleaved"),
                                            ("call7_h3072", "1f1b"), ("call8_h2816", "interleaved"),
                                            ("call9_h3328", "1f1b"), ("call10_h3840", "1f1b"),
                                            ("call11_h4352", "1f1b"), ("call11_h4352", "interleaved"),
                                            ("call12_h3328", "gpipe"), ("call12_h3328", "1f1b"),
                                            ("call13_h3328", "1f1b"), ("call14_h3328", "1f1b"),
                                            ("call14_h3328", "interleaved")]
           + [("call16_h2432", n) for n in PLANS] + [("call17_h3968", "gpipe"), ("call17_h3968", "1f1b"),
                                                                               ("call18_h2816", "1f1b")]
           + [("call19_h2176_p4", "gpipe"), ("call19_h2176_p4", "1f1b"), ("call21_h2304", "1f1b"),
              ("call23_h3584", "1f1b"), ("call24_h2304", "gpipe")]
           + [("call25_h3072", n) for n in PLANS] + [("call27_h3072", "1f1b"), ("call28_h4096", "1f1b")]
           + [("call29_h3072", n) for n in PLANS] + [("call31_h2432", "gpipe"), ("call31_h2432", "interleaved"),
                                                         ("call32_h3584", "gpipe"), ("call33_h2176", "interleaved"),
                                                         ("call35_h3840", "interleaved")])
P95S = [(c, n) for c in ("call1", "call2", "call3", "call4_h3584", "call4_h2048", "call5_h3072", "call5_h2560",
                        "call6_h3584", "call8_h2816", "call9_h3328", "call10_h3840", "call11_h4352",
                        "call12_h3328", "call13_h3328", "call16_h2432", "call17_h3968")
        for n in PLANS] + [("call18_h2816", "gpipe"), ("call18_h2816", "1f1b")] + [
    ("call19_h2176_p4", "gpipe"), ("call19_h2176_p4", "1f1b"), ("call20_h3712", "gpipe"), ("call20_h3712", "1f1b"),
    ("call20_h3712", "interleaved"), ("call21_h2304", "1f1b")] + [("call15_h3200", "1f1b"), ("call15_h3200", "interleaved"),
    ("call3_h2560", "gpipe"), ("call3_h2560", "1f1b"), ("call7_h3072", "1f1b"), ("call7_h3072", "interleaved"),
    ("call14_h3328", "1f1b"), ("call14_h3328", "interleaved"), ("call22_h3968", "1f1b"),
    ("call22_h3968", "interleaved")] + [(c, n) for c in ("call23_h3584", "call24_h2304", "call25_h3072")
                                         for n in PLANS] + [("call26_h2432", "1f1b"), ("call26_h2432", "interleaved")] + [
    (c, n) for c in ("call27_h3072", "call28_h4096", "call29_h3072", "call30_h2560", "call31_h2432") for n in PLANS] + [
    ("call32_h3584", "gpipe"), ("call33_h2176", "1f1b"), ("call33_h2176", "interleaved")] + [
    ("call35_h3840", n) for n in PLANS]
CALLS = ("call1", "call2", "call3", "call3_h2560", "call4_h3584", "call4_h2048", "call5_h3072", "call5_h2560",
         "call6_h3584", "call7_h3072", "call8_h2816", "call9_h3328", "call10_h3840", "call11_h4352",
         "call12_h3328", "call13_h3328", "call14_h3328", "call15_h3200", "call16_h2432", "call17_h3968", "call18_h2816",
         "call19_h2176_p4", "call20_h3712", "call21_h2304", "call22_h3968", "call23_h3584",
         "call24_h2304", "call25_h3072", "call26_h2432", "call27_h3072",
         "call28_h4096", "call29_h3072", "call30_h2560", "call31_h2432", "call32_h3584",
         "call33_h2176", "call34_h2048", "call35_h3840")
#: Call 6: measured 1.114, 1.102, 1.114 (gpipe, 1f1b, interleaved); its launch spread (0.51%) ties gpipe and
#: interleaved and resolves 1f1b under both, and the model puts 1f1b (1.131) over interleaved (1.110).
#: Call 7: measured 1.173, 1.161, 1.142, every pair resolved (launch spread 0.63%); predicted 1.197, 1.210,
#: 1.215, the other way round.
#: Call 10 (rank 0 slowed): measured 1.087, 1.059, 1.086; gpipe and interleaved tie (launch spread 0.38%),
#: 1f1b is under both; predicted 1.128, 1.062, 1.058: interleaved under 1f1b, the other way round.
#: Call 14 (H100s, exponent learnt 0.525): measured 1.046, 1.049, 1.052, gpipe resolved under both (launch spread
#: 0.29%); predicted 1.061, 1.044, 1.046: gpipe over both. Its GPipe ran 5% slower than predicted (median 53.78
#: against a band of 51.64-52.85, p95 +4.9%) while GPipe predicted from its own run is -0.6%: the learnt
#: exponent made GPipe's less busy ranks too fast.
#: Calls 19-21 (drawn by bench/draw_shapes.py before their run; 19 on 4 H200s at pp 4): each resolves all three
#: pairs and orders one or two the other way (docs/whatif.md "Calls 19 to 21").
#: Call 27 (rank 0 slowed): measured 1.050, 1.032, 1.057, every pair resolved (launch spread 0.23%); predicted
#: 1.095, 1.040, 1.042: 1F1B under both as measured, GPipe over interleaved the other way round.
RANKED = tuple(c for c in CALLS if c not in ("call6_h3584", "call7_h3072", "call10_h3840", "call14_h3328",
                                             "call19_h2176_p4", "call20_h3712", "call21_h2304", "call27_h3072"))
#: GPipe with the straggler: call 7 predicted 36.87 ms against 34.87 measured (+5.7%; +6.3% before the step's
#: opening, which took call 6's from +5.3% to +3.1%).
#: Call 20: GPipe +5.3% and 1F1B +6.2% (its ops ran 3-9% faster beside the straggler than without it).
#: Call 32: 1F1B +6.3%, predicted from a calibrating run whose ops ran slower (rank 1's B by 10%) than the same
#: plan's in the later launches (docs/whatif.md "Call 32"). Call 33: GPipe +5.4% (its ops 4-5% faster in the later
#: launches than in the calibrating one, at the same memory clock).
#: Call 22 (rank 0 slowed, its calibrating ranks busy 0.855 and 0.886, too alike to learn an exponent from:
#: 0 used): GPipe +7.0%, 1F1B +9.1%, interleaved +5.9%; beside the straggler the ops ran 5-9% faster
#: than without it (docs/whatif.md "Call 22").
STRAGGLED = [(c, n) for c in CALLS for n in PLANS
             if (c, n) not in (("call7_h3072", "gpipe"), ("call20_h3712", "gpipe"), ("call20_h3712", "1f1b"),
                               ("call32_h3584", "1f1b"), ("call33_h2176", "gpipe"))
             and c != "call22_h3968"]



@pytest.mark.parametrize("call,name", MEDIANS)
def test_median_in_the_predicted_band(call, name):
    p25, p75 = np.quantile(_outcome(call)["base"][name], (0.25, 0.75))
    assert p25 <= float(np.median(_steps(call, name))) <= p75


@pytest.mark.parametrize("call,name", P95S)
def test_p95_within_3_percent(call, name):
    pred = float(np.quantile(_outcome(call)["base"][name], 0.95))
    meas = float(np.quantile(_steps(call, name), 0.95))
    assert abs(meas - pred) <= 0.03 * pred, (meas, pred)


@pytest.mark.parametrize("call,name", STRAGGLED)
def test_straggler_mean_within_5_percent(call, name):
    pred = float(_outcome(call)["slow"][name].mean())
    meas = float(_steps(call, f"{name}_slow").mean())
    assert abs(pred - meas) <= 0.05 * meas, (pred, meas)


def _launch_spread(call: str) -> float:
    """The same 1F1B plan measured in two launches of the call (the calibrating one and the later
    one): how far its mean step moved, the tolerance under which two sensitivities tie."""
    return launch_spread(float(_steps(call, "calibrate").mean()), float(_steps(call, "1f1b").mean()))


def _sensitivities(call: str) -> tuple[dict[str, float], dict[str, float]]:
    """Measured and predicted straggler sensitivity per family: mean step with the straggler over
    the mean step without."""
    res = _outcome(call)
    measured = {n: float(_steps(call, f"{n}_slow").mean() / _steps(call, n).mean()) for n in PLANS}
    predicted = {n: float(res["slow"][n].mean() / res["base"][n].mean()) for n in PLANS}
    return measured, predicted


#: Pairs of families the measurement orders (out of 3), per call: call 4 (hidden 2048) ties 1f1b and
#: interleaved (1.2416 and 1.2410, 0.05% apart, launch spread 0.06%); call 5 (hidden 2560) ties all three
#: (1.144, 1.146, 1.147 within 0.26%, launch spread 0.59%): no order to hold the model to.
#: Call 8 ties gpipe and 1f1b (1.2071 and 1.2077, launch spread 0.64%) and resolves interleaved (1.190) under both.
#: Call 12 ties all three (1.117, 1.117, 1.110; launch spread 1.11%, the widest of the calls).
#: Call 15 ties gpipe and interleaved (1.088, 1.081; launch spread 0.98%) and resolves 1f1b (1.059) under both;
#: call 16 ties 1f1b and gpipe (1.184, 1.191; launch spread 0.76%) and resolves interleaved (1.165) under both.
#: Call 22 ties gpipe and interleaved (1.136, 1.134; launch spread 0.47%) and resolves 1f1b (1.089) under both.
#: Call 23 ties 1f1b and interleaved (1.108, 1.109; launch spread 1.32%) and resolves gpipe (1.127) over both.
#: Call 24 resolves gpipe (1.155) over interleaved (1.132) and ties 1f1b (1.144) with both (launch spread 1.77%).
#: Call 26 ties all three (1.174, 1.165, 1.159; launch spread 2.94%, the widest of the calls).
#: Call 29 (rank 0 slowed) ties gpipe and interleaved (1.041, 1.038; launch spread 0.72%) and resolves 1f1b (1.019)
#: under both.
#: Call 30 resolves interleaved (1.087) under gpipe (1.103) and ties 1f1b (1.096) with both (launch spread 1.17%).
#: Call 31 ties all three (1.194, 1.185, 1.193; launch spread 1.57%); call 32 (rank 0 slowed) too (1.049, 1.025,
#: 1.065; launch spread 7.3%, its calibrating run 7% slower than the later launch's run of the same plan); call 33
#: too (1.190, 1.186, 1.182; launch spread 2.14%); call 34 too (0.998, 0.983, 0.943: every family ran faster with
#: its straggler than without, in a launch 7.1% apart from the calibrating one); call 35 too (1.101, 1.083, 1.087;
#: launch spread 2.02%).
RESOLVED = {"call35_h3840": 0, "call34_h2048": 0, "call33_h2176": 0, "call32_h3584": 0, "call31_h2432": 0, "call30_h2560": 1, "call29_h3072": 2, "call26_h2432": 0, "call22_h3968": 2, "call23_h3584": 2, "call24_h2304": 1, "call25_h3072": 2, "call4_h2048": 2, "call5_h2560": 0, "call6_h3584": 2, "call7_h3072": 3, "call8_h2816": 2,
            "call12_h3328": 0, "call15_h3200": 2, "call16_h2432": 2}


@pytest.mark.parametrize("call", RANKED)
def test_families_ranked_alike_by_straggler_sensitivity_up_to_ties(call):
    measured, predicted = _sensitivities(call)
    got = rank_agreement(measured, predicted, _launch_spread(call))
    assert got.alike, got
    assert len(got.resolved) == RESOLVED.get(call, 3), got
    # the measured orders differ between the calls, so a fixed order cannot pass them all
    if call == "call1":
        assert got.resolved == (("gpipe", "1f1b"), ("interleaved", "1f1b"), ("interleaved", "gpipe"))
    elif call == "call28_h4096":  # rank 0 slowed: 1.023, 1.033, 1.041 (1f1b, interleaved, gpipe); predicted 1.016, 1.020, 1.069
        assert got.resolved == (("1f1b", "gpipe"), ("1f1b", "interleaved"), ("interleaved", "gpipe"))
    elif not got.ties:
        assert got.resolved == (("1f1b", "gpipe"), ("interleaved", "1f1b"), ("interleaved", "gpipe"))


def test_call_6_ranks_two_families_alike_and_one_pair_the_other_way():
    # the tie between gpipe and interleaved asks nothing; 1f1b under gpipe is predicted (1.131 < 1.157),
    # 1f1b under interleaved is not (1.131 > 1.110): the check fails on that pair alone
    measured, predicted = _sensitivities("call6_h3584")
    assert 0.0050 < _launch_spread("call6_h3584") < 0.0052
    got = rank_agreement(measured, predicted, _launch_spread("call6_h3584"))
    assert got.ties == (("gpipe", "interleaved"),)
    assert got.disagree == (("1f1b", "interleaved"),)


def test_the_plan_the_run_measured_keeps_its_own_band_width():
    # the duty exponent each sample draws moves a plan only as far as its ranks' duty differs from the
    # run's: the calibrating plan's band stays that of its step-to-step spread, the busier interleaved
    # plan's widens (call 2: 1.7% and 4% of the median)
    out = _outcome("call2")["base"]
    width = {n: float(np.subtract(*np.quantile(out[n], (0.75, 0.25))) / np.median(out[n])) for n in PLANS}
    assert width["1f1b"] < 0.02 < 0.03 < width["interleaved"] < 0.05

# Not pinned, failing:
# - call 1's interleaved m=4 median (50.38 ms) lies 0.7 ms under its predicted band (51.09-52.17): that
#   launch ran about 1% faster than the calibrating one (its 1F1B median sits at the foot of its band),
#   and the middle stage on rank 1, derived from rank 0's first stage, is predicted 3-5% slower than it ran.
# - call 3: the 1F1B median (50.39 ms) is at the band's lower edge (50.39) to the hundredth: too close to pin.
# - call 3, hidden 2560: interleaved's median (162.04) 2.3% under its band (165.84-171.32) and its p95 4.8%
#   under the predicted: the duty
#   exponent learnt (0.74, each sample drawn in 0.48-0.99) is too high for interleaved (0.4 fits it),
#   its calibrating run's ranks differed in duty by 10% only (0.80, 0.88), so the last stage's loss
#   reads as more duty than in the bench's shape (16%).
# - call 4 (two shapes no run had used, chosen before any result; the first launches whose B ran as I
#   then W), replayed with the loss-bounded exponent (pptl.whatif.duty.loss_bounded_range, written
#   after these launches were seen): hidden 3584, 2048 tokens, 3 blocks: interleaved's median (217.82)
#   0.9% over its band (212.15-215.92); hidden 2048, 4096 tokens, 4 blocks: gpipe's median (27.45) 0.06
#   ms under its band (27.51-28.00). As run (the pooled exponent, 0.69 and 0.76) they passed 6 and 7.
# - call 6 (hidden 3584, 2560 tokens, 4 blocks, rank 1 x1.2; a shape no run had used): 9 of 10 (7 before the
#   step's opening, pptl.whatif.opening: GPipe's median 0.5% under its band, 49.28 against 49.54-50.83, and its
#   straggled mean +5.3%; now 48.49-49.77 and +3.1%). The ranking fails on one pair (test above).
# - call 7 (hidden 3072, 2048 tokens, 4 blocks, rank 1 x1.25; a shape no run had used, the model unchanged):
#   5 of 10. Its calibrating run's ranks were busy 0.82 and 0.88, the
#   closest of the ten (7%): the exponent learnt 0.14 (the loss bounds it in 0-0.27), and no rank may run
#   faster than at 0.82. GPipe's ranks (ops 2.5-5.5% faster than the calibrating run's) are predicted 2-8%
#   long: its median 3% under its band (29.64 against 30.44-31.15), its p95 -3.7%, its straggled mean +5.7%
#   (the run's 56 ms step barely opens: its ranks' first half of work ran 0.997 and 0.993 of their means);
#   interleaved's ranks ran 1-10% slower than the calibrating run's, its median 1.9% over its band (213.15
#   against 204.68-209.25); the three sensitivities (1.173, 1.161, 1.142, each pair apart by more than the
#   launch spread, 0.63%) are predicted in the reverse order.
# - call 8 (hidden 2816, 2560 tokens, 4 blocks, rank 1 x1.3; a shape no run had used, chosen before the run,
#   with the step's opening in the model): 8 of 10. p95 3/3 (-1.9, -0.5, -0.0%), straggled means 3/3 (+4.2,
#   +2.9, +2.4%), the ranking up to its tie; GPipe's median (31.62) 0.9% under its band (31.90-32.48) and
#   1F1B's (59.13) 0.01 ms under its band's foot (59.14).
# - call 10 (hidden 3840, 2560 tokens, 3 blocks, rank 0 x1.25, the first call to slow the first rank; the
#   shape chosen before the run, the model unchanged since call 8): 7 of 10. p95 3/3 (+1.6, +0.1, -1.2%),
#   straggled means 3/3 (+2.1, +0.3, -1.8%); GPipe's median (42.80) 0.5% over its band (41.72-42.59),
#   interleaved's (309.67) 0.2% under its band (310.37-315.67), and the ranking fails on one pair (1f1b under
#   interleaved measured, over it predicted).
# - call 11 (hidden 4352, 2048 tokens, 3 blocks, rank 1 x1.3; chosen before the run, the model unchanged):
#   9 of 10. GPipe's median (42.92) 0.3% over its band (41.93-42.80); p95 +1.1, -0.4, -0.3%; straggled
#   means -0.4, -0.8, -1.7%; the three sensitivities (1.198, 1.182, 1.162) ranked alike.
# - call 15 (hidden 3200, 1280 tokens, 4 blocks, rank 0 x1.21; drawn by bench/draw_shapes.py before the run, the
#   model unchanged; its second launch, the first's timelines did not come back): 6 of 10. Every median under its
#   band: GPipe's (20.56) 2.3% under (21.04-21.46, its p95 -4.6%), 1F1B's (39.11) 0.6% and interleaved's (147.34)
#   0.2%. The later launch ran faster than the calibrating one (1F1B, the same plan, 0.6%), and GPipe's ops 3-6%
#   faster than the calibrating run's where the exponent learnt (0.48) gave them 0-3%. The first launch
#   (exponent 0.63): 5 of 10, GPipe's median 0.8% and interleaved's 2.7% under their bands.
# - call 17 (hidden 3968, 3072 tokens, 2 blocks, rank 1 x1.3; drawn before the run, the model unchanged): 9 of 10.
#   Interleaved's median (263.05) 2.4% over its band (250.07-256.93), its p95 +2.2%; every other check passes, the
#   ranking with all three pairs resolved (launch spread 0.42%).
# - call 18 (hidden 2816, 2048 tokens, 3 blocks, rank 1 x1.29; drawn before the run, the model unchanged): 7 of 10.
#   GPipe's median (19.26) 0.8% under its band (19.42-19.83), interleaved's (139.48) 0.6% over its band
#   (135.48-138.70) and its p95 +3.3%; every straggled mean within 2.5% and the ranking, all three pairs resolved
#   (launch spread 0.21%), alike.
# - call 19 (the first at pp 4, on 4 H200s: hidden 2176, 4096 tokens, 5 blocks a stage, rank 3 x1.13; drawn before
#   the run, the model unchanged): 7 of 10. Interleaved's median (288.09) 4% under its band (299.96-309.93), its p95
#   -7.7%: the exponent learnt from four ranks busy 0.66-0.72 (0.47; their duty ratio 1.09) made interleaved's ops
#   (ranks 0.9 busy) 10-15% slower than the calibrating run's where they ran 3-7%; the ranking resolves all three pairs
#   (launch spread 0.11%, sensitivities 1.065-1.070) and orders gpipe and interleaved the other way.
# - call 20 (hidden 3712, 3072 tokens, 3 blocks, rank 1 x1.26): 4 of 10. Every p95 within 2.3%; every median
#   outside its band by 0.2-0.7% (GPipe and 1F1B under, interleaved over); the straggled GPipe +5.3% and 1F1B
#   +6.2%: beside the straggler both ranks' ops ran 3-9% faster than without it (both cooler), which the model,
#   floored at the run's least busy duty, does not follow; the ranking orders two pairs the other way.
# - call 21 (hidden 2304, 3328 tokens, 2 blocks, rank 1 x1.18; a 27 ms 1F1B step, the shortest): 5 of 10. GPipe's
#   median 1.9% under its band (p95 -4.1%), interleaved's 0.9% over (p95 +3.1%); every straggled mean within 1.9%;
#   the ranking orders interleaved the other way against both.


def _op_mean(call: str, name: str, prefix: str, *, one_step: bool = False) -> float:
    """Mean time of the ops whose id starts with ``prefix``: over every timed step (``step_ops``), or
    over the one step the timeline's events record."""
    data = json.loads((DATA / call / f"measured_{name}.json").read_text())
    if one_step:
        return statistics.mean(e["end"] - e["start"] for e in data["events"] if e["op"].startswith(prefix))
    return statistics.mean(x for op, v in data["meta"]["extra"]["step_ops"]["ms"].items() if op.startswith(prefix)
                           for x in v)


def test_beside_call_6s_straggler_the_other_rank_ran_2_percent_faster_not_8():
    # GPipe, rank 1 x1.2. The bench's table compared one recorded step of each launch and read rank 0's B
    # 8% faster (0.917): the base launch's recorded step (31) had rank 0's Bs at 6.19-6.40 ms, the slowest
    # of its 50 steps (mean 5.84). Over every timed step (50 and 20), rank 0's B ran 0.980 and its F 0.976
    # of their times without the straggler; the slowed rank's own ops 0.947 (F) and 0.961 (B): its spin
    # holds draw little power, and both GPUs ran cooler.
    ratio = {p: _op_mean("call6_h3584", "gpipe_slow", p) / _op_mean("call6_h3584", "gpipe", p)
             for p in ("r0/compute/B", "r0/compute/F", "r1/compute/B", "r1/compute/F")}
    assert 0.915 < (_op_mean("call6_h3584", "gpipe_slow", "r0/compute/B", one_step=True)
                    / _op_mean("call6_h3584", "gpipe", "r0/compute/B", one_step=True)) < 0.92
    assert 0.975 < ratio["r0/compute/B"] < 0.985 and 0.97 < ratio["r0/compute/F"] < 0.98
    assert 0.94 < ratio["r1/compute/F"] < 0.95 and 0.955 < ratio["r1/compute/B"] < 0.965


def _b_by_position(call: str, rank: int) -> list[float]:
    """Mean time over every timed step of the rank's Bs in the calibrating run, in the order it ran them."""
    data = json.loads((DATA / call / "measured_calibrate.json").read_text())
    ms = data["meta"]["extra"]["step_ops"]["ms"]
    bs = sorted((e for e in data["events"] if e["rank"] == rank and e["lane"] == "compute" and e["kind"] == "B"),
                key=lambda e: e["start"])
    return [statistics.mean(ms[e["op"]]) for e in bs]


def test_call_6s_calibrating_run_slows_within_its_step_where_call_2s_does_not():
    # What a step-wide duty cannot hold (docs/whatif.md, "Beside a straggler"): in call 6's 95 ms 1F1B step
    # rank 0's Bs ran 5.90 ms in the middle and 6.44 at the end (9%); call 2's 50 ms step kept them within
    # 1.5% (3.22-3.27). A plan with a shorter step (GPipe m=4, 49 ms) never reaches the late, slow part.
    late6, late2 = _b_by_position("call6_h3584", 0), _b_by_position("call2", 0)
    assert max(late6) / min(late6) > 1.08 and late6[-1] / min(late6) > 1.08
    assert max(late2) / min(late2) < 1.02


def test_only_call_6s_long_calibrating_step_opens_fast():
    # pptl.whatif.opening, learnt from each calibrating run: per rank, its ops' time over their means in the
    # first and the second half of its work in a step. Call 6's 94 ms step: rank 0 0.971 then 1.032, rank 1
    # 0.977 then 1.025 (the clock falls once the power reaches the cap). The other ten steps (41-62 ms) are
    # nearly all opening: within 1.3% either way, and five of them ran their first half no faster than the
    # second on both ranks (their first ops after the step's barrier run slow too)
    from pptl.formats.loader import load_any
    from pptl.whatif.spread import spread_from_timeline

    opening = {c: spread_from_timeline(load_any(DATA / c / "measured_calibrate.json").timeline, c).opening
               for c in CALLS}
    # per call, (rank 0 early, late, rank 1 early, late), to the tolerance given. Call 6's 94 ms step: the clock
    # falls once the power reaches the cap. Call 9's 73 ms step, the next longest, opens in between. Calls 10 and
    # 11 (81-82 ms steps), measured after this test was written, open too; calls 13 and 14 (78 and 102 ms, H100s)
    # as well; call 16 (88 ms, drawn later) too; call 17 (68 ms, as call 12's) on its busier rank only (call 15's
    # 39 ms step does not); call 20 (91 ms); call 22 (169 ms, the longest calibrating step) as call 6's; call 23
    # (74 ms, as call 9's 73); call 27 (115 ms); call 28 (86 ms)
    fast = {"call6_h3584": ((0.971, 1.032, 0.977, 1.025), 5e-4), "call9_h3328": ((0.990, 1.011, 0.985, 1.017), 5e-4),
            "call10_h3840": ((0.986, 1.015, 0.978, 1.024), 5e-4), "call11_h4352": ((0.990, 1.011, 0.980, 1.022), 5e-4),
            "call13_h3328": ((0.988, 1.013, 0.982, 1.020), 5e-4), "call14_h3328": ((0.979, 1.023, 0.968, 1.035), 5e-4),
            "call16_h2432": ((0.984, 1.018, 0.978, 1.024), 5e-4), "call17_h3968": ((0.996, 1.005, 0.986, 1.015), 5e-4),
            "call20_h3712": ((0.983, 1.019, 0.967, 1.036), 5e-4), "call22_h3968": ((0.971, 1.031, 0.970, 1.033), 5e-4),
            "call23_h3584": ((0.992, 1.009, 0.988, 1.013), 6e-4), "call27_h3072": ((0.969, 1.034, 0.962, 1.041), 6e-4),
            "call28_h4096": ((0.989, 1.012, 0.980, 1.022), 6e-4)}
    for call, (want, tol) in fast.items():
        o = opening[call]
        assert (o[0].early, o[0].late, o[1].early, o[1].late) == pytest.approx(want, abs=tol), call
    # call 19 (87 ms, pp 4) on its last three ranks: 0.988 then 1.016, 0.985 then 1.017, 0.986 then 1.016
    o19 = opening["call19_h2176_p4"]
    assert [x for r in (1, 2, 3) for x in (o19[r].early, o19[r].late)] == pytest.approx(
        [0.988, 1.016, 0.985, 1.017, 0.986, 1.016], abs=5e-4)
    # call 34 (25 ms steps of 0.5-1.6 ms ops, its host issuing each op as the GPU ends the last): rank 0
    # 1.017 then 0.982, rank 1 1.008 then 0.992
    o34 = opening["call34_h2048"]
    assert (o34[0].early, o34[0].late, o34[1].early, o34[1].late) == pytest.approx((1.017, 0.982, 1.008, 0.992),
                                                                                   abs=5e-4)
    late = (*fast, "call19_h2176_p4", "call34_h2048")
    others = [o for c in CALLS if c not in late for o in opening[c].values()]
    # call 12 (68 ms), measured later: 0.993 then 1.008, 0.989 then 1.012, within the others' 1.3%; call 15
    # (39 ms): 0.999 then 1.001, 1.010 then 0.991; call 18 (37 ms): 1.003 then 0.997, 1.005 then 0.995; call 21
    # (27 ms): 1.001 then 0.999, 1.012 then 0.989; call 24 (61 ms): 0.993 then 1.007, 0.991 then 1.010; call 25
    # (31 ms): 0.999 then 1.001, 1.008 then 0.993; call 26 (41 ms): 1.004 then 0.995, 1.006 then 0.994; call 29
    # (57 ms): 0.997 then 1.004, 0.994 then 1.007; call 30 (57 ms): 0.999 then 1.001, 0.994 then 1.007; call 31
    # (28 ms): 0.999 then 1.001, 1.000 then 1.000; call 32 (22 ms): 1.004 then 0.996, 1.013 then 0.988; call 33
    # (43 ms): 1.003 then 0.997, 1.009 then 0.992; call 35 (54 ms): 0.998 then 1.002, 0.996 then 1.004
    assert len(others) == 46 and all(abs(o.early - 1) < 0.013 and abs(o.late - 1) < 0.013 for o in others)
    slower_first = [c for c in CALLS if c not in late and all(o.early >= o.late for o in opening[c].values())]
    assert slower_first == ["call1", "call2", "call3", "call3_h2560", "call4_h2048", "call18_h2816",
                            "call21_h2304", "call26_h2432", "call32_h3584", "call33_h2176"], slower_first


def test_cli_says_how_the_run_is_used():
    # call 2's calibrating run: sent on the compute stream of CUDA (sync-send), its SENDs' median
    # (0.0667 ms) holds the lane; the exponent learnt pooled 0.48, F alone 0.77 and B alone 0.20
    from typer.testing import CliRunner

    from pptl.cli import app

    run = DATA / "call2" / "measured_calibrate.json"
    sends = sorted(e["end"] - e["start"] for e in json.loads(run.read_text())["events"] if e["kind"] == "SEND")
    res = CliRunner().invoke(app, ["whatif", str(DATA / "call2" / "plan_1f1b.json"), "--from", str(run), "-n", "20"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "duty exponent 0.48 (learnt from the run, whose ranks busy 0.77, 0.88, each sample's drawn in " \
           "0.20-0.77)" in lines[0]
    assert lines[1] == (f"note: the run sent on the compute stream (sync-send): each SEND holds its rank's compute "
                        f"lane for {sends[len(sends) // 2]:.3g} ms (the rest of the message is its RECV's), as it ran")


def _per_gemm(call: str, name: str) -> dict[tuple[int, str], float]:
    """Mean measured time per GEMM of each (stage, kind) of a stored run, each rank's first op of a
    step left out (it pays the step's start, ``Spread.first``)."""
    from pptl.formats.loader import load_any
    from pptl.whatif.roles import gemm_work, layers_from_mapping, role_of
    from pptl.whatif.spread import first_ops

    tl = load_any(DATA / call / f"measured_{name}.json").timeline
    lead = first_ops(tl)
    layers = layers_from_mapping(tl.meta.extra["workload"])
    n = max(e.stage for e in tl.events if e.stage >= 0) + 1
    by: dict[tuple[int, str], list[float]] = {}
    for e in tl.events:
        if e.lane == "compute" and e.stage >= 0 and e.op not in lead:
            by.setdefault((e.stage, e.kind), []).append(e.duration)
    return {k: statistics.mean(v) / gemm_work(k[1], role_of(k[0], n), layers(k[0])) for k, v in by.items()}


@pytest.mark.parametrize("call", CALLS[:4])
def test_what_the_runs_ranks_tell_of_duty_is_mostly_the_loss(call):
    # Why the exponent learnt from a 2-rank run is not the one plans follow (docs/whatif.md, "What a
    # 2-rank run cannot tell"): interleaved 1F1B runs a middle stage on each rank, so the same work on
    # ranks of differing duty (rank 1 the busier) ran within 3% per GEMM of each other, while on rank 1
    # its last stage's F, the same GEMMs plus the loss, ran 4.7-10% longer than its middle one. The
    # calibrating run's rank 1 is that last stage: of what its F shows over rank 0's per GEMM (10-14%),
    # the loss is about half (hidden 2560: 0.48) to three quarters (call 2: 0.74). (Call 4, B as I then
    # W, is left out: there the middle stages differed 3% and 7% per GEMM, at rank duty 0.89/0.95 and
    # 0.86/0.96.)
    g = _per_gemm(call, "interleaved")
    assert 0.98 <= g[(1, "F")] / g[(2, "F")] <= 1.03
    assert 0.98 <= g[(1, "B")] / g[(2, "B")] <= 1.06
    assert 1.04 <= g[(3, "F")] / g[(1, "F")] <= 1.11
    cal = _per_gemm(call, "calibrate")
    loss_share = g[(3, "F")] / g[(1, "F")] - 1
    assert loss_share >= 0.45 * (cal[(1, "F")] / cal[(0, "F")] - 1)


def test_the_missed_interleaved_step_on_hidden_2560_is_its_rank_1_middle_stage():
    # call 3, hidden 2560: interleaved's median 2.4% under its band. Per stage, the op times the samples
    # are drawn around over the measured ones: rank 1's middle stage (derived from the run's first
    # stage on rank 0 and moved to rank 1's duty with the learnt exponent, 0.74) 5-8% long, the rest
    # within 3.5%
    from pptl.formats.loader import load_any
    from pptl.optable import table_of

    call = "call3_h2560"
    o = study_plans([DATA / call / "plan_interleaved.json"], measured=DATA / call / "measured_calibrate.json",
                    samples=16, seed=0, duty_exponent=None)[0]
    t = table_of(o.schedule)
    kinds = t.strings("kind")
    dur = o.samples.planned_end - o.samples.planned_start
    pred: dict[tuple[int, str], list[float]] = {}
    for i in range(t.n):
        if t.lane_names[int(t.lane[i])] == "compute" and int(t.stage[i]) >= 0:
            pred.setdefault((int(t.stage[i]), kinds[i]), []).append(float(dur[i]))
    meas: dict[tuple[int, str], list[float]] = {}
    for e in load_any(DATA / call / "measured_interleaved.json").timeline.events:
        if e.lane == "compute" and e.stage >= 0:
            meas.setdefault((e.stage, e.kind), []).append(e.duration)
    ratio = {k: statistics.mean(pred[k]) / statistics.mean(v) for k, v in meas.items()}
    assert 1.05 <= ratio[(1, "F")] <= 1.08 and 1.05 <= ratio[(1, "B")] <= 1.08
    assert all(0.99 <= r <= 1.035 for k, r in ratio.items() if k[0] != 1), ratio


def test_a_run_whose_b_ran_as_i_then_w_bounds_the_exponent_by_its_loss():
    # call 4's first shape: B as I then W (meta.extra.full_backward), a first and a last stage on ranks
    # busy 0.77 and 0.89: per GEMM the last stage's F ran 1.1246 and its B 1.0879 times the first's,
    # F' / B' = 0.502; B alone gives alpha 0.58 (the loss all in F), the loss as long in B as in F
    # 0.34; each sample draws between, the mean durations take the middle, 0.46
    from typer.testing import CliRunner

    from pptl.cli import app

    run = DATA / "call4_h3584" / "measured_calibrate.json"
    assert json.loads(run.read_text())["meta"]["extra"]["full_backward"] == "i-then-w"
    res = CliRunner().invoke(app, ["whatif", str(DATA / "call4_h3584" / "plan_gpipe.json"), "--from", str(run),
                                   "-n", "20"])
    assert res.exit_code == 0, res.output
    assert "duty exponent 0.46 (learnt from the run, whose ranks busy 0.77, 0.89, each sample's drawn in " \
           "0.34-0.58)" in res.stdout.splitlines()[0]
# - call 9 (hidden 3328, 3072 tokens, 3 blocks, rank 1 x1.2; chosen before the run, the model unchanged): 8 of 10.
#   GPipe's median (38.54 ms) 0.7% under its band (38.80-39.64): its ranks ran 1.6-5.5% faster than the
#   calibrating run's (busy less); interleaved's (278.88) 1.6% over its band (266.81-274.60): its rank 0
#   ran 6-12% slower than the calibrating run's (busier). Each plan predicted from its own run is within
#   0.3%: the schedule is right, the law that carries op times across duty is what misses.
