"""What the GPU bench scripts share: a timestamped log, the machine's description, and guarded
stages that keep the results file current (one failing stage never hides the others)."""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.time() - T0:5.1f}s] {msg}", flush=True)


def env_info() -> dict[str, Any]:
    """torch, Python and the GPUs this process sees (or why torch could not say)."""
    try:
        import torch

        return {"torch": torch.__version__, "python": sys.version.split()[0],
                "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    except Exception as e:
        return {"error": str(e)}


class Stages:
    """Runs named stages; a failure is logged and kept in ``results["failures"]``, and the results
    are written to ``out/results.json`` after every stage."""

    def __init__(self, results: dict[str, Any], out: Path) -> None:
        self.results, self.out = results, out

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        t = time.time()
        log(f"== {name}")
        try:
            return fn()
        except Exception:
            log(f"{name} FAILED:\n{traceback.format_exc()}")
            self.results.setdefault("failures", {})[name] = traceback.format_exc()[-3000:]
        finally:
            log(f"== {name} done in {time.time() - t:.1f} s")
            (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))


def calibrate_one(cfg_path: Path, measured: Path, out_dir: Path | None = None) -> tuple[Any, Path, Any]:
    """``pptl plan CONFIG --costs-from MEASURED`` written beside the measured timeline (calibrated_*; in
    ``out_dir`` if given), and ``pptl compare`` of it against that timeline: (plan result, its path, comparison)."""
    from pptl import planning
    from pptl.compare import compare_timelines
    from pptl.formats.loader import load_any

    cfg, units = planning.calibrate(planning.make_config(cfg_path, {}, None, None), measured)
    result = planning.plan(cfg)
    result.schedule.meta["units"] = units
    cal_path = (out_dir or measured.parent) / measured.name.replace("measured_", "calibrated_")
    planning.write_plan(result, cal_path)
    return result, cal_path, compare_timelines(load_any(cal_path).timeline, load_any(measured).timeline)


def add_anchor_workload_args(ap: Any, *, steps: int = 5) -> None:
    """The anchor workload's options (bench/torch_pp_anchor.py's MLP blocks) and the timed steps, shared by the
    benches that time pptl beside torch's classes."""
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers-per-rank", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=2)


def add_moe_workload_args(ap: Any) -> None:
    """The issue-8 MoE workload's options, shared by bench/gpu_issue8.py and bench/gpu_offload.py."""
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2, help="MoE layers per model chunk")
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per micro-batch per EP member")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--dtype", default="bfloat16")
