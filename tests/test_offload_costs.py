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
    m = measure_contexts(spans, [None, "a2a", "a2a", "a2a", "a2a"])
    assert m["a2a"]["MLP"] == 2 and m["a2a"][ALONE] == pytest.approx(5 / 3) and m["a2a"][BUSY] == 2


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
