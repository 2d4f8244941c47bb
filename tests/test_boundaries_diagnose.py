"""Boundaries of ``pptl diagnose`` that hand-written mutants showed the suite left open (rows in the mutants
file of the diagnose hunt): sizes that may differ per rank, outputs a dump leaves out, a wrapped ring buffer,
a group made again, display limits ("and N more"), ties, and the dump reader's field limits.

Dumps are built here call by call (torch's format 2.10) and read through the dump reader, so each expected
sentence is worked out from what the files hold, not from the code under test.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pptl.diagnose import Diagnosis, diagnose_dumps, to_dict, to_text
from pptl.errors import InputError
from pptl.formats.flight_recorder import MAX_ENTRIES, MAX_RANK, FrDump, find_dumps, loads_dump

T0 = 1_795_000_000_000_000_000
DEFAULT = ("0", "default_pg")
Shapes = tuple[tuple[int, ...], ...]


@dataclass
class _Rank:
    """One rank's ring buffer, written call by call as torch records them (``first``: the record id of the
    oldest call kept; above 0, the buffer wrapped)."""

    rank: int
    first: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)
    coll: dict[str, int] = field(default_factory=dict)
    p2p: dict[str, int] = field(default_factory=dict)

    def _add(self, group: tuple[str, str], name: str, state: str, is_p2p: bool, ins: Shapes, outs: Shapes,
             dtypes: tuple[str, ...], out_dtypes: tuple[str, ...]) -> None:
        k = self.first + len(self.entries)
        t = T0 + 1000 * k
        self.entries.append({
            "record_id": k, "pg_id": int(group[0]), "process_group": group,
            "collective_seq_id": self.coll.get(group[0], 0), "p2p_seq_id": self.p2p.get(group[0], 0),
            "op_id": k + 1, "profiling_name": name, "time_created_ns": t,
            "input_sizes": [list(s) for s in ins], "input_dtypes": list(dtypes),
            "output_sizes": [list(s) for s in outs], "output_dtypes": list(out_dtypes),
            "state": state, "is_p2p": is_p2p, "retired": state == "completed", "timeout_ms": 10000,
            "time_discovered_started_ns": t + 10 if state != "scheduled" else None,
            "time_discovered_completed_ns": t + 20 if state == "completed" else None})

    def collective(self, kind: str, state: str, *, group: tuple[str, str] = DEFAULT, ins: Shapes = ((1024,),),
                   outs: Shapes | None = None, dtypes: tuple[str, ...] = ("Float",)) -> None:
        """The group's next collective (torch numbers them from #1 per group)."""
        self.coll[group[0]] = self.coll.get(group[0], 0) + 1
        outs = ins if outs is None else outs
        self._add(group, f"nccl:{kind}", state, False, ins, outs, dtypes, dtypes[:1] * len(outs))

    def send(self, peer: int, state: str) -> None:
        self.p2p["0"] = self.p2p.get("0", 0) + 1
        self._add(DEFAULT, f"nccl:send {self.rank}->{peer}", state, True, ((16, 64),), ((16, 64),),
                  ("Float",), ("Float",))

    def recv(self, peer: int, state: str) -> None:
        self.p2p["0"] = self.p2p.get("0", 0) + 1
        self._add(DEFAULT, f"nccl:recv {self.rank}<-{peer}", state, True, ((16, 64),), ((16, 64),),
                  ("Float",), ("Float",))


def _pg(world: list[int], **named: list[int]) -> dict[str, dict[str, str]]:
    """pg_config: the default group over ``world``, then one group per name (its desc), numbered from 1."""
    out = {"0": {"name": "0", "desc": "default_pg", "ranks": str(world)}}
    for k, (desc, ranks) in enumerate(named.items(), start=1):
        out[str(k)] = {"name": str(k), "desc": desc, "ranks": str(ranks)}
    return out


def _dump(r: _Rank, pg: dict[str, Any]) -> FrDump:
    raw = {"version": "2.10", "pg_config": pg, "pg_status": {}, "entries": r.entries}
    return loads_dump(pickle.dumps(raw), source=f"nccl_trace_rank_{r.rank}", rank=r.rank)


def _diagnose(ranks: list[_Rank], pg: dict[str, Any], per_rank_pg: dict[int, dict[str, Any]] | None = None
              ) -> Diagnosis:
    return diagnose_dumps([_dump(r, (per_rank_pg or {}).get(r.rank, pg)) for r in ranks])


