"""Start one process per rank on this machine, watch them, and collect the measured timelines.

Each rank is a process forked by :mod:`pptl.run.spawner` after it imported torch (start-up is paid
once); it runs what ``python -m pptl.run --job FILE`` runs (gloo on CPU, NCCL on CUDA) and joins
the others through a file store in a private run folder. The launcher watches two things:
exit codes, and a progress board where every rank posts the op it is at. When a rank fails, the
others get a short grace to stop on their own and are then terminated; when no rank makes progress
for ``--timeout`` seconds, all are stopped. Either way the error names the rank and the op, and the
records the ranks kept (each completed step, plus the interrupted step's finished ops) are merged
into the measured timeline, which is still written.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pptl.errors import InputError, RunError
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Schedule
from pptl.run.options import Job, PlanJob
from pptl.timeline import Timeline

__all__ = ["check_device", "launch"]

#: Seconds the other ranks get to stop by themselves after one failed.
_GRACE = 5.0
#: Seconds start-up and set-up may go without progress, whatever --timeout says.
_SETUP = 60.0


def check_device(device: str | None, gpus: int) -> str:
    """Resolve ``--device`` (None: cuda when available) and refuse what this machine cannot do."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise InputError("pptl run needs torch: pip install 'pptl[run]' (torch>=2.4)")
    if device == "cpu":  # no need to load torch here: the ranks do
        if gpus < 1:
            raise InputError(f"--gpus: got {gpus}, expected at least 1")
        return device
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise InputError(f"--device: got '{device}', expected cuda or cpu")
    if gpus < 1:
        raise InputError(f"--gpus: got {gpus}, expected at least 1")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device cuda: no CUDA device is available here (torch {torch.__version__}); "
                             "use --device cpu")
        n = torch.cuda.device_count()
        if gpus > n:
            raise InputError(f"--gpus {gpus}: only {n} CUDA device{'s' if n != 1 else ''} visible here")
    return device


