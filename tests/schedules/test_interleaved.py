"""interleaved-1f1b and moe-1f1b-overlap held against Megatron-Core's own schedule code.

The reference below restates, independently of pptl, what Megatron-Core's
``megatron/core/pipeline_parallel/schedules.py`` does (``get_schedule_table``,
``get_pp_rank_microbatches``, the group checks and the three loops of
``forward_backward_pipelining_with_interleaving``; ``combined_1f1b.py`` pairs the forward and the
backward of one steady iteration). pptl's per-rank order, warmup counts and F/B pairing must equal
it wherever Megatron runs, and pptl must refuse, with one line naming the rule, wherever Megatron
raises.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import Config
from pptl.errors import InputError
from pptl.schedules import build_schedule, get_family, interleaved
from pptl.schedules.moe_overlap import parse_options, steps, warmup
from pptl.simulate import simulate

runner = CliRunner()
MOE = "moe-1f1b-overlap"
FAMILIES = ("interleaved-1f1b", MOE)


# ------------------------------------------------------------------------------------------------
# Megatron-Core, restated


def megatron_refusal(p: int, m: int, g: int) -> str | None:
    """Which of Megatron's checks raises for group size g (None: it schedules)."""
    if not p <= g <= m:
        return "group rule"  # "The number of contiguous micro-batches ... should range in [PP, M]"
    if 0 < m % g < p:
        return "last-group rule"  # "The remainder of M ... divided by N ... should be 0, or >= PP"
    return None


