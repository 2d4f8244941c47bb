"""Issue 21: durations per context (alone / beside compute), the host held back, the run's working memory."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pptl.compare import compare_timelines, comparison_lines
from pptl.config import config_from_mapping, costs_from_mapping
from pptl.contexts import ALONE, BUSY, Span, contexts_of, measure_contexts
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.run.families import cost_means
from pptl.run.hostlag import HostLag
from pptl.schedules import build_schedule
from pptl.schedules._moe_metrics import EP_KINDS, exposed_in_timeline
from pptl.simulate import peak_memory, simulate

MOE = {"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4, "activation": 10,
       "options": {"ep": 2, "layers_per_chunk": 2, "offload": True,
                   "costs": {"attn": 2, "mlp": 1, "attn_b": 2, "mlp_b": 1, "wgrad": 3, "dispatch": 0.2,
                             "combine": 0.3, "offload_bytes": 2}}}


def _schedule(extra_costs: dict | None = None, **opts) -> Schedule:
    data = {**MOE, "options": {**MOE["options"], **opts}}
    if extra_costs:
        data["options"]["costs"] = {**data["options"]["costs"], **extra_costs}
    return build_schedule(config_from_mapping(data))


def test_contexts_read_off_the_lanes_of_one_rank():
    spans = [Span(0, "compute", "MLP", 0, 4), Span(0, "comm", "A2A", 1, 3), Span(0, "comm", "A2A", 5, 6),
             Span(1, "comm", "A2A", 1, 3), Span(0, "comm", "A2A", 3.5, 5.5)]
    assert contexts_of(spans) == [None, "MLP", ALONE, ALONE, ALONE]  # last: 0.5 of 2 beside compute


@pytest.mark.parametrize("start, expected", [
    pytest.param(0.0, 0.3 + 0.5 * 0.2, id="half-the-work-beside-mlp-then-alone"),
    pytest.param(-0.1, 0.4 + (1 - 0.4 / 0.6) * 0.2, id="two-thirds-beside-mlp"),
    pytest.param(0.3, 0.2, id="after-the-compute"),
    pytest.param(0.5, 0.1 + 0.5 * 0.9, id="alone-until-the-attention-then-beside-it"),
])
def test_an_op_progresses_at_the_rate_of_each_context_it_passes(start, expected):
    from pptl.contexts import _compute_by_rank, paced_duration

    comp = _compute_by_rank([Span(0, "compute", "MLP", -1.0, 0.3), Span(0, "compute", "ATTN", 0.6, 5.0)],
                            "compute")[0]
    beside = {"MLP": 0.6, "ATTN": 0.9}.__getitem__
    assert paced_duration(start, comp, 0.2, beside) == pytest.approx(expected)
    assert paced_duration(start, None, 0.2, beside) == 0.2  # no compute on the rank: alone


def _paced_timeline(truth: dict[str, float], starts: list[float]) -> list[Span]:
    """A rank whose compute runs MLP [0, 1), ATTN [1.2, 3); one all-to-all from each start, timed by
    the rule the simulator uses (what a run that follows it would measure)."""
    from pptl.contexts import _compute_by_rank, paced_duration

    comp = [Span(0, "compute", "MLP", 0.0, 1.0), Span(0, "compute", "ATTN", 1.2, 3.0)]
    c = _compute_by_rank(comp, "compute")[0]
    side = [Span(0, "comm", "A2A", a, a + paced_duration(a, c, truth[ALONE], truth.__getitem__))
            for a in starts]
    return comp + side


def test_measured_durations_per_context_are_the_rates_the_run_went_at():
    truth = {ALONE: 0.2, "MLP": 0.6, "ATTN": 1.0}
    # alone (3.5, 4), wholly beside MLP (0.1), beside MLP then alone (0.8), alone into ATTN (1.1),
    # beside ATTN then alone (2.5): every mix of contexts
    spans = _paced_timeline(truth, [3.5, 4.0, 0.1, 0.8, 1.1, 2.5])
    m = measure_contexts(spans, [None, None] + ["a2a"] * 6)["a2a"]
    assert m[ALONE] == pytest.approx(0.2)
    assert m["MLP"] == pytest.approx(0.6) and m["ATTN"] == pytest.approx(1.0)
    assert 0.6 < m[BUSY] < 1.0
    # the mean length per dominant context (the old statistic) is off for the partly overlapped ones
    lengths = [s.end - s.start for s in spans[2:]]
    assert lengths[3] != pytest.approx(0.6) and lengths[5] != pytest.approx(1.0)
    # and durations given apart (a collective from its last member) replace the span's own length
    longer = measure_contexts(spans, [None, None] + ["a2a"] * 6, [0, 0] + [x + 0.1 for x in lengths])["a2a"]
    assert longer[ALONE] == pytest.approx(0.3)


def test_an_op_never_alone_learns_its_alone_duration_from_its_tails():
    # every all-to-all starts beside compute (the last stage's loss combine); two outlive it
    truth = {ALONE: 0.4, "MLP": 0.6, "ATTN": 3.0}
    spans = _paced_timeline(truth, [0.1, 0.6, 1.2, 1.5, 2.0])
    keys = [None, None] + ["a2a"] * 5
    m = measure_contexts(spans, keys)["a2a"]
    # ratios of sums over ops that mix contexts: close to the truth, not exact
    assert m[ALONE] == pytest.approx(0.4, rel=0.01)
    assert m["MLP"] == pytest.approx(0.6, rel=0.01) and m["ATTN"] == pytest.approx(3.0, rel=0.01)
    # no tail at all: nothing to learn it from, the alone duration stays unknown
    inside = measure_contexts(spans[:2] + [Span(0, "comm", "A2A", 1.3, 2.2)], [None, None, "a2a"])["a2a"]
    assert ALONE not in inside and inside["ATTN"] == pytest.approx(0.9)


def test_contexts_seen_too_rarely_are_left_out():
    spans = _paced_timeline({ALONE: 0.2, "MLP": 0.6, "ATTN": 1.0}, [3.5, 4.0, 0.1, 2.5])
    m = measure_contexts(spans, [None, None] + ["a2a"] * 4, min_count=2)["a2a"]
    assert set(m) == {ALONE, BUSY}  # MLP and ATTN once each; alone twice; busy twice


def _truth(schedule: Schedule) -> dict:
    # all-to-alls beside compute take 3x as long as alone (the H200 measurement of issue 8)
    c = schedule.config.costs
    return {k: {ALONE: c.base[k], BUSY: 3 * c.base[k]} for k in ("dispatch", "combine")}


def test_a_calibrated_plan_reproduces_paired_all_to_alls_three_times_slower():
    s = _schedule()
    truth = _truth(s)
    measured_sim = simulate(s, replace(s.config.costs, context=truth))
    measured = measured_sim.timeline()
    # what `pptl run` stores with the timeline, and what --costs-from reads back
    means = cost_means(s, measured.events, contexts=True)
    assert means["context"]["dispatch"][ALONE] == pytest.approx(0.2)
    assert means["context"]["dispatch"][BUSY] == pytest.approx(0.6)
    data = {**means["base"], "context": means["context"]}
    calibrated = simulate(s, costs_from_mapping(data))
    assert calibrated.makespan == pytest.approx(measured_sim.makespan, rel=0.01)
    exp_m = exposed_in_timeline(measured, EP_KINDS)[1]
    exp_c = exposed_in_timeline(calibrated.timeline(), EP_KINDS)[1]
    assert max(exp_c.values()) == pytest.approx(max(exp_m.values()), rel=0.05)
    # one mean per all-to-all (the old model) misses the exposed time
    flat = simulate(s, costs_from_mapping(means["base"]))
    assert abs(max(exposed_in_timeline(flat.timeline(), EP_KINDS)[1].values()) - max(exp_m.values())) > 0.05
    # pptl compare: the error per context is zero for the calibrated plan, not for the flat one
    cmp = compare_timelines(calibrated.timeline(), measured)
    rows = {(r.kind, r.context): r for r in cmp.contexts}
    assert rows[("A2A_DISPATCH", ALONE)].error == pytest.approx(0.0, abs=0.05)
    assert any("context" in line for line in comparison_lines(cmp))
    flat_rows = compare_timelines(flat.timeline(), measured).contexts
    assert max(abs(r.error) for r in flat_rows if r.error is not None and r.planned_count) > 0.3


def test_context_costs_round_trip_and_reject_bad_input():
    c = costs_from_mapping({"F": 1, "context": {"dispatch": {"alone": 1, "MLP": 3}}})
    assert c.context == {"dispatch": {"alone": 1.0, "MLP": 3.0}}
    assert costs_from_mapping(c.to_dict()).context == c.context
    with pytest.raises(InputError, match="costs.context"):
        costs_from_mapping({"context": [1, 2]})
    with pytest.raises(InputError, match="costs.context.dispatch.MLP"):
        costs_from_mapping({"context": {"dispatch": {"MLP": -1}}})


class _FakeGPU:
    """Ops complete one per host sleep; events report whether the op they were recorded after ran."""

    def __init__(self) -> None:
        self.issued = 0
        self.done = 0

    def event(self) -> "_FakeEvent":
        return _FakeEvent(self)

    def sleep(self, _s: float) -> None:
        self.done = min(self.done + 1, self.issued)


class _FakeEvent:
    def __init__(self, gpu: _FakeGPU) -> None:
        self.gpu, self.at = gpu, 0

    def record(self) -> None:
        self.at = self.gpu.issued

    def query(self) -> bool:
        return self.gpu.done >= self.at


@pytest.mark.parametrize("lag", [1, 3])
def test_the_host_stays_within_lag_ops_of_the_gpu(lag):
    gpu = _FakeGPU()
    hold = HostLag(lag, gpu.event, timeout=5, sleep=gpu.sleep)
    lead = []
    for _ in range(20):
        hold.before()
        gpu.issued += 1
        lead.append(gpu.issued - gpu.done)  # ops queued on the GPU once this one is issued
        hold.after()
    assert max(lead) == lag and hold.waits > 0
    gpu = _FakeGPU()
    unbounded = HostLag(0, gpu.event, timeout=5, sleep=gpu.sleep)
    for _ in range(5):
        unbounded.before()
        gpu.issued += 1
        unbounded.after()
    assert gpu.issued - gpu.done == 5  # lag 0: the host never waits


def test_a_stuck_gpu_is_reported_not_waited_on_forever():
    gpu = _FakeGPU()
    clock = iter(range(100))
    hold = HostLag(1, gpu.event, timeout=3, clock=lambda: next(clock), sleep=lambda s: None)
    hold.before()
    gpu.issued += 1
    hold.after()
    with pytest.raises(TimeoutError, match="no progress for 3 s"):
        hold.before()


def test_the_plan_counts_the_layer_in_flight_received_inputs_and_the_loss():
    plain = simulate(_schedule())
    held = simulate(_schedule({"hidden_bytes": 0.5}))
    assert held.makespan == plain.makespan  # memory only
    assert held.schedule.meta["held"] and "held" not in plain.schedule.meta
    assert held.schedule.meta["held_saved"] is True and "held_saved" not in plain.schedule.meta
    # the saved tensors are spans layer by layer: the chunk-wide markers hold nothing, so the
    # config's chunk activation no longer moves the peak
    big = simulate(build_schedule(config_from_mapping({**MOE, "activation": 1000, "options": {
        **MOE["options"], "costs": {**MOE["options"]["costs"], "hidden_bytes": 0.5}}})))
    for r in range(4):
        assert big.ranks[r].peak_activation == held.ranks[r].peak_activation
        # at least one micro-batch's chunk (2 layers x 5 tensors x 0.5) is held before its backward
        assert held.ranks[r].peak_activation >= 5.0
    # the last pipeline rank also holds the loss gradient and a layer's backward tensors
    assert held.ranks[3].peak_activation >= 5.0 + 0.5 + 2.0
    assert held.schedule.meta["host_lag"] == 4


def test_held_spans_count_each_layers_saved_tensors_once():
    s = _schedule({"hidden_bytes": 0.5}, offload=False)
    spans = [sp for sp in s.meta["held"]]
    attn_f = [i for i, op in enumerate(s.ops) if op.kind == "ATTN" and op.flow == "F"]
    from_attn = {i: sum(n for a, ea, b, eb, n in spans if a == i and ea == 0
                        and s.ops[b].kind == "WGRAD") for i in attn_f}
    for i, n in from_attn.items():  # x and u_a, less the first stage's layer-0 input (made once)
        op = s.ops[i]
        assert n == (1.0 if op.stage == 0 and op.sub == 0 else 1.5)


def test_a_malformed_held_span_is_one_error():
    s = _schedule({"hidden_bytes": 0.5})
    sim = simulate(s)
    bad = replace(s, meta={**s.meta, "held": [[0, 0, 10 ** 6, 1, 1.0]]})
    with pytest.raises(InputError, match=r"meta.held\[0\]"):
        peak_memory(bad, sim.start, sim.end, 10, 0)


# ----------------------------------------------------------------------------------------------
# What the caching allocator counts follows the host's issue order (pptl run)


def _bench_plan(offload: bool, copy_bandwidth: float):
    """The GPU workload's shape in MiB (48 a tensor, 96 an offloaded layer), uncalibrated costs."""
    return build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 8, "activation": 240,
        "options": {"ep": 2, "layers_per_chunk": 2, "offload": offload,
                    "costs": {"offload_bytes": 96, "hidden_bytes": 48, "offload_bandwidth": copy_bandwidth}}}))


