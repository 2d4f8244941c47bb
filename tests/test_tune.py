"""pptl tune: the search (splits, synthesised order, ranking, memory), the CLI's outputs and one-line
errors, calibration from a measured run, and uneven stage_layers in pptl run (gloo)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.errors import InputError
from pptl.tune import tune
from pptl.tune.model import tune_config_from_mapping
from pptl.tune.rank import best_schedule
from pptl.tune.split import balanced_split, even_split, megatron_layout, splits_for, stage_costs
from pptl.tune.synth import SynthInput, build_synth, greedy_orders

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "tune" / "uneven.yaml"
runner = CliRunner()


def _cfg(**over):
    data = yaml.safe_load(FIX.read_text())
    data.update(over)
    return tune_config_from_mapping(data, source="t.yaml")


def _write(tmp_path: Path, **over) -> Path:
    data = yaml.safe_load(FIX.read_text())
    data.update(over)
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


# -- splits and layout -------------------------------------------------------------------------

def test_balanced_split_gives_the_heavy_ends_fewer_layers():
    tc = _cfg()
    assert even_split(32, 4) == (8, 8, 8, 8)
    assert even_split(10, 4) == (2, 3, 3, 2)  # the remainder goes to the middle
    bal = balanced_split(tc.model, 4)
    assert bal == (7, 9, 9, 7)  # embedding and head cost two layers each: 9 layer-times per stage
    per = stage_costs(tc.model, bal)
    assert {per[s]["F"] + per[s]["B"] for s in range(4)} == {27.0}


def test_megatron_layout_string():
    assert megatron_layout((7, 9, 9, 7)) == "Et*7|t*9|t*9|t*7L"
    assert megatron_layout((1, 2)) == "Et|t*2L"


def test_v_placement_rank_balances_rank0_holding_both_ends():
    tc = _cfg()
    rank_of = [0, 1, 2, 3, 3, 2, 1, 0]  # ZB-V: rank 0 holds the first and the last stage
    rb = splits_for(tc.model, rank_of)[0].layers  # rank-balanced folds into balanced when equal
    per_rank = [0.0] * 4
    for s, n in enumerate(rb):
        c = stage_costs(tc.model, rb)[s]
        per_rank[rank_of[s]] += c["F"] + c["B"]
    assert max(per_rank) - min(per_rank) <= 3.0 + 1e-9  # within one layer's F+B
    assert sum(rb) == 32


# -- synthesised order -------------------------------------------------------------------------

def test_synth_respects_the_memory_cap_and_passes_the_checker():
    x = SynthInput(pp=4, microbatches=8, F=[1.0] * 4, I=[1.0] * 4, W=[1.0] * 4, activation=[1.0] * 4,
                   limit=[2.0] * 4, w_activation=0.5, message=0.0)
    orders = greedy_orders(x)
    for r, seq in orders.items():
        held = peak = 0.0
        for kind, _ in seq:
            held += {"F": 1.0, "I": -0.5, "W": -0.5}[kind]
            peak = max(peak, held)
        assert peak <= 2.0
        assert [k for k, _ in seq].count("W") == 8
    from pptl.config import Config

    s = build_synth(Config(schedule="zb-h1", pp=4, microbatches=8, split_backward=True), x)
    assert [v for v in run_checks(s) if v.severity == "error"] == []


def test_without_memory_pressure_synth_matches_zb_h1_bubble_free_steady_state():
    tc = _cfg(memory_limit=None, families=["zb-h1", "synth"], microbatches=16)
    res = tune(tc)
    best: dict[str, float] = {}
    for r in res.results:
        if r.step is not None and r.split.name == "balanced":
            best[r.structure.family] = min(best.get(r.structure.family, r.step), r.step)
    assert best["synth"] <= best["zb-h1"] * 1.05


# -- ranking and memory ------------------------------------------------------------------------

def test_ranking_puts_fitting_candidates_first_and_reports_peaks():
    res = tune(_cfg())
    assert res.best is not None and res.best.fits
    fits = [r.fits for r in res.results]
    assert fits == sorted(fits, reverse=True)
    for r in res.results:
        if r.step is not None:
            assert r.fits == (max(r.peak) <= 10 + 1e-9)
    per_mb = [r.step / r.structure.microbatches for r in res.results if r.fits]
    assert per_mb == sorted(per_mb)
    fams = {r.structure.family for r in res.results}
    assert fams == {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "looped-bfs",
                    "interleaved-zb", "v-half", "v-min", "synth"}


def test_dualpipe_peak_counts_two_parameter_copies():
    tc = _cfg(memory_limit=None, families=["dualpipe", "1f1b"], microbatches=8)
    res = tune(tc)
    even = {r.structure.family: r for r in res.results if r.split and r.split.name == "even"}
    # weights: 1F1B rank 1 holds stage 1 (8 layers x 0.5); DualPipe rank 1 also holds stage 2.
    assert even["dualpipe"].peak[1] - even["1f1b"].peak[1] >= 8 * 0.5 - 1e-9


def test_best_plan_carries_the_split_costs_and_stage_layers():
    tc = _cfg()
    res = tune(tc)
    s = best_schedule(tc, res.best)
    assert s.config.workload.stage_layers == tuple(
        n + (2 if i in (0, 3) else 0) for i, n in enumerate(res.best.split.layers))
    # Stage 0's forward sends its activation on the compute stream (sync-send): its 0.05 is on F.
    assert dict(s.config.costs.stages[0])["F"] == stage_costs(tc.model, res.best.split.layers)[0]["F"] + 0.05
    assert dict(s.config.costs.stages[3])["F"] == stage_costs(tc.model, res.best.split.layers)[3]["F"]


# -- CLI ---------------------------------------------------------------------------------------

def test_cli_writes_plan_csv_figure_and_json(tmp_path):
    plan, csv, fig = tmp_path / "best.json", tmp_path / "best.csv", tmp_path / "pareto.png"
    r = runner.invoke(app, ["tune", str(FIX), "-o", str(plan), "--csv", str(csv), "--figure", str(fig)])
    assert r.exit_code == 0, r.output
    assert 'layout "Et*7|t*9|t*9|t*7L"' in r.output
    assert json.loads(plan.read_text())["format"] == "pptl-plan"
    rows = csv.read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("0F0,") and rows[3].endswith(",3W15")  # one row per rank
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(app, ["check", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["tune", str(FIX), "--output", "json", "--top", "3"])
    data = json.loads(r.output)
    assert data["best"]["fits"] and data["memory_limit"] == 10


def test_no_candidate_fits_exit_1_names_the_closest(tmp_path):
    r = runner.invoke(app, ["tune", str(FIX), "--memory-limit", "1"])
    assert r.exit_code == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no candidate fits the memory limit 1; closest: ")
    assert "with peak" in line


def test_fewer_layers_than_stages_exit_2(tmp_path):
    data = yaml.safe_load(FIX.read_text())
    data["model"]["layers"] = 3
    p = tmp_path / "few.yaml"
    p.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["tune", str(p)])
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"error: {p}: field 'model.layers': got 3, fewer than pp=4 stages; give at least "
                                "4 layers or a smaller pp")


def test_missing_cost_for_a_kind_exit_2(tmp_path):
    data = yaml.safe_load(FIX.read_text())
    data["model"]["layer"] = {"F": 1.0, "B": 2.0}
    p = tmp_path / "nocost.yaml"
    p.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["tune", str(p)])
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "field 'model.layer.I': no cost given (needed by zb-h1, zb-h2, zbv, interleaved-zb, v-half, v-min, synth" in r.stderr
    data["families"] = ["1f1b", "gpipe"]  # families without a split backward need only F and B
    p.write_text(yaml.safe_dump(data))
    assert runner.invoke(app, ["tune", str(p)]).exit_code == 0


# -- calibration -------------------------------------------------------------------------------

def test_costs_from_fits_layer_embedding_and_head():
    from pptl.tune.calibrate import fit_layer_costs

    tc = _cfg()
    # stage times of 8 layers each plus embedding 5 and head 3 at t = 2
    t, e, h = fit_layer_costs(tc.model, (8, 8, 8, 8), [21.0, 16.0, 16.0, 19.0], (2.0, 2.0))
    assert (t, e, h) == (2.0, 5.0, 3.0)
    t, e, h = fit_layer_costs(tc.model, (8, 8), [20.0, 20.0], (2.0, 2.0))
    assert t == pytest.approx(2.0) and e == pytest.approx(4.0)


# -- pptl run with uneven stage_layers (gloo) --------------------------------------------------

def test_run_uneven_stage_layers_verifies(tmp_path):
    pytest.importorskip("torch")
    from pptl.config import config_from_mapping
    from pptl.run import run_plans
    from pptl.schedules import build_schedule

    wl = {"hidden": 16, "tokens": 4, "dtype": "float32", "stage_layers": [3, 1]}
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 4, "workload": wl}))
    tl = run_plans([(s, None)], gpus=2, device="cpu", steps=1, warmup=0, verify=True, timeout=60)[0]
    assert tl.meta.extra["verify"]["ok"]
    assert tl.meta.extra["workload"]["stage_layers"] == [3, 1]
    f = {e.stage: e.duration for e in tl.events if e.kind == "F" and e.mb == 0}
    assert len(f) == 2


def test_stage_layers_of_the_wrong_length_is_one_line(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"schedule": "1f1b", "pp": 2, "microbatches": 2,
                             "workload": {"hidden": 8, "tokens": 2, "stage_layers": [1, 1, 1]}}))
    r = runner.invoke(app, ["run", str(p), "--device", "cpu", "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2
    assert "field 'workload.stage_layers': got 3 entries, expected one per stage (2 for 1f1b" in r.stderr


# -- the exact synthesised order ---------------------------------------------------------------

def test_ilp_note_when_highspy_is_missing_or_too_big(monkeypatch):
    import builtins

    from pptl.tune.synth_ilp import ilp_orders

    x = SynthInput(pp=2, microbatches=2, F=[1.0] * 2, I=[1.0] * 2, W=[1.0] * 2, activation=[1.0] * 2,
                   limit=[2.0] * 2, w_activation=0.5, message=0.0)
    real = builtins.__import__

    def no_highs(name, *a, **k):
        if name == "highspy":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_highs)
    orders, note = ilp_orders(x, 100.0)
    assert orders is None and note.startswith("synth ILP skipped: highspy is not installed")
    big = replace(x, pp=8, microbatches=64, F=[1.0] * 8, I=[1.0] * 8, W=[1.0] * 8, activation=[1.0] * 8,
                  limit=[2.0] * 8)
    orders, note = ilp_orders(big, 100.0)
    assert orders is None and "exceed" in note
    # the candidate falls back to the greedy order and says so
    tc = _cfg(families=["synth"], microbatches=8)
    res = tune(tc)
    ilp = [r for r in res.results if r.structure.method == "ilp"]
    assert ilp and all(r.step is None and r.skipped.startswith("synth ILP skipped") and r.rejected is None for r in ilp)
    assert any(r.structure.method == "greedy" and r.step is not None for r in res.results)
    assert any(n.startswith("synth ILP skipped") for n in res.notes)


def test_ilp_finds_an_order_no_slower_than_greedy_within_the_memory_limit():
    pytest.importorskip("highspy")
    from pptl.tune.synth_ilp import ilp_orders, order_makespan

    x = SynthInput(pp=3, microbatches=4, F=[1.0, 1.0, 1.5], I=[1.0] * 3, W=[0.5] * 3, activation=[1.0] * 3,
                   limit=[2.0] * 3, w_activation=0.5, message=0.1)
    greedy = greedy_orders(x)
    orders, note = ilp_orders(x, 100.0, time_limit=5.0, warm=greedy)
    assert orders is not None, note
    assert order_makespan(x, orders) <= order_makespan(x, greedy) + 1e-9
    for r, seq in orders.items():
        held = peak = 0.0
        for k, _ in seq:
            held += {"F": 1.0, "I": -0.5, "W": -0.5}[k]
            peak = max(peak, held)
        assert peak <= 2.0 + 1e-9


def test_gpu_script_limit_and_spearman():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_tune", ROOT / "bench" / "gpu_tune.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # (micro-batches, predicted step, predicted peak): the fastest of each count (peaks 15.0 and
    # 12.0) must not fit, something of each count must, and the limit sits in the widest gap below.
    cands = [(8, 1.0, 15.0), (8, 2.0, 10.0), (8, 3.0, 10.2), (16, 1.5, 12.0), (16, 2.5, 10.0)]
    limit = mod.pick_limit(cands)
    assert 10.2 < limit < 12.0
    assert limit == pytest.approx((10.2 * 12.0) ** 0.5)
    # no count keeps a fitting candidate below its winner: the middle of the range instead
    assert mod.pick_limit([(8, 1.0, 10.0), (8, 2.0, 12.0), (8, 3.0, 15.0)]) > 10.0
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from _tune_common import spearman, structure_of

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # bench/tune_offline.py rebuilds each measured candidate from its label
    st = structure_of("interleaved-1f1b vpp=3 G=4 m=16 split=balanced")
    assert structure_of("interleaved vpp=3 G=4 m=16 split=balanced") == st  # older results name it so
    assert (st.family, st.vpp, st.group, st.microbatches) == ("interleaved-1f1b", 3, 4, 16)
    assert structure_of("zbv vpp=2 m=8 split=rank-balanced").vpp == 2
    st = structure_of("synth mem-limit ilp m=8 split=balanced")
    assert (st.inflight, st.method) == (None, "ilp")
    assert structure_of("synth inflight=4 m=8 split=even").inflight == 4


def test_hostile_sizes_are_rejected_not_built(monkeypatch):
    import pptl.tune.rank

    data = yaml.safe_load(FIX.read_text())
    data.update(pp=4096, microbatches=100_000, memory_limit=None, families=["1f1b", "synth"])
    data["model"]["layers"] = 100_000
    tc = tune_config_from_mapping(data, source="t.yaml")
    # the sweep is refused before anything is built: 4 plans of 6 x 4096 x 100,000 ops
    with pytest.raises(InputError, match=r"^t.yaml: 4 candidate plans of about 9,830,400,000 ops in all, more than "
                                         r"the 10,000,000 pptl tune times in one call"):
        tune(tc)
    # and past that bound, each plan too large for pptl is rejected, not built
    monkeypatch.setattr(pptl.tune.rank, "MAX_TUNE_OPS", 10**12)
    res = tune(tc)
    assert res.best is None and all(r.step is None for r in res.results)
    assert all("more than the 5,000,000 pptl plans" in r.rejected for r in res.results)


def test_sync_send_puts_message_time_on_the_producers_compute_lane():
    base = _cfg(families=["1f1b"], microbatches=8, memory_limit=None)
    sync = {r.label: r for r in tune(base).results}
    over = {r.label: r for r in tune(replace(base, messages="overlap")).results}
    key = "1f1b m=8 split=even"
    # rank 0's compute lane carries 8 activation sends of 0.05 each that overlap does not
    busy = lambda r: r.step * (1 - r.bubble) * 4  # noqa: E731
    assert busy(sync[key]) - busy(over[key]) == pytest.approx(2 * 3 * 8 * 0.05)
    free = replace(base, comm_latency=0.0)
    assert tune(free).results[0].step == tune(replace(free, messages="overlap")).results[0].step


# -- I and W from a run with B only (model.work) -----------------------------------------------

def test_split_shares_recover_i_and_w_from_the_rates_f_and_b_imply():
    from pptl.tune.calibrate import split_shares
    from pptl.tune.model import mlp_block_work

    work = mlp_block_work(4096, 2048, 2)
    model = replace(_cfg().model, work=work)
    x, y = 1.3e-12, 2.9e-10  # ms per FLOP, ms per byte
    t = {k: w.flops * x + w.bytes * y for k, w in work.items()}
    i, w = split_shares(model, t["F"], t["B"])
    assert i * t["B"] == pytest.approx(t["I"]) and w * t["B"] == pytest.approx(t["W"])
    # autograd's B adds each weight gradient into .grad in a pass of its own; W's addmm_ does not
    assert i + w < 0.97
    # F and B that no non-negative rates explain (B below twice F's GEMMs): no shares
    assert split_shares(model, 1.0, 1.5) is None
    assert split_shares(replace(model, work=None), t["F"], t["B"]) is None


def test_split_shares_predict_the_measured_zero_bubble_steps_on_2x_h200():
    # Per-block costs `pptl tune --costs-from` fitted to the 1F1B run of bench/gpu_tune.sh on 2x H200
    # (2026-11-26, PP=2): F 0.87495 ms, B 1.98795 ms, message 0.08954 ms. Measured steps of the
    # same launch: zb-h1 224.86 ms and zb-h2 227.15 ms at 8 micro-batches. Halving B over-predicted them
    # by 6.6% and 5.0%.
    from pptl.tune.calibrate import split_shares

    h, t, esz = 4096, 2048, 2
    w_mib, a_mib = 2 * (8 * h * h + 5 * h) * esz / 2**20, t * 10 * h * esz / 2**20
    f, b = 0.87495, 1.98795
    model = {"layers": 16, "layer": {"F": f, "B": b, "activation": a_mib, "weight": w_mib},
             "embedding": {"F": 2 * f, "B": 2 * b, "activation": 2 * a_mib, "weight": 2 * w_mib},
             "head": {"F": 2 * f, "B": 2 * b, "activation": 2 * a_mib, "weight": 2 * w_mib},
             "message_bytes": t * h * esz, "w_activation": 1.0, "work": "mlp"}
    data = {"pp": 2, "microbatches": 8, "model": model, "comm": {"latency": 0.08954},
            "families": ["zb-h1", "zb-h2"], "workload": {"hidden": h, "tokens": t, "dtype": "bfloat16"}}
    tc = tune_config_from_mapping(data, source="t.yaml")
    i, w = split_shares(tc.model, f, b)
    layer = replace(tc.model.layer, I=i * b, W=w * b)
    tc = replace(tc, model=replace(tc.model, layer=layer))
    steps = {r.structure.family: r.step for r in tune(tc).results if r.split and r.split.layers == (8, 8)}
    assert steps["zb-h1"] == pytest.approx(224.86, rel=0.02)
    assert steps["zb-h2"] == pytest.approx(227.15, rel=0.02)


def test_model_work_is_validated_in_one_line():
    from pptl.errors import InputError

    data = yaml.safe_load(FIX.read_text())
    data["model"]["work"] = {"F": {"flops": 1, "bytes": 1}}
    with pytest.raises(InputError, match=r"model\.work.*expected work: mlp"):
        tune_config_from_mapping(data, source="t.yaml")
    data["model"]["work"] = "mlp"
    assert tune_config_from_mapping(data, source="t.yaml").model.work["B"].flops > 0


# -- duty cycle (device.duty_exponent) -------------------------------------------------------------

def _duty_run(tmp_path, alpha: float, makespan: float = 550.0,
              work: tuple[int, ...] = (10, 8, 8, 10)) -> tuple[Path, list[float]]:
    """A measured 1F1B-like timeline of 4 ranks, 16 micro-batches, stage work ``work`` in layers (by
    default 8 layers each plus an embedding and a head of 2 layers), full-duty F 1 and B 2 per layer,
    where each rank's compute takes duty ** alpha of that. Duty u solves u = busy(u) / makespan, i.e.
    u ** (1 - alpha) = 48 * work / makespan. Returns the file and the ranks' duty."""
    from pptl.timeline import Event, Timeline, TimelineMeta

    duty = [(48 * w / makespan) ** (1 / (1 - alpha)) for w in work]
    events = []
    for r, (w, u) in enumerate(zip(work, duty)):
        f, b = w * u ** alpha, 2 * w * u ** alpha
        ops = [("F", mb, f) for mb in range(16)] + [("B", mb, b) for mb in range(16)]
        # the first op at 0, the rest back to back so the last ends at the makespan
        t = makespan - sum(d for *_, d in ops[1:])
        for k, (kind, mb, d) in enumerate(ops):
            start = 0.0 if k == 0 else t
            events.append(Event(op=f"r{r}/compute/{kind} s{r} mb{mb}", rank=r, lane="compute", start=start,
                                end=start + d, kind=kind, stage=r, mb=mb))
            if k:
                t += d
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", family="1f1b", pp=4, microbatches=16))
    p = tmp_path / f"run{alpha}.json"
    p.write_text(json.dumps(tl.to_dict()))
    return p, duty


