"""Boundaries of ``pptl whatif``, ``pptl compare`` and ``pptl explain``, against answers worked out by hand.

1F1B with F=1, B=2 and free messages: makespan (m + p - 1)(F + B), each rank idle (p - 1)(F + B), so
pp 4 m 8 is 33 (idle 9) and pp 12 m 12 is 69 (idle 33, bubble 11/23). A rank R of 1F1B pp 12 m 12 x f
(f large): the other stages before it (R forwards of mb 0), its m (F + B) f, the stages before it
again on the way back (2R): 3R + 36f... worked out per case below. A chain (pp 1) is a sum of
normals under jitter: its median is the sum of the means, its p95 that plus 1.645 sd sqrt(sum d^2).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.planning import timeline_of
from pptl.whatif import montecarlo
from pptl.whatif.montecarlo import monte_carlo
from pptl.whatif.spread import Jitter, Spread, parse_straggler

R = CliRunner()


def _plan(tmp: Path, name: str, family: str, pp: int, m: int) -> Path:
    out = tmp / name
    res = R.invoke(app, ["plan", "--schedule", family, "--pp", str(pp), "--microbatches", str(m), "--cost",
                         "F=1,B=2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("edges")
    return {"p4": _plan(tmp, "p4.json", "1f1b", 4, 8), "p12": _plan(tmp, "p12.json", "1f1b", 12, 12),
            "chain": _plan(tmp, "chain.json", "gpipe", 1, 4), "c1": _plan(tmp, "c1.json", "gpipe", 1, 1),
            "dir": tmp}


def _whatif_json(*args: str) -> dict:
    res = R.invoke(app, ["whatif", *args, "--output", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _refused(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


# --- whatif: idle exactly 0 (a bug: a chain's idle came out -1.8e-15 and 1.8e-15) ----------------------

def test_a_chain_is_never_idle_not_even_by_rounding(plans):
    d = _whatif_json(str(plans["chain"]), "--jitter", "5%", "--samples", "2000", "--seed", "3")
    assert d["plans"][0]["idle"] == [{"rank": 0, "p5": 0.0, "p50": 0.0, "p95": 0.0}]
    res = R.invoke(app, ["whatif", str(plans["chain"]), "--jitter", "5%", "--samples", "2000", "--seed", "3"])
    assert res.exit_code == 0, res.output
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("  rank  0"))
    assert row.split()[2:] == ["0", "0", "0"], row
    out = monte_carlo(load_any(plans["chain"]).schedule, None, Spread(jitter=Jitter(0.3)), samples=500, seed=1)
    assert (out.idle == 0.0).all()


# --- whatif: --jitter 0% is the deterministic makespan, every quantile ------------------------------

@pytest.mark.parametrize("name,planned,idle", [("p4", 33.0, 9.0), ("p12", 69.0, 33.0), ("chain", 12.0, 0.0)])
def test_jitter_zero_gives_the_planned_makespan_exactly(plans, name, planned, idle):
    d = _whatif_json(str(plans[name]), "--jitter", "0%", "--samples", "7")
    p = d["plans"][0]
    assert p["planned"] == planned
    assert {k: v for k, v in p["makespan"].items()} == {"mean": planned, "std": 0.0, "p50": planned,
                                                       "p95": planned, "p99": planned, "p25": planned,
                                                       "p75": planned}
    assert all(r["p5"] == r["p50"] == r["p95"] == idle for r in p["idle"])


# --- whatif: --samples 1 and the largest number of samples ---------------------------------------------

def test_one_sample(plans):
    d = _whatif_json(str(plans["p4"]), "--jitter", "5%", "--samples", "1")
    assert d["samples"] == 1
    p = d["plans"][0]["makespan"]
    assert p["p50"] == p["p95"] == p["p99"] == p["mean"] and p["std"] == 0.0
    res = R.invoke(app, ["whatif", str(plans["p4"]), "--samples", "1"])
    assert res.exit_code == 0 and res.stdout.startswith("1 sample, seed 0;"), res.output
    assert "refused" not in res.output
    res = R.invoke(app, ["whatif", str(plans["p4"]), "--samples", "0"])
    assert res.exit_code == 2, res.output


def test_samples_up_to_exactly_the_cell_limit(plans, monkeypatch):
    s = load_any(plans["chain"]).schedule  # 8 ops
    assert s.n_ops == 8
    monkeypatch.setattr(montecarlo, "MAX_CELLS", 8 * 10)
    assert monte_carlo(s, None, Spread(), samples=10).makespan.size == 10  # 80 cells: at the limit
    with pytest.raises(InputError, match="11 samples of 8 ops is more than 80"):
        monte_carlo(s, None, Spread(), samples=11)
    ok = R.invoke(app, ["whatif", str(plans["chain"]), "--samples", "10"])
    assert ok.exit_code == 0, ok.output
    line = _refused(R.invoke(app, ["whatif", str(plans["chain"]), "--samples", "11"]))
    assert "--samples" in line


# --- whatif: stragglers at the last rank, the last micro-batch, the ends of the factor -----------------

def test_the_last_rank_may_straggle_one_past_it_is_refused(plans):
    # rank 11 (the last stage) x2: stages 0-10 forward mb0 (11), its 12 x (2 + 4) = 72, back 11 x 2 = 22
    d = _whatif_json(str(plans["p12"]), "--straggler", "rank=11,x2", "--samples", "3")
    assert d["plans"][0]["makespan"]["p50"] == 105.0
    line = _refused(R.invoke(app, ["whatif", str(plans["p12"]), "--straggler", "rank=12,x2", "-n", "3"]))
    assert line == f"error: --straggler: rank 12 is not in {plans['p12']} (ranks 0-11)"


def test_the_last_micro_batch_may_hiccup_m_is_refused(plans):
    # F and B of mb 11 on rank 3 both on the critical path: +2 each
    d = _whatif_json(str(plans["p12"]), "--straggler", "rank=3,+2@mb11", "--samples", "3")
    assert d["plans"][0]["makespan"]["p50"] == 73.0
    d = _whatif_json(str(plans["p12"]), "--straggler", "rank=11,+2@mb11", "--samples", "3")
    assert d["plans"][0]["makespan"]["p50"] == 73.0
    line = _refused(R.invoke(app, ["whatif", str(plans["p12"]), "--straggler", "rank=3,+2@mb12", "-n", "3"]))
    assert line == f"error: --straggler: micro-batch 12 is not in {plans['p12']} (micro-batches 0-11)"


def test_factor_at_each_end_of_its_range(plans):
    # x1e6 on rank 3: 3 forwards before it, 12 x 3e6, 3 backwards (2 each) after: 36,000,009
    d = _whatif_json(str(plans["p12"]), "--straggler", "rank=3,x1000000", "--samples", "2")
    assert d["plans"][0]["makespan"]["p50"] == 36_000_009.0
    assert parse_straggler("rank=0,x1000,x1000")[0].factor == 1e6  # the product exactly at the bound
    for bad in ("rank=3,x1000001", "rank=3,x0", "rank=0,x1000,x1000.1", "rank=3,x0.0"):
        line = _refused(R.invoke(app, ["whatif", str(plans["p12"]), "--straggler", bad, "-n", "2"]))
        assert line.startswith("error: --straggler: "), line
    # the low end is open: any factor above 0; rank 0 nearly free leaves 11 stages: (12 + 10) x 3
    d = _whatif_json(str(plans["p12"]), "--straggler", "rank=0,x0.000001", "--samples", "2")
    assert d["plans"][0]["makespan"]["p50"] == pytest.approx(66.0, abs=1e-3)


def test_jitter_bounds(plans):
    assert _whatif_json(str(plans["p4"]), "--jitter", "99.9%", "-n", "5")["spread"] == "jitter 99.9%"
    assert _whatif_json(str(plans["p4"]), "--jitter", "0.999", "-n", "5")["spread"] == "jitter 99.9%"
    for bad in ("100%", "1", "1.0"):
        _refused(R.invoke(app, ["whatif", str(plans["p4"]), "--jitter", bad, "-n", "5"]))


# --- whatif: pp >= 10, criticality, the chain's closed form, the seed, plans side by side ----------------

def test_two_digit_ranks_in_numeric_order(plans):
    d = _whatif_json(str(plans["p12"]), "--jitter", "5%", "-n", "50")
    assert [r["rank"] for r in d["plans"][0]["idle"]] == list(range(12))
    res = R.invoke(app, ["whatif", str(plans["p12"]), "--jitter", "5%", "-n", "50"])
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("  rank ")]
    assert [ln[:10] for ln in rows] == [f"  rank {r:>2} " for r in range(12)]  # aligned: "rank  0" .. "rank 11"


@pytest.mark.parametrize("name,planned", [("p12", 69.0), ("p4", 33.0), ("chain", 12.0)])
def test_the_critical_path_adds_up_to_the_makespan(plans, name, planned):
    out = monte_carlo(load_any(plans[name]).schedule, None, Spread(jitter=Jitter(0.0)), samples=3)
    dur = out.planned_end - out.planned_start
    assert float((out.critical * dur).sum()) == pytest.approx(planned, abs=1e-9)
    assert out.critical.max() == 1.0 and out.critical.min() >= 0.0


def test_a_chain_has_the_quantiles_of_a_sum_of_normals(plans):
    n, sd = 20_000, 0.05
    out = monte_carlo(load_any(plans["chain"]).schedule, None, Spread(jitter=Jitter(sd)), samples=n, seed=3)
    s = sd * math.sqrt(4 * 1.0 ** 2 + 4 * 2.0 ** 2)  # 4 F of 1, 4 B of 2
    se = 1.2533 * s / math.sqrt(n)
    p50, p95 = np.quantile(out.makespan, (0.5, 0.95))
    assert abs(p50 - 12.0) < 5 * se
    assert abs(p95 - (12.0 + 1.6449 * s)) < 8 * se
    assert (out.critical == 1.0).all()  # every op of a chain is on every sample's path


def test_the_seed_decides_the_draws(plans):
    a = _whatif_json(str(plans["p4"]), str(plans["p12"]), "--jitter", "5%", "-n", "200", "--seed", "7")
    b = _whatif_json(str(plans["p4"]), str(plans["p12"]), "--jitter", "5%", "-n", "200", "--seed", "7")
    c = _whatif_json(str(plans["p4"]), str(plans["p12"]), "--jitter", "5%", "-n", "200", "--seed", "8")
    assert a == b
    assert a["plans"][0]["makespan"] != c["plans"][0]["makespan"]


def test_plans_of_different_pp_side_by_side(plans):
    d = _whatif_json(str(plans["p4"]), str(plans["p12"]), "--jitter", "0", "-n", "4")
    assert [(p["pp"], p["planned"], p["makespan"]["p99"], len(p["idle"])) for p in d["plans"]] == \
        [(4, 33.0, 33.0, 4), (12, 69.0, 69.0, 12)]
    # a straggler on the larger plan's last rank is not in the smaller one: refused, naming it
    line = _refused(R.invoke(app, ["whatif", str(plans["p12"]), str(plans["p4"]), "--straggler", "rank=11,x2",
                                   "-n", "3"]))
    assert line == f"error: --straggler: rank 11 is not in {plans['p4']} (ranks 0-3)"
    line = _refused(R.invoke(app, ["whatif", str(plans["p12"]), str(plans["p4"]), "--straggler",
                                   "rank=3,+1@mb8", "-n", "3"]))
    assert line == f"error: --straggler: micro-batch 8 is not in {plans['p4']} (micro-batches 0-7)"


# --- compare and explain: a "measured" timeline that ran exactly as planned ------------------------------

def _as_measured(plan: Path, out: Path, k: float) -> Path:
    """The plan's timeline as a measured one in ms, every time times ``k``."""
    d = timeline_of(load_any(plan)).to_dict()
    d["meta"]["source"] = "measured"
    d["meta"]["units"] = "ms"
    for e in d["events"]:
        e["start"] *= k
        e["end"] *= k
    out.write_text(json.dumps(d))
    return out