def _allocated_peak_in_issue_order(schedule: Schedule, issue) -> float:
    """The allocated peak a host issuing ``issue`` sees: every tensor allocated and freed when the op
    that makes or drops it is issued (an Offload drops its layer, an Onload allocates it)."""
    from pptl.simulate import held_spans

    pos = {i: k for k, i in enumerate(issue)}
    ev = []
    for a, _, b, _, amount in held_spans(schedule):
        if a in pos:
            ev += [(pos[a], 0, amount), (pos[b], 1, -amount)]
    for i in issue:
        op = schedule.ops[i]
        if op.kind in ("OFFLOAD", "ONLOAD"):
            ev.append((pos[i], op.kind == "OFFLOAD", -op.payload if op.kind == "OFFLOAD" else op.payload))
    cur = best = 0.0
    for _, _, d in sorted(ev):
        cur += d
        best = max(best, cur)
    return best


def test_copies_issued_at_their_producer_and_consumer_save_what_the_plan_saves():
    from pptl.run.moe import copies_at_their_ends
    from pptl.run.program import build_program

    base = build_program(_bench_plan(False, 1.0))
    no_offload = _allocated_peak_in_issue_order(base.schedule, base.ranks[0].issue)
    # copies planned 50x too slow: the plan's start order issues each Offload late
    slow = _bench_plan(True, 1.0)
    prog = build_program(slow)
    from pptl.schedules._moe_metrics import moe_metrics

    peak = lambda s: moe_metrics(s, simulate(s))["moe"]["peak_activation"]  # noqa: E731
    planned_saving = peak(_bench_plan(False, 45.0)) - peak(_bench_plan(True, 45.0))
    as_planned = no_offload - _allocated_peak_in_issue_order(slow, prog.ranks[0].issue)
    rp = prog.ranks[0]
    moved = copies_at_their_ends(slow.ops, rp.issue, rp.waits)
    saving = no_offload - _allocated_peak_in_issue_order(slow, moved)
    assert as_planned < 0.8 * planned_saving <= saving
    # a valid order: every op after what it needs on this rank, each copy lane in the plan's order
    pos = {i: k for k, i in enumerate(moved)}
    assert sorted(moved) == sorted(rp.issue)
    assert all(pos[u] < pos[v] for u, v in slow.deps if u in pos and v in pos)
    for lane in ("d2h", "h2d"):
        assert [i for i in moved if slow.ops[i].lane == lane] == [i for i in rp.issue if slow.ops[i].lane == lane]
    off = next(k for k, i in enumerate(moved) if slow.ops[i].kind == "OFFLOAD")
    assert (slow.ops[moved[off - 1]].kind, slow.ops[moved[off - 1]].flow) == ("MLP", "F")


