"""Measured timelines of ``pptl run`` (CPU, gloo) are physically consistent, on plans made with
``pptl plan -o`` at sizes and message modes the other run tests do not use (pp 3 and 4, one, odd and
more than ten micro-batches, V-shaped and paired-FB plans).

The assertions are written from what a measurement must obey, not from pptl's code: every op the
plan file lists (rank from its ``lanes``, fields from its columns) appears exactly once; a message
(flow F: stage s's output to stage s+1; flow B: stage s's input gradient to stage s-1; same
micro-batch and direction) is not received before it is sent (the ranks of one host share one
clock); an op does not start before the RECV of its input ended, nor a SEND before its producer;
a rank's compute ops do not overlap; times are ordered and step times positive. ``pptl check``
must pass too. ``test_each_assertion_can_fail`` mutates a scratch copy of a measured timeline once
per assertion and shows that exactly that assertion (and, for PP090/PP091, ``pptl check``) fails.
"""
from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from pptl.cli import app  # noqa: E402

#: ms. One host, one monotonic clock: only float rounding is allowed.
EPS = 1e-6
COMPUTE = ("F", "B", "I", "W", "FB")

#: (family, pp, micro-batches, extra plan flags, message mode)
CASES = [
    ("1f1b", 3, 5, [], "sync-send"),
    ("zbv", 3, 1, [], "inline"),
    ("dualpipev", 3, 7, [], "overlap"),
    ("interleaved-1f1b", 3, 11, ["--vpp", "2", "--group-size", "11"], "inline"),
    ("zb-h1", 4, 11, [], "overlap"),
]
IDS = [f"{f}-pp{pp}-m{m}-{mode}" for f, pp, m, _, mode in CASES]


# ------------------------------------------------------------------------------------------------
# The plan file, read on its own terms


def planned_ops(plan: dict) -> list[dict]:
    """The plan file's ops, each with its rank and lane (ops are stored lane by lane, in the order
    of ``lanes``; a column is a list or a {values, index} table; a missing column is its default)."""
    cols = plan["ops"]
    n = sum(lane["count"] for lane in plan["lanes"])

    def col(name: str, default):
        c = cols.get(name)
        if c is None:
            return [default] * n
        if isinstance(c, dict):
            return [c["values"][k] for k in c["index"]]
        assert len(c) == n, name
        return list(c)

    kind, flow, stage, mb = col("kind", ""), col("flow", ""), col("stage", -1), col("mb", -1)
    chunk, peer, direction, pair = col("chunk", -1), col("peer", -1), col("direction", 0), col("pair", None)
    ops = [dict(kind=kind[i], flow=flow[i] or "", stage=stage[i], mb=mb[i], chunk=chunk[i], peer=peer[i],
                direction=direction[i] or 0, pair=pair[i]) for i in range(n)]
    pos = 0
    for lane in plan["lanes"]:
        for i in range(pos, pos + lane["count"]):
            ops[i]["rank"], ops[i]["lane"] = lane["rank"], lane["lane"]
        pos += lane["count"]
    return ops


def _ident(o: dict) -> tuple:
    return (o["kind"], o["rank"], o["lane"], o.get("stage", -1), o.get("mb", -1), o.get("direction", 0) or 0,
            o.get("chunk", -1), o.get("flow") or "", o.get("peer", -1))


def _d(e: dict) -> int:
    return e.get("direction", 0) or 0


# ------------------------------------------------------------------------------------------------
# Assertions over a measured timeline (each returns what it found wrong)


def ops_as_planned(plan: dict, tl: dict) -> list[str]:
    """Every planned op exactly once, with its rank, lane, stage, micro-batch, chunk, flow and peer;
    its id names the same rank, lane and micro-batch."""
    out = []
    want = Counter(_ident(o) for o in planned_ops(plan))
    got = Counter(_ident(e) for e in tl["events"])
    if want != got:
        out.append(f"ops differ from the plan: missing {sorted(want - got)[:3]}, extra {sorted(got - want)[:3]}")
    dup = [k for k, c in Counter(e["op"] for e in tl["events"]).items() if c > 1]
    if dup:
        out.append(f"op ids twice: {dup[:3]}")
    for e in tl["events"]:
        if not e["op"].startswith(f"r{e['rank']}/{e['lane']}/") or f"mb{e['mb']}" not in e["op"].split():
            out.append(f"{e['op']} is labelled rank {e['rank']} lane {e['lane']} mb {e['mb']}")
    return out


def times_sane(tl: dict) -> list[str]:
    """0 <= start <= end for every op; every timed step time and the chosen one positive."""
    out = [f"{e['op']}: interval {e['start']}..{e['end']}" for e in tl["events"] if not 0 <= e["start"] <= e["end"]]
    x = tl["meta"]["extra"]
    steps = x.get("step_ms") or []
    if not steps or not all(s > 0 for s in steps) or not (x.get("median_step_ms") or 0) > 0:
        out.append(f"step times not positive: {steps}, median {x.get('median_step_ms')}")
    return out


