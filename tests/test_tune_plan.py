"""The plan ``pptl tune`` writes is the candidate it ranked: same order, same split, same costs, so
that ``pptl plan`` of the written file gives the ranked step exactly (every candidate, several
model files, sync-send and overlap messages, with and without a duty exponent, I holding more than F kept)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.formats.loader import load_any
from pptl.planning import plan_from_file, write_plan
from pptl.tune import load_tune_config, tune
from pptl.tune.costs import candidate_costs
from pptl.tune.rank import best_schedule
from pptl.tune.write import plan_result

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "tune"
MODELS = ["uneven.yaml", "user3.yaml", "skewed.yaml"]
_runner = CliRunner()


def invoke(args: list[str]):
    return _runner.invoke(app, args)


def _lanes(schedule) -> dict:
    return {key: [schedule.ops[i].id for i in order] for key, order in schedule.lanes.items()}


def _calibrated(name: str):
    """A model calibrated from a saved 2x H200 run (fitted duty exponent, memory and spread), at its limit."""
    import tempfile
    from dataclasses import replace

    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    d = json.loads((Path(__file__).resolve().parent / "data" / "tune_crossval" / f"{name}.json").read_text())
    tc = tune_config_from_mapping(d["config"], source=name)
    with tempfile.TemporaryDirectory() as t:
        base = Path(t) / "base.measured.json"
        base.write_text(json.dumps(d["base"]))
        tc, _, _ = calibrate_tune(tc, base)
    return replace(tc, memory_limit=d["limit_mib"])


@pytest.fixture(scope="module", params=MODELS + ["calibrated:h2560-t2048-l6-m16", "calibrated:h5120-t1024-l10-m6"])
def ranked(request):
    name = request.param
    tc = _calibrated(name.split(":", 1)[1]) if name.startswith("calibrated:") else load_tune_config(FIX / name)
    return tc, tune(tc)


def test_every_written_plan_simulates_to_its_ranked_step(ranked, tmp_path: Path) -> None:
    tc, res = ranked
    timed = [r for r in res.results if r.step is not None]
    assert len(timed) >= 40
    for k, r in enumerate(timed):
        planned = plan_result(tc, r)
        assert planned.valid, (r.label, [v.message for v in planned.violations if v.severity == "error"])
        path = tmp_path / f"c{k}.json"
        write_plan(planned, path)
        again = plan_from_file(path)
        # Exactly, not approximately: the ranking's durations are the plan's costs.
        assert again.simulation.makespan == r.step, r.label
        assert _lanes(again.schedule) == _lanes(r.schedule), r.label
        assert again.schedule.config.workload.stage_layers is not None
        layers = list(again.schedule.config.workload.stage_layers)
        blocks = list(r.split.layers)
        blocks[0] += tc.run_blocks[0]
        blocks[-1] += tc.run_blocks[1]
        assert layers == blocks, r.label


def test_forked_search_writes_the_same_orders(ranked) -> None:
    """With several workers the results come back without their schedules; the plans rebuilt from
    them (synth from the order it timed) are the ranked ones."""
    tc, res = ranked
    forked = tune(tc, workers=2)
    assert [r.label for r in forked.results] == [r.label for r in res.results]
    for a, b in zip(res.results, forked.results):
        assert a.step == b.step, a.label
        if b.step is None:
            continue
        assert b.schedule is None
        assert _lanes(best_schedule(tc, b)) == _lanes(a.schedule), a.label


def test_fb_costs_its_pair_stage_backward() -> None:
    """DualPipeV under an uneven split: an FB pairs a forward of one stage with the backward of
    another on the same rank. uneven.yaml's balanced split of 8 stages: F of stage 1 (5 layers,
    5.0) overlaps B of stage 6 (4 layers, 8.0), and both halves send a message (0.05 each) under
    sync-send: 13.1, where F and B of stage 1 alone would be 15."""
    tc = load_tune_config(FIX / "uneven.yaml")
    res = tune(tc)
    r = next(r for r in res.results if r.label == "dualpipev vpp=2 m=8 split=balanced")
    assert r.split.layers == (3, 5, 5, 5, 4, 4, 4, 2)
    s = r.schedule
    fb = next(op for op in s.ops if op.kind == "FB" and op.stage == 1)
    assert fb.pair[0] == 6
    assert r.costs.stages[1]["FB"] == pytest.approx(5 * 1.0 + 4 * 2.0 + 2 * 0.05)
    assert r.costs.stages[1]["F"] == pytest.approx(5.05)


def test_sync_send_puts_each_message_on_its_producer() -> None:
    """1F1B on 2 ranks, 3 layers each plus an embedding of 2 and a head of 3 layers: F of stage 0
    sends (5 + 0.05), F of stage 1 does not (6); B of stage 1 sends its gradient (12 + 0.05), B of
    stage 0 does not (10). The plan's messages take no time of their own."""
    tc = load_tune_config(FIX / "user3.yaml")
    from dataclasses import replace

    from pptl.schedules import get_family
    from pptl.tune.candidates import Structure
    from pptl.tune.model import LayerCost
    from pptl.tune.rank import config_for

    tc = replace(tc, pp=2, model=replace(tc.model, layers=6, embedding=LayerCost(F=2.0, B=4.0),
                                         head=LayerCost(F=3.0, B=6.0)))
    st = Structure("1f1b", 4)
    sched = get_family("1f1b").build(config_for(tc, st))
    c = candidate_costs(tc, sched, (3, 3))
    assert c.stages[0] == {"F": 5.05, "B": 10.0}
    assert c.stages[1] == {"F": 6.0, "B": 12.05}
    assert c.comm_time(0.0) == 0.0
    overlap = candidate_costs(replace(tc, messages="overlap"), sched, (3, 3))
    assert overlap.stages[0] == {"F": 5.0, "B": 10.0} and overlap.comm_time(0.0) == 0.05