def test_fit_duty_exponent_recovers_a_known_exponent():
    from pptl.tune.calibrate import fit_duty_exponent

    work, duty = [10.0, 8.0, 8.0, 10.0], [0.88, 0.6, 0.59, 0.87]
    times = [[c * w * u ** 0.3 for w, u in zip(work, duty)] for c in (0.8, 1.9)]
    assert fit_duty_exponent(work, times, duty) == pytest.approx(0.3)
    assert fit_duty_exponent(work, [[w for w in work]], duty) == pytest.approx(0.0)
    # ranks about as busy as each other: nothing to fit from
    assert fit_duty_exponent(work, times, [0.80, 0.79, 0.78, 0.80]) is None
    # times that scatter around no trend in duty: no exponent is read from noise
    noisy = [[w * f for w, f in zip(work, (1.0, 1.06, 0.93, 1.01))], [w * f for w, f in zip(work, (0.95, 1.0, 1.04, 1.0))]]
    assert fit_duty_exponent(work, noisy, duty) is None


def test_costs_from_fits_duty_exponent_and_full_duty_costs(tmp_path):
    from pptl.tune.calibrate import calibrate_tune

    # 9, 7, 7 and 9 layers, the embedding and head on the ends: busy shares 1.8 apart (11/7 ** (1/0.7))
    path, duty = _duty_run(tmp_path, 0.3, work=(11, 7, 7, 11))
    assert max(duty) / min(duty) == pytest.approx((11 / 7) ** (1 / 0.7))
    tc, _, notes = calibrate_tune(_cfg(memory_limit=None, measured_split=[9, 7, 7, 9]), path)
    assert tc.duty_exponent == pytest.approx(0.3, abs=1e-6)
    m = tc.model
    # full-duty costs come back: 1 and 2 per layer, the embedding and head 2 layers each
    assert m.layer.F == pytest.approx(1.0) and m.layer.B == pytest.approx(2.0)
    assert m.embedding.F == pytest.approx(2.0) and m.head.B == pytest.approx(4.0)
    assert any("duty exponent 0.300 fitted" in n for n in notes)
    # the config's exponent wins over the fit; 0 is today's fixed durations (per-stage means)
    fixed, _, notes = calibrate_tune(replace(_cfg(memory_limit=None, measured_split=[9, 7, 7, 9]), duty_exponent=0.0),
                                     path)
    assert fixed.duty_exponent == 0.0 and fixed.model.layer.F == pytest.approx(8 * duty[1] ** 0.3 / 8, rel=0.05)
    assert not any("duty exponent" in n for n in notes)


