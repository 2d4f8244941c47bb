"""Write the plan and the faulted plan of hang (2): ``pptl run`` with two sends swapped on one rank.

    PYTHONPATH=. python3 bench/hang_pptl_run.py OUT [--messages inline]

Writes OUT/plan.json (1F1B, 4 ranks, 8 micro-batches, the anchor workload) and OUT/issued.json:
the same plan with the issue order a run of it makes under ``PPTL_RUN_FAULT`` (:data:`FAULT`) and
``--messages MODE`` written into it, so that ``pptl check --p2p nccl OUT/issued.json`` says before
the run what ``pptl diagnose --plan OUT/issued.json`` says after it. Prints the fault.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pptl.config import config_from_mapping  # noqa: E402
from pptl.formats.plan import dumps, plan_to_dict  # noqa: E402
from pptl.ir import Schedule  # noqa: E402
from pptl.run.program import build_program, issued_for  # noqa: E402
from pptl.run.swap import issued_plan, parse_swap, swap_sends  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402

#: Rank 1 sends F mb7 to rank 2 only after B mb6 to rank 0 (see pptl/run/swap.py for why it hangs).
FAULT = "swap:1:r1/send/SEND_F s1 mb7 ->r2|r1/send/SEND_B s1 mb6 ->r0"


def plans(messages: str = "sync-send", workload: dict | None = None) -> tuple[Schedule, Schedule]:
    """(the plan, the plan with the faulted run's issue order)."""
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8, "workload": workload or {
        "hidden": 1024, "tokens": 1024, "layers_per_stage": 2, "dtype": "bfloat16"}}))
    program = issued_for(build_program(s), messages)  # what the executor does before it applies the fault
    _, rank, rest = FAULT.split(":", 2)
    return s, issued_plan(swap_sends(program, *parse_swap(int(rank), rest)))


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("out", type=Path)
    a.add_argument("--messages", default="sync-send")
    a.add_argument("--cpu", action="store_true", help="a small float32 workload for gloo")
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    small = {"hidden": 64, "tokens": 16, "layers_per_stage": 1, "dtype": "float32"} if args.cpu else None
    plan, issued = plans(args.messages, small)
    (args.out / "plan.json").write_text(dumps(plan_to_dict(plan)))
    (args.out / "issued.json").write_text(dumps(plan_to_dict(issued)))
    print(FAULT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
