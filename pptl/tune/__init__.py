"""``pptl tune``: which schedule family, layer split and settings to use for a model under a memory
limit. Pure: reads a :class:`~pptl.tune.model.TuneConfig`, returns ranked candidates.

Modules: :mod:`~pptl.tune.model` (the config), :mod:`~pptl.tune.candidates` (the search space),
:mod:`~pptl.tune.split` (layer splits, Megatron layout), :mod:`~pptl.tune.synth` (the synthesised
order), :mod:`~pptl.tune.rank` (build, check, time, rank), :mod:`~pptl.tune.calibrate`
(``--costs-from``), :mod:`~pptl.tune.report` (table and JSON).
"""
from pptl.tune.model import TuneConfig, load_tune_config
from pptl.tune.rank import Result, TuneResult, tune

__all__ = ["TuneConfig", "load_tune_config", "tune", "Result", "TuneResult"]
