"""Fork one process per rank from a process that has imported torch once.

``pptl run`` starts this module (``python -m pptl.run.spawner JOB INIT WORLD RUNDIR``) in its own
session; it imports torch and the worker, then forks the ranks, so start-up is paid once rather
than once per rank (on a 2-core CI machine that is most of a small run). It never touches CUDA
or runs a torch op before forking, so each rank starts clean. It reaps the ranks and writes each
exit code (negative: killed by that signal) to ``RUNDIR/exit.rankR`` for the launcher.
"""
from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["main"]


def main(argv: list[str]) -> int:
    job_file, init, world, rundir = argv[0], argv[1], int(argv[2]), argv[3]
    import torch  # noqa: F401  (imported once, before forking)
    import torch.distributed  # noqa: F401

    from pptl.run.__main__ import main as rank_main

    ranks: dict[int, int] = {}
    # The launcher stops a run with SIGTERM to the whole group: the ranks save their records and exit,
    # and this process must outlive them to reap them, or they linger as orphans after pptl returns.
    # SIGUSR1 is the launcher's "now": SIGKILL the ranks still running (they are our unreaped
    # children, so their pids cannot have been reused).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, lambda *_: _kill(ranks))
    for r in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGUSR1, signal.SIG_DFL)
                os.environ.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
                fd = os.open(os.path.join(rundir, f"rank{r}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                code = rank_main(["--job", job_file, "--init", init])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        ranks[pid] = r
    _watch_parent(os.getppid(), ranks)
    while ranks:
        pid, status = os.waitpid(-1, 0)
        r = ranks.pop(pid, None)
        if r is None:
            continue
        tmp = os.path.join(rundir, f".exit.rank{r}")
        with open(tmp, "w") as f:
            f.write(str(os.waitstatus_to_exitcode(status)))
        os.replace(tmp, os.path.join(rundir, f"exit.rank{r}"))
    return 0


def _watch_parent(parent: int, ranks: dict[int, int]) -> None:
    """Stop the ranks when ``pptl`` is gone without stopping them (killed with SIGKILL, say): they
    would otherwise run on until their own collective timeout. SIGTERM first (each saves its records
    and exits), SIGKILL 2 s later."""
    import threading

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        for pid in list(ranks):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(2.0)
        _kill(ranks)

    threading.Thread(target=loop, name="pptl-parent", daemon=True).start()


def _kill(ranks: dict[int, int]) -> None:
    for pid in list(ranks):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