def launch(job: Job, schedules: list[Schedule], world: int) -> list[Timeline]:
    """Run ``job`` (its plans are ``schedules``, already loaded) on ``world`` local processes.

    Returns:
        The measured timeline of each plan, in order.

    Raises:
        RunError: a rank failed, was lost, or stopped making progress (what was measured is written).
        InputError: a rank refused its input.
    """
    for pj, s in zip(job.plans, schedules):
        if s.pp != world:
            raise InputError(f"{pj.plan}: the plan has pp={s.pp} ranks; run it with --gpus {s.pp}")
    from pptl.formats.plan import dumps, load_plan, plan_to_dict

    rundir = tempfile.mkdtemp(prefix="pptl-run-")
    plans = []
    # Rank 0 writes each timeline inside the run folder, and the launcher copies it to the user's
    # name: a write that fails there loses no measurement, and .json.gz is compressed in one place.
    targets = [p.out for p in job.plans]
    for k, (p, s) in enumerate(zip(job.plans, schedules)):
        copy = Path(rundir) / f"plan{k}.json"  # every rank reads exactly the schedule checked here
        copy.write_text(dumps(plan_to_dict(s)))
        plans.append(PlanJob(str(copy), str(Path(rundir) / f"measured{k}.json"), p.label or p.plan))
    plans = tuple(plans)
    # Op indices in the ranks' records refer to the copies, whose op order is the file's.
    schedules = [load_plan(p.plan)[0] for p in plans]
    job = replace(job, plans=plans, rundir=rundir,
                  threads=job.threads or (max(1, (os.cpu_count() or 1) // world) if job.device == "cpu" else None))
    job_file = Path(rundir) / "job.json"
    job_file.write_text(job.to_json())
    from pptl.run.progress import Board

    board = Board(Path(rundir) / "progress.bin", world, create=True)
    ranks: _Ranks | None = None
    with _StopSignals() as stop_signals:
        try:
            ranks = _Ranks(job_file, rundir, world)
            verdict = _watch(ranks, board, job.timeout)
        except _Stopped as e:  # SIGTERM, SIGHUP or Ctrl-C: like a hang, stop the ranks and keep what they measured
            stop_signals.ignore()  # a second signal must not cut the clean-up short
            if ranks is not None:
                ranks.stop()
            verdict = {"signal": e.signum}
        except BaseException:
            stop_signals.ignore()
            if ranks is not None:
                ranks.stop()
            raise
        finally:
            board_posts = [board.read(r) for r in range(world)]
            board.close()
    if verdict is None:
        timelines = []
        for p, target in zip(plans, targets):
            kept = str(p.out)
            raw = Path(kept).read_bytes()
            timelines.append(timeline_from_dict(json.loads(raw), source=target or kept))
            if target:
                _deliver(raw, target, kept)
        if not os.environ.get("PPTL_RUN_KEEP"):
            shutil.rmtree(rundir, ignore_errors=True)
        return timelines
    message, plan_index, code = _diagnose(verdict, rundir, world, board_posts, schedules)
    written = _write_partial(schedules, plans, plan_index, rundir, world, message, board_posts)
    where = ""
    if written:
        target = targets[plan_index]
        try:
            shown = _deliver(Path(written).read_bytes(), target, written) if target else written
            where = f"; measured so far written to {shown}"
        except InputError as e:
            where = f"; {e}"
    full = f"{message}{where} (logs in {rundir})"
    if code == 2:
        raise InputError(full)
    error = RunError(full)
    if "signal" in verdict:  # the shell's convention for a process ended by a signal: 128 + its number
        error.exit_code = 128 + int(verdict["signal"])
    raise error


class _Stopped(BaseException):
    """A stop signal reached ``pptl run`` (a BaseException, as KeyboardInterrupt: no handler swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: What stops a run: Ctrl-C, ``kill``/``timeout``/Slurm/CI cancellation, a closed terminal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _StopSignals:
    """While a run is in flight, a stop signal raises :class:`_Stopped` in the launcher's loop.

    The ranks live in the spawner's own session (so a Ctrl-C at the terminal reaches only
    ``pptl``), hence nothing but the launcher can stop them: without this, SIGTERM ended ``pptl``
    and left the spawner and every rank running. Outside the main thread (where Python cannot set
    handlers) it does nothing.
    """

    def __init__(self) -> None:
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> "_StopSignals":
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in _STOP_SIGNALS:
                self._saved[sig] = signal.signal(sig, self._raise)
        return self

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    def ignore(self) -> None:
        """From now on a stop signal is noted and dropped (the run is already stopping)."""
        for sig in self._saved:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


class _Ranks:
    """The rank processes, as the spawner reports them (exit codes in files)."""

    def __init__(self, job_file: Path, rundir: str, world: int) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self.rundir, self.world = Path(rundir), world
        with open(self.rundir / "spawner.log", "wb") as log:
            self.spawner = subprocess.Popen(
                [sys.executable, "-m", "pptl.run.spawner", str(job_file), f"file://{rundir}/store", str(world), rundir],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def codes(self) -> list[int | None]:
        out: list[int | None] = []
        for r in range(self.world):
            try:
                out.append(int((self.rundir / f"exit.rank{r}").read_text()))
            except (OSError, ValueError):
                out.append(None)
        if self.spawner.poll() is not None:  # the spawner is gone: ranks it did not report are lost
            out = [c if c is not None else -signal.SIGKILL for c in out]
        return out

    def stop(self) -> None:
        """SIGTERM every rank (the whole session), then SIGKILL what is left after 2 s.

        The spawner outlives its ranks and reaps them (it ignores SIGTERM; on SIGUSR1 it SIGKILLs the
        ranks left), so when this returns no rank is left running, and each one's records are saved.
        """
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGUSR1, 5.0), (signal.SIGKILL, 5.0)):
            try:
                if sig == signal.SIGUSR1:
                    os.kill(self.spawner.pid, sig)
                else:
                    os.killpg(self.spawner.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.spawner.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _watch(ranks: _Ranks, board: Any, timeout: float) -> dict[str, Any] | None:
    """None when every rank exited 0; otherwise what went wrong."""
    lost_at: dict[int, float] = {}
    stop_at = None
    while True:
        codes = ranks.codes()
        now = time.time()
        for r, c in enumerate(codes):
            if c not in (None, 0) and r not in lost_at:
                lost_at[r] = now
        if all(c == 0 for c in codes):
            ranks.spawner.wait()
            return None
        if all(c is not None for c in codes):
            ranks.stop()
            return {"codes": codes, "lost_at": lost_at}
        if lost_at and stop_at is None:
            stop_at = time.monotonic() + min(_GRACE, timeout)
        if stop_at is not None and time.monotonic() > stop_at:
            ranks.stop()
            return {"codes": codes, "lost_at": lost_at}
        if not lost_at:
            posts = [board.read(r) for r in range(ranks.world)]
            newest = max(p.time for p in posts)
            # Start-up and set-up (importing torch, joining the group, NCCL communicators) get at
            # least _SETUP seconds: the timeout is about ops that stop making progress.
            in_steps = any(p.op >= 0 for p in posts)
            if now - newest > (timeout if in_steps else max(timeout, _SETUP)):
                ranks.stop()
                return {"codes": codes, "lost_at": lost_at, "hung": True}
        time.sleep(0.02)


def _diagnose(verdict: dict[str, Any], rundir: str, world: int, posts: list[Any],
              schedules: list[Schedule]) -> tuple[str, int, int]:
    """(message, plan index, exit code) for the failure that came first."""

    def at(p: Any) -> str:
        """Where a rank's last post puts it: an op and its step, or set-up (no op, step -1: that
        read "at op (setup, before any op) (step -1)")."""
        if 0 <= p.plan < len(schedules) and 0 <= p.op < len(schedules[p.plan].ops):
            return f"at op {schedules[p.plan].ops[p.op].id} (step {p.step})"
        return "during set-up, before any op" if p.step < 0 else f"between ops (step {p.step})"

    if "signal" in verdict:
        name = signal.Signals(verdict["signal"]).name
        running = [p for p in posts if p.plan >= 0]
        p = max(running, key=lambda q: (q.plan, q.step)) if running else None
        where = f" at step {p.step}" if p is not None and p.step >= 0 else " during set-up"
        return f"run stopped by {name}{where}; every rank was stopped", max(p.plan, 0) if p else 0, 1
    if verdict.get("hung"):
        r = _stuck_rank(posts, schedules, world)
        p = posts[r]
        return (f"run stopped: no rank made progress for the --timeout; rank {r} is stuck {at(p)}",
                max(p.plan, 0), 1)
    records = []
    for r in range(world):
        path = Path(rundir) / f"failure.rank{r}.json"
        if path.exists():
            try:
                records.append(json.loads(path.read_text()))
            except ValueError:
                pass
    lost = [r for r, t in verdict["lost_at"].items() if not any(rec["rank"] == r for rec in records)]
    codes = verdict["codes"]
    # A rank killed by a signal (no failure record) makes its peers fail, not the other way round.
    lost = [r for r in lost if codes[r] is not None and codes[r] < 0] or lost
    if lost:
        r = min(lost, key=lambda i: verdict["lost_at"][i])
        p = posts[r]
        code = codes[r]
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return f"rank {r} was lost ({how}) {at(p)}", max(p.plan, 0), 1
    if records:
        rec = min(records, key=lambda x: x["time"])
        return rec["message"], max(int(rec.get("plan", 0)), 0), int(rec.get("exit_code", 1))
    return "the run failed without a message", 0, 1


def _stuck_rank(posts: list[Any], schedules: list[Schedule], world: int) -> int:
    """The rank a hang starts at.

    A rank at a SEND or RECV waits for its peer: from the rank that posted least recently, follow
    those waits to the rank that is stuck. A peer already past the matching op (later in its issue
    order, or in a later step) is not what the rank waits for: then the rank itself is stuck there,
    e.g. it stopped before posting its receive while its peer went on to wait for it.
    """
    from pptl.messages import message_key
    from pptl.run.program import build_program

    issue: dict[tuple[int, int], dict[int, int]] = {}

    def position(plan: int, rank: int) -> dict[int, int]:
        if (plan, rank) not in issue:
            try:
                order = build_program(schedules[plan]).ranks[rank].issue
            except Exception:  # diagnosis is best effort; never hide the failure behind another
                order = ()
            issue[(plan, rank)] = {i: k for k, i in enumerate(order)}
        return issue[(plan, rank)]

    r = min(range(world), key=lambda i: posts[i].time)
    seen: set[int] = set()
    while r not in seen:
        seen.add(r)
        p = posts[r]
        ops = schedules[p.plan].ops if 0 <= p.plan < len(schedules) else []
        op = ops[p.op] if 0 <= p.op < len(ops) else None
        if op is None or op.kind not in ("SEND", "RECV") or not 0 <= op.peer < world:
            break
        q, pq = op.peer, posts[op.peer]
        if pq.plan == p.plan:
            pos = position(p.plan, q)
            want, key = ("RECV" if op.kind == "SEND" else "SEND"), message_key(op)
            match = next((i for i in pos if ops[i].kind == want and message_key(ops[i]) == key), None)
            if match is not None and (pq.step, pos.get(pq.op, -1)) > (p.step, pos[match]):
                break
        elif pq.plan > p.plan:
            break
        r = q
    return r


def _deliver(raw: bytes, target: str, kept: str) -> str:
    """Write the timeline kept in the run folder at ``kept`` to the user's ``target``.

    Raises:
        InputError: ``target`` cannot be written; the line says where the measurement is kept
            (the run folder is then left in place).
    """
    from pptl.run.output import write_output

    try:
        write_output(target, raw)
    except InputError as e:
        raise InputError(f"{e}; the measured timeline is kept in {kept}") from None
    return target


def hosts_at(schedule: Schedule, k: int, posts: list[Any]) -> dict[str, dict[str, Any]]:
    """Rank -> the op of plan ``k`` its host last posted (the one it was issuing or waiting at) and its
    step: what a partial timeline keeps as ``meta.extra.hosts``. Ranks set up or on another plan are left out."""
    out: dict[str, dict[str, Any]] = {}
    for r, p in enumerate(posts):
        if p is not None and p.plan == k and 0 <= p.op < len(schedule.ops) and p.step >= 0:
            out[str(r)] = {"op": schedule.ops[p.op].id, "step": p.step}
    return out


def _write_partial(schedules: list[Schedule], plans: tuple[PlanJob, ...], k: int, rundir: str, world: int,
                   message: str, posts: list[Any] | None = None) -> str | None:
    from pptl.fileio import atomic_write
    from pptl.run.results import build_timeline

    if not 0 <= k < len(plans) or not plans[k].out:
        return None
    payloads = []
    for r in range(world):
        path = Path(rundir) / f"plan{k}.rank{r}.json"
        if path.exists():
            try:
                payloads.append(json.loads(path.read_text()))
            except ValueError:
                pass
    extra: dict[str, Any] = {"failed": message, "plan": plans[k].label}
    hosts = hosts_at(schedules[k], k, posts or [])
    if hosts:
        extra["hosts"] = hosts
    timeline = build_timeline(schedules[k], payloads, extra=extra)
    atomic_write(plans[k].out, json.dumps(timeline.to_dict(), separators=(",", ":"), allow_nan=False))
    return plans[k].out