def test_costs_from_a_run_without_duty_effect_fits_zero(tmp_path):
    from pptl.tune.calibrate import calibrate_tune

    path, duty = _duty_run(tmp_path, 0.0, makespan=600.0)  # durations do not depend on duty
    tc, _, notes = calibrate_tune(_cfg(memory_limit=None), path)
    assert tc.duty_exponent == pytest.approx(0.0, abs=1e-9)
    assert tc.model.layer.F == pytest.approx(1.0) and tc.model.embedding.F == pytest.approx(2.0)


def test_duty_timing_is_a_fixed_point_and_zero_is_unchanged():
    base = _cfg(families=["1f1b", "gpipe", "zbv"], microbatches=8, memory_limit=None, messages="overlap")
    plain = {r.label: r for r in tune(base).results}
    same = {r.label: r for r in tune(replace(base, duty_exponent=0.0)).results}
    assert {k: r.step for k, r in plain.items()} == {k: r.step for k, r in same.items()}
    assert all(r.duty == () for r in plain.values())
    duty = {r.label: r for r in tune(replace(base, duty_exponent=0.3)).results}
    for label, r in duty.items():
        # idle time lets a rank clock higher: no step is longer than at fixed durations, and one
        # whose busiest rank idles at times is shorter (a rank busy all the step keeps its cost)
        assert r.step <= plain[label].step * (1 + 1e-12)
        if max(r.duty) < 1:
            assert r.step < plain[label].step
        # the duty the timing converged to is the busy share of its own step
        assert sum(r.duty) / len(r.duty) == pytest.approx(1 - r.bubble, abs=1e-3)
        assert all(0 < d <= 1 for d in r.duty)
    assert duty["1f1b m=8 split=even"].step < plain["1f1b m=8 split=even"].step