def megatron_table(m: int, v: int, g: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) per virtual micro-batch id: group by group, chunk by chunk, mb ascending."""
    return sorted(itertools.product(range(m), range(v)), key=lambda e: (e[0] // g, e[1], e[0]))


def megatron_warmup(p: int, r: int, v: int, m: int, g: int, moe: bool) -> int:
    """get_pp_rank_microbatches: 2(P-r-1) + (V-1)G, one more under overlap_moe_expert_parallel_comm, at most mV."""
    return min(2 * (p - r - 1) + (v - 1) * g + int(moe), m * v)


def megatron_iterations(p: int, r: int, v: int, m: int, g: int, moe: bool) -> list[tuple]:
    """Rank r's iterations as Megatron runs them: (forward (stage, mb) or None, backward (stage, mb) or None).

    Forwards read the table; a backward pops the oldest forward of its chunk (chunk V-1-c of the
    table entry), so its micro-batch is counted here, not read from the table.
    """
    table = megatron_table(m, v, g)
    total, w = m * v, megatron_warmup(p, r, v, m, g, moe)
    popped = [0] * v

    def fwd(k: int) -> tuple[int, int]:
        mb, c = table[k]
        return (c * p + r, mb)

    def bwd(k: int) -> tuple[int, int]:
        c = v - 1 - table[k][1]
        popped[c] += 1
        return (c * p + r, popped[c] - 1)

    out: list[tuple] = [(fwd(k), None) for k in range(w)]
    out += [(fwd(k + w), bwd(k)) for k in range(total - w)]
    out += [(None, bwd(k)) for k in range(total - w, total)]
    return out


def megatron_compute_order(p: int, r: int, v: int, m: int, g: int) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for f, b in megatron_iterations(p, r, v, m, g, moe=False):
        out += [("F", *f)] if f else []
        out += [("B", *b)] if b else []
    return out


def test_reference_table_is_megatron_s_documented_example() -> None:
    # schedules.py: "the tunable schedule table for PP2 N3M5 with VP2".
    assert megatron_table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1),
                                       (3, 0), (4, 0), (3, 1), (4, 1)]


# ------------------------------------------------------------------------------------------------
# pptl, read back


def _cfg(family: str, p: int, v: int, m: int, g: int | None = None, **options) -> Config:
    return Config(schedule=family, pp=p, vpp=v, microbatches=m, group_size=g, options=options)


def compute_order(cfg: Config) -> list[list[tuple[str, int, int]]]:
    s = build_schedule(cfg)
    return [[(s.ops[i].kind, s.ops[i].stage, s.ops[i].mb) for i in s.lanes[(r, "compute")]] for r in range(cfg.pp)]


def moe_pairs(cfg: Config) -> list[list[tuple]]:
    """Per rank, each forward's (stage, mb) and the backward it is paired with, from the built plan's markers."""
    s = build_schedule(cfg)
    return [[((op.stage, op.mb), op.pair[:2] if op.pair else None)
             for op in (s.ops[i] for i in s.lanes[(r, "pass")]) if op.kind == "F"] for r in range(cfg.pp)]


def forwards_before_first_backward(cfg: Config) -> list[int]:
    return [next(i for i, (kind, _, _) in enumerate(rank) if kind == "B") for rank in compute_order(cfg)]


# ------------------------------------------------------------------------------------------------
# The grid: M = P, odd M, G != P; every config Megatron runs is ordered as Megatron orders it,
# every config it refuses is refused.

GRID = [(p, v, m, g) for p in (2, 3, 4) for v in (2, 3) for m in sorted({p, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p})
        for g in sorted({p - 1, p, p + 1, m, m + 1} - {0})]
ACCEPTED = [c for c in GRID if megatron_refusal(c[0], c[2], c[3]) is None]
REFUSED = [c for c in GRID if megatron_refusal(c[0], c[2], c[3]) is not None]
ids = lambda cases: [f"P{p}-V{v}-M{m}-G{g}" for p, v, m, g in cases]  # noqa: E731


def test_grid_covers_the_cases_the_issue_names() -> None:
    assert {(4, 2, 4, 4), (2, 2, 2, 2), (4, 3, 4, 4)} <= set(ACCEPTED)  # M = P, V = 2 and 3
    assert any(m % 2 and megatron_refusal(p, m, g) is None for p, _, m, g in GRID)  # odd M that runs
    assert any(g != p for p, _, _, g in ACCEPTED)
    assert {megatron_refusal(p, m, g) for p, _, m, g in REFUSED} == {"group rule", "last-group rule"}


@pytest.mark.parametrize("p, v, m, g", ACCEPTED, ids=ids(ACCEPTED))
def test_interleaved_order_is_megatron_s(p: int, v: int, m: int, g: int) -> None:
    cfg = _cfg("interleaved-1f1b", p, v, m, g)
    assert compute_order(cfg) == [megatron_compute_order(p, r, v, m, g) for r in range(p)]
    assert [interleaved.warmup_count(cfg, r) for r in range(p)] == [megatron_warmup(p, r, v, m, g, False)
                                                                    for r in range(p)]
    assert interleaved.schedule_table(m, v, g) == megatron_table(m, v, g)
    assert [v_ for v_ in run_checks(build_schedule(cfg)) if v_.severity == "error"] == []


@pytest.mark.parametrize("p, v, m, g", ACCEPTED, ids=ids(ACCEPTED))
def test_moe_steps_warmup_and_pairing_are_megatron_s(p: int, v: int, m: int, g: int) -> None:
    cfg = _cfg(MOE, p, v, m, g, layers_per_chunk=1)
    opts = parse_options(cfg)
    expected = [megatron_iterations(p, r, v, m, g, moe=True) for r in range(p)]
    assert [warmup(cfg, r, opts) for r in range(p)] == [megatron_warmup(p, r, v, m, g, True) for r in range(p)]
    assert build_schedule(cfg).meta["warmup"] == [megatron_warmup(p, r, v, m, g, True) for r in range(p)]
    # steps() speaks (mb, chunk); Megatron's iterations (stage, mb).
    as_stage = lambda e, r: None if e is None else (e[1] * p + r, e[0])  # noqa: E731
    assert [[(as_stage(f, r), as_stage(b, r)) for f, b in steps(cfg, r, opts)] for r in range(p)] == expected
    # The built plan pairs each steady forward with Megatron's backward of the same iteration.
    assert moe_pairs(cfg) == [[(f, b) for f, b in it if f is not None] for it in expected]


@pytest.mark.parametrize("p, v, m, g", [c for c in ACCEPTED if c[1] == 2], ids=ids([c for c in ACCEPTED if c[1] == 2]))
def test_moe_plans_that_megatron_runs_are_valid(p: int, v: int, m: int, g: int) -> None:
    s = build_schedule(_cfg(MOE, p, v, m, g, layers_per_chunk=1))
    assert [x.code for x in run_checks(s) if x.severity == "error"] == []


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("p, v, m, g", REFUSED, ids=ids(REFUSED))
def test_what_megatron_refuses_is_refused_naming_the_rule(family: str, p: int, v: int, m: int, g: int) -> None:
    rule = megatron_refusal(p, m, g)
    cfg = replace(_cfg(family, p, v, m, g), source="c.yaml")
    with pytest.raises(InputError, match=f"^c.yaml: field 'group_size': got {g}, .*Megatron-Core's {rule}"):
        build_schedule(cfg)


# ------------------------------------------------------------------------------------------------
# M = P: the case Megatron-Core changed (commit 4295be1)


def test_m_equals_p_forwards_before_first_backward() -> None:
    # Megatron: rank r runs w(r) warmup forwards, then the steady step's forward before its backward.
    cfg = _cfg("interleaved-1f1b", 4, 2, 4)
    assert forwards_before_first_backward(cfg) == [8, 8, 7, 5]
    old = _cfg("interleaved-1f1b", 4, 2, 4, order="megatron-pre-2025")
    assert forwards_before_first_backward(old) == [8, 8, 8, 8]
    moe = _cfg(MOE, 4, 2, 4)
    assert build_schedule(moe).meta["warmup"] == [8, 8, 7, 5]  # one more than [8, 8, 6, 4], at most mV
    assert build_schedule(_cfg(MOE, 4, 2, 4, order="megatron-pre-2025")).meta["warmup"] == [8, 8, 8, 8]


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3), (3, 3)], ids=lambda x: str(x))
def test_pre_2025_order_changes_only_m_equals_p(p: int, v: int) -> None:
    old = {"order": "megatron-pre-2025"}
    assert compute_order(_cfg("interleaved-1f1b", p, v, p, **old)) == [
        [("F", c * p + r, mb) for c in range(v) for mb in range(p)]
        + [("B", c * p + r, mb) for c in reversed(range(v)) for mb in range(p)] for r in range(p)]
    assert compute_order(_cfg("interleaved-1f1b", p, v, 2 * p, **old)) == compute_order(
        _cfg("interleaved-1f1b", p, v, 2 * p))


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3)], ids=lambda x: str(x))
def test_m_equals_p_memory_formula_holds_and_later_ranks_hold_less(p: int, v: int) -> None:
    cfg = _cfg("interleaved-1f1b", p, v, p)
    peaks = [r.peak_activation for r in simulate(build_schedule(cfg)).ranks]
    old = [r.peak_activation for r in simulate(build_schedule(_cfg("interleaved-1f1b", p, v, p,
                                                                   order="megatron-pre-2025"))).ranks]
    assert peaks[0] == get_family("interleaved-1f1b").memory(cfg) == p * v
    assert old == [p * v] * p and peaks[-1] < old[-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_unknown_order_is_one_line(family: str) -> None:
    cfg = replace(_cfg(family, 4, 2, 8, order="megatron-2019"), source="c.yaml")
    with pytest.raises(InputError, match="^c.yaml: field 'options.order': got 'megatron-2019', expected megatron "
                                         r"\(Megatron-Core's order, the default\) or megatron-pre-2025"):
        build_schedule(cfg)


def test_interleaved_names_its_one_option() -> None:
    with pytest.raises(InputError, match="field 'options.ordr' is unknown for schedule 'interleaved-1f1b'; "
                                         "known: order$"):
        build_schedule(_cfg("interleaved-1f1b", 4, 2, 8, ordr="megatron"))


# ------------------------------------------------------------------------------------------------
# Command line: the configs Megatron refuses exit 2 with one line


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("p, m, g, fits", [(2, 5, 2, "3, 5"), (4, 9, 4, "5, 9"), (4, 12, 5, "4, 6, 7, 8, 12"),
                                           (4, 10, None, "5, 6, 10")], ids=["P2-M5-G2", "P4-M9-G4", "P4-M12-G5",
                                                                            "P4-M10-default"])
def test_cli_refuses_a_short_last_group(family: str, p: int, m: int, g: int | None, fits: str) -> None:
    args = ["plan", "--schedule", family, "--pp", str(p), "--vpp", "2", "--microbatches", str(m)]
    result = runner.invoke(app, args + (["--group-size", str(g)] if g else []))
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    got = g if g else f"{p} (the default, pp)"
    assert line.startswith(f"error: --group-size: got {got}, which leaves a last group of "
                           f"{m} mod {g or p} = {m % (g or p)} micro-batch")
    assert "(Megatron-Core's last-group rule: \"The remainder of M (the total micro-batches) divided by N" in line
    assert line.endswith(f"group sizes that fit: {fits} for schedule '{family}'")
    assert "PP007" not in result.output and "deadlock" not in result.output


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("g, expected", [(2, "expected at least pp=4 (a smaller group"),
                                         (9, "expected at most microbatches=8 (")], ids=["G<P", "G>M"])
def test_cli_refuses_a_group_outside_pp_to_m(family: str, g: int, expected: str) -> None:
    result = runner.invoke(app, ["plan", "--schedule", family, "--pp", "4", "--vpp", "2", "--microbatches", "8",
                                 "--group-size", str(g)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --group-size: got {g}, {expected}")
    assert line.endswith(f"Megatron-Core's group rule: G in [pp, microbatches]) for schedule '{family}'")