def test_costs_a_plan_cannot_hold_reject_the_candidate_not_the_search() -> None:
    """A family whose ops of one (kind, stage) the model times differently (here: one F of stage 0
    pretends to send nothing) is listed as rejected with the reason; the search goes on."""
    from dataclasses import replace

    from pptl.checks import Context
    from pptl.schedules import get_family
    from pptl.tune.candidates import Structure
    from pptl.tune.rank import _time, config_for
    from pptl.tune.split import Split

    tc = load_tune_config(FIX / "user3.yaml")
    st = Structure("1f1b", 6)
    sched = get_family("1f1b").build(config_for(tc, st))
    k = next(i for i, op in enumerate(sched.ops) if op.kind == "SEND" and op.stage == 0 and op.flow == "F")
    sched.ops[k] = replace(sched.ops[k], mb=99)  # its producer is gone: that F of stage 0 sends nothing
    r = _time(tc, st, sched, Context(sched), Split("even", (7, 7, 7)))
    assert r.step is None and r.rejected is not None
    assert "a plan holds one cost per key and stage" in r.rejected


def test_duty_factors_ride_in_the_plan(tmp_path: Path) -> None:
    tc = load_tune_config(FIX / "skewed.yaml")
    res = tune(tc)
    best = res.results[0]
    assert best.duty and best.costs.rank_scale
    assert best.costs.rank_scale == {r: pytest.approx(d ** 0.3, rel=1e-3) for r, d in enumerate(best.duty)}
    write_plan(plan_result(tc, best), tmp_path / "b.json")
    saved = json.loads((tmp_path / "b.json").read_text())
    assert set(saved["config"]["costs"]["rank_scale"]) == {"0", "1"}


