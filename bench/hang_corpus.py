"""A corpus of real hangs on 2 ranks, one kind per run, each rank running a pptl plan's P2P order and the
step-end collectives a training loop adds, with one fault. The flight recorder is on (bench/_fr.py): the
watchdog dumps every rank when a call times out.

    python3 bench/_spawn.py -n 2 --timeout 100 --log-dir D -- python3 bench/hang_corpus.py KIND --dump-dir D
    python3 bench/hang_corpus.py --list              # the kinds, and each rank's calls (no torch.distributed)

Each kind is a pure function ``rank -> list[Call]`` (:data:`KINDS`), so the faults can be read and tested
without GPUs; :func:`execute` issues the calls with torch.distributed (NCCL on cuda, gloo on cpu). A rank
walks its plan's ops in pptl's issue order (:func:`pptl.issue_order.program`): a SEND or RECV is one
``batch_isend_irecv`` (as torch.distributed.pipelining issues them), compute is a cheap kernel on the
compute stream, and a receive is waited on before the compute that needs it.

The kinds (rank 0 always runs the plan written beside the dumps as plan.json):

===================  =========================================================================================
p2p_order            1F1B m4; rank 0 posts its receive of B mb0 before its send of F mb1 (a receive-receive cycle)
collective_order     two groups over both ranks, 64 MiB all_to_alls; rank 1 issues the second group's first
mb_count             GPipe; rank 0 runs 4 micro-batches, rank 1 runs 3; then the step-end all_reduce
collective_one_rank  GPipe m2; rank 0 all_reduces a logging metric inside ``if rank == 0``; then the grads
rank_exits           GPipe m4; rank 1 raises (a data error) before its 3rd receive and exits
rank_stalls          GPipe m4; rank 1's host stops before its 3rd receive (a stuck data loader), alive
p2p_size             GPipe m4; rank 1 was built with half the hidden size: receives and sends half the bytes
schedule_family      rank 0 runs 1F1B, rank 1 runs GPipe (m4): the same transfers in another order
schedule_vpp         rank 0 runs interleaved 1F1B (vpp 2), rank 1 runs 1F1B (vpp 1), m4
collective_kind      GPipe m2; at the step end rank 0 all_reduces the grads, rank 1 broadcasts parameters
collective_size      GPipe m2; the grads all_reduce holds 1024 more elements on rank 0 (a tied weight)
collective_dtype     GPipe m2; the grads all_reduce is fp32 on rank 0 and bf16 on rank 1 (one rank's grads cast
                     for a low-precision reduce), the same element count
===================  =========================================================================================
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pptl.config import config_from_mapping  # noqa: E402
from pptl.ir import Schedule  # noqa: E402
from pptl.issue_order import program  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402

WORLD = 2


@dataclass(frozen=True)
class Call:
    """One thing a rank's host does, in order."""

    what: str
    """send, recv, compute, all_reduce, broadcast, all_to_all, raise, stall."""
    peer: int = -1
    hidden_div: int = 1
    """A send/recv moves tokens x hidden/hidden_div elements (the fault of p2p_size)."""
    group: str = "default"
    numel_extra: int = 0
    """A collective moves GRAD_NUMEL + numel_extra elements (1 for the metric)."""
    label: str = ""
    bf16: bool = False
    """A collective of the grads in bf16 instead of fp32 (the fault of collective_dtype)."""


def plan(family: str, m: int, **extra: int) -> Schedule:
    return build_schedule(config_from_mapping({"schedule": family, "pp": WORLD, "microbatches": m, **extra}))


def plan_calls(s: Schedule, rank: int, *, hidden_div: int = 1, stop_before: str = "", stop: str = "",
               move: tuple[str, str] = ("", "")) -> list[Call]:
    """The rank's calls of plan ``s``: stop before op ``stop_before`` with Call(``stop``); ``move``: (op, after)
    moves op to just after another (a wrong issue order)."""
    ids = [s.ops[i].id for i in program(s)[rank]]
    if move[0]:
        ids.remove(move[0])
        ids.insert(ids.index(move[1]) + 1, move[0])
    by_id = {op.id: op for op in s.ops}
    out: list[Call] = []
    for i in ids:
        if i == stop_before:
            out.append(Call(stop, label=i))
            break
        op = by_id[i]
        if op.kind in ("SEND", "RECV"):
            out.append(Call(op.kind.lower(), peer=op.peer, hidden_div=hidden_div, label=i))
        else:
            out.append(Call("compute", label=i))
    return out


def step_end(*names: str) -> list[Call]:
    return [Call("all_reduce", label=n) for n in names]


