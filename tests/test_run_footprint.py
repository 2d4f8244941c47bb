"""pptl run's memory between passes: the bytes :mod:`pptl.run.footprint` predicts, worked out by
hand, and the tensors the model really keeps, counted storage by storage on CPU."""
from __future__ import annotations

import warnings

import pytest

from pptl.config import Workload, config_from_mapping
from pptl.run.footprint import Footprint, chunk_footprint, planned_peaks
from pptl.schedules import build_schedule
from pptl.simulate import simulate

# 4 tokens x 8 hidden in float32: one unit (a tokens x hidden tensor) is 32 elements, 128 bytes.
SMALL = Workload(hidden=8, tokens=4, layers_per_stage=3, dtype="float32")
UNIT = 4 * 8 * 4


def test_footprint_by_hand_middle_and_last_stage():
    # 3 blocks save h, u, a: 27 units, less the chunk's input: 26. Until W: h, a, du, dd = 30,
    # less the input and the received gradient (the last block's dd): 28.
    mid = chunk_footprint(SMALL, 1, last=False)
    assert (mid.forward, mid.until_w) == (26 * UNIT, 28 * UNIT) == (3328, 3584)
    # The loss's float32 residual (32 elements, 128 bytes); dd of the last block is made here (29).
    last = chunk_footprint(SMALL, 1, last=True)
    assert (last.forward, last.until_w) == (26 * UNIT + 128, 29 * UNIT) == (3456, 3712)


def test_footprint_of_the_gpu_benchmark_chunk():
    # 8 blocks of 2048 x 2048 in bf16: a unit is 8 MiB; 71 units saved, 78 held until W.
    w = Workload(hidden=2048, tokens=2048, layers_per_stage=8, dtype="bfloat16")
    fp = chunk_footprint(w, 0, last=False)
    assert (fp.forward, fp.until_w) == (568 * 2**20, 624 * 2**20)
    assert fp.w_activation == pytest.approx(78 / 71)  # above 1: W's inputs outweigh F's saved tensors


def test_footprint_one_block_and_an_empty_stage():
    one = Workload(hidden=8, tokens=4, layers_per_stage=1, stage_layers=(1, 0), dtype="bfloat16")
    u = 4 * 8 * 2
    # B (I then W) in its one block: da and du, 4 units each: 1 + 7 units.
    assert chunk_footprint(one, 0, last=False) == Footprint(8 * u, 8 * u, 8 * u)
    empty = chunk_footprint(one, 1, last=True)
    # The residual only, nothing to split; B is the loss's four float32 tensors: 4 * 32 * 4 bytes.
    assert (empty.forward, empty.until_w, empty.full_backward) == (4 * 32, 0, 512)
    assert chunk_footprint(one, 1, last=False) == Footprint(0, 0, 0)


def test_full_backward_by_hand():
    # SMALL (float32, h 8, 4 tokens, 3 blocks; a unit is 128 bytes): I in the chunk's first block
    # holds its da and du (8 units) and a unit kept net for each of the 2 blocks above: 10 units.
    # The last stage: the residual (128) goes and the output's gradient (128) comes: 1280 again,
    # above the loss's 4 x 128.
    assert chunk_footprint(SMALL, 0, last=False).full_backward == 10 * 128 == 1280
    assert chunk_footprint(SMALL, 2, last=True).full_backward == 1280
    # bfloat16, h = tokens = 16, 2 blocks (a unit is 512 bytes): 9 units, 4608; on the last stage
    # 4608 + 512 - 1024 = 4096, equal to the loss's four float32 tensors.
    sq = Workload(hidden=16, tokens=16, layers_per_stage=2, dtype="bfloat16")
    assert chunk_footprint(sq, 0, last=False).full_backward == 4608
    assert chunk_footprint(sq, 1, last=True).full_backward == 4096
    # The GPU benchmark's chunk, 8 blocks of 8 MiB units: 15 units, 120 MiB; last 120 + 8 - 16.
    gpu = Workload(hidden=2048, tokens=2048, layers_per_stage=8, dtype="bfloat16")
    assert chunk_footprint(gpu, 0, last=False).full_backward == 120 * 2**20
    assert chunk_footprint(gpu, 1, last=True).full_backward == 112 * 2**20