@pytest.mark.parametrize("model", ["uneven.yaml", "user3.yaml"])
def test_cli_best_plan_checks_and_simulates_to_the_printed_step(model: str, tmp_path: Path) -> None:
    out, csv = tmp_path / "best.json", tmp_path / "best.csv"
    r = invoke(["tune", str(FIX / model), "-o", str(out), "--csv", str(csv), "--output", "json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["best"]
    if model == "uneven.yaml":  # it gives device.jitter: every timed candidate has a spread around its step
        assert best["step_p05"] < best["step"] < best["step_p95"]
    c = invoke(["check", str(out)])
    assert c.exit_code == 0, c.output
    p = invoke(["plan", str(out), "--output", "json"])
    assert p.exit_code == 0, p.output
    assert json.loads(p.stdout)["makespan"] == best["step"]
    # The CSV holds the same compute order per rank as the plan.
    plan = load_any(out).schedule
    from_csv = load_any(csv).schedule
    for r_ in range(plan.pp):
        a = [(op.kind, op.stage, op.mb) for op in plan.lane_ops(r_, "compute")]
        b = [(op.kind, op.stage, op.mb) for op in from_csv.lane_ops(r_, "compute")]
        assert a == b


def _two_rank_1f1b(**kw):
    """user3.yaml's model on 2 ranks (3 layers each, embedding 2, head 3; message 0.05), 1F1B m=4."""
    from dataclasses import replace

    from pptl.schedules import get_family
    from pptl.tune.candidates import Structure
    from pptl.tune.model import LayerCost
    from pptl.tune.rank import config_for

    tc = load_tune_config(FIX / "user3.yaml")
    tc = replace(tc, pp=2, model=replace(tc.model, layers=6, embedding=LayerCost(F=2.0, B=4.0),
                                         head=LayerCost(F=3.0, B=6.0)), **kw)
    return tc, get_family("1f1b").build(config_for(tc, Structure("1f1b", 4)))


@pytest.mark.parametrize(("hold", "producer", "transfer"), [
    (0.02, 0.02, 0.03),   # the SEND holds the producer 0.02 of the message's 0.05; the consumer waits 0.03 more
    (0.05, 0.05, 0.0),    # a hold equal to the message time: all of it on the producer, as without a hold
    (0.08, 0.05, 0.0),    # longer than the message (a noisy run): never more than the message time
    (0.0, 0.0, 0.05),     # the SEND does not hold the producer: the transfer is all the consumer's wait
], ids=["part", "equal", "clipped", "none"])
def test_sync_send_holds_the_producer_only_for_the_measured_send(hold: float, producer: float, transfer: float) -> None:
    tc, sched = _two_rank_1f1b(send_hold=hold)
    c = candidate_costs(tc, sched, (3, 3))
    assert c.stages[0]["F"] == pytest.approx(5.0 + producer) and c.stages[0]["B"] == 10.0
    assert c.stages[1]["F"] == 6.0 and c.stages[1]["B"] == pytest.approx(12.0 + producer)
    assert c.comm_time(tc.model.message_bytes) == pytest.approx(transfer)


def test_a_held_send_delays_the_producer_less_than_the_consumer() -> None:
    """Stage 0's first two forwards run back to back (1F1B warmup on 2 ranks: 2 forwards): with a hold of
    0.02 of the 0.05 message, F mb1 starts at 5.02 (not 5.05), and stage 1's F mb0 at 5.05 as before."""
    from pptl.simulate import simulate

    for hold, second in ((None, 5.05), (0.02, 5.02)):
        tc, sched = _two_rank_1f1b(send_hold=hold)
        c = candidate_costs(tc, sched, (3, 3))
        sim = simulate(sched, c)
        start = {op.id: t for op, t in zip(sched.ops, sim.start)}
        assert start["r0/compute/F s0 mb1"] == pytest.approx(second)
        assert start["r1/compute/F s1 mb0"] == pytest.approx(5.05)


@pytest.mark.parametrize(("config", "m", "layers"), [
    # uneven.yaml: the embedding and head weigh two layers each (F+B 6 against 3), so the balanced
    # split is [7, 9, 9, 7] (27 of F+B a stage), each end plus its 2 run blocks: [9, 9, 9, 9]; m of [8, 16].
    ("uneven", 16, [9, 9, 9, 9]),
    # 10 layers on 2 ranks, an embedding of one layer's cost and a head of three: 6 + 1 against 4 + 3 layers'
    # worth, run as 6 + 1 embedding block and 4 + 3 head blocks; m of [4, 12].
    ("skew2", 12, [7, 7]),
    # user_h3072.yaml (the user model): 24 layers, an embedding of F+B 5.5 (its first block makes no
    # input gradient) and a head of 6 against a layer's 3: 12 and 12 layers (41.5 and 42; 13 and 11 would
    # make 44.5), each end plus its 2 blocks; m of [6, 12].
    ("user_h3072", 12, [14, 14]),
])
def test_calibration_plan_is_1f1b_at_the_balanced_split(config: str, m: int, layers: list[int], tmp_path: Path) -> None:
    path = FIX / ("user_h3072.yaml" if config == "user_h3072" else "uneven.yaml")
    if config == "skew2":
        path = tmp_path / "skew2.yaml"
        path.write_text("pp: 2\nmicrobatches: [4, 12]\nmodel:\n  layers: 10\n  layer: {F: 1, B: 2, activation: 1, weight: 1}\n"
                        "  embedding: {F: 1, B: 2}\n  head: {F: 3, B: 6}\nrun_blocks: {embedding: 1, head: 3}\n"
                        "workload: {hidden: 32, tokens: 8, dtype: float32}\n")
    out = tmp_path / "cal.json"
    r = invoke(["tune", str(path), "--calibration-plan", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("\n") == 1 and f"1f1b m={m}, stage layers {layers}" in r.stdout
    assert f"pptl tune {path} --costs-from run.json" in r.stdout
    blocks = {"uneven": (2, 2), "skew2": (1, 3), "user_h3072": (2, 2)}[config]
    assert f"the embedding and head as {blocks[0]} and {blocks[1]} MLP blocks" in r.stdout
    assert invoke(["check", str(out)]).exit_code == 0
    plan = load_any(out).schedule
    assert plan.family == "1f1b" and plan.config.microbatches == m
    assert list(plan.config.workload.stage_layers) == layers
    j = invoke(["tune", str(path), "--calibration-plan", str(tmp_path / "cal2.json"), "--output", "json"])
    assert j.exit_code == 0, j.output
    assert json.loads(j.stdout) == {"calibration_plan": str(tmp_path / "cal2.json"), "schedule": "1f1b",
                                    "microbatches": m, "stage_layers": layers, "run_blocks": list(blocks),
                                    "next": [f"pptl run {tmp_path / 'cal2.json'} -o run.json",
                                             f"pptl tune {path} --costs-from run.json"]}


def test_calibration_plan_of_a_model_without_embedding_or_head_says_no_blocks(tmp_path: Path) -> None:
    """Three stages, eight equal layers and no embedding or head: the balanced split is 3, 3, 2 (the
    remainder on the first stages), and the line names no run blocks."""
    path = tmp_path / "plain.yaml"
    path.write_text("pp: 3\nmicrobatches: 5\nmodel:\n  layers: 8\n  layer: {F: 1, B: 2, activation: 1, weight: 1}\n")
    r = invoke(["tune", str(path), "--calibration-plan", str(tmp_path / "cal.json")])
    assert r.exit_code == 0, r.output
    assert "1f1b m=5, stage layers [3, 3, 2] (the balanced split);" in r.stdout


def test_calibration_plan_to_a_folder_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    r = invoke(["tune", str(FIX / "uneven.yaml"), "--calibration-plan", str(tmp_path / "no" / "cal.json")])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and r.output.startswith("error:"), r.output


def test_calibration_plan_with_a_ranking_output_is_one_line(tmp_path: Path) -> None:
    r = invoke(["tune", str(FIX / "uneven.yaml"), "--calibration-plan", str(tmp_path / "cal.json"),
                "-o", str(tmp_path / "best.json"), "--figure", str(tmp_path / "p.png")])
    assert r.exit_code == 2
    assert r.output.strip() == ("error: --calibration-plan writes the run to measure and ranks nothing; -o, --figure "
                                "write the ranking's results: give them in a later call (with --costs-from)")
    assert not (tmp_path / "cal.json").exists() and not (tmp_path / "best.json").exists()
    # one option alone: "-o writes ... give it", not "-o write ... give them"
    r = invoke(["tune", str(FIX / "uneven.yaml"), "--calibration-plan", str(tmp_path / "cal.json"),
                "-o", str(tmp_path / "best.json")])
    assert r.exit_code == 2
    assert r.output.strip().endswith("nothing; -o writes the ranking's results: give it in a later call "
                                     "(with --costs-from)"), r.output


def test_cli_plan_of_a_synthesised_plan_is_the_order_it_holds(tmp_path: Path) -> None:
    """A synthesised order keeps the config of the family whose ops it orders (uneven.yaml: zb-h1), which
    builds another order: `pptl plan FILE` plans the order the file holds and gives the ranked step for
    every synthesised candidate (each of the twelve differs from its config's zb-h1); a flag that would
    re-plan it from the config is one error line, exit 2."""
    tc = load_tune_config(FIX / "uneven.yaml")
    synth = [r for r in tune(tc).results if r.step is not None and r.structure.family == "synth"]
    assert len(synth) == 12
    for k, r in enumerate(synth):
        path = tmp_path / f"s{k}.json"
        write_plan(plan_result(tc, r), path)
        p = invoke(["plan", str(path), "--output", "json"])
        assert p.exit_code == 0, p.output
        got = json.loads(p.stdout)
        assert (got["schedule"], got["makespan"]) == ("synth", r.step), r.label
    bad = invoke(["plan", str(tmp_path / "s0.json"), "--microbatches", "8"])
    assert bad.exit_code == 2
    assert bad.output.count("\n") == 1 and "its order is synth's, which its config (zb-h1) does not build" in bad.output
    # --memory-limit only judges the order: it is planned as it is
    lim = invoke(["plan", str(tmp_path / "s0.json"), "--memory-limit", "100", "--output", "json"])
    assert lim.exit_code == 0 and json.loads(lim.stdout)["makespan"] == synth[0].step


def _stored_run(name: str, tmp_path: Path, **workload: object) -> Path:
    """The calibrating run stored with a cross-validation shape, its workload edited as ``workload`` says."""
    d = json.loads((Path(__file__).resolve().parent / "data" / "tune_crossval" / f"{name}.json").read_text())
    base = d["base"]
    base["meta"]["extra"]["workload"].update(workload)
    path = tmp_path / f"{name}.measured.json"
    path.write_text(json.dumps(base))
    return path


def test_costs_from_a_run_of_this_model_ranks(tmp_path: Path) -> None:
    """The user model's own calibrating run (h3072-t4096-l12-m12: [14, 14] blocks = 24 layers and 2 + 2
    embedding and head blocks) calibrates fixtures/tune/user_h3072.yaml."""
    r = invoke(["tune", str(FIX / "user_h3072.yaml"), "--costs-from", str(_stored_run("h3072-t4096-l12-m12", tmp_path)),
                "--top", "1"])
    assert r.exit_code == 0, r.output
    # the run's [14, 14] blocks less the embedding's and head's two: 12 layers a stage
    assert "(1f1b, 2 stages, split [12, 12])" in r.output, r.output


@pytest.mark.parametrize(("edit", "says"), [
    ({"tokens": 4095}, "the run executed hidden 3072, 4095 tokens, bfloat16; the config's workload is hidden 3072, "
                       "4096 tokens, bfloat16"),
    ({"dtype": "float32"}, "the run executed hidden 3072, 4096 tokens, float32"),
    ({"stage_layers": [14, 15]}, "the run executed 29 blocks a micro-batch ([14, 15]); the config's model has 28 "
                                 "(24 layers and 4 embedding and head blocks)"),
    ({"stage_layers": [2, 26]}, "the run executed 28 blocks a micro-batch ([2, 26])"),
])
def test_costs_from_a_run_of_another_model_is_one_line(edit: dict, says: str, tmp_path: Path) -> None:
    """A run of another width, row count, dtype or layer count would be fitted to this model silently: one
    error line, exit 2. [2, 26] has the right total but leaves the first stage no layer beside the
    embedding's two blocks."""
    r = invoke(["tune", str(FIX / "user_h3072.yaml"), "--costs-from",
                str(_stored_run("h3072-t4096-l12-m12", tmp_path, **edit))])
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and says in r.output, r.output


def _interleaved(m: int, group: int):
    from pptl.config import config_from_mapping
    from pptl.schedules import build_schedule

    return build_schedule(config_from_mapping({"schedule": "interleaved-1f1b", "pp": 2, "microbatches": m, "vpp": 2,
                                               "group_size": group}))


def test_a_plan_pptl_run_holds_every_send_of_gets_no_note() -> None:
    """1F1B and interleaved 1F1B in groups of pp hold each SEND on its producer's stream (pptl.run.program:
    "1F1B, GPipe, ZB-H1/H2 and interleaved 1F1B in groups of pp need none")."""
    from pptl.config import config_from_mapping
    from pptl.schedules import build_schedule
    from pptl.tune.write import beside_sends_note

    assert beside_sends_note(build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 8})),
                             "sync-send") is None
    assert beside_sends_note(_interleaved(8, 2), "sync-send") is None


def test_every_micro_batch_in_one_group_sends_beside_compute_from_six_on() -> None:
    """Interleaved 1F1B at pp 2, V = 2, one group of m: rank 1 sends stage 1's forwards as it runs them, ahead
    of where rank 0's issue order receives them, and a host queues at most pptl.run.program.RUN_AHEAD = 4
    compute ops past a SEND that holds its stream: at m = 5 every SEND still holds, from m = 6 some cannot
    (held_sends). Its messages: stages 0-1-2-3 cross a rank three times each way, 6 a micro-batch, 36 at
    m = 6. Under --messages overlap every SEND runs beside compute by choice: no note."""
    from pptl.tune.write import beside_sends_note

    assert beside_sends_note(_interleaved(5, 5), "sync-send") is None
    note = beside_sends_note(_interleaved(6, 6), "sync-send")
    assert note is not None and "of the plan's 36 messages beside compute" in note and "docs/tune.md" in note
    assert beside_sends_note(_interleaved(6, 6), "overlap") is None


@pytest.mark.parametrize("says", [None, "pptl run sends 3 of the plan's 36 messages beside compute"])
def test_cli_notes_what_the_written_plan_sends_beside_compute(says, monkeypatch, tmp_path: Path) -> None:
    import pptl.tune.write as write

    seen = []
    monkeypatch.setattr(write, "beside_sends_note", lambda s, messages: seen.append(messages) or says)
    r = invoke(["tune", str(FIX / "uneven.yaml"), "-o", str(tmp_path / "best.json")])
    assert r.exit_code == 0, r.output
    assert seen == ["sync-send"]
    assert ("note: pptl run sends 3 of the plan's 36" in r.output) is (says is not None)