def _p2p_order(r: int) -> list[Call]:
    # a receive waits for its data whatever NCCL buffers: rank 0 receives B mb0 before it sends F mb1, which
    # rank 1 receives before it computes B mb0
    move = ("r0/send/SEND_F s0 mb1 ->r1", "r0/recv/RECV_B s0 mb0 <-r1") if r == 0 else ("", "")
    return plan_calls(plan("1f1b", 4), r, move=move) + step_end("grads")


def _collective_order(r: int) -> list[Call]:
    one = [Call("all_to_all", group="ep_dispatch"), Call("all_to_all", group="ep_combine")]
    return one + (one[::-1] if r == 1 else one)


def _mb_count(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 4 if r == 0 else 3), r) + step_end("grads")


def _collective_one_rank(r: int) -> list[Call]:
    metric = [Call("all_reduce", numel_extra=1 - GRAD_NUMEL, label="loss metric")] if r == 0 else []
    return plan_calls(plan("gpipe", 2), r) + metric + step_end("grads")


def _rank_exits(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 4), r, stop_before="r1/recv/RECV_F s1 mb2 <-r0", stop="raise") + step_end("grads")


def _rank_stalls(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 4), r, stop_before="r1/recv/RECV_F s1 mb2 <-r0", stop="stall") + step_end("grads")


def _p2p_size(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 4), r, hidden_div=2 if r == 1 else 1) + step_end("grads")


def _schedule_family(r: int) -> list[Call]:
    return plan_calls(plan("1f1b" if r == 0 else "gpipe", 4), r) + step_end("grads")


def _schedule_vpp(r: int) -> list[Call]:
    s = plan("interleaved-1f1b", 4, vpp=2) if r == 0 else plan("1f1b", 4)
    return plan_calls(s, r) + step_end("grads")


def _collective_kind(r: int) -> list[Call]:
    end = Call("all_reduce", label="grads") if r == 0 else Call("broadcast", label="params")
    return plan_calls(plan("gpipe", 2), r) + [end] + step_end("loss")


def _collective_dtype(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 2), r) + [Call("all_reduce", label="grads", bf16=r == 1)]


def _collective_size(r: int) -> list[Call]:
    return plan_calls(plan("gpipe", 2), r) + [Call("all_reduce", numel_extra=1024 if r == 0 else 0, label="grads")]


GRAD_NUMEL = 4 * 2**20
KINDS: dict[str, Callable[[int], list[Call]]] = {
    "p2p_order": _p2p_order, "collective_order": _collective_order, "mb_count": _mb_count,
    "collective_one_rank": _collective_one_rank, "rank_exits": _rank_exits, "rank_stalls": _rank_stalls,
    "p2p_size": _p2p_size, "schedule_family": _schedule_family, "schedule_vpp": _schedule_vpp,
    "collective_kind": _collective_kind, "collective_size": _collective_size, "collective_dtype": _collective_dtype,
}
#: The plan rank 0 runs: what ``--plan`` names the calls by.
PLANS: dict[str, Callable[[], Schedule]] = {
    "p2p_order": lambda: plan("1f1b", 4), "mb_count": lambda: plan("gpipe", 4),
    "collective_one_rank": lambda: plan("gpipe", 2), "rank_exits": lambda: plan("gpipe", 4),
    "rank_stalls": lambda: plan("gpipe", 4), "p2p_size": lambda: plan("gpipe", 4),
    "schedule_family": lambda: plan("1f1b", 4), "schedule_vpp": lambda: plan("interleaved-1f1b", 4, vpp=2),
    "collective_kind": lambda: plan("gpipe", 2), "collective_size": lambda: plan("gpipe", 2),
    "collective_dtype": lambda: plan("gpipe", 2),
}