# ----------------------------------------------------------------------------------------------
# ops: sizes that may differ per rank, outputs a dump does not record, dtype names


@pytest.mark.parametrize(("kind", "ins", "outs"), [
    # all_gather_v: each rank contributes its own count (32 and 48), every rank gathers all 80
    ("all_gather_v", [((32,),), ((48,),)], [((80,),), ((80,),)]),
    # reduce_scatter_v: every rank reduces all 80, each keeps its own share (32 and 48)
    ("reduce_scatter_v", [((80,),), ((80,),)], [((32,),), ((48,),)]),
])
def test_uneven_v_collectives_that_completed_are_no_size_fault(kind: str, ins: list[Shapes],
                                                                outs: list[Shapes]) -> None:
    # The _v variants take one size per rank (torchfrtrace's Op.match): different counts on the per-rank
    # side are how the call is meant to be used; both completed, so nothing is wrong.
    a, b = _Rank(0), _Rank(1)
    a.collective(kind, "completed", ins=ins[0], outs=outs[0])
    b.collective(kind, "completed", ins=ins[1], outs=outs[1])
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.counts.diffs == () and d.collectives == ()
    assert (d.cause.kind, d.ok) == ("none", True)


@pytest.mark.parametrize("kind", ["all_gather", "all_to_all_single"])
def test_outputs_one_rank_did_not_record_are_no_size_fault(kind: str) -> None:
    # Rank 0 records its output (64 elements gathered / 32 exchanged), rank 1's dump records no output
    # shapes at all. Inputs agree (32 each), every call completed: a missing record is no evidence, neither of
    # outputs that differ nor of an all_to_all whose totals (32 + 32 in, 32 + ? out) do not add up.
    out0 = ((64,),) if kind == "all_gather" else ((32,),)
    a, b = _Rank(0), _Rank(1)
    a.collective(kind, "completed", ins=((32,),), outs=out0)
    b.collective(kind, "completed", ins=((32,),), outs=())
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.counts.diffs == ()
    assert (d.cause.kind, d.ok) == ("none", True)


def test_a_dtype_is_named_once_for_tensors_of_one_type() -> None:
    # One all_reduce of two tensors of 8 elements: Float twice on rank 0, BFloat16 twice on rank 1 (16
    # elements each). The counts agree, the element type does not; each rank's type is one word.
    a, b = _Rank(0), _Rank(1)
    a.collective("all_reduce", "started", ins=((8,), (8,)), dtypes=("Float", "Float"))
    b.collective("all_reduce", "started", ins=((8,), (8,)), dtypes=("BFloat16", "BFloat16"))
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.cause.kind == "collective_dtype"
    assert d.cause.text == ("collectives of different dtypes at one sequence number: collective #1 of group "
                            "default_pg is rank 0 all_reduce of 16 elements Float, rank 1 all_reduce of 16 elements "
                            "BFloat16")


# ----------------------------------------------------------------------------------------------
# counts: a wrapped ring buffer, a group made again


def test_an_all_to_all_one_rank_lost_to_its_ring_buffer_is_no_size_fault() -> None:
    # Rank 0 holds all_to_all #1 (sends 48, receives 16: uneven splits, which an all_to_all may have) and #2
    # (8 in, 8 out). Rank 1's buffer wrapped: its oldest record is 1, so its #1 is gone and only #2 (8 in,
    # 8 out) is left. The group's totals can be checked at #2 only (16 in, 16 out); #1's 48 vs 16 is one
    # member's half, not the group's totals.
    a, b = _Rank(0), _Rank(1, first=1)
    a.collective("all_to_all_single", "completed", ins=((48,),), outs=((16,),))
    b.coll["0"] = 1  # rank 1's #1 fell out of the ring
    for r in (a, b):
        r.collective("all_to_all_single", "completed", ins=((8,),), outs=((8,),))
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.counts.diffs == () and d.counts.gaps == ()
    assert d.cause.kind == "none"
    assert [n.split(";")[0] for n in d.notes] == ["rank 1: the ring buffer wrapped (first record 1)"]


