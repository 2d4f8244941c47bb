"""pptl run's activation reading (pptl.run.memory): the arithmetic by hand, and the executor's
tensors outside the activations against the CPU allocator's own record of a real step (one
process, gloo), where it equals the plan's bytes (pptl.run.footprint.planned_peaks)."""
from __future__ import annotations

import gc
import itertools

import pytest

from pptl.config import config_from_mapping
from pptl.run.footprint import chunk_footprint, planned_peaks
from pptl.run.memory import ActivationPeak, Sample, activation_peak
from pptl.schedules import build_schedule
from pptl.simulate import simulate


def test_activation_peak_by_hand():
    # 100 bytes held at the step's start; an op reaching 180 with 30 outside, one reaching 170 with 50.
    assert activation_peak(100, [Sample(3, 180, 30), Sample(7, 170, 50)]) == ActivationPeak(50, 3)
    # Equal readings: the first op keeps it; a later op that holds more outside does not win.
    assert activation_peak(100, [Sample(0, 150, 0), Sample(1, 250, 100)]) == ActivationPeak(50, 0)
    # An op below the base (the step freed what the last one left): negative, still reported.
    assert activation_peak(100, [Sample(5, 90, 0)]) == ActivationPeak(-10, 5)
    assert activation_peak(100, []) is None


# Float32, hidden 8, 64 tokens, 3 blocks a chunk: a unit (tokens x hidden) is 2048 bytes; a block's
# weights and biases 2 x 4 x 8 x 8 + 32 + 8 = 552 elements, 2208 bytes.
UNIT = 64 * 8 * 4


def _config(family, vpp, split, mb):
    return {"schedule": family, "pp": 1, "vpp": vpp, "microbatches": mb, "split_backward": split,
            "costs": {"F": 1, "B": 2, "I": 1, "W": 1},
            "workload": {"hidden": 8, "tokens": 64, "layers_per_stage": 3, "dtype": "float32"}}