def compute_serial(tl: dict) -> list[str]:
    """A rank's compute lane runs one op at a time."""
    out = []
    per: dict[int, list[dict]] = defaultdict(list)
    for e in tl["events"]:
        if e["lane"] == "compute" or e["kind"] in COMPUTE:
            per[e["rank"]].append(e)
    for r, es in per.items():
        es.sort(key=lambda e: (e["start"], e["end"]))
        for a, b in zip(es, es[1:]):
            if b["start"] < a["end"] - EPS:
                out.append(f"rank {r}: {b['op']} starts {b['start']:.6f} before {a['op']} ends {a['end']:.6f}")
    return out


def _sends(tl: dict) -> dict[tuple, dict]:
    """(flow, direction, mb, sender's stage, sender, receiver) -> SEND."""
    return {(e["flow"], _d(e), e["mb"], e["stage"], e["rank"], e["peer"]): e
            for e in tl["events"] if e["kind"] == "SEND"}


def _recvs(tl: dict) -> dict[tuple, dict]:
    """(flow, direction, receiver's stage, mb, receiver) -> RECV."""
    return {(e["flow"], _d(e), e["stage"], e["mb"], e["rank"]): e for e in tl["events"] if e["kind"] == "RECV"}


def recv_after_send(tl: dict) -> list[str]:
    """A RECV ends no earlier than its SEND starts."""
    out = []
    sends = _sends(tl)
    for e in tl["events"]:
        if e["kind"] != "RECV":
            continue
        src = e["stage"] - 1 if e["flow"] == "F" else e["stage"] + 1
        s = sends.get((e["flow"], _d(e), e["mb"], src, e["peer"], e["rank"]))
        if s is None:
            out.append(f"{e['op']}: no SEND")
        elif e["end"] < s["start"] - EPS:
            out.append(f"{e['op']} ends {e['end']:.6f} before {s['op']} starts {s['start']:.6f}")
    return out


def consumers_after_recv(tl: dict) -> list[str]:
    """F (and FB's forward) needs the activation of its stage and micro-batch, B and I (and FB's
    paired backward) its output gradient: where a RECV brought it, the op starts after it ended."""
    out = []
    recvs = _recvs(tl)
    for e in tl["events"]:
        needs = []
        if e["kind"] in ("F", "FB"):
            needs.append(("F", _d(e), e["stage"], e["mb"]))
        if e["kind"] in ("B", "I"):
            needs.append(("B", _d(e), e["stage"], e["mb"]))
        if e["kind"] == "FB":
            ps, pm, pd = e["pair"]
            needs.append(("B", pd, ps, pm))
        for n in needs:
            r = recvs.get((*n, e["rank"]))
            if r is not None and e["start"] < r["end"] - EPS:
                out.append(f"{e['op']} starts {e['start']:.6f} before {r['op']} ends {r['end']:.6f}")
    return out


def sends_after_producer(tl: dict) -> list[str]:
    """A SEND of flow F starts after the F (or FB) that made its activation; of flow B after the B,
    I (or FB's paired backward) that made its gradient."""
    made: dict[tuple, dict] = {}
    for e in tl["events"]:
        if e["kind"] in ("F", "FB"):
            made[("F", _d(e), e["stage"], e["mb"], e["rank"])] = e
        if e["kind"] in ("B", "I"):
            made[("B", _d(e), e["stage"], e["mb"], e["rank"])] = e
        if e["kind"] == "FB":
            ps, pm, pd = e["pair"]
            made[("B", pd, ps, pm, e["rank"])] = e
    out = []
    for e in tl["events"]:
        if e["kind"] != "SEND":
            continue
        p = made.get((e["flow"], _d(e), e["stage"], e["mb"], e["rank"]))
        if p is None:
            out.append(f"{e['op']}: nothing on rank {e['rank']} made it")
        elif e["start"] < p["end"] - EPS:
            out.append(f"{e['op']} starts {e['start']:.6f} before {p['op']} ends {p['end']:.6f}")
    return out


CHECKS = {"ops": ops_as_planned, "times": times_sane, "serial": compute_serial, "recv": recv_after_send,
          "consumer": consumers_after_recv, "send": sends_after_producer}


def problems(plan: dict, tl: dict) -> dict[str, list[str]]:
    found = {name: (f(plan, tl) if name == "ops" else f(tl)) for name, f in CHECKS.items()}
    return {k: v for k, v in found.items() if v}


# ------------------------------------------------------------------------------------------------
# The runs


def _cli(*args: str) -> str:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, (args, r.output)
    return r.output