def test_an_onload_is_issued_right_after_the_last_op_it_waits_for():
    """Its destination comes from the compute stream's pool and its copy waits for the compute work
    issued before it: issued there, that is no later than the plan's own wait."""
    from pptl.run.moe import copies_at_their_ends
    from pptl.run.program import build_program

    s = _bench_plan(True, 45.0)
    rp = build_program(s).ranks[0]
    moved = copies_at_their_ends(s.ops, rp.issue, rp.waits)
    onloads = [k for k, i in enumerate(moved) if s.ops[i].kind == "ONLOAD"]
    assert onloads
    for k in onloads:
        waits = [u for u in rp.waits[moved[k]] if s.ops[u].kind != "OFFLOAD"]
        assert waits and moved[k - 1] == max(waits, key=moved.index), s.ops[moved[k]].id
        assert s.ops[moved[k - 1]].lane == "compute"
        mlp_b = next(j for j in range(k + 1, len(moved)) if s.ops[moved[j]].kind == "MLP"
                     and s.ops[moved[j]].flow == "B" and s.ops[moved[j]].mb == s.ops[moved[k]].mb
                     and s.ops[moved[j]].sub == s.ops[moved[k]].sub)
        assert mlp_b > k + 1  # the copy runs while other work is issued, not right before its consumer


