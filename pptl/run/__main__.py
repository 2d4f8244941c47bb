"""Per-rank entry: ``python -m pptl.run PLAN [options]`` under torchrun (rank and world from the
environment), or ``python -m pptl.run --job FILE`` as spawned by ``pptl run``.

Example (2 nodes x 8 GPUs)::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m pptl.run plan.json --steps 5 -o measured.json
"""
from __future__ import annotations

import argparse
import os
import sys

from pptl.errors import PptlError
from pptl.run.options import CUDA_CONNECTIONS, DEFAULT_MESSAGES, DEFAULT_TIMEOUT, MESSAGE_MODES, Job, PlanJob, read_job


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pptl.run", description="Run one rank of a pptl plan.")
    p.add_argument("plan", nargs="?", help="plan file (pptl plan -o) or config")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--verify", action="store_true")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    p.add_argument("--messages", choices=MESSAGE_MODES, default=DEFAULT_MESSAGES,
                   help="how CUDA ranks run SEND/RECV (see pptl run --help)")
    p.add_argument("-o", "--out", default=None, help="measured timeline (written by rank 0)")
    p.add_argument("--job", default=None, help=argparse.SUPPRESS)
    p.add_argument("--init", default="env://", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # read when this process makes its CUDA context (pptl.run.options.CUDA_CONNECTIONS says why)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", str(CUDA_CONNECTIONS))
    a = _parse(sys.argv[1:] if argv is None else argv)
    try:
        if a.job:
            job = read_job(a.job)
        else:
            if not a.plan:
                print("error: give a plan (python -m pptl.run PLAN)", file=sys.stderr)
                return 2
            if _missing_env():  # how it was started comes before what it was given
                return 2
            device = a.device
            if device is None:
                import torch

                device = "cuda" if torch.cuda.is_available() else "cpu"
            job = Job(plans=(PlanJob(a.plan, a.out, a.plan),), device=device, steps=a.steps, warmup=a.warmup,
                      verify=a.verify, timeout=a.timeout, messages=a.messages).validate()
            if a.out:  # rank 0 writes it after the whole run: a name it cannot write is found now
                from pptl.run.output import check_output

                check_output(a.out)
            # A file that is no plan exits 2 here, before the rendezvous; found by each rank after
            # it, the error was a rank's failure (exit 1), which torchrun reports with a traceback.
            from pptl.formats.loader import load_any
            from pptl.run import runnable

            runnable(load_any(a.plan), a.plan)
    except PptlError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if _missing_env():
        return 2
    from pptl.run.worker import run_worker

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    code = run_worker(job, rank=rank, world=world, local_rank=local, init_method=a.init)
    if code == 0 and rank == 0 and not a.job:
        print(f"pptl.run: {world} ranks done" + (f"; wrote {a.out}" if a.out else ""))
    return code


def _missing_env() -> bool:
    """Say so (one line) when torchrun's RANK or WORLD_SIZE is not set."""
    missing = [k for k in ("RANK", "WORLD_SIZE") if k not in os.environ]
    if missing:
        print(f"error: {' and '.join(missing)} not set: start this under torchrun, or use 'pptl run'", file=sys.stderr)
    return bool(missing)


if __name__ == "__main__":
    sys.exit(main())
