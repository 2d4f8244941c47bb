"""What the hang scripts share: the NCCL flight recorder switched on (dump on timeout, one file per rank under a
folder), a snapshot of the recorder taken from Python, and waiting for a hang without blocking the host."""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

PREFIX = "nccl_trace_rank_"


def enable(dump_dir: Path, heartbeat_s: int = 20) -> None:
    """Set before init_process_group: ProcessGroupNCCL reads these when it is built. torch reads the dump prefix
    from TORCH_FR_DUMP_TEMP_FILE in newer releases and TORCH_NCCL_DEBUG_INFO_TEMP_FILE in older ones (both
    names are in libtorch 2.13), and the buffer size from TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE."""
    dump_dir.mkdir(parents=True, exist_ok=True)
    prefix = str(dump_dir.resolve() / PREFIX)
    for k, v in {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_FR_BUFFER_SIZE": "2000",
                 "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
                 "TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_NCCL_ENABLE_MONITORING": "1",
                 "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(heartbeat_s), "TORCH_NCCL_DESYNC_DEBUG": "1"}.items():
        os.environ[k] = v


def snapshot(path: Path) -> str:
    """Write this process's flight recorder (the pickle torch's own dump writes) to ``path``; the API's name."""
    c10d = torch._C._distributed_c10d
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        fn = getattr(c10d, name, None)
        if fn is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(fn())
            return name
    return "none"


def wait_for_hang(dev: torch.device, rank: int, dump_dir: Path, snapshot_after_s: float) -> None:
    """Poll the device (the host stays free) for ``snapshot_after_s``; if the work is still pending, write a
    snapshot to DUMP_DIR_manual/ (beside it: fr_trace reads every file under its folder), then block until
    the NCCL watchdog times the work out, dumps and aborts."""
    stream = torch.cuda.current_stream(dev)
    t0 = time.time()
    while time.time() - t0 < snapshot_after_s:
        if stream.query():
            print(f"rank {rank}: NO HANG: the work finished after {time.time() - t0:.1f} s", flush=True)
            raise SystemExit(3)
        time.sleep(0.2)
    api = snapshot(dump_dir.with_name(dump_dir.name + "_manual") / f"{PREFIX}{rank}")
    print(f"rank {rank}: still pending after {snapshot_after_s:.0f} s; snapshot via {api}; waiting for the "
          "watchdog", flush=True)
    torch.cuda.synchronize(dev)
    print(f"rank {rank}: synchronize returned (unexpected after a hang)", flush=True)
