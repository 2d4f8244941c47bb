"""Hold the host back to within a bounded number of ops of the GPU (``pptl run``, MoE plans).

Why: on CUDA the host enqueues work far faster than the GPU runs it. A tensor dropped by the host
while another stream still has to read it (``record_stream``: an offload copy, an all-to-all) goes
back to the caching allocator only once that stream gets there; with the host a whole step ahead,
every such block is still pending when memory is asked for again, so the allocator maps new
segments and the reserved memory grows with the host's lead (36 GiB reserved against 17 GiB without
offloading, on the issue-8 workload). The allocated view is off too: a tensor counts as freed when
the host drops it and as allocated when the host asks for it, a step before the GPU does either.

:class:`HostLag` keeps the host at most ``lag`` marked ops (the compute sub-ops) ahead of the GPU:
before issuing marked op n it waits, on the host, for the event recorded after marked op n - lag.
Blocks freed that far back have been passed by their streams, so the allocator reuses them; the
GPU never starves as long as ``lag`` ops of work stay queued (a paired MoE layer issues five
compute sub-ops of 1-3 ms each on H200s). The wait polls, so a stuck peer is reported after the
run's timeout instead of blocking in CUDA.
"""
from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["HostLag"]


class HostLag:
    """A ring of ``lag`` events: :meth:`before` waits for the oldest, :meth:`after` re-records it."""

    def __init__(self, lag: int, make_event: Callable[[], Any], *, timeout: float,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.lag = max(0, lag)
        self.events = [make_event() for _ in range(self.lag)]
        self.timeout, self.clock, self.sleep = timeout, clock, sleep
        self.n = 0
        """Marked ops issued this step."""
        self.waits = 0
        """How often the host had to wait (for reports and tests)."""

    def reset(self) -> None:
        """A new step: the previous step's events have all completed (the step ended in a barrier)."""
        self.n = 0

    def before(self) -> None:
        """Before issuing a marked op: wait until the marked op ``lag`` back has run on the GPU."""
        if self.lag == 0 or self.n < self.lag:
            return
        ev = self.events[self.n % self.lag]
        if ev.query():
            return
        self.waits += 1
        t0 = self.clock()
        while not ev.query():
            if self.clock() - t0 > self.timeout:
                raise TimeoutError(f"no progress for {self.timeout:g} s while the host waited for the GPU "
                                   f"({self.lag} ops behind; a peer may have failed)")
            self.sleep(2e-5)

    def after(self) -> None:
        """After issuing a marked op (on its stream): record its event."""
        if self.lag == 0:
            return
        self.events[self.n % self.lag].record()
        self.n += 1