def _storages(tensors, skip):
    """Bytes of the distinct storages among ``tensors``, leaving out those of ``skip``."""
    out = {}
    gone = {t.untyped_storage().data_ptr() for t in skip if t is not None}
    for t in tensors:
        if t is None:
            continue
        s = t.untyped_storage()
        if s.data_ptr() not in gone:
            out[s.data_ptr()] = s.nbytes()
    return sum(out.values())


@pytest.mark.parametrize("stage,last", [(0, False), (1, False), (1, True)], ids=["first", "middle", "last"])
def test_model_holds_what_the_footprint_counts(stage, last):
    torch = pytest.importorskip("torch")
    from pptl.run.model import backward_input, forward, make_chunk

    cpu = torch.device("cpu")
    chunk = make_chunk(SMALL, stage, cpu)
    x = torch.randn(SMALL.tokens, SMALL.hidden)
    target = torch.randn(SMALL.tokens, SMALL.hidden) if last else None
    dy = None if last else torch.randn(SMALL.tokens, SMALL.hidden)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        act = forward(chunk, x, needs_input_grad=stage > 0, keep_linears=True, target=target, scale=1.0)
    fp = chunk_footprint(SMALL, stage, last=last)
    not_activation = [x, act.x, act.y, *chunk.params] + ([target] if last else [])
    held = saved + act.linear_in + act.linear_out
    assert _storages(held, not_activation) == fp.forward
    saved.clear()  # from here only the graph and the Activation keep the tensors
    held.clear()
    backward_input(chunk, act, dy)
    assert act.linear_out == [] and all(g is not None for g in act.linear_grad)
    kept = act.linear_in + act.linear_grad
    assert _storages(kept, [x, act.x, dy]) == fp.until_w


def _allocations(prof, name):
    """(time, signed bytes) of every allocation and free the profiler saw, in time order, and the
    (start, end) of the range ``name``, on the same clock."""
    out, span = [], []

    def walk(node):
        if str(node.typed[0]).endswith("Allocation"):
            out.append((node.start_time_ns, node.typed[1].alloc_size))
        if node.name == name:
            span.extend((node.start_time_ns, node.end_time_ns))
        for child in node.children:
            walk(child)

    for node in prof.profiler.kineto_results.experimental_event_tree():
        walk(node)
    assert len(span) == 2, span
    return sorted(out), span


@pytest.mark.parametrize("layers", [1, 2, 4], ids=["1-block", "2-blocks", "4-blocks"])
@pytest.mark.parametrize("hidden,tokens,dtype", [(8, 4, "float32"), (16, 16, "bfloat16"), (32, 8, "float32")],
                         ids=["small-f32", "square-bf16", "wide-f32"])