def test_a_copy_move_that_would_skip_a_wait_keeps_the_order():
    from pptl.run.moe import copies_at_their_ends
    from pptl.run.program import build_program

    s = _bench_plan(True, 1.0)
    rp = build_program(s).ranks[0]
    on = next(i for i in rp.issue if s.ops[i].kind == "ONLOAD")
    later = rp.issue[-1]  # an op issued after every consumer: an Onload waiting on it cannot move up to its B.mlp
    assert copies_at_their_ends(s.ops, rp.issue, {**rp.waits, on: (later,)}) == rp.issue


def test_exposure_counts_an_all_to_all_from_its_last_member():
    from pptl.schedules._moe_metrics import exposure

    s = _schedule()
    sim = simulate(s)
    start, end = list(sim.start), list(sim.end)
    same = exposure(s, start, end)
    # member 1 of the first EP group starts its first dispatch 5 units early: it waits for member 0
    # with compute idle. That wait is not all-to-all time on either side.
    i = next(k for k, op in enumerate(s.ops) if op.kind == "A2A_DISPATCH" and op.rank == 1)
    start[i] -= 5.0
    late = exposure(s, start, end)
    assert late["per_rank"]["exposed_ep"][1] == pytest.approx(same["per_rank"]["exposed_ep"][1])
    # counted from its own start (the old rule), the wait shows on member 1 only
    assert exposed_in_timeline(_timeline_of(s, start, end), EP_KINDS)[1][1] > same["per_rank"]["exposed_ep"][1] + 2
    from pptl.schedules._moe_metrics import moe_metrics

    assert moe_metrics(s, simulate(s))["moe"]["exposed_ep"] == pytest.approx(same["exposed_ep"])


