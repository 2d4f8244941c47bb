"""What-if: a plan's step time under variance and stragglers, by Monte Carlo over its graph.

Modules: :mod:`~pptl.whatif.spread` (how durations are drawn: measured, jitter, stragglers),
:mod:`~pptl.whatif.montecarlo` (the samples, all at once over the simulator's graph),
:mod:`~pptl.whatif.roles` (a run's stage costs keyed by role for another plan's stages),
:mod:`~pptl.whatif.duty` (the duty exponent learnt from the run),
:mod:`~pptl.whatif.opening` (how fast each rank computed early in a step of the run and later),
:mod:`~pptl.whatif.study` (plans and a measured run read from files), :mod:`~pptl.whatif.report`
(text and JSON), :mod:`~pptl.whatif.figure` (matplotlib). Pure but for reading files in ``study``.
"""
from __future__ import annotations

from pptl.whatif.montecarlo import Samples, makespan_quantiles, monte_carlo
from pptl.whatif.spread import Jitter, Quantiles, Spread, Straggler, parse_jitter, parse_straggler

__all__ = ["Samples", "makespan_quantiles", "monte_carlo", "Jitter", "Quantiles", "Spread", "Straggler",
           "parse_jitter", "parse_straggler"]
