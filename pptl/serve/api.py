"""What the explorer's JSON API does, as pure functions: request parameters in, a response out.

The wire format is one flat mapping of strings, the same in the page's URL hash (a view you can
share), in the body of ``POST /api/plan`` and in the query of a download link::

    schedule=interleaved-1f1b  pp=4  microbatches=8  vpp=2  group_size=  split_backward=0
    cost.F=1  cost.B=2  cost.I=1  cost.W=1  stages=0:F=1.5,B=3;3:B=3  comm_latency=0  memory_limit=
    compare=zb-h1  compare_vpp=1

Values stay strings until the library reads them, so a bad value typed in the page gets the
CLI's own one-line message (``planning.make_config`` builds the config exactly as ``pptl plan``
does from flags). Every :class:`~pptl.errors.PptlError` becomes ``{"error": line, "field": name}``
where ``name`` is the parameter the page shows the message next to.

Nothing here touches sockets or files; :mod:`pptl.serve.server` does.
"""
from __future__ import annotations

import html as _html
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Mapping

from pptl import planning
from pptl.config import Config
from pptl.errors import InputError, PptlError
from pptl.schedules._size import estimate_ops

__all__ = ["Settings", "Request", "Download", "MAX_PARAMS", "MAX_VALUE_CHARS", "SERVE_MAX_OPS", "LIVE_MAX_BLOCKS",
           "MAX_ROW_LABELS", "DOWNLOADS", "parse_request", "settings_from_config", "settings_params", "init_view", "plan_view",
           "download", "error_body", "error_field", "estimate_ops", "PlanCache"]

#: Parameters one request may carry, and characters per value (a request is a form, not a file).
MAX_PARAMS = 64
MAX_VALUE_CHARS = 400
#: The explorer plans at most this many ops per schedule (the CLI takes 5M; a page waits for
#: every change, and a plan of 500k ops takes tens of seconds on one core).
SERVE_MAX_OPS = 500_000
#: Above this many blocks the page gets metrics but no live figure (a browser draws each block as
#: an SVG path and would freeze); the PNG/SVG download still draws it.
LIVE_MAX_BLOCKS = 20_000
#: Rows labelled on the live figure's axis (every k-th past this many): plotly lays tick labels out in
#: time that grows with their square.
MAX_ROW_LABELS = 80

_COST_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_STAGES_HINT = "expected STAGE:KIND=VALUE,...;STAGE:... such as 0:F=1.5,B=3;7:B=3"
_FIELDS = ("schedule", "pp", "microbatches", "vpp", "group_size", "split_backward", "stages", "comm_latency",
           "memory_limit", "compare", "compare_vpp")


@dataclass(frozen=True)
class Settings:
    """One schedule as the page's fields hold it: raw text, read by the library."""

    schedule: str
    pp: str
    microbatches: str
    vpp: str = "1"
    group_size: str = ""
    split_backward: bool = False
    costs: tuple[tuple[str, str], ...] = ()
    """(kind, value) in the page's order."""
    stages: str = ""
    """Per-stage cost overrides, ``STAGE:KIND=VALUE,...;...``."""
    comm_latency: str = ""
    memory_limit: str = ""


@dataclass(frozen=True)
class Request:
    settings: Settings
    compare: Settings | None
    """The second schedule: the same settings with another family (and its own vpp)."""


@dataclass(frozen=True)
class Download:
    data: bytes
    content_type: str
    filename: str


DOWNLOADS: dict[str, tuple[str, str]] = {
    "plan": ("application/json", "json"),
    "png": ("image/png", "png"),
    "svg": ("image/svg+xml", "svg"),
    "csv": ("text/csv; charset=utf-8", "csv"),
}


# ----------------------------------------------------------------------------------------------
# Parameters <-> settings


