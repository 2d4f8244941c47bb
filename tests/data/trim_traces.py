"""Make the trimmed trace fixtures of tests/data/traces from full torch profiler traces.

    python tests/data/trim_traces.py SRC_DIR DST_DIR   # SRC_DIR/<Schedule>/rank<k>.json.gz

Keeps what pptl's importer reads and drops the rest: user annotations, GPU annotations of PP:/
Forward/Backward ranges, every kernel (short names; NCCL kernels keep their prefix), the launches
tied to them (correlation only), and, for single-stage traces (no PP: ranges), the top-level CPU
ops and the fwdbwd flows that start in them. Times are rounded to 1 ns.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

_GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def trim(data: dict) -> dict:
    ev = data["traceEvents"]
    single = not any(e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("PP:") for e in ev)
    kernels = {e["args"]["correlation"] for e in ev if e.get("cat") in _GPU and "correlation" in e.get("args", {})}
    out = []
    top: dict = {}
    cpu_ops = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                     key=lambda e: (e["ts"], -e.get("dur", 0)))
    kept_ops = []
    for e in cpu_ops:
        end = top.get(e["tid"])
        if end is not None and e["ts"] < end:
            continue
        top[e["tid"]] = e["ts"] + e.get("dur", 0)
        kept_ops.append(e)

    def x(e: dict, name: str, args: dict | None = None) -> dict:
        d = {"ph": "X", "cat": e["cat"], "name": name, "pid": e.get("pid"), "tid": e.get("tid"),
             "ts": round(e["ts"], 3), "dur": round(e.get("dur", 0), 3)}
        if args:
            d["args"] = args
        return d

    for e in ev:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if e.get("ph") != "X":
            continue
        if cat == "user_annotation":
            out.append(x(e, name))
        elif cat == "gpu_user_annotation" and (name.startswith(("PP:", "Forward ", "Backward "))):
            out.append(x(e, name))
        elif cat in _GPU:
            short = name.split("(")[0] if name.startswith("nccl") else cat
            out.append(x(e, short, {"correlation": e.get("args", {}).get("correlation")}))
        elif cat in ("cuda_runtime", "cuda_driver") and e.get("args", {}).get("correlation") in kernels:
            out.append(x(e, "launch", {"correlation": e["args"]["correlation"]}))
    if single:
        for e in kept_ops:
            name = e["name"]
            keep = name.startswith(("autograd::engine::evaluate_function", "c10d::", "nccl:", "record_param_comms"))
            out.append(x(e, name if keep else name.split("::")[0] + "::op"))
        starts = {}
        for e in kept_ops:
            starts.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e.get("dur", 0)))
        for e in ev:
            if e.get("cat") == "fwdbwd" and e.get("ph") == "s":
                if any(a <= e["ts"] <= b for a, b in starts.get(e.get("tid"), ())):
                    out.append({"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": e["id"], "pid": e.get("pid"),
                                "tid": e.get("tid"), "ts": round(e["ts"], 3)})
    info = data.get("distributedInfo", {})
    return {"schemaVersion": data.get("schemaVersion", 1),
            "distributedInfo": {k: info[k] for k in ("backend", "rank", "world_size") if k in info},
            "baseTimeNanoseconds": data.get("baseTimeNanoseconds", 0), "traceEvents": out}


def main(src: Path, dst: Path) -> None:
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        for f in sorted(folder.glob("rank*.json.gz")):
            data = json.loads(gzip.decompress(f.read_bytes()))
            target = dst / folder.name / f.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(gzip.compress(json.dumps(trim(data), separators=(",", ":")).encode(), 9, mtime=0))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
