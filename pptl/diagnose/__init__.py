"""``pptl diagnose``: why a distributed run hung, from torch's NCCL flight-recorder dumps or the partial
timeline a stopped ``pptl run`` wrote.

- :mod:`pptl.diagnose.ops`: one NCCL call as a rank issued it (:class:`NcclOp`).
- :mod:`pptl.diagnose.counts`: calls matched by count and order (per group and ordered pair of ranks,
  collectives by sequence number): what one side issued that the other never did, sizes and kinds that differ.
- :mod:`pptl.diagnose.cause`: the one sentence that names the root cause and the ranks, and its evidence.
- :mod:`pptl.diagnose.waits`: the wait-for graph and its cycle; :func:`diagnose_dumps` puts a diagnosis together.
- :mod:`pptl.diagnose.plan_names`: calls named by the plan (``--plan``), the plan's next op and other end.
- :mod:`pptl.diagnose.report`: the text and JSON report.
"""
from pptl.diagnose.ops import NcclOp
from pptl.diagnose.report import to_dict, to_text
from pptl.diagnose.waits import Diagnosis, diagnose_dumps, diagnose_timeline

__all__ = ["NcclOp", "Diagnosis", "diagnose_dumps", "diagnose_timeline", "to_text", "to_dict"]