def parse_request(params: Mapping[str, Any]) -> Request:
    """Read the flat parameter mapping; bounded (count, lengths, key shapes), never evaluated.

    Raises:
        InputError: too many parameters, a non-string value, an unknown name, an overlong value.
    """
    if not isinstance(params, Mapping):
        raise InputError("request: expected a mapping of parameters")
    if len(params) > MAX_PARAMS:
        raise InputError(f"request: {len(params)} parameters, at most {MAX_PARAMS} accepted")
    raw: dict[str, str] = {}
    costs: list[tuple[str, str]] = []
    for key, value in params.items():
        if not isinstance(key, str) or len(key) > 40:
            raise InputError("request: parameter names are short strings")
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = repr(value)
        if not isinstance(value, str):
            raise InputError(f"{key}: expected text, got {type(value).__name__}")
        if len(value) > MAX_VALUE_CHARS:
            raise InputError(f"{key}: {len(value)} characters, at most {MAX_VALUE_CHARS} accepted")
        if key.startswith("cost."):
            kind = key[5:]
            if not _COST_KEY.fullmatch(kind):
                raise InputError(f"{key}: a cost key is a letter and then letters, digits or _ (such as F, B, FB)")
            costs.append((kind, value.strip()))
        elif key in _FIELDS:
            raw[key] = value.strip()
        else:
            raise InputError(f"request: unknown parameter '{key}'; known: {', '.join(_FIELDS)}, cost.KIND")
    split = raw.get("split_backward", "")
    if split not in ("", "0", "1", "true", "false"):
        raise InputError(f"split_backward: got '{split}', expected 0 or 1")
    settings = Settings(
        schedule=raw.get("schedule", ""), pp=raw.get("pp", ""), microbatches=raw.get("microbatches", ""),
        vpp=raw.get("vpp", "") or "1", group_size=raw.get("group_size", ""), split_backward=split in ("1", "true"),
        costs=tuple(costs), stages=raw.get("stages", ""), comm_latency=raw.get("comm_latency", ""),
        memory_limit=raw.get("memory_limit", ""))
    other = raw.get("compare", "")
    compare = replace(settings, schedule=other, vpp=raw.get("compare_vpp", "") or "1") if other else None
    return Request(settings, compare)


def settings_params(s: Settings) -> dict[str, str]:
    """The parameters of ``s`` (what the page puts in its fields and URL)."""
    out = {"schedule": s.schedule, "pp": s.pp, "microbatches": s.microbatches, "vpp": s.vpp,
           "group_size": s.group_size, "split_backward": "1" if s.split_backward else "0"}
    out.update({f"cost.{k}": v for k, v in s.costs})
    out.update({"stages": s.stages, "comm_latency": s.comm_latency, "memory_limit": s.memory_limit})
    return out


def settings_from_config(cfg: Config) -> Settings:
    """The page's fields for a config read from a file (``pptl serve CONFIG``)."""
    stages = ";".join(f"{s}:" + ",".join(f"{k}={v:g}" for k, v in kv.items()) for s, kv in sorted(cfg.costs.stages.items()))
    return Settings(schedule=cfg.schedule, pp=str(cfg.pp), microbatches=str(cfg.microbatches), vpp=str(cfg.vpp),
                    group_size="" if cfg.group_size is None else str(cfg.group_size),
                    split_backward=cfg.split_backward,
                    costs=tuple((k, f"{v:g}") for k, v in cfg.costs.base.items()), stages=stages,
                    comm_latency=f"{cfg.costs.comm_latency:g}" if cfg.costs.comm_latency else "",
                    memory_limit="" if cfg.memory_limit is None else f"{cfg.memory_limit:g}")


def config_of(s: Settings, base: Config | None = None) -> Config:
    """Build the config exactly as ``pptl plan --schedule ... --cost K=V --comm-latency X`` does.

    ``base`` (a config file given to ``pptl serve``) keeps what the page does not edit: activation
    sizes, the workload, link bandwidths and, for the same family, its options.
    """
    if not s.schedule:
        raise InputError("give a schedule (see 'pptl schedules')")
    flags: dict[str, Any] = {"schedule": s.schedule, "pp": s.pp or None, "microbatches": s.microbatches or None,
                             "vpp": s.vpp or None, "group_size": s.group_size or None,
                             "split_backward": s.split_backward, "memory_limit": s.memory_limit or None}
    latency = None
    if s.comm_latency:
        try:
            latency = float(s.comm_latency)
        except ValueError:
            raise InputError(f"--comm-latency: got '{s.comm_latency}', expected a number >= 0") from None
        if math.isinf(latency):
            raise InputError(f"--comm-latency: got '{s.comm_latency}', expected a finite number >= 0")
    cost_flags = [f"{k}={v}" for k, v in s.costs if v != ""]
    for k, v in s.costs:
        if "," in v or "=" in v:  # would split into another KIND=VALUE on the CLI's path
            raise InputError(f"--cost {k}: got '{v}', expected a finite number >= 0")
    cfg = planning.make_config(None, flags, cost_flags, latency)
    stages = _stage_overrides(s.stages)
    if stages:
        from pptl.config import costs_from_mapping

        parsed = costs_from_mapping({"stages": stages}, source="<flags>")
        cfg = replace(cfg, costs=replace(cfg.costs, stages=parsed.stages))
        _check_stage_keys(cfg)
    if base is not None:
        costs = replace(cfg.costs, comm_bandwidth=base.costs.comm_bandwidth, comm_bytes=base.costs.comm_bytes,
                        copy_bandwidth=base.costs.copy_bandwidth)
        same = _family_name(base.schedule) == _family_name(cfg.schedule)
        cfg = replace(cfg, costs=costs, activation=base.activation, w_activation=base.w_activation,
                      workload=base.workload, options=base.options if same else {})
    # After the file's options are in: they change the op count (MoE layers per chunk, EP size).
    _bound(cfg)
    return cfg