def execute(calls: list[Call], *, rank: int, dev, tokens: int, hidden: int, pg_timeout: float,
            dump_dir: Path) -> int:
    """Issue the calls; then wait for them without blocking the host, snapshot the recorder, and block until
    the watchdog times the work out (cuda), or report that nothing hung. Returns the exit code."""
    from datetime import timedelta

    import _fr
    import torch
    import torch.distributed as dist

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    groups = {"default": None}
    for name in sorted({c.group for c in calls} - {"default"}):  # one order on every rank
        # new_group does not inherit init_process_group's timeout; group_desc names it in the dump
        groups[name] = dist.new_group(list(range(WORLD)), timeout=timedelta(seconds=pg_timeout), group_desc=name)
    works: list = []
    act = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    grads = torch.ones(GRAD_NUMEL + 1024, device=dev, dtype=torch.float32)
    x = torch.randn(tokens * hidden // 2, device=dev, dtype=torch.float32)  # as many bytes as a bf16 activation
    y = torch.empty_like(x)
    for k, c in enumerate(calls):
        print(f"rank {rank}: call {k} {c.what} {c.label}", flush=True)
        if c.what == "raise":
            raise RuntimeError(f"rank {rank}: a corrupt sample in the batch before {c.label} (the fault of this run)")
        if c.what == "stall":
            print(f"rank {rank}: the host stops issuing before {c.label}", flush=True)
            deadline = time.time() + pg_timeout / 2
            while time.time() < deadline:
                time.sleep(0.2)
            if dev.type == "cuda":
                _fr.snapshot(dump_dir.with_name(dump_dir.name + ".manual") / f"{_fr.PREFIX}{rank}")
            time.sleep(3 * pg_timeout + 10)  # alive while the peer's watchdog times out and asks every rank to dump
            print(f"rank {rank}: the stalled host gives up", flush=True)
            return 5
        if c.what in ("send", "recv"):
            shape = (tokens, hidden // c.hidden_div)
            t = act[:, :shape[1]].contiguous() if c.what == "send" else torch.empty(shape, device=dev, dtype=dtype)
            op = dist.P2POp(dist.isend if c.what == "send" else dist.irecv, t, c.peer)
            ws = dist.batch_isend_irecv([op])
            works += ws
            if c.what == "recv":
                for w in ws:
                    w.wait()  # the compute that needs the data waits (the stream, not the host, on cuda)
        elif c.what == "compute":
            act.mul_(1.0001)
        elif c.what == "all_to_all":
            dist.all_to_all_single(y, x, group=groups[c.group])
            x, y = y, x  # the next call takes this one's output: a stream dependency on cuda
        else:
            t = grads[:GRAD_NUMEL + c.numel_extra]
            if c.bf16:
                t = t.to(torch.bfloat16)
            w = (dist.all_reduce(t, async_op=True) if c.what == "all_reduce"
                 else dist.broadcast(t, src=0, async_op=True))
            works.append(w)
            w.wait()
    print(f"rank {rank}: all {len(calls)} calls issued", flush=True)
    if dev.type != "cuda":
        for w in works:
            w.wait()
        print(f"rank {rank}: NO HANG", flush=True)
        return 3
    t0 = time.time()
    while time.time() - t0 < pg_timeout / 2:
        if all(w.is_completed() for w in works):
            _fr.snapshot(dump_dir / f"{_fr.PREFIX}{rank}")  # no watchdog dump comes: take the recorder now
            print(f"rank {rank}: NO HANG: every call completed after {time.time() - t0:.1f} s; recorder snapshot "
                  "written as the dump", flush=True)
            return 3
        time.sleep(0.2)
    _fr.snapshot(dump_dir.with_name(dump_dir.name + ".manual") / f"{_fr.PREFIX}{rank}")
    print(f"rank {rank}: still pending after {pg_timeout / 2:.0f} s; waiting for the watchdog", flush=True)
    torch.cuda.synchronize(dev)
    print(f"rank {rank}: synchronize returned (unexpected after a hang)", flush=True)
    return 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", choices=sorted(KINDS))
    ap.add_argument("--list", action="store_true", help="print each kind's calls per rank and exit")
    ap.add_argument("--dump-dir", type=Path)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    # 8192 x 4096 bf16 = 64 MiB per message: beyond NCCL's buffers, so a send waits for its receive
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--pg-timeout", type=float, default=12)
    a = ap.parse_args()
    if a.list:
        for name, fn in KINDS.items():
            for r in range(WORLD):
                print(f"{name} rank {r}: " + ", ".join(f"{c.what} {c.label or c.group}".strip() for c in fn(r)))
        return 0
    if a.kind is None or a.dump_dir is None:
        ap.error("KIND and --dump-dir are needed")
    from datetime import timedelta

    import _fr
    import torch
    import torch.distributed as dist

    _fr.enable(a.dump_dir)
    rank = int(__import__("os").environ["RANK"])
    calls = KINDS[a.kind](rank)
    kw = {"timeout": timedelta(seconds=a.pg_timeout)}
    if a.device == "cuda":
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev, **kw)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", **kw)
    if rank == 0 and a.kind in PLANS:
        from pptl.formats.plan import dumps, plan_to_dict

        (a.dump_dir / "plan.json").write_text(dumps(plan_to_dict(PLANS[a.kind]())))
    print(f"rank {rank}: {a.kind}: {len(calls)} calls; torch {torch.__version__}", flush=True)
    try:
        return execute(calls, rank=rank, dev=dev, tokens=a.tokens, hidden=a.hidden, pg_timeout=a.pg_timeout,
                       dump_dir=a.dump_dir)
    except RuntimeError as e:
        if "the fault of this run" in str(e):
            raise
        # gloo (cpu) blocks in the host and raises on the process-group timeout: the hang was reached
        print(f"rank {rank}: HANG: raised ({type(e).__name__}: {str(e)[:160]})", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