def test_duty_exponent_config_errors():
    from pptl.errors import InputError

    assert _cfg(device={"duty_exponent": 0.25}).duty_exponent == 0.25
    assert _cfg().duty_exponent is None and _cfg().alpha == 0.0
    with pytest.raises(InputError, match=r"field 'device.duty_exponent': got 3.0, expected 0..2"):
        _cfg(device={"duty_exponent": 3.0})
    with pytest.raises(InputError, match=r"field 'device': expected a mapping such as"):
        _cfg(device={"clock": 1})


@pytest.mark.parametrize("units, memory", [("unit", "unit of the config"), ("ms", "MiB")])
def test_pareto_figure_names_both_axes_units(units: str, memory: str) -> None:
    """Uncalibrated, memory is in the config's unit; calibrated from a run, it is what the run measured (MiB)."""
    from pptl.render.pareto import pareto_figure

    ax = pareto_figure(tune(_cfg()), units=units).axes[0]
    assert ax.get_xlabel() == f"peak memory on the busiest rank ({memory})"
    assert ax.get_ylabel().endswith(f"({units})")


def test_costs_from_a_run_read_the_split_that_run_executed(tmp_path):
    """A tuned plan runs its split ([7, 9, 9, 7] layers, the embedding's and head's 2 run blocks added
    to the first and last stage: workload.stage_layers [9, 9, 9, 9]); the fit reads it from the run,
    not the even split [8, 8, 8, 8], and recovers F 1 per layer, 2 for the embedding and head."""
    from pptl.timeline import Event, Timeline, TimelineMeta
    from pptl.tune.calibrate import calibrate_tune

    events = []
    for r in range(4):
        t = 0.0
        for kind, per in (("F", 9.0), ("B", 18.0)):  # 7 layers + a 2-layer embedding, or 9 layers: 9 each
            for mb in range(4):
                events.append(Event(op=f"r{r}/compute/{kind} s{r} mb{mb}", rank=r, lane="compute", start=t, end=t + per,
                                    kind=kind, stage=r, mb=mb))
                t += per
    extra = {"workload": {"hidden": 64, "tokens": 16, "layers_per_stage": 1, "dtype": "float32",
                          "stage_layers": [9, 9, 9, 9]}}
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", family="1f1b", pp=4, microbatches=4,
                                       extra=extra))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(tl.to_dict()))
    tc, _, _ = calibrate_tune(replace(_cfg(memory_limit=None), duty_exponent=0.0), path)
    assert tc.model.layer.F == pytest.approx(1.0) and tc.model.layer.B == pytest.approx(2.0)
    assert tc.model.embedding.F == pytest.approx(2.0) and tc.model.head.F == pytest.approx(2.0)
    # a split given in the config still wins over the run's
    given, _, _ = calibrate_tune(replace(_cfg(memory_limit=None), duty_exponent=0.0, measured_split=(8, 8, 8, 8)), path)
    assert given.model.layer.F != pytest.approx(1.0)