def _check_stage_keys(cfg: Config) -> None:
    """The library's key check, worded for the stages field: it names the CLI's --cost, which the
    page does not have, and the page would show it by no field."""
    from pptl.schedules import check_keys, get_family

    fam = get_family(cfg.schedule)
    try:
        check_keys(replace(cfg, costs=replace(cfg.costs, base={})), fam)
    except InputError as e:
        text = str(e)
        m = re.search(r"unknown cost key '([^']*)'; (.*)$", text)
        if m is None:
            raise
        raise InputError(f"stages: unknown cost key '{m.group(1)}' in a per-stage override; {m.group(2)}") from None


def _family_name(name: str) -> str:
    from pptl.schedules import get_family

    try:
        return get_family(name).name
    except InputError:
        return name


def _stage_overrides(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        stage, sep, rest = chunk.partition(":")
        if not sep or not stage.strip() or not rest.strip():
            raise InputError(f"stages: got '{chunk}', {_STAGES_HINT}")
        kv = out.setdefault(stage.strip(), {})
        for item in filter(None, (i.strip() for i in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not _COST_KEY.fullmatch(key.strip()):
                raise InputError(f"stages: got '{item}' in '{chunk}', {_STAGES_HINT}")
            kv[key.strip()] = value.strip()
    return out


def _bound(cfg: Config) -> None:
    """Refuse, before planning, a config whose plan would pass :data:`SERVE_MAX_OPS` ops."""
    from pptl.schedules import get_family

    fam = get_family(cfg.schedule)
    estimate = estimate_ops(cfg, fam, limit=SERVE_MAX_OPS)
    if estimate > SERVE_MAX_OPS:
        raise InputError(f"field '{_bound_field(cfg, fam)}': {cfg.schedule} with pp={cfg.pp} x vpp={cfg.vpp} x "
                         f"microbatches={cfg.microbatches} would plan about {estimate:,} ops, more than the "
                         f"{SERVE_MAX_OPS:,} the explorer draws live; use 'pptl plan' for larger plans")


def _bound_field(cfg: Config, fam: Any) -> str:
    """The field a plan over the bound is shown by: micro-batches, unless the fewest micro-batches the
    family takes at this pp and vpp are over it too (then fewer cannot help, and the page marks pp,
    or vpp where it is the larger)."""
    for m in sorted({1, cfg.pp, cfg.group_size or cfg.pp}):
        if m >= cfg.microbatches:
            break
        fewest = replace(cfg, microbatches=m)
        try:
            fam.validate(fewest)
        except InputError:
            continue
        if estimate_ops(fewest, fam, limit=SERVE_MAX_OPS) <= SERVE_MAX_OPS:
            return "microbatches"
        break
    return "vpp" if cfg.vpp > cfg.pp else "pp"


# ----------------------------------------------------------------------------------------------
# Errors


_FIELD_RE = re.compile(r"field '([^']{1,80})'")
_FLAG_RE = re.compile(r"^(?:<flags>: )?--(cost ([A-Za-z0-9_]+)|comm-latency|pp|microbatches)\b")


def error_field(message: str) -> str | None:
    """The parameter a library message is about (the page shows it next to that field), or None."""
    m = _FLAG_RE.match(message)
    if m:
        if m.group(2):
            return f"cost.{m.group(2)}"
        return {"comm-latency": "comm_latency"}.get(m.group(1), m.group(1))
    if message.startswith("unknown schedule") or message.startswith("give a schedule"):
        return "schedule"
    for prefix in ("stages:", "split_backward:"):
        if message.startswith(prefix):
            return prefix[:-1]
    m = _FIELD_RE.search(message)
    if m is None:
        head = message.split(":", 1)[0]
        return head if head.startswith("cost.") or head in _FIELDS else None
    name = m.group(1)
    if name.startswith("--cost "):
        return "cost." + name[len("--cost "):]
    if name.startswith("costs.stages"):
        return "stages"
    if name.startswith("costs."):
        return "cost." + name.split(".", 1)[1]
    if name.startswith("comm."):
        return "comm_latency"
    return name if name in _FIELDS else None


def error_body(error: PptlError, *, compare: bool = False) -> dict[str, Any]:
    """``{"error": one line, "field": name or None}``; ``compare`` says the second schedule failed."""
    text = " ".join(str(error).split("\n")) or type(error).__name__
    if text.startswith("<flags>: "):  # the page is the source; the rest of the line is the CLI's
        text = text[len("<flags>: "):]
    field = error_field(text)
    if compare:
        field = "compare_vpp" if field == "vpp" else "compare"
    return {"error": text, "field": field}


# ----------------------------------------------------------------------------------------------
# Planning (cached: a download after a redraw does not plan again)


class PlanCache:
    """The last plans by their settings; safe to share between request threads.

    Bounded by the ops the plans hold (memory grows with them, about 1 kB an op), not only by their
    number: eight plans at the size limit would hold gigabytes. The newest plan always stays (its
    page may download it next), so a pair to compare fits when each is within the limit."""

    def __init__(self, size: int = 8, max_ops: int = 2 * SERVE_MAX_OPS) -> None:
        self._size = size
        self._max_ops = max_ops
        self._items: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def ops_held(self) -> int:
        with self._lock:
            return sum(n for _, n in self._items.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def plan(self, s: Settings, base: Config | None) -> Any:
        key = (s, id(base))
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        result = planning.plan(config_of(s, base))
        ops = len(result.schedule.ops)
        with self._lock:
            self._items[key] = (result, ops)
            self._items.move_to_end(key)
            held = sum(n for _, n in self._items.values())
            while len(self._items) > 1 and (len(self._items) > self._size or held > self._max_ops):
                held -= self._items.popitem(last=False)[1][1]
        return result


def init_view(initial: Settings, base: Config | None = None) -> dict[str, Any]:
    """What the page needs before the first plan: the families and the starting fields."""
    from pptl.schedules import FAMILIES

    fams = []
    for f in FAMILIES.values():
        fams.append({"name": f.name, "summary": f.summary, "constraints": f.constraints,
                     "bubble": f.bubble_formula, "vpp": _natural_vpp(f)})
    return {"families": fams, "params": settings_params(initial), "live_max_blocks": LIVE_MAX_BLOCKS,
            # The file's name only: a page (or whatever reads it) learns nothing of this machine's folders.
            "config": _file_name(base.source) if base is not None else None}


def _file_name(source: str) -> str:
    """The last part of a path, "/" or "\\" separated ("<flags>" stays as it is)."""
    return source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or source


def _natural_vpp(fam: Any) -> int:
    """1, or 2 for a family that refuses one chunk per rank (asked of the family, not listed here)."""
    try:
        fam.validate(Config(schedule=fam.name, pp=4, microbatches=8, vpp=1))
    except InputError as e:
        return 2 if "'vpp'" in str(e) else 1
    return 1


def plan_view(req: Request, *, cache: PlanCache, base: Config | None = None) -> dict[str, Any]:
    """Plan the schedule (and the one to compare), and describe what the page shows.

    Raises:
        PptlError: the first schedule cannot be planned (the page shows the message by its field).
    """
    t = time.perf_counter()
    a = cache.plan(req.settings, base)
    b = None
    b_error = None
    if req.compare is not None:
        try:
            b = cache.plan(req.compare, base)
        except PptlError as e:
            b_error = error_body(e, compare=True)
    figure = _figure([a] + ([b] if b is not None else []))
    return {"a": _panel(a), "b": _panel(b) if b is not None else None, "compare_error": b_error,
            "figure": figure, "server_ms": round(1000 * (time.perf_counter() - t), 1)}


def _panel(result: Any) -> dict[str, Any]:
    m = result.metrics
    fam = result.family
    ranks = [{"rank": r["rank"], "busy": r["busy"], "idle": r["idle"], "bubble": r["bubble_fraction"],
              "peak": r["peak_activation"]} for r in m["ranks"]]
    return {
        "title": result.title, "family": fam.name if fam is not None else "", "makespan": m["makespan"],
        "ops": m["ops"], "bubble": m["bubble_fraction"], "peak": m["peak_activation"], "ranks": ranks,
        "formula": fam.bubble_formula if fam is not None else "", "textbook": m.get("textbook_bubble"),
        "simulated_idle": max((r["idle"] for r in ranks), default=0.0), "valid": result.valid,
        "violations": [{"code": v.code, "severity": v.severity, "message": v.message} for v in result.violations],
        "units": result.schedule.meta.get("units", "unit"),
        "unavailable": _unavailable(result),
    }


def _unavailable(result: Any) -> dict[str, str]:
    """The downloads this plan cannot take, with the reason: the page shows it in place of a link that
    would only fail (a browser ends a refused download as "Failed", with no word of why)."""
    from pptl.formats.torch_csv import to_rows

    try:
        to_rows(result.schedule, comms=False)  # what the CSV download writes (milliseconds; 0.3 s at the bound)
    except PptlError as e:
        return {"csv": " ".join(str(e).split())}
    return {}


def _figure(results: list[Any]) -> dict[str, Any]:
    """The plotly figure of one plan, or two stacked on one time axis; or a note when too big."""
    from pptl.render.html import figure_dict
    from pptl.render.layout import build_layout

    lays = [build_layout(r.timeline, "auto") for r in results]
    blocks = sum(len(lay.blocks) for lay in lays)
    if blocks > LIVE_MAX_BLOCKS:
        return {"note": f"{blocks:,} blocks: too many to draw live (above {LIVE_MAX_BLOCKS:,}); the metrics are "
                        "current, and the PNG and SVG downloads draw the figure", "blocks": blocks}
    # the live page redraws on every change: fewer row labels than a written page (MAX_ROW_LABELS)
    figs = [figure_dict(lay.timeline, layout=lay, max_ticks=MAX_ROW_LABELS) for lay in lays]
    fig = figs[0] if len(figs) == 1 else _stack(figs, [lay.title for lay in lays], [lay.t1 for lay in lays])
    _drop_unreadable_labels(fig)
    _room_for_legend(fig["layout"])
    return {"data": fig["data"], "layout": fig["layout"], "blocks": blocks}


_MARGIN_T, _MARGIN_B = 95, 50
_PLOT_PX = 1100.0  # the plot's width at a usual window size (render/html.py assumes the same)
_MIN_LABEL_PX = 12.0


def _room_for_legend(lay: dict) -> None:
    """Title at the very top, then two rows of legend (chunked kinds take two on a page-wide plot)."""
    extra = 35
    lay["margin"] = {**lay.get("margin", {}), "t": _MARGIN_T + extra}
    lay["height"] = lay.get("height", 400) + extra
    lay["title"] = {**lay.get("title", {}), "y": 1.0, "yref": "container", "yanchor": "top", "pad": {"t": 12}}


def _drop_unreadable_labels(fig: dict) -> None:
    """Blank the labels of blocks too narrow to show one at the first view: plotly measures every
    label before hiding it, which is ~40% of a redraw of pp 8 x 64 micro-batches. (The HTML file of
    ``pptl render`` keeps them all, for zooming in.)"""
    rng = fig["layout"]["xaxis"]["range"]
    px_per_t = _PLOT_PX / max(rng[1] - rng[0], 1e-12)
    for t in fig["data"]:
        text = t.get("text")
        if not isinstance(text, list) or not isinstance(t.get("x"), list) or len(text) != len(t["x"]):
            continue
        kept = [s if w * px_per_t >= _MIN_LABEL_PX else "" for s, w in zip(text, t["x"])]
        if any(kept):
            t["text"] = kept
        else:
            for k in ("text", "textposition", "insidetextanchor", "textangle", "constraintext", "textfont"):
                t.pop(k, None)


def _stack(figs: list[dict], titles: list[str], ends: list[float]) -> dict:
    """Two figures one above the other on ONE time axis (zoom moves both); grids are left out."""
    a, b = (_without_grid(f) for f in figs)
    pa = a["layout"]["height"] - _MARGIN_T - _MARGIN_B
    pb = b["layout"]["height"] - _MARGIN_T - _MARGIN_B
    gap = 70
    total = pa + gap + pb
    lay = dict(a["layout"])
    lay["height"] = total + _MARGIN_T + _MARGIN_B
    lay["title"] = {**a["layout"]["title"], "text": f"<b>{_html.escape(titles[0])}</b>"}
    lay["yaxis"] = {**a["layout"]["yaxis"], "domain": [(pb + gap) / total, 1.0]}
    lay["yaxis3"] = {**b["layout"]["yaxis"], "domain": [0.0, pb / total], "anchor": "x"}
    lay["xaxis"] = {**a["layout"]["xaxis"], "anchor": "y3",
                    "range": [min(a["layout"]["xaxis"]["range"][0], b["layout"]["xaxis"]["range"][0]), max(ends)]}
    # The first title stays the figure's (above the legend); the second sits in the gap.
    lay["annotations"] = [{"text": f"<b>{_html.escape(titles[1])}</b>", "xref": "paper", "yref": "paper", "x": 0, "y": pb / total,
                           "xanchor": "left", "yanchor": "bottom", "yshift": 8, "showarrow": False,
                           "font": {"size": 15}}]
    shapes = list(a["layout"].get("shapes", [])) + [{**s, "yref": "y3"} for s in b["layout"].get("shapes", [])]
    if shapes:
        lay["shapes"] = shapes
    seen = {t.get("name") for t in a["data"]}
    data = [{**t, "legendgroup": t.get("name", "")} for t in a["data"]]
    for t in b["data"]:
        data.append({**t, "yaxis": "y3", "legendgroup": t.get("name", ""),
                     "showlegend": t.get("showlegend", True) and t.get("name") not in seen})
    return {"data": data, "layout": lay}


def _without_grid(fig: dict) -> dict:
    data = [t for t in fig["data"] if t.get("xaxis") != "x2"]
    lay = {k: v for k, v in fig["layout"].items() if k not in ("xaxis2", "yaxis2", "annotations")}
    if "yaxis2" in fig["layout"]:  # the timeline gave the lower part of its height to the grid
        dom = fig["layout"]["yaxis"].get("domain", [0.0, 1.0])
        plot = fig["layout"]["height"] - _MARGIN_T - _MARGIN_B
        lay["height"] = int(plot * (dom[1] - dom[0])) + _MARGIN_T + _MARGIN_B
        lay["yaxis"] = {k: v for k, v in fig["layout"]["yaxis"].items() if k != "domain"}
        lay["xaxis"] = {k: v for k, v in fig["layout"]["xaxis"].items() if k != "anchor"}
    return {"data": data, "layout": lay}


# ----------------------------------------------------------------------------------------------
# Downloads


def download(what: str, req: Request, which: str, *, cache: PlanCache, base: Config | None = None) -> Download:
    """The plan JSON, the figure (PNG/SVG, matplotlib) or the torch CSV of schedule ``which`` (a or b).

    Raises:
        InputError: an unknown download, no second schedule, or a format the plan cannot take.
    """
    if what not in DOWNLOADS:
        raise InputError(f"download: got '{what}', expected one of {', '.join(DOWNLOADS)}")
    if which not in ("a", "b"):
        raise InputError(f"which: got '{which}', expected a or b")
    settings = req.settings if which == "a" else req.compare
    if settings is None:
        raise InputError("compare: no second schedule to download; pick one to compare with")
    result = cache.plan(settings, base)
    ctype, ext = DOWNLOADS[what]
    stem = _stem(result)
    if what == "plan":
        from pptl.formats.plan import dumps, plan_to_dict

        data = dumps(plan_to_dict(result.schedule, timeline=result.timeline, metrics=result.metrics)).encode("utf-8")
    elif what == "csv":
        from pptl.formats.torch_csv import export_csv

        text, _notes = export_csv(result.schedule, comms=False)
        data = text.encode("utf-8")
    else:
        from pptl.render import encode
        from pptl.render.options import RenderOptions

        raw, _warnings = encode(result.timeline, what, options=RenderOptions(title="auto", dpi=150))
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return Download(data, ctype, f"{stem}.{ext}")


def _stem(result: Any) -> str:
    cfg = result.schedule.config
    name = result.schedule.family or "plan"
    if cfg is not None:
        name += f"-pp{cfg.pp}" + (f"-vpp{cfg.vpp}" if cfg.vpp > 1 else "") + f"-mb{cfg.microbatches}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