def _run_case(tmp: Path, family: str, pp: int, m: int, flags: list[str], mode: str) -> tuple[Path, Path]:
    plan, measured = tmp / f"{family}.plan.json", tmp / f"{family}.measured.json"
    _cli("plan", "-s", family, "--pp", str(pp), "-m", str(m), *flags, "-o", str(plan))
    _cli("run", str(plan), "--device", "cpu", "--steps", "2", "--warmup", "0", "--hidden", "16", "--tokens", "4",
         "--messages", mode, "--timeout", "60", "-o", str(measured))
    return plan, measured


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("truth")
    out = {}
    for case, name in zip(CASES, IDS):
        d = tmp / name
        d.mkdir()
        out[name] = _run_case(d, *case)
    return out


@pytest.mark.parametrize("name", IDS)
def test_measured_timeline_is_physically_consistent(runs, name):
    plan_path, measured_path = runs[name]
    plan, tl = json.loads(plan_path.read_text()), json.loads(measured_path.read_text())
    assert tl["meta"]["source"] == "measured" and tl["meta"]["units"] == "ms"
    assert tl["meta"]["extra"]["messages"] == CASES[IDS.index(name)][-1]
    assert problems(plan, tl) == {}
    out = _cli("check", str(measured_path))
    assert "ok" in out, out
    assert tl["meta"]["extra"]["clock"]["violations"] == 0


@pytest.mark.parametrize("mutation", ["drop", "twice", "relabel_mb", "end_before_start", "step_zero",
                                      "overlap", "recv_early", "consumer_early", "send_early"])
def test_each_assertion_can_fail(runs, tmp_path, mutation):
    """A scratch copy of one measured timeline (dualpipev: FB pairs, both flows), mutated once: the
    assertion made for that property fails, and only it; PP090/PP091 of ``pptl check`` agree."""
    plan_path, measured_path = runs[IDS[2]]
    plan, good = json.loads(plan_path.read_text()), json.loads(measured_path.read_text())
    assert problems(plan, good) == {}
    tl = copy.deepcopy(good)
    ev = tl["events"]
    expect, code = None, None
    if mutation == "drop":
        ev.remove(next(e for e in ev if e["kind"] == "W"))
        expect = "ops"
    elif mutation == "twice":
        ev.append(copy.deepcopy(next(e for e in ev if e["kind"] == "SEND")))
        expect = "ops"
    elif mutation == "relabel_mb":
        e = next(e for e in ev if e["kind"] == "W")
        e["mb"] += 1000
        expect = "ops"
    elif mutation == "end_before_start":
        e = next(e for e in ev if e["kind"] == "W")
        e["end"] = e["start"] - 1e-3
        expect = "times"
    elif mutation == "step_zero":
        tl["meta"]["extra"]["step_ms"][0] = 0.0
        expect = "times"
    elif mutation == "overlap":
        # a W that no one waits on, moved to start inside the compute op before it
        rank0 = sorted((e for e in ev if e["rank"] == 0 and e["lane"] == "compute"), key=lambda e: e["start"])
        k, w = next((k, e) for k, e in enumerate(rank0) if e["kind"] == "W" and k > 0)
        prev = rank0[k - 1]
        shift = w["start"] - (prev["start"] + prev["end"]) / 2
        w["start"] -= shift
        w["end"] -= shift
        expect = "serial"
    elif mutation in ("recv_early", "consumer_early"):
        recv = next(e for e in ev if e["kind"] == "RECV" and e["flow"] == "F" and e["rank"] == 1)
        consumer = next(e for e in ev if e["rank"] == 1 and e["kind"] in ("F", "FB") and e["stage"] == recv["stage"]
                        and e["mb"] == recv["mb"] and _d(e) == _d(recv))
        send = next(s for s in ev if s["kind"] == "SEND" and s["rank"] == recv["peer"] and s["peer"] == 1
                    and s["flow"] == "F" and s["mb"] == recv["mb"] and s["stage"] == recv["stage"] - 1)
        if mutation == "recv_early":  # the SEND moved past its RECV's end: received before it was sent
            held = send["end"] - send["start"]
            send["start"] = recv["end"] + 0.5
            send["end"] = send["start"] + held
            expect, code = "recv", "PP090"
        else:  # the consumer started before its data arrived, and stays where it was on its lane
            recv["end"] = consumer["start"] + 0.5
            expect, code = "consumer", "PP091"
    elif mutation == "send_early":
        send = next(e for e in ev if e["kind"] == "SEND" and e["flow"] == "F" and e["rank"] == 0)
        producer = next(e for e in ev if e["rank"] == 0 and e["kind"] in ("F", "FB") and e["stage"] == send["stage"]
                        and e["mb"] == send["mb"])
        send["start"] = producer["end"] - 0.5 * (producer["end"] - producer["start"])
        expect, code = "send", "PP091"
    found = problems(plan, tl)
    assert set(found) == {expect}, found
    # the same scratch copy on disk, through pptl check
    scratch = tmp_path / "mutated.json"
    scratch.write_text(json.dumps(tl))
    r = CliRunner().invoke(app, ["check", str(scratch)])
    if code is not None:
        assert r.exit_code != 0 and code in r.output, r.output