def test_duty_fit_needs_a_spread_of_duty_that_shows_it():
    """alpha = (stage time ratio beyond the work ratio) / ln(duty ratio): below a duty ratio of 1.4 the
    last stage's own slowness (up to 3.5% a block on 2 H200s) would move it by more than 0.1, so nothing
    is fitted."""
    import math

    from pptl.tune.calibrate import MIN_DUTY_SPREAD, fit_duty_exponent

    assert MIN_DUTY_SPREAD == 1.4
    work = [[7.0, 8.0], [6.75, 8.0]]  # per kind: F, and B where the first stage makes no input gradient
    # 0.625 and 0.875 are 5/8 and 7/8: their ratio is 1.4 to the last bit, exactly at the limit
    assert 0.875 / 0.625 == MIN_DUTY_SPREAD
    for duty, fitted in (([0.625, 0.875], True), ([0.625, 0.625 * 1.399], False)):
        times = [[c * w * u ** 0.25 for w, u in zip(ws, duty)] for c, ws in zip((1.0, 2.1), work)]
        got = fit_duty_exponent(work, times, duty)
        assert (got == pytest.approx(0.25)) if fitted else got is None
    # One work list for every kind reads B's first-stage saving (6.75 of 7 layers) as duty: B's slope is
    # 0.25 + ln(7 / 6.75) / ln(1.4) = 0.358, pooled with F's 0.25: 0.304.
    duty = [0.7, 0.98]
    times = [[c * w * u ** 0.25 for w, u in zip(ws, duty)] for c, ws in zip((1.0, 2.1), work)]
    assert fit_duty_exponent(work[0], times, duty) == pytest.approx(0.25 + math.log(7 / 6.75) / math.log(1.4) / 2,
                                                                      abs=1e-9)


