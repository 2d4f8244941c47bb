"""The costs one candidate is timed with, as the :class:`~pptl.config.Costs` its written plan carries.

``pptl tune`` ranks a candidate by the simulator's longest path over its plan; ``pptl plan`` of the
plan it writes must give the same step. So the ranking's durations are not computed beside the
plan's costs: they are the plan's costs, read through :func:`pptl.simulate.durations`, and this
module is where the tune model becomes such costs:

- per stage, F, B, I and W of the split's layers, with the embedding on the first stage and the
  head on the last (:func:`pptl.tune.split.stage_costs`);
- an overlapped ``FB`` costs the F of its own stage plus the B of its pair's stage (DualPipe(V)
  pairs a forward of one stage with a backward of another, whose costs differ under an uneven
  split), carried as the stage's ``FB`` cost;
- ``messages: sync-send`` (``pptl run``'s CUDA default): a SEND runs on the compute stream right
  after the op that produced its data and the next compute op waits for it, so its time on that
  stream (``TuneConfig.send_hold``, measured by the calibrating run) is added to its producer's
  cost; the rest of the message time, until the data is at the receiver, is the plan's SEND
  (the consumer waits for it, the producer does not). Without a measured hold the whole message
  time is on the producer and the SEND takes none;
- a rank's duty factor (``device.duty_exponent``) is the plan's ``costs.rank_scale``.

Every op of one (cost key, stage) must come out at one value for the plan to hold it; the families
place stages on ranks once, so every forward of a stage sends (or none does).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pptl.config import Costs
from pptl.deps import roles
from pptl.errors import InvalidScheduleError
from pptl.tune.split import stage_costs

if TYPE_CHECKING:
    from pptl.ir import Schedule
    from pptl.tune.model import TuneConfig

__all__ = ["candidate_costs"]


def candidate_costs(tc: TuneConfig, schedule: Schedule, layers: tuple[int, ...]) -> Costs:
    """Per-stage costs of ``schedule`` under the split ``layers`` (no rank factors yet).

    Raises:
        InvalidScheduleError: an op kind the tune model has no cost for, or two ops of one cost key
            and stage that the model times differently (a plan could not carry them).
    """
    per = stage_costs(tc.model, layers)
    comm = Costs(comm_latency=tc.comm_latency, comm_bandwidth=tc.comm_bandwidth, comm_bytes=tc.model.message_bytes)
    ops = schedule.ops
    value: dict[int, float] = {}
    producer: dict[tuple[str, int, int, int], int] = {}  # (F or G, direction, stage, mb) -> compute op
    for i, op in enumerate(ops):
        k = op.kind
        if k in ("SEND", "RECV"):
            continue
        if k == "FB":
            bstage = op.pair[0] if op.pair else op.stage
            value[i] = per[op.stage]["F"] + per[bstage]["B"]
        elif k in ("F", "B", "I", "W") and k in per.get(op.stage, {}):
            value[i] = per[op.stage][k]
        else:
            raise InvalidScheduleError(f"pptl tune: op kind {k} of {op.id} has no model cost")
        if op.lane == "compute":
            for role, d, stg, mb in roles(op):
                if role in ("F", "G"):
                    producer[(role, d, stg, mb)] = i
    fold = tc.messages == "sync-send"
    hold = None if tc.send_hold is None else min(tc.send_hold, comm.comm_time(comm.comm_bytes))
    if fold:
        for op in ops:
            if op.kind == "SEND":
                j = producer.get(("F" if op.flow == "F" else "G", op.direction, op.stage, op.mb))
                if j is not None:
                    value[j] += comm.comm_time(op.payload) if hold is None else hold
    stages: dict[int, dict[str, float]] = {}
    for i, v in value.items():
        op = ops[i]
        row = stages.setdefault(op.stage, {})
        key = op.cost_key
        if key in row and row[key] != v:
            raise InvalidScheduleError(f"pptl tune: {op.id} costs {v:g} but another {key} of stage {op.stage} "
                                       f"costs {row[key]:g}; a plan holds one cost per key and stage")
        row[key] = v
    base: dict[str, float] = {}
    for k in ("F", "B", "I", "W"):
        c = tc.model.part_cost(tc.model.layer, k)
        if c is not None:
            base[k] = c
    if fold and hold is None:
        # The transfer is on its producer: the plan's SENDs take no time of their own.
        return Costs(base=base, stages=stages, comm_latency=0.0, comm_bandwidth=math.inf, comm_bytes=0.0)
    if fold:
        # The producer holds the stream for ``hold``; the consumer waits for the rest.
        return Costs(base=base, stages=stages, comm_latency=max(0.0, comm.comm_latency - hold),
                     comm_bandwidth=comm.comm_bandwidth, comm_bytes=comm.comm_bytes)
    return Costs(base=base, stages=stages, comm_latency=comm.comm_latency, comm_bandwidth=comm.comm_bandwidth,
                 comm_bytes=comm.comm_bytes)