@pytest.mark.parametrize("stage,last", [(0, False), (1, False), (1, True)], ids=["first", "middle", "last"])
def test_full_backward_allocates_what_the_footprint_counts(hidden, tokens, dtype, stage, last, layers):
    """The CPU allocator's own count: the most bytes live during B (I then W, after a forward that
    kept its Linears, as the executor runs it) above what was live at its start, every allocation
    and free recorded by the profiler from before the forward on."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    from pptl.run.model import DTYPES, backward_full, forward, make_chunk

    w = Workload(hidden=hidden, tokens=tokens, layers_per_stage=layers, dtype=dtype)
    chunk = make_chunk(w, stage, torch.device("cpu"))
    x = torch.randn(tokens, hidden).to(DTYPES[dtype])
    target = torch.randn(tokens, hidden).to(DTYPES[dtype]) if last else None
    dy = None if last else torch.randn(tokens, hidden).to(DTYPES[dtype])
    # oneDNN, where the CPU has bf16 instructions, allocates its own scratch for bf16 matmuls (20 KB
    # here for 16x16 blocks): the library's workspace, not tensors a GPU run holds; without it the
    # count is the same on every CPU (the flags' context warns, on entry and exit, that TF32 needs an Intel GPU)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=False), \
                profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            act = forward(chunk, x, needs_input_grad=stage > 0, keep_linears=True, target=target, scale=1.0)
            with record_function("pptl-test-B"):
                backward_full(chunk, act, dy)
            del act
    events, (t0, t1) = _allocations(prof, "pptl-test-B")
    live = at_start = peak = 0
    for t, delta in events:
        if t > t1:
            break
        live += delta
        if t < t0:
            at_start = live
        else:
            peak = max(peak, live)
    fp = chunk_footprint(w, stage, last=last)
    # On the last stage the loss, a 0-dim float32 held at B's start, is freed before the peak.
    assert peak - at_start == fp.full_backward - (4 if last else 0)


def _plan(cfg):
    s = build_schedule(config_from_mapping({**cfg, "costs": {"F": 1, "B": 2, "I": 1, "W": 1},
                                            "workload": {"hidden": 8, "tokens": 4, "layers_per_stage": 3}}))
    sim = simulate(s)
    return planned_peaks(s, sim.start, sim.end)


def test_planned_peaks_by_hand():
    # 1F1B, 2 ranks: rank 0 holds 2 forwards of stage 0 (26 units each) when B of micro-batch 0
    # starts, rank 1 one of the last stage (26 units and the 128-byte residual); each B's own
    # working set (I then W, 3 blocks) is 10 units, 1280 bytes, on top.
    assert _plan({"schedule": "1f1b", "pp": 2, "microbatches": 4}) == {0: 2 * 3328 + 1280, 1: 3456 + 1280}
    # ZB-H1: an I holds B's working set (10 units) while it runs. Rank 0 runs F0 F1 I0 W0 F2 ...:
    # during I0, two forwards (26 units each) and I0's 10; rank 1 runs F0 I0 F1 I1 W0 ...: during I1,
    # mb 0 waiting for its W (29 units on the last stage), mb 1's forward (26 and the residual) and 10.
    assert _plan({"schedule": "zb-h1", "pp": 2, "microbatches": 4, "split_backward": True}) == \
        {0: 2 * 3328 + 1280, 1: 3712 + 3456 + 1280} == {0: 7936, 1: 8448}
    assert _plan({"schedule": "inference", "pp": 2, "vpp": 2, "microbatches": 4}) == {0: 0, 1: 0}


def test_v_min_peaks_on_rank_0_before_its_first_w():
    # The GPU benchmark's v-min in the paper's pattern (docs/benchmarks.md, issue 34): 2 ranks, 8
    # micro-batches, 8 blocks a chunk of 2048 x 2048 bf16 (a unit is 8 MiB). Rank 0 holds stages 0 and 3 and runs F s0 mb0,
    # F s0 mb1, F s3 mb0, I s3 mb0, W s3 mb0 (its first W), ...: during I s3 mb0 it holds two stage-0
    # forwards (71 units, 568 MiB each), the last stage's (568 and the float32 residual, 16 MiB) and
    # the I's working set (15 units, 120 MiB, less the residual, plus the output's gradient: 112).
    # No weight gradient exists then: the step dropped them and W s3 mb0 makes the first.
    s = build_schedule(config_from_mapping({
        "schedule": "v-min", "pp": 2, "vpp": 2, "microbatches": 8, "split_backward": True,
        "costs": {"F": 1, "B": 2, "I": 1, "W": 1}, "options": {"memory": "pattern"},
        "workload": {"hidden": 2048, "tokens": 2048, "layers_per_stage": 8, "dtype": "bfloat16"}}))
    sim = simulate(s)
    order = [op.id for i, op in sorted(enumerate(s.ops), key=lambda x: sim.start[x[0]])
             if op.rank == 0 and op.lane == "compute"]
    assert order[:5] == [f"r0/compute/{k}" for k in ("F s0 mb0", "F s0 mb1", "F s3 mb0", "I s3 mb0", "W s3 mb0")]
    assert planned_peaks(s, sim.start, sim.end)[0] == (568 + 568 + 584 + 112) * 2**20 == 1832 * 2**20