def _crossval_calibrated(name: str, full_backward: str | None = None):
    import tempfile

    from pptl.tune.calibrate import calibrate_tune

    d = json.loads((ROOT / "tests" / "data" / "tune_crossval" / f"{name}.json").read_text())
    if full_backward is not None:  # what pptl run writes since its B runs as I then W
        d["base"]["meta"]["extra"]["full_backward"] = full_backward
    tc = tune_config_from_mapping(d["config"], source=name)
    with tempfile.TemporaryDirectory() as t:
        base = Path(t) / "base.measured.json"
        base.write_text(json.dumps(d["base"]))
        return calibrate_tune(tc, base)


def test_two_h200_ranks_alike_in_duty_take_the_devices_exponent():
    """2 H200s, two stages of equal work (5 layers + 2 blocks each), no clock record: ranks busy 0.79 and
    0.86 (a ratio of 1.09) gave alpha 0.70 when fitted; now the device's, the clock law's 0.55 x 0.55."""
    from pptl.tune.calibrate import DEVICE_DUTY_EXPONENT

    tc, _, notes = _crossval_calibrated("h3072-t4096-l5-m6")
    assert tc.duty_exponent == DEVICE_DUTY_EXPONENT == pytest.approx(0.3025)
    assert notes[0].startswith("duty exponent 0.3025: the run's ranks (busy 0.79, 0.86 of the step) do not show")


def test_ranks_that_differ_in_duty_fit_the_exponent_from_f_and_b_only():
    """Busy 0.64 and 0.95 (ratio 1.48): fitted from the run's F and B (its I and W are halves of B,
    not measurements), 0.294, clamped to at most 0.5. Busy 0.63 and 0.84 (1.33, under 1.4): the device's
    0.3025, where the fit would say 0.23."""
    tc, _, notes = _crossval_calibrated("h6144-t2048-l6-m12")
    assert tc.duty_exponent == pytest.approx(0.294, abs=0.001)
    assert "fitted" in notes[0] and "clamped to 0..0.5" in notes[0]
    tc, _, notes = _crossval_calibrated("h8192-t1024-l4-m4")
    assert tc.duty_exponent == pytest.approx(0.3025)
    assert notes[0].startswith("duty exponent 0.3025: the run's ranks (busy 0.63, 0.84")


def test_a_run_whose_b_ran_as_i_then_w_gives_shares_that_sum_to_b_and_no_fresh_gradient():
    """A timeline that says ``full_backward: i-then-w`` did I's and W's work in B and no more: the
    shares derived from its F and B sum to 1 (autograd's B: 0.917 of it on this run), and a rank of
    split backwards holds what a rank of B's held (no fresh 512 MiB weight gradient to take off)."""
    import re

    old_tc, _, old_notes = _crossval_calibrated("h8192-t1024-l4-m4")
    tc, _, notes = _crossval_calibrated("h8192-t1024-l4-m4", "i-then-w")

    def shares(ns: list[str]) -> tuple[float, float]:
        line = next(n for n in ns if n.startswith("the run has no split backward"))
        i, w = re.search(r"I and W take ([0-9.]+) and ([0-9.]+) of B", line).groups()
        return float(i), float(w)

    assert sum(shares(old_notes)) < 0.97
    assert sum(shares(notes)) == pytest.approx(1.0, abs=0.002)
    assert tc.memory.split_working is None and tc.memory.working == pytest.approx(old_tc.memory.working)
    assert old_tc.memory.split_working == pytest.approx(old_tc.memory.working - 512.0)


def test_split_backward_working_memory_has_no_fresh_weight_gradient():
    """hidden 8192, bf16: B writes a Linear(8192, 32768)'s weight gradient, 4 * 8192^2 * 2 bytes =
    512 MiB, to a fresh tensor; W adds in place, so a rank of split backwards holds 512 MiB less."""
    tc, _, _ = _crossval_calibrated("h8192-t1024-l4-m4")
    mm = tc.memory
    assert mm.split_working == pytest.approx(mm.working - 512.0)
    assert mm.working == pytest.approx(681.44, abs=0.01)


@pytest.mark.parametrize(("messages", "durations", "hold"), [
    ("sync-send", [0.01, 0.04, 0.02], 0.02),        # odd count: the middle one
    ("sync-send", [0.03, 0.01, 0.04, 0.02], 0.03),  # even count: the upper of the two middle ones
    ("sync-send", [], None),                        # no message at all
    ("overlap", [0.01, 0.04, 0.02], None),          # sends beside compute hold no producer
], ids=["odd", "even", "no-send", "overlap"])
def test_send_hold_is_the_runs_median_send_on_its_compute_stream(messages, durations, hold) -> None:
    from pptl.timeline import Event, Timeline, TimelineMeta
    from pptl.tune.calibrate import _send_hold

    events = [Event(f"r0/send/SEND_F s0 mb{k} ->r1", 0, "send", 10.0 * k, 10.0 * k + d, "SEND", 0, k)
              for k, d in enumerate(durations)]
    events.append(Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 5.0, "F", 0, 0))
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", extra={"messages": messages}))
    got = _send_hold(tl)
    assert got == (None if hold is None else pytest.approx(hold))