@pytest.fixture
def one_rank(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    # An executor is a reference cycle (its actions close over it): collect it now, not inside a
    # later test's profiled window, where its frees would land among that test's allocations.
    gc.collect()


def _measure(cfg):
    """Run two steps of ``cfg`` under the profiler; on the second, what the probe computes (every op's
    peak from the CPU allocator's record, less the step's start and the executor's ``outside`` at the
    op's start and end), and the whole-step reading the bench took before: the most bytes live in
    the step less what was live before it (the weight gradients of the step before included)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    from pptl.run.executor import Executor
    from pptl.run.program import build_program

    ex = Executor(build_program(build_schedule(config_from_mapping(cfg))), 0, torch.device("cpu"), {}, timeout=30)
    outside: dict[int, int] = {}

    def wrap(i, action):  # what Executor._step_cuda does around an op when it has a probe
        def run(st):
            before, waiting = ex.outside(st), set(st.grads)
            with record_function(f"pptl-op-{i}"):
                action(st)
            made = [st.grads[k] for k in st.grads.keys() - waiting]
            outside[i] = sum({**before, **ex.outside(st, leave=made)}.values())
        return run

    ex.actions = {i: wrap(i, a) for i, a in ex.actions.items()}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ex.step(0, timed=False)
        with record_function("pptl-step"):
            ex.step(1, timed=False)
    allocs, spans = [], {}

    def walk(node):
        if str(node.typed[0]).endswith("Allocation"):
            allocs.append((node.start_time_ns, node.typed[1].alloc_size))
        if node.name.startswith("pptl-"):
            spans[node.name] = (node.start_time_ns, node.end_time_ns)
        for child in node.children:
            walk(child)

    for node in prof.profiler.kineto_results.experimental_event_tree():
        walk(node)
    allocs.sort()
    times = [t for t, _ in allocs]
    live = list(itertools.accumulate(a for _, a in allocs))

    def live_before(t):
        k = sum(1 for u in times if u < t)
        return live[k - 1] if k else 0

    s0, s1 = spans["pptl-step"]
    in_step = [v for t, v in zip(times, live) if s0 <= t <= s1]
    whole = max(in_step) - live_before(s0)
    windows = sorted((spans[f"pptl-op-{i}"], i) for i in outside)
    base = live_before(windows[0][0][0])  # after the step dropped its gradients
    samples, prev = [], windows[0][0][0]
    for (_, t1), i in windows:
        peak = max([live_before(prev)] + [v for t, v in zip(times, live) if prev <= t <= t1])
        samples.append(Sample(i, peak, outside[i]))
        prev = t1
    got = activation_peak(base, samples)
    return got.bytes, ex.ids[got.op], whole, [(ex.ops[x.op], x.peak - base - x.outside) for x in samples]


def _planned(cfg):
    s = build_schedule(config_from_mapping(cfg))
    sim = simulate(s)
    return planned_peaks(s, sim.start, sim.end)[0]


def test_a_peak_before_the_first_w_is_measured_without_the_gradients(one_rank):
    # v-min on one rank, one micro-batch: F s0, F s1, I s1, I s0, W s1, W s0. Stage 0 holds 26 units
    # from F to I (9 a block, less its input); the last stage holds 29 from I to W (10 a block, less
    # its input; its last dd is made here); an I holds 3 + 7 = 10 units more while it runs. The
    # peak: during I s0, 29 + 26 + 10 = 65 units, before the rank's first W.
    cfg = _config("v-min", 2, True, 1)
    assert _planned(cfg) == 65 * UNIT == 133120
    act, op, whole, _ = _measure(cfg)
    assert (act, op) == (133120, "r0/compute/I s0 mb0")
    # What the bench read before: the step dropped the gradients of 6 blocks (6 x 2208 bytes) that
    # the rank held before it, and the first W makes them again only after this peak; and it counted
    # stage 0's output (stage 1's input) and the gradient I s0 received, a unit each, which no
    # message subtraction takes out on one rank, and the last stage's loss, the 0-dim float32 its
    # activation keeps (4 bytes): 65 + 2 units + 4 - 13248 bytes, 6.9% under the plan.
    assert whole == 133120 + 2 * UNIT + 4 - 6 * 2208 == 123972


@pytest.mark.parametrize("family,vpp,split,last", [
    ("v-min", 2, True, False), ("zbv", 2, True, True), ("interleaved-zb", 2, True, True),
    ("zb-h1", 1, True, True), ("1f1b", 1, False, True), ("interleaved-1f1b", 2, False, True)])
def test_the_measured_activations_are_the_plans(one_rank, family, vpp, split, last):
    # Three micro-batches. Where the peak is on the last stage, the loss's 0-dim float32 gradient
    # (4 bytes, which no plan counts) is live beside it.
    cfg = _config(family, vpp, split, 3)
    act, _, _, _ = _measure(cfg)
    assert act == _planned(cfg) + (4 if last else 0)


def _levels(cfg):
    """Oracle: per compute op, what the plan holds on its rank while it runs (split backward; the
    order is the plan's)."""
    s = build_schedule(config_from_mapping(cfg))
    sim = simulate(s)
    fps = {st: chunk_footprint(s.config.workload, st, last=st == s.num_stages - 1) for st in range(s.num_stages)}
    held, out = [0] * s.pp, {}
    for i in sorted((i for i, op in enumerate(s.ops) if op.lane == "compute"), key=lambda i: sim.start[i]):
        op, fp = s.ops[i], fps[s.ops[i].stage]
        if op.kind == "F":
            held[op.rank] += fp.forward
            out[op.id] = held[op.rank]
        elif op.kind == "I":
            out[op.id] = held[op.rank] + fp.full_backward
            held[op.rank] += fp.until_w - fp.forward
        else:
            out[op.id] = held[op.rank]
            held[op.rank] -= fp.until_w
    return out


@pytest.mark.parametrize("family", ["zbv", "v-min", "interleaved-zb"])
def test_every_backward_op_reads_what_the_plan_holds_then(one_rank, family):
    # Op by op, not only at the peak. Over the plan: an I on the last stage keeps the loss's 0-dim
    # float32 gradient (4 bytes); a W reads the plan's level to the byte (its bias gradient is a
    # GEMV into the gradient, no temporary; the first W makes the gradient itself, outside).
    # The gradient a stage-0 chunk received from stage 1 came without a message (one rank): it is
    # outside too, else every stage-0 W would read one unit (2048 bytes) over.
    cfg = _config(family, 2, True, 3)
    levels = _levels(cfg)
    _, _, _, reads = _measure(cfg)
    for op, got in reads:
        if op.kind == "I":
            assert got == levels[op.id] + (4 if op.stage == 1 else 0), op.id
        if op.kind == "W":
            assert got == levels[op.id], op.id


def test_probe_reads_the_allocator_after_every_op(monkeypatch):
    torch = pytest.importorskip("torch")
    from pptl.run.memory import Probe

    # A fake device allocator: 1000 bytes held at the step's start; the first op peaks at 1600 and
    # ends at 1200, the second peaks at 1550 (its own peak, not the first's: the probe reset it).
    peaks = iter([1600, 1550])
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 1000)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: next(peaks))
    probe = Probe(torch.device("cpu"))
    probe.begin()
    probe.after(4, {1: 300, 2: 100})
    probe.after(9, {1: 300})
    assert calls == ["reset"] * 3
    assert probe.samples == [Sample(4, 1600, 400), Sample(9, 1550, 300)]
    assert probe.peak() == ActivationPeak(250, 9)  # 1550 - 1000 - 300; the first op's is 200


def test_only_the_training_executor_is_probed():
    pytest.importorskip("torch")
    from pptl.run.executor import Executor
    from pptl.run.moe import MoEExecutor
    from pptl.run.weight_update import WeightUpdateExecutor

    # MoE keeps its layer outputs in state of its own and reads the allocator per step itself; the
    # weight update holds buffers, not activations.
    assert Executor.measures_activations
    assert not MoEExecutor.measures_activations and not WeightUpdateExecutor.measures_activations
