"""Which executor runs a plan, and the program refinements the non-training families need (pure).

Training plans run on :class:`pptl.run.executor.Executor`. A family whose record declares a
:class:`~pptl.schedules.Runtime` (its executor, the op kinds it runs, a check of the plan) runs
on that executor instead; today two do:

- ``moe-1f1b-overlap`` -> :class:`pptl.run.moe.MoEExecutor` (attention-like and expert parts,
  all-to-alls in the EP group, offload/onload copies);
- ``weight-update`` -> :class:`pptl.run.weight_update.WeightUpdateExecutor` (H2D, IPC copy,
  broadcast, reload).

Both reuse the training executor's step loop (streams, event timing, CPU timing, failure
handling) and change what is run and, through :func:`refine`, two things of the program:

- **issue order** (:func:`symmetric_issue`): every member of an EP group issues its ops in the
  same order, op for op (the twin of an op on another member has the same kind, lane, stage,
  micro-batch, layer and flow). :func:`pptl.run.program.build_program` breaks ties between ops of
  equal planned start by a topological position, which can differ between members whose copies
  of the pipeline are not connected in the plan's DAG; a collective then could meet a member
  that issues it after a wait on something the collective holds back. With one order for all
  members, the copies of each collective sit next to each other in one linear extension of the
  whole plan, and the argument of :mod:`pptl.run.program` carries over to collectives.
- **waits** (:func:`remote_hop_waits`): the weight-update plan orders ops of different ranks
  through each other (rank r's reload of bucket g-2 must end before the owner of bucket g writes
  that IPC half, and so before rank r's broadcast of g overwrites it). The broadcast carries the
  data; what rank r must wait for locally is what two hops through another rank lead back to.

:func:`cost_means` (with the refinements, in :mod:`pptl.run.family_program`) gives the measured mean per cost key (``Op.cost``), which ``pptl plan
--costs-from`` reads for families whose cost keys are not their op kinds.
"""
from __future__ import annotations

from importlib import import_module

from pptl.ir import Schedule
from pptl.run.family_program import cost_means, refine, remote_hop_waits, symmetric_issue
from pptl.schedules import find_family

__all__ = ["executor_class", "refine", "symmetric_issue", "remote_hop_waits", "cost_means"]

#: The executor of plans whose family declares none (training plans, imported schedules).
_TRAINING = "pptl.run.executor:Executor"


def executor_class(schedule: Schedule) -> type:
    """The executor class for ``schedule``: its family's (``Family.runtime``), else the training
    one (imports torch)."""
    fam = find_family(schedule.family)
    path = fam.runtime.executor if fam is not None and fam.runtime is not None else _TRAINING
    module, _, name = path.partition(":")
    cls: type = getattr(import_module(module), name)
    return cls
