"""pptl: plan, check, draw and run pipeline-parallel training schedules."""
__version__ = "0.1.0"