def _renumbered_rank(rank: int, old: int, new: int, last_state: str) -> _Rank:
    r = _Rank(rank)
    for _ in range(old):
        r.collective("all_reduce", "completed")
    r.coll["0"] = 0  # destroy_process_group + init_process_group: numbers start again
    for k in range(new):
        r.collective("all_reduce", last_state if k == new - 1 else "completed")
    return r


def test_collectives_missing_in_a_numbering_before_a_restart_are_one_run() -> None:
    # Rank 0: #1-#4, then the group is made again and #1 (started). Rank 1: #1, #2, then the new #1
    # (started). In the older numbering rank 1 never issued #3 and #4: one run of two numbers, #3-#4, of
    # the group "before its numbers restarted" (once: no count of times), issued by rank 0 only.
    a = _renumbered_rank(0, 4, 1, "started")
    b = _renumbered_rank(1, 2, 1, "started")
    d = _diagnose([a, b], _pg([0, 1]))
    assert [(g.first, g.last, g.missing) for g in d.counts.gaps] == [(3, 4, (1,))]
    assert d.cause.kind == "collective_missing"
    assert d.cause.ranks == (1, 0)
    assert d.cause.text == ("group default_pg, before its numbers restarted #3-#4: issued by rank 0 all_reduce of "
                            "1024 elements (completed); never by rank 1")


def test_missing_numbers_of_two_numberings_are_two_runs() -> None:
    # Rank 0: #1-#3, then the group is made again and #1-#4 (#4 started). Rank 1: #1, #2, then #1-#3, all
    # completed. Rank 1 never issued the old #3 nor the new #4: the numbers follow each other (3, 4) but
    # belong to two numberings, so they are two runs, not "#3-#4". Rank 1 did all it issued and rank 0 waits
    # in the new #4: rank 1 stopped.
    a = _renumbered_rank(0, 3, 4, "started")
    b = _renumbered_rank(1, 2, 3, "completed")
    d = _diagnose([a, b], _pg([0, 1]))
    assert [(g.first, g.last, g.missing) for g in d.counts.gaps] == [(3, 3, (1,)), (4, 4, (1,))]
    assert d.cause.kind == "stopped"
    assert d.cause.ranks == (1, 0)


def test_two_numbers_in_a_row_that_one_rank_never_issued_are_a_range() -> None:
    # Rank 0: #1 completed, #2 started, #3 scheduled. Rank 1: #1 completed, nothing more. #2 and #3 are one
    # run that rank 1 never issued: "#2-#3" (not "#2").
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.collective("all_reduce", "completed")
    a.collective("all_reduce", "started")
    a.collective("all_reduce", "scheduled")
    ev = to_dict(_diagnose([a, b], _pg([0, 1])))["evidence"]
    assert "collectives: group default_pg #2-#3: issued by rank 0 all_reduce of 1024 elements (started); " \
           "never by rank 1" in ev


# ----------------------------------------------------------------------------------------------
# waits: the wait-for cycle


def _ring_of_groups() -> Diagnosis:
    """Four ranks, four groups of two around a ring (g01 = ranks 0, 1; ...; g30 = ranks 0, 3). Each rank's
    first call (started) is in the group with its left neighbour, its second (scheduled, queued behind the
    first) in the group with its right neighbour: g01's call waits for g30's on rank 0, g12's for g01's on
    rank 1, g23's for g12's on rank 2, g30's for g23's on rank 3 -- a cycle of four nodes."""
    pg = _pg([0, 1, 2, 3], g01=[0, 1], g12=[1, 2], g23=[2, 3], g30=[0, 3])
    g = {"g01": ("1", "g01"), "g12": ("2", "g12"), "g23": ("3", "g23"), "g30": ("4", "g30")}
    order = {0: ("g30", "g01"), 1: ("g01", "g12"), 2: ("g12", "g23"), 3: ("g23", "g30")}
    ranks = []
    for r, (first, second) in order.items():
        x = _Rank(r)
        x.collective("all_reduce", "started", group=g[first])
        x.collective("all_reduce", "scheduled", group=g[second])
        ranks.append(x)
    return _diagnose(ranks, pg)