def _timeline_of(s: Schedule, start, end):
    return replace(simulate(s), start=start, end=end).timeline()


def test_compare_times_an_all_to_all_from_its_last_member():
    from pptl.timeline import Event, Timeline, TimelineMeta

    def tl(early: float, source: str) -> Timeline:
        ev = [Event(op=f"r{r}/comm/d", rank=r, lane="comm", kind="A2A_DISPATCH", start=1.0 - (early if r else 0),
                    end=1.2, stage=0, mb=0, direction=r, sub=0, flow="F") for r in (0, 1)]
        ev += [Event(op=f"r{r}/compute/a", rank=r, lane="compute", kind="ATTN", start=0.0,
                     end=0.5, stage=0, mb=0, direction=r, sub=0, flow="F") for r in (0, 1)]
        return Timeline(ev, TimelineMeta(source=source, units="ms", family="moe-1f1b-overlap", pp=2))

    # member 1 starts 0.3 early and waits for member 0: both copies move data for 0.2
    rows = compare_timelines(tl(0.0, "planned"), tl(0.3, "measured")).contexts
    assert [(r.kind, r.context, r.measured_mean, r.error) for r in rows] == [
        ("A2A_DISPATCH", ALONE, pytest.approx(0.2), pytest.approx(0.0))]