def test_calibration_takes_the_send_hold_of_a_sync_send_run(tmp_path: Path) -> None:
    """The saved 2x H200 run of h2048-t1024-l16-m8 (sync-send, 16 messages of 4 MiB): its SENDs took
    28.2-31.8 us on the compute stream of messages 70.8 us long; the hold is the upper median, 29.25 us."""
    from pptl.tune.calibrate import calibrate_tune

    d = json.loads((Path(__file__).resolve().parent / "data" / "tune_crossval" / "h2048-t1024-l16-m8.json").read_text())
    sends = sorted(e["end"] - e["start"] for e in d["base"]["events"] if e["kind"] == "SEND")
    assert len(sends) == 16 and 0.028 < sends[0] and sends[-1] < 0.032
    base = tmp_path / "base.measured.json"
    base.write_text(json.dumps(d["base"]))
    tc, _, notes = calibrate_tune(tune_config_from_mapping(d["config"], source="t"), base)
    assert tc.send_hold == pytest.approx(sends[8]) and tc.send_hold == pytest.approx(0.02925, abs=5e-5)
    assert tc.comm_latency == pytest.approx(0.07075, abs=5e-5)
    assert any(n.endswith("message 0.07075 ms (its SEND holds the producer's compute stream 0.02925 of it)")
               for n in notes), notes


def _b_split_run(tmp_path: Path, parts: dict[str, object] | None, full_backward: str | None = "i-then-w") -> Path:
    """4 ranks, 4 micro-batches, 8 layers a stage plus a 2-layer embedding and head (stage work
    [10, 8, 8, 10]): F 1 a layer, B 3 = I 1.2 + W 1.8 a layer; ``parts`` (B's op id -> ms of its I
    part) is what the run wrote as ``b_input_ms``, None for all of them at 0.4 of B."""
    from pptl.timeline import Event, Timeline, TimelineMeta

    events, b_input = [], {}
    for r, w in enumerate((10, 8, 8, 10)):
        t = 0.0
        for kind, per in (("F", 1.0 * w), ("B", 3.0 * w)):
            for mb in range(4):
                op = f"r{r}/compute/{kind} s{r} mb{mb}"
                events.append(Event(op=op, rank=r, lane="compute", start=t, end=t + per, kind=kind, stage=r, mb=mb))
                if kind == "B":
                    b_input[op] = 0.4 * per
                t += per
    extra: dict[str, object] = {"b_input_ms": b_input if parts is None else {**b_input, **parts}}
    if full_backward is not None:
        extra["full_backward"] = full_backward
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", family="1f1b", pp=4, microbatches=4,
                                       extra=extra))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(tl.to_dict()))
    return path


def test_a_run_that_marked_each_bs_i_part_calibrates_i_and_w_from_it(tmp_path):
    """The I part of every B took 0.4 of it: a layer's I is 1.2 and W 1.8 (not the model's 1:1,
    nor a share derived from work), the embedding's and head's 2.4 and 3.6."""
    from pptl.planning import b_parts
    from pptl.tune.calibrate import calibrate_tune

    path = _b_split_run(tmp_path, None)
    tc, _, notes = calibrate_tune(replace(_cfg(memory_limit=None), duty_exponent=0.0), path)
    m = tc.model
    assert (m.layer.F, m.layer.B) == (pytest.approx(1.0), pytest.approx(3.0))
    assert (m.layer.I, m.layer.W) == (pytest.approx(1.2), pytest.approx(1.8))
    assert (m.head.I, m.head.W) == (pytest.approx(2.4), pytest.approx(3.6))
    assert any(n.startswith("I and W measured inside the run's B") and "0.400 and 0.600 of B" in n for n in notes)
    assert not any(n.startswith("the run has no split backward") for n in notes)
    from pptl.formats.loader import load_any

    parts = b_parts(load_any(path).timeline)
    assert parts is not None and parts[0] == {"I": pytest.approx(12.0), "W": pytest.approx(18.0)}


@pytest.mark.parametrize("bad", [
    {"r3/compute/B s3 mb3": 30.01},   # longer than its B (30 ms): not a part of it
    {"r3/compute/B s3 mb3": -0.01},
    {"r3/compute/B s3 mb3": "12"},
    {"r3/compute/B s3 mb3": True},
], ids=["over-b", "negative", "string", "bool"])
def test_b_parts_that_cannot_be_a_part_of_their_b_are_not_used(tmp_path, bad):
    """Input from a file: one value that is not a time inside its B and the run's I:W is derived
    as for a run that never marked it (a share of B from the model's work or ratio: here 1:1)."""
    from pptl.formats.loader import load_any
    from pptl.planning import b_parts
    from pptl.tune.calibrate import calibrate_tune

    path = _b_split_run(tmp_path, bad)
    assert b_parts(load_any(path).timeline) is None
    tc, _, notes = calibrate_tune(replace(_cfg(memory_limit=None), duty_exponent=0.0), path)
    assert (tc.model.layer.I, tc.model.layer.W) == (pytest.approx(1.5), pytest.approx(1.5))
    assert any(n.startswith("the run has no split backward") for n in notes)


def test_b_parts_need_a_b_that_ran_as_i_then_w(tmp_path):
    """A B that ran through autograd (no ``full_backward: i-then-w``) has no I part to mark."""
    from pptl.formats.loader import load_any
    from pptl.planning import b_parts

    assert b_parts(load_any(_b_split_run(tmp_path, None, full_backward=None)).timeline) is None


@pytest.mark.parametrize("at", [0.0, 30.0], ids=["zero", "all-of-b"])
def test_a_b_part_at_either_end_of_its_b_is_a_part(tmp_path, at):
    """A mark at B's start (I took none of it) or at its end (all of it, 30 ms here) lies inside B:
    the run's parts are used, that B's stage averaging it with its other three (12 ms each)."""
    from pptl.formats.loader import load_any
    from pptl.planning import b_parts

    parts = b_parts(load_any(_b_split_run(tmp_path, {"r3/compute/B s3 mb3": at})).timeline)
    assert parts is not None
    assert parts[3] == {"I": pytest.approx((3 * 12.0 + at) / 4), "W": pytest.approx((3 * 18.0 + 30.0 - at) / 4)}