def test_a_cycle_through_collectives_of_two_ranks_names_each_rank_call() -> None:
    d = _ring_of_groups()
    assert d.cycle_ranks == (0, 1, 2, 3)
    # a node of two calls is named by both (a group's one-node form is for three ranks or more)
    nodes = {"g01": "[r0 all_reduce #1 (group g01) = r1 all_reduce #1 (group g01)]",
             "g12": "[r1 all_reduce #1 (group g12) = r2 all_reduce #1 (group g12)]",
             "g23": "[r2 all_reduce #1 (group g23) = r3 all_reduce #1 (group g23)]",
             "g30": "[r0 all_reduce #1 (group g30) = r3 all_reduce #1 (group g30)]"}
    assert {n for n, _ in d.cycle} == set(nodes.values())
    assert d.cause.kind == "cycle"
    text = d.cause.text
    assert text.startswith("wait-for cycle across ranks 0-3: ")
    # four steps, all of them shown (at most four are), and nothing left over to count
    for after, before, r in (("g01", "g30", 0), ("g12", "g01", 1), ("g23", "g12", 2), ("g30", "g23", 3)):
        assert f"{nodes[after]} waits for {nodes[before]} (next on rank {r})" in text
    assert text.count(" waits for ") == 4
    assert "more" not in text


def test_a_started_call_waits_for_its_peers_only() -> None:
    # Rank 0: recv<-1 (started), all_reduce #1 (started). Rank 1: all_reduce #1 (started), send->0
    # (scheduled, queued behind its all_reduce). A started call's kernel runs (TORCH_NCCL_ENABLE_TIMING):
    # rank 0's all_reduce is not queued behind its receive, so only rank 1's send waits for the all_reduce
    # and there is no cycle.
    a, b = _Rank(0), _Rank(1)
    a.recv(1, "started")
    a.collective("all_reduce", "started")
    b.collective("all_reduce", "started")
    b.send(0, "scheduled")
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.cycle == ()
    assert d.cause.kind == "pending"
    assert d.cause.ranks == (0, 1)


def test_dumps_without_calls_are_no_hang_and_claim_no_gloo_run() -> None:
    # Two ranks whose ring buffers hold no call: nothing waits, and nothing says the calls were gloo's
    # (there are none to be "scheduled").
    d = _diagnose([_Rank(0), _Rank(1)], _pg([0, 1]))
    assert not d.no_completion
    assert d.cause.kind == "none"
    assert d.notes == ()
    assert to_dict(d)["completion_recorded"] is True


# ----------------------------------------------------------------------------------------------
# cause: which fact leads, and its words


def test_a_missing_rank_with_exactly_three_waiting_calls_lists_them_all() -> None:
    # World 0-2, rank 2 left no dump. Waiting for it: rank 0's all_reduce #1 (started) and its send to 2
    # (scheduled), rank 1's all_reduce #1 (started): three calls, all shown, none left to count.
    a, b = _Rank(0), _Rank(1)
    a.collective("all_reduce", "started")
    a.send(2, "scheduled")
    b.collective("all_reduce", "started")
    d = _diagnose([a, b], _pg([0, 1, 2]))
    assert d.cause.kind == "missing_dump"
    assert d.cause.ranks == (2, 0, 1)
    assert d.cause.text == ("rank 2 left no dump and ranks 0, 1 wait for it in r0 all_reduce #1 (group default_pg) "
                            "(and 2 more pending calls): rank 2 exited, crashed or was killed before the others "
                            "timed out (its log says why)")
    assert to_dict(d)["evidence"][0] == (
        "missing: rank 2 left no dump; waiting for it: r0 all_reduce #1 (group default_pg) (started), "
        "r0 send->2 #1 (group default_pg) (scheduled), r1 all_reduce #1 (group default_pg) (started)")


def test_two_against_two_names_no_odd_rank() -> None:
    # all_reduce #1 of 1024 elements on ranks 0, 1 and of 2048 on ranks 2, 3: two sides of two, so no rank
    # "differs from the other" ranks (that is said only where one value has more ranks than every other).
    ranks = [_Rank(r) for r in range(4)]
    for x in ranks:
        x.collective("all_reduce", "started", ins=((1024,),) if x.rank < 2 else ((2048,),))
    d = _diagnose(ranks, _pg([0, 1, 2, 3]))
    assert d.cause.kind == "collective_size"
    assert d.cause.ranks == (0, 1, 2, 3)
    assert d.cause.text == ("collectives of different sizes at one sequence number: collective #1 of group default_pg "
                            "is ranks 0, 1 all_reduce of 1024 elements, ranks 2, 3 all_reduce of 2048 elements")


