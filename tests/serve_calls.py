"""The serve API called as the page calls it: a request from query parameters (1F1B, pp 4, 8
micro-batches unless given), the plan view, or the error body a refused request gets."""
from __future__ import annotations

from pptl.errors import InputError, InvalidScheduleError
from pptl.serve import api


def req(**params: str) -> api.Request:
    base = {"schedule": "1f1b", "pp": "4", "microbatches": "8"}
    base.update(params)
    return api.parse_request(base)


def plan(**params: str) -> dict:
    return api.plan_view(req(**params), cache=api.PlanCache())


def error(**params: str) -> dict:
    """The error body of a request the API refuses (AssertionError when it does not)."""
    r = req(**params)
    try:
        api.plan_view(r, cache=api.PlanCache())
    except (InputError, InvalidScheduleError) as e:
        return api.error_body(e)
    raise AssertionError("no error")