def test_the_last_stages_last_forward_combine_is_timed_apart():
    s = _schedule({"combine_loss": 0.9})
    keys = {op.cost_key for op in s.ops if op.kind == "A2A_COMBINE" and op.flow == "F" and op.stage == 3
            and op.sub == 1}
    assert keys == {"combine_loss"}
    others = {op.cost_key for op in s.ops if op.kind == "A2A_COMBINE" and op.cost_key != "combine_loss"}
    assert others == {"combine"}
    assert sum(op.cost_key == "combine_loss" for op in s.ops) == 4 * 2  # 4 micro-batches x 2 EP members
    sim = simulate(s)
    i = next(k for k, op in enumerate(s.ops) if op.cost_key == "combine_loss")
    assert sim.end[i] - sim.start[i] == pytest.approx(0.9)
    # unset, it is the combine's; costs calibrated without it (an older run) take the calibrated combine
    assert _schedule().config.costs.lookup("combine_loss") == 0.3
    old = build_schedule(replace(config_from_mapping(MOE), costs=costs_from_mapping({"combine": 0.7})))
    assert old.config.costs.lookup("combine_loss") == 0.7


def test_an_all_to_all_output_is_made_by_the_last_compute_op_it_waits_on_issued_before_it():
    """The output's block comes from the compute stream's pool at that op's issue: only an op the
    all-to-all waits for and that was issued before it orders the all-to-all's write after every
    compute use of the block."""
    from types import SimpleNamespace as Op

    from pptl.run.moe import outputs_made_by

    ops = [Op(kind="ATTN", flow="F", lane="compute"),          # 0
           Op(kind="MLP", flow="B", lane="compute"),           # 1 (the other micro-batch)
           Op(kind="A2A_DISPATCH", flow="F", lane="comm"),     # 2 waits on 0 and 1: made at 1, issued later
           Op(kind="A2A_COMBINE", flow="B", lane="comm"),      # 3 waits on a receive only
           Op(kind="RECV", flow="B", lane="recv"),             # 4
           Op(kind="MLP", flow="F", lane="compute"),           # 5
           Op(kind="A2A_COMBINE", flow="F", lane="comm"),      # 6 waits on 5 and on 7, issued after it
           Op(kind="ATTN", flow="B", lane="compute"),          # 7
           Op(kind="OFFLOAD", flow="F", lane="d2h")]           # 8 not an all-to-all
    issue = (0, 1, 2, 4, 3, 5, 6, 7, 8)
    waits = {2: (0, 1), 3: (4,), 6: (5, 7), 8: (5,)}
    compute = frozenset({0, 1, 5, 7})
    assert outputs_made_by(ops, issue, waits, compute) == {1: [2], 5: [6]}
    assert outputs_made_by(ops, (0, 1, 2), {2: (1, 0)}, compute) == {1: [2]}
    assert outputs_made_by(ops, (1, 0, 2), {2: (1, 0)}, compute) == {0: [2]}
    assert outputs_made_by(ops, issue, {}, compute) == {}


def test_a_side_lane_op_frees_what_it_read_at_the_first_compute_op_ordered_after_it():
    """Worked by hand: an all-to-all's tensors go back at the first compute op that waits on it or
    on a later op of its lane (not on an earlier one); a copy's at the first compute op the plan
    starts at or after the copy's end (exactly at the end counts); a reader with neither is left out."""
    from types import SimpleNamespace as Op

    from pptl.run.moe import release_points

    lanes = ["compute", "comm", "compute", "d2h", "comm", "comm", "compute", "compute", "compute", "comm"]
    ops = [Op(lane=x) for x in lanes]
    #       0  1  2  3  4  5  6  7  8  9
    start = [0, 1, 2, 3, 3, 4, 4, 6, 7, 8]
    end = [1, 2, 3, 7, 4, 5, 5, 7, 8, 9]
    issue = tuple(range(10))
    waits = {1: (0,), 2: (1,), 3: (2,), 4: (2,), 5: (2,),
             6: (1,),      # waits on a comm op issued before 4 and 5: frees neither
             7: (5,),      # waits on 5, after 4 on the comm lane: frees both
             8: ()}        # waits on nothing; the plan starts it at the copy's end: frees 3
    compute = frozenset({0, 2, 6, 7, 8})
    got = release_points(ops, issue, waits, compute, start, end)
    assert got == {1: 2, 4: 7, 5: 7, 3: 8}
    # without the plan's times a copy no compute op waits on has no point; one op earlier, it misses
    assert release_points(ops, issue, waits, compute) == {1: 2, 4: 7, 5: 7}
    assert release_points(ops, issue, waits, compute, start, [*end[:3], 7.5, *end[4:]]) == {1: 2, 4: 7, 5: 7}