def test_a_size_fault_leads_a_dtype_fault() -> None:
    # Group tp's all_reduce #1: 1024 Float on rank 0, 1024 BFloat16 on rank 1 (dtype differs). Group dp's
    # #1: 1024 elements on rank 0, 2048 on rank 1 (size differs). The order of causes puts a size before a
    # dtype, whatever group comes first.
    a, b = _Rank(0), _Rank(1)
    tp, dp = ("1", "tp"), ("2", "dp")
    a.collective("all_reduce", "started", group=tp, dtypes=("Float",))
    b.collective("all_reduce", "started", group=tp, dtypes=("BFloat16",))
    a.collective("all_reduce", "started", group=dp)
    b.collective("all_reduce", "started", group=dp, ins=((2048,),))
    d = _diagnose([a, b], _pg([0, 1], tp=[0, 1], dp=[0, 1]))
    assert [(x.group, x.what) for x in d.counts.diffs] == [("1", "dtype"), ("2", "size")]
    assert d.cause.kind == "collective_size"
    assert d.cause.text == ("collectives of different sizes at one sequence number: collective #1 of group dp is "
                            "rank 0 all_reduce of 1024 elements, rank 1 all_reduce of 2048 elements")


def test_more_receives_than_sends_put_the_larger_count_first() -> None:
    # Rank 0 sends 1 message to rank 1 (completed), then receives one back (completed): it went on. Rank 1
    # posted 2 receives from rank 0 (the first completed, the second waits) and sent 1 back. The ranks
    # disagree on the transfers 0 -> 1: 2 (rank 1's) against 1 (rank 0's), the larger first.
    a, b = _Rank(0), _Rank(1)
    a.send(1, "completed")
    a.recv(1, "completed")
    b.recv(0, "completed")
    b.send(0, "completed")
    b.recv(0, "started")
    d = _diagnose([a, b], _pg([0, 1]))
    assert d.cause.kind == "p2p_count"
    assert d.cause.ranks == (0, 1)
    assert d.cause.text == ("rank 1 posted 2 receives from rank 0 (group default_pg), which sent only 1 message "
                            "(the ranks disagree on the number of transfers, 2 vs 1: micro-batches, vpp or schedule "
                            "differ?)")


def test_group_members_disagreeing_with_one_waiting_call_count_no_more() -> None:
    # Ranks 0 and 1 made group tp of ranks 0, 1; rank 2 made it of ranks 0, 2. Rank 0 waits in tp's
    # all_reduce #1: the one waiting call, so nothing "and 0 more".
    a, b, c = _Rank(0), _Rank(1), _Rank(2)
    a.collective("all_reduce", "started", group=("1", "tp"))
    pg = _pg([0, 1, 2], tp=[0, 1])
    d = _diagnose([a, b, c], pg, {2: _pg([0, 1, 2], tp=[0, 2])})
    assert d.cause.kind == "group_members"
    assert d.cause.ranks == (2, 0, 1)
    assert d.cause.text == ("the dumps disagree on the members of group tp: ranks 0, 1 list ranks 0, 1, rank 2 lists "
                            "ranks 0, 2 (new_group called with different ranks: the communicators differ, so the "
                            "group's calls cannot meet); rank 0 waits in r0 all_reduce #1 (group tp)")


# ----------------------------------------------------------------------------------------------
# report: the pending calls shown per rank


def test_the_report_shows_six_pending_calls_per_rank_and_counts_the_rest() -> None:
    # Rank 0 has 7 pending all_reduces (group solo0 of rank 0 alone), rank 1 has 6 (solo1): rank 0 shows 6
    # and "1 more"; rank 1 shows its 6 and no "more" line.
    a, b = _Rank(0), _Rank(1)
    for x, n, g in ((a, 7, ("1", "solo0")), (b, 6, ("2", "solo1"))):
        for k in range(n):
            x.collective("all_reduce", "started" if k == 0 else "scheduled", group=g)
    lines = to_text(_diagnose([a, b], _pg([0, 1], solo0=[0], solo1=[1]))).splitlines()
    k0 = lines.index("rank 0: 0 of 7 ops completed; first not completed: r0 all_reduce #1 (group solo0) (started)")
    assert lines[k0 + 1] == "      0  started    r0 all_reduce #1 (group solo0)"
    assert lines[k0 + 6] == "      5  scheduled  r0 all_reduce #6 (group solo0)"
    assert lines[k0 + 7] == "  ... 1 more not completed"
    k1 = lines.index("rank 1: 0 of 6 ops completed; first not completed: r1 all_reduce #1 (group solo1) (started)")
    assert k1 == k0 + 8
    assert lines[k1 + 6] == "      5  scheduled  r1 all_reduce #6 (group solo1)"
    assert not lines[k1 + 7].startswith("  ...")


