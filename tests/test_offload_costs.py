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