def test_compare_pp12_against_its_run(plans):
    run = _as_measured(plans["p12"], plans["dir"] / "t12.json", 0.5)
    res = R.invoke(app, ["compare", str(plans["p12"]), str(run), "--output", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["makespan"]["planned"] == d["makespan"]["measured"] == 34.5 and d["scale"] == 0.5
    assert d["bubble"]["planned"] == d["bubble"]["measured"] == pytest.approx(11 / 23)
    assert {o["rank"] for o in d["ops"]} == set(range(12))
    assert all(o["end_error"] == 0.0 for o in d["ops"])
    res = R.invoke(app, ["compare", str(plans["p12"]), str(run)])
    assert "bubble: planned 47.8%, measured 47.8%" in res.stdout


def test_explain_pp12_every_idle_is_schedule_bubble(plans):
    run = _as_measured(plans["p12"], plans["dir"] / "t12b.json", 0.5)
    for extra in ([], ["--plan", str(plans["p12"])]):
        res = R.invoke(app, ["explain", str(run), *extra, "--output", "json"])
        assert res.exit_code == 0, res.output
        d = json.loads(res.stdout)
        assert [r["rank"] for r in d["ranks"]] == list(range(12))
        for r in d["ranks"]:  # busy 12 x 1.5, idle 34.5 - 18, all of it the schedule's
            assert (r["busy"], r["idle"], r["bubble"]) == (18.0, 16.5, 16.5)
            assert r["late_input"] == r["transfer"] == r["host"] == r["imbalance"] == 0.0
    res = R.invoke(app, ["explain", str(run), "--plan", str(plans["p12"])])
    rows = [ln.split() for ln in res.stdout.splitlines()[2:14]]
    assert [r[0] for r in rows] == [str(r) for r in range(12)]
    assert all(r[3:5] == ["16.5", "(100%)"] and r[5:7] == ["0", "(0%)"] for r in rows), rows


def test_no_idle_at_all_reads_zero_without_a_share(plans):
    run = _as_measured(plans["c1"], plans["dir"] / "tc1.json", 1.0)
    res = R.invoke(app, ["compare", str(plans["c1"]), str(run)])
    assert res.exit_code == 0, res.output
    assert "bubble: planned 0.0%, measured 0.0%" in res.stdout
    res = R.invoke(app, ["explain", str(run), "--plan", str(plans["c1"])])
    assert res.exit_code == 0, res.output
    row = res.stdout.splitlines()[2].split()
    assert row == ["0", "3", "0", "0", "0", "0", "0", "0"], row


def test_a_run_of_another_plan_is_refused_in_one_line(plans):
    run = _as_measured(plans["p12"], plans["dir"] / "t12c.json", 1.0)
    line = _refused(R.invoke(app, ["compare", str(plans["p4"]), str(run)]))
    assert line == "error: the plan and the measurement are different schedules: the plan has pp 4, the run 12"
    line = _refused(R.invoke(app, ["explain", str(run), "--plan", str(plans["p4"])]))
    assert line == f"error: {plans['p4']}: not the plan that ran t12c.json: the plan has pp 4, the run 12"
    line = _refused(R.invoke(app, ["compare", str(run), str(plans["p12"])]))
    assert "give the plan first" in line
    small = _as_measured(plans["p4"], plans["dir"] / "t4.json", 1.0)  # and the other way round
    line = _refused(R.invoke(app, ["compare", str(plans["p12"]), str(small)]))
    assert line == "error: the plan and the measurement are different schedules: the plan has pp 12, the run 4"


def _uneven(path: Path) -> Path:
    """GPipe pp 2 m 1 as measured, stage 1 twice as slow: F0 0-1, F1 1-3, B1 3-7, B0 7-9 (ms), two steps of 9."""
    ev = [("r0/compute/F s0 mb0", 0, "F", 0, 0, 1), ("r1/compute/F s1 mb0", 1, "F", 1, 1, 3),
          ("r1/compute/B s1 mb0", 1, "B", 1, 3, 7), ("r0/compute/B s0 mb0", 0, "B", 0, 7, 9)]
    d = {"format": "pptl-timeline", "version": 1,
         "meta": {"source": "measured", "units": "ms", "family": "gpipe", "pp": 2, "microbatches": 1,
                  "extra": {"step_ms": [9.0, 9.0]}},
         "events": [{"op": o, "rank": r, "lane": "compute", "start": a, "end": b, "kind": k, "stage": st, "mb": 0,
                     "chunk": 0} for o, r, k, st, a, b in ev]}
    path.write_text(json.dumps(d))
    return path


def test_explain_splits_bubble_from_imbalance_by_hand(plans):
    # Replay at the kinds' means (F 1.5, B 3): B0 could start at 6, so rank 0's 6 ms gap before it is
    # 4.5 bubble and 1.5 imbalance (the measured replay's gap 6 less the mean one's). Rank 1 waits 1
    # for F0 (replay at means: 1.5, at measured: 1: bubble 1) and trails 2 (the means' replay trails 3):
    # all its idle, 3, is bubble: exactly 100%.
    run = _uneven(plans["dir"] / "uneven.json")
    res = R.invoke(app, ["explain", str(run), "--output", "json"])
    assert res.exit_code == 0, res.output
    got = [(r["rank"], r["busy"], r["idle"], r["bubble"], r["imbalance"], r["late_input"], r["transfer"], r["host"])
           for r in json.loads(res.stdout)["ranks"]]
    assert got == [(0, 3.0, 6.0, 4.5, 1.5, 0.0, 0.0, 0.0), (1, 6.0, 3.0, 3.0, 0.0, 0.0, 0.0, 0.0)]
    text = R.invoke(app, ["explain", str(run)]).stdout.splitlines()
    assert text[3].split()[3:5] == ["3", "(100%)"], text[3]


def test_a_run_right_on_the_plan_is_at_percentile_50_not_0(plans):
    # a bug: the measured median equal to every predicted step (no spread: two steps of 9) read
    # "at percentile 0" (the share strictly shorter); ties count half
    run = _uneven(plans["dir"] / "uneven2.json")
    plan = _plan(plans["dir"], "g2.json", "gpipe", 2, 1)
    cal = plans["dir"] / "cal.json"
    assert R.invoke(app, ["plan", str(plan), "--costs-from", str(run), "-o", str(cal)]).exit_code == 0
    res = R.invoke(app, ["compare", str(cal), str(run), "--output", "json"])
    assert res.exit_code == 0, res.output
    band = json.loads(res.stdout)["step_band"]
    assert (band["p5"], band["p50"], band["p95"], band["measured_median"], band["steps"]) == (9.0, 9.0, 9.0, 9.0, 2)
    assert band["percentile"] == 0.5
    res = R.invoke(app, ["compare", str(cal), str(run)])
    assert "step time: measured median 9 ms over 2 steps, at percentile 50 of the plan" in res.stdout