# ----------------------------------------------------------------------------------------------
# the dump reader: each field's limit is taken, one past it refused


def _one_entry(**fields: Any) -> bytes:
    e: dict[str, Any] = {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
                         "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]],
                         "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"]}
    e.update(fields)
    return pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [e]})


def test_a_dtype_name_of_64_characters_is_read() -> None:
    name = "F" * 64
    assert loads_dump(_one_entry(input_dtypes=[name]), source="d", rank=0).entries[0].input_dtypes == (name,)
    with pytest.raises(InputError, match="field 'input_dtypes'"):
        loads_dump(_one_entry(input_dtypes=[name + "F"]), source="d", rank=0)


def test_the_largest_int64_is_a_record_id() -> None:
    top = 2**63 - 1
    assert loads_dump(_one_entry(record_id=top), source="d", rank=0).entries[0].record_id == top
    with pytest.raises(InputError, match="field 'record_id'"):
        loads_dump(_one_entry(record_id=top + 1), source="d", rank=0)


def test_a_profiling_name_of_1024_characters_is_read() -> None:
    name = "nccl:" + "a" * (1024 - len("nccl:"))
    assert len(name) == 1024
    assert loads_dump(_one_entry(profiling_name=name), source="d", rank=0).entries[0].profiling_name == name
    with pytest.raises(InputError, match="field 'profiling_name'"):
        loads_dump(_one_entry(profiling_name=name + "a"), source="d", rank=0)


def test_a_peer_of_rank_one_million_outside_any_group_is_read() -> None:
    # No pg_config for the group: the peer in the name is taken as the global rank, up to MAX_RANK.
    e = {"profiling_name": f"nccl:send 0->{MAX_RANK}", "is_p2p": True}
    assert loads_dump(_one_entry(**e), source="d", rank=0).entries[0].peer == MAX_RANK
    with pytest.raises(InputError, match=f"names rank {MAX_RANK + 1}, over {MAX_RANK}"):
        loads_dump(_one_entry(profiling_name=f"nccl:send 0->{MAX_RANK + 1}", is_p2p=True), source="d", rank=0)


@pytest.mark.parametrize(("n", "expected"), [
    (MAX_ENTRIES, r"entries\[0\]: expected a dict"),  # the count is taken: the first entry is read (and bad)
    (MAX_ENTRIES + 1, f"{MAX_ENTRIES + 1} entries, over the {MAX_ENTRIES}"),
])
def test_a_dump_of_max_entries_entries_is_read(n: int, expected: str) -> None:
    data = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [0] * n})
    with pytest.raises(InputError, match=expected):
        loads_dump(data, source="d", rank=0)


def test_a_json_file_named_in_capitals_is_a_timeline(tmp_path: Path) -> None:
    f = tmp_path / "HANG.JSON"
    f.write_text("{}")
    found = find_dumps([f])
    assert (found.timelines, found.dumps) == ((f,), ())


@pytest.mark.parametrize("count", [2, 3])
def test_two_or_more_pptl_timelines_are_refused_naming_the_second(tmp_path: Path, count: int) -> None:
    """A pptl timeline holds every rank, so a second one can only be a mistake (another run, or the
    same one twice); the second file is the one named, whether two or three are given."""
    from pptl.diagnose_inputs import diagnose_paths

    run = Path(__file__).parent / "data" / "whatif_gpu" / "call2" / "measured_calibrate.json"
    paths = []
    for k in range(count):
        p = tmp_path / f"run{k}.json"
        p.write_bytes(run.read_bytes())
        paths.append(p)
    with pytest.raises(InputError, match=r"run1\.json: give one pptl timeline \(it holds every rank\)"):
        diagnose_paths(paths)