def test_short_layer_note_at_its_bound() -> None:
    """Under 0.35 ms a layer (CUDA) warns; at 0.35 exactly, on CPU, or for a longer layer it does not."""
    from pptl.tune.calibrate import SHORT_LAYER_MS, short_layer_note

    assert SHORT_LAYER_MS == 0.35
    assert short_layer_note(0.35, True) is None
    assert short_layer_note(0.362, True) is None
    assert short_layer_note(0.307, False) is None
    note = short_layer_note(0.307, True)
    assert note is not None and note.startswith("a layer's forward takes 0.307 ms, under 0.35:")
    assert short_layer_note(0.349, True) is not None


@pytest.mark.parametrize(("layers", "stages", "split"), [(4, 4, (1, 1, 1, 1)), (3, 4, None), (2, 3, None), (2, 2, (1, 1))])
def test_balanced_split_at_as_many_layers_as_stages(layers: int, stages: int, split: tuple | None) -> None:
    """As many layers as stages: one each. One fewer: no split with a layer on every stage, so the
    candidate is ruled out (the search raised an empty max() there)."""
    tc = tune_config_from_mapping({"pp": 2, "microbatches": [4], "model": {
        "layers": layers, "layer": {"F": 1.0, "B": 2.0}, "embedding": {"F": 1.0, "B": 2.0},
        "head": {"F": 3.0, "B": 6.0}}}, source="t")
    got = [sp.layers for sp in splits_for(tc.model, list(range(stages)))]
    if split is None:
        assert got == [] and sum(balanced_split(tc.model, stages)) == layers
    else:
        assert balanced_split(tc.model, stages) == split and got == [split]


def test_tune_of_fewer_layers_than_a_families_stages_rejects_it(tmp_path: Path) -> None:
    """Three layers at pp 2: the one-chunk families rank, every two-chunk family (four stages) is
    rejected with its reason; no traceback."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text("pp: 2\nmicrobatches: [4]\nmodel:\n  layers: 3\n"
                   "  layer: {F: 1.0, B: 2.0, I: 1.0, W: 1.0, activation: 1, weight: 1}\nmemory_limit: 100\n")
    r = CliRunner().invoke(app, ["tune", str(cfg), "--output", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["candidates"]
    rejected = {x["label"] for x in rows if "4 stages need at least that many layers" in (x.get("rejected") or "")}
    assert {"zbv vpp=2 m=4", "dualpipev vpp=2 m=4", "looped-bfs vpp=2 m=4"} <= rejected
    assert any(x["label"] == "1f1b m=4 split=balanced" and x["step"] for x in rows)


def test_costs_from_a_run_whose_b_marked_its_i_part_give_i_and_w_those_parts(tmp_path):
    """``pptl plan --costs-from`` and ``pptl whatif --from`` read the same costs as ``pptl tune``: the I part
    of every B took 0.4 of it (B 30, 24, 24, 30 ms on stages 0-3), so I is 12, 9.6, 9.6, 12 and W 18, 14.4,
    14.4, 18, B unchanged; over the run (16 Bs, mean 27) I 10.8 and W 16.2. A run whose marks cannot be parts
    of their B, or whose B ran through autograd, keeps the halves of B."""
    from pptl.formats.loader import load_any
    from pptl.planning import costs_from_timeline

    c = costs_from_timeline(load_any(_b_split_run(tmp_path, None)).timeline)
    assert (c["B"], c["I"], c["W"]) == (pytest.approx(27.0), pytest.approx(10.8), pytest.approx(16.2))
    for s, (b, i, w) in enumerate(((30.0, 12.0, 18.0), (24.0, 9.6, 14.4), (24.0, 9.6, 14.4), (30.0, 12.0, 18.0))):
        got = c["stages"][s]
        assert (got["B"], got["I"], got["W"]) == (pytest.approx(b), pytest.approx(i), pytest.approx(w)), s
    for bad in ({"r3/compute/B s3 mb3": 30.01}, None):
        path = _b_split_run(tmp_path, bad, **({} if bad else {"full_backward": None}))
        c = costs_from_timeline(load_any(path).timeline)
        assert (c["I"], c["W"]) == (pytest.approx(13.5), pytest.approx(13.5))
        assert (c["stages"][0]["I"], c["stages"][0]["W"]) == (pytest.approx(15.0), pytest.approx(15.0))


def test_whatif_spread_lends_b_s_variation_to_i_and_w_only_where_the_run_marked_b_s_parts() -> None:
    """A plan's I and W, never run as ops in a run of full backwards, vary as the run's B on that stage
    (else on that rank) when the run marked its B's I part; otherwise the run has nothing for them (None)."""
    from pptl.whatif.spread import Quantiles, Spread

    qb, qr = Quantiles.of([0.9, 1.0, 1.1]), Quantiles.of([0.8, 1.0, 1.2])
    marked = Spread(stages={(0, "B"): qb, (0, "F"): qb}, ranks={(1, "B"): qr}, source="run.json", b_parts=True)
    assert marked.factor_for(0, 0, "I") is qb and marked.factor_for(0, 0, "W") is qb
    assert marked.factor_for(5, 1, "W") is qr
    assert marked.factor_for(5, 2, "W") is None and marked.factor_for(0, 0, "FB") is None
    plain = Spread(stages={(0, "B"): qb}, ranks={(1, "B"): qr}, source="run.json")
    assert plain.factor_for(0, 0, "I") is None and plain.factor_for(0, 0, "B") is qb
