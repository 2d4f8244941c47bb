"""Schedules the rules are held to: every fixture, every family, mutated copies and hand-made
broken ones, with the violations each must report (tests/data/rule_cases.json).

Those violations were recorded from the per-op implementation of each rule (pptl before the op
table became its only storage, commit f85f889) and are the reference the one implementation on the
table is held to: tests/test_rule_cases.py. One change since, on purpose: two full backwards of one unit
were reported twice by PP002 (its I-work and its W-work, "B (or I)" and "B (or W)"); they are one
report, "B of stage S mb M is done twice" (three cases).
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from mutations import drop_one, duplicate_one, lanes_of, move_before_dependency

from pptl.config import Config
from pptl.formats.loader import load_any
from pptl.formats.torch_csv import load_csv_text, to_rows
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules import build_schedule

STRUCTURE = ("PP001", "PP002", "PP003", "PP004", "PP005")
ORDER_P2P = ("PP006", "PP008", "PP030", "PP031", "PP032", "PP033")
MODES = ("nonblocking", "nccl", "blocking")

ROOT = Path(__file__).resolve().parent.parent
FAMILY_CONFIGS = [
    Config(schedule="gpipe", pp=3, microbatches=5),
    Config(schedule="1f1b", pp=4, microbatches=8),
    Config(schedule="1f1b", pp=3, microbatches=5, split_backward=True),
    Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8),
    Config(schedule="zb-h1", pp=4, microbatches=8),
    Config(schedule="zb-h2", pp=4, microbatches=8),
    Config(schedule="zbv", pp=4, microbatches=8),
    Config(schedule="dualpipe", pp=4, microbatches=8),
    Config(schedule="dualpipev", pp=4, microbatches=8),
]
FILES = sorted([*ROOT.glob("fixtures/*.yaml"), *ROOT.glob("fixtures/*.toml"), *ROOT.glob("fixtures/invalid/*.json"),
                *ROOT.glob("fixtures/invalid/*.yaml"), *ROOT.glob("fixtures/csv/*.csv"),
                *ROOT.glob("fixtures/csv/invalid/*.csv"), *ROOT.glob("fixtures/invalid/p2p_*.csv")])


def _file(path: Path) -> Schedule:
    if path.suffix == ".csv":
        return load_csv_text(path.read_text(), report_problems=True)[0]
    s = load_any(path).schedule
    assert s is not None, path
    return s


def _make(pp: int, ops: list[Op], *, stages: int = 2, mbs: int = 2, directions: int = 1) -> Schedule:
    b = ScheduleBuilder()
    b.extend(ops)
    return Schedule("hand", pp, stages, mbs, b.ops, b.lanes, [], directions)


def _full(pp: int = 2, mbs: int = 2, skip: tuple[str, int, int] | None = None) -> list[Op]:
    """F and B of every stage (stage s on rank s) and mb, but ``skip`` (kind, stage, mb)."""
    return [Op(k, st, "compute", st, mb) for st in range(pp) for mb in range(mbs) for k in ("F", "B")
            if (k, st, mb) != skip]


def _hand_made() -> list[tuple[str, Schedule]]:
    F = _full()
    return [
        ("unknown-kind", _make(2, [*F, Op("ZZZ", 0, "compute")])),
        ("negative-rank", _make(2, [*F, Op("F", -1, "compute", 0, 0)])),
        ("rank-too-large", _make(2, [Op("W", 5, "compute", 1, 1), *F])),
        ("no-lane", _make(2, [*F, Op("F", 0, "", 0, 1)])),
        ("b-without-stage", _make(2, [*F, Op("B", 0, "compute", -1, 1)])),
        ("fb-without-pair", _make(2, [*F, Op("FB", 0, "compute", 0, 1)])),
        ("fb-without-pair-twice", _make(2, [*F, Op("FB", 0, "compute", 0, 1), Op("FB", 0, "compute", 0, 1)])),
        ("send-bad-flow", _make(2, [*F, Op("SEND", 0, "send", 0, 0, peer=1, flow="X")])),
        ("recv-peer-out", _make(2, [*F, Op("RECV", 1, "recv", 1, 0, peer=7, flow="F")])),
        ("send-to-self", _make(2, [*F, Op("SEND", 0, "send", 0, 0, peer=0, flow="F")])),
        ("same-op-twice", _make(2, [*F, F[3]])),
        ("same-send-twice", _make(2, [*F, *[Op("SEND", 0, "send", 0, 0, peer=1, flow="F")] * 2])),
        ("same-recv-key-other-op", _make(2, [*F, Op("RECV", 1, "recv", 1, 0, peer=0, flow="F"),
                                             Op("RECV", 1, "recv", 1, 0, peer=0, flow="F", label="x")])),
        ("same-unknown-twice", _make(2, [*F, Op("H2D", 0, "h2d", payload=2.0), Op("H2D", 0, "h2d", payload=2.0),
                                         Op("H2D", 0, "h2d", payload=3.0)])),
        ("payload-signed-zero", _make(2, [*F, Op("H2D", 0, "h2d", payload=0.0), Op("H2D", 0, "h2d", payload=-0.0)])),
        ("work-twice-relabelled", _make(2, [*F, dataclasses.replace(F[0], label="again"),
                                            dataclasses.replace(F[1], lane="compute2")])),
        ("split-and-whole-backward", _make(2, [*F, Op("I", 1, "compute", 1, 0), Op("W", 1, "compute", 1, 0),
                                               Op("W", 1, "compute", 1, 0)])),
        ("fb-repeats-a-b", _make(2, [*_full(skip=("F", 0, 1)), Op("FB", 0, "compute", 0, 1, pair=(0, 0, 0))])),
        ("missing-f", _make(2, _full(skip=("F", 1, 0)))),
        ("missing-b", _make(2, _full(skip=("B", 0, 1)))),
        ("missing-w", _make(2, [*_full(skip=("B", 1, 1)), Op("I", 1, "compute", 1, 1)])),
        ("missing-i", _make(2, [*_full(skip=("B", 1, 1)), Op("W", 1, "compute", 1, 1)])),
        ("missing-direction-1", _make(2, _full(), directions=2)),
        ("empty", _make(2, [])),
        ("only-family-kinds", _make(2, [Op("H2D", 0, "h2d"), Op("BCAST", 1, "comm", peer=0)])),
        ("stage-out", _make(2, [*F, Op("F", 0, "compute", 2, 0)])),
        ("mb-out", _make(2, [*F, Op("B", 1, "compute", 1, 9)])),
        ("direction-out", _make(2, [*F, Op("W", 1, "compute", 1, 0, direction=3)])),
        ("fb-pair-out", _make(2, [*F, Op("FB", 0, "compute", 0, 1, pair=(5, 0, 0)),
                                  Op("FB", 1, "compute", 4, 1, pair=(0, 9, 0))])),
        ("no-stages", _make(2, F, stages=0)),
        ("stage-on-two-ranks", _make(3, [*F, Op("F", 1, "compute", 0, 1), Op("W", 2, "compute", 0, 0),
                                         Op("F", 0, "compute", 1, 1)])),
        ("stage-on-two-ranks-direction-1", _make(2, [*F, *[Op(k, 1 - st, "compute", st, mb, direction=1)
                                                          for st in range(2) for mb in range(2) for k in ("F", "B")],
                                                     Op("B", 0, "compute", 0, 0, direction=1)], directions=2)),
    ]


def _mutants() -> list[tuple[str, Schedule]]:
    out: list[tuple[str, Schedule]] = []
    for k, cfg in enumerate(FAMILY_CONFIGS):
        s = build_schedule(cfg)
        rnd = random.Random(k)
        out.append((f"{cfg.schedule}-drop", drop_one(s, rnd)[0]))
        out.append((f"{cfg.schedule}-duplicate", duplicate_one(s, rnd)))
        moved = move_before_dependency(s, rnd)
        if moved is not None:
            out.append((f"{cfg.schedule}-move", moved[0]))
        lanes = lanes_of(s)
        key = rnd.choice(sorted(k for k in lanes if k[1] == "compute"))
        lanes[key] = [dataclasses.replace(op, rank=(op.rank + 1) % s.pp) if i == 0 else op
                      for i, op in enumerate(lanes[key])]
        out.append((f"{cfg.schedule}-other-rank", s.with_lanes(lanes)))
    return out


def structure_cases() -> list[tuple[str, Schedule]]:
    out = [(p.relative_to(ROOT).as_posix(), _file(p)) for p in FILES]
    out += [(f"{c.schedule}-{c.pp}x{c.microbatches}", build_schedule(c)) for c in FAMILY_CONFIGS]
    return _unique(out + _mutants() + _hand_made())


def _unique(cases: list[tuple[str, Schedule]]) -> list[tuple[str, Schedule]]:
    """The cases, a name that repeats numbered from its second use on (two 1f1b configs)."""
    seen: dict[str, int] = {}
    out = []
    for name, s in cases:
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", s))
    return out


CSVS = sorted([*ROOT.glob("fixtures/csv/*.csv"), *ROOT.glob("fixtures/csv/invalid/*.csv"),
               *ROOT.glob("fixtures/invalid/p2p_*.csv")])




def _load(path: Path) -> Schedule:
    return load_csv_text(path.read_text(), report_problems=True)[0]


def _mutated(s: Schedule, seed: int) -> Schedule:
    """The CSV of ``s`` with two cells of one rank swapped, read again (a new issue order)."""
    from pptl.formats.torch_csv import dumps_rows

    rows, _ = to_rows(s, comms=True)
    rng = random.Random(seed)
    row = rng.choice([r for r in rows if len(r) > 1])
    a, b = rng.sample(range(len(row)), 2)
    row[a], row[b] = row[b], row[a]
    return load_csv_text(dumps_rows(rows), report_problems=True)[0]


def p2p_cases() -> list[tuple[str, Schedule]]:
    out = [(p.name, _load(p)) for p in CSVS]
    base = [s for name, s in out if name.endswith("_comms.csv")]
    out += [(f"mutated{k}", _mutated(base[k % len(base)], k)) for k in range(12)]
    out += [(f"{c.schedule}-valid", build_schedule(c)) for c in FAMILY_CONFIGS]
    return _unique(out + _order_broken())


def _relaned(s: Schedule, key: tuple[int, str], reorder) -> Schedule:
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    lanes[key] = reorder(lanes[key])
    return s.with_lanes(lanes)


def _first_to_front(kind: str):
    def move(ops: list[Op]) -> list[Op]:
        k = next(j for j, op in enumerate(ops) if op.kind == kind)
        return [ops[k]] + ops[:k] + ops[k + 1:]
    return move


def _without(s: Schedule, pred) -> Schedule:
    return s.with_lanes({k: [s.ops[i] for i in v if not pred(s.ops[i])] for k, v in s.lanes.items()})


def _order_broken() -> list[tuple[str, Schedule]]:
    """Hand-broken copies for PP006 (a B, W or FB before what it needs; every B first; work listed
    twice) and PP008 (a missing RECV, a missing message pair, a RECV naming the wrong peer, no
    messages at all)."""
    one = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    zb = build_schedule(Config(schedule="zb-h1", pp=4, microbatches=8))
    dp = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    fb_lane = next(k for k, v in dp.lanes.items() if k[1] == "compute" and any(dp.ops[i].kind == "FB" for i in v))
    il = build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8))
    every_b_first = il
    for r in range(4):
        every_b_first = _relaned(every_b_first, (r, "compute"), lambda ops: sorted(ops, key=lambda o: o.kind != "B"))
    small = build_schedule(Config(schedule="1f1b", pp=2, microbatches=4))
    lanes = {k: [small.ops[i] for i in v] for k, v in small.lanes.items()}
    lanes[(0, "compute")] = lanes[(0, "compute")] + [lanes[(0, "compute")][0]]
    twice = small.with_lanes(lanes)
    lanes = {k: [one.ops[i] for i in v] for k, v in one.lanes.items()}
    key = next(k for k, v in lanes.items() if any(o.kind == "RECV" for o in v))
    j = next(i for i, o in enumerate(lanes[key]) if o.kind == "RECV")
    lanes[key][j] = dataclasses.replace(lanes[key][j], peer=(lanes[key][j].peer + 2) % 4)
    return [
        ("b-before-f", _relaned(one, (2, "compute"), _first_to_front("B"))),
        ("w-before-i", _relaned(zb, (1, "compute"), _first_to_front("W"))),
        ("fb-before-f", _relaned(dp, fb_lane, _first_to_front("FB"))),
        ("every-b-first", every_b_first),
        ("work-listed-twice", twice),
        ("missing-recv", _without(one, lambda o: o.kind == "RECV" and o.mb == 3 and o.flow == "F" and o.stage == 2)),
        ("missing-pair", _without(one, lambda o: o.kind in ("SEND", "RECV") and o.mb == 5 and o.flow == "B")),
        ("ranks-disagree", one.with_lanes(lanes)),
        ("no-messages", _without(one, lambda o: o.kind in ("SEND", "RECV"))),
    ]
