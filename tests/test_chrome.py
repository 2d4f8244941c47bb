"""Chrome trace export (Perfetto): tracks, units, flows, the memory counter, gzip, CLI."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.formats.chrome_trace import to_chrome, write_chrome
from pptl.schedules import build_schedule
from pptl.simulate import simulate
from pptl.timeline import Event, Timeline, TimelineMeta

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def planned():
    s = build_schedule(config_from_mapping({"schedule": "interleaved-1f1b", "pp": 4, "vpp": 2, "microbatches": 8,
                                            "costs": {"comm": {"latency": 0.25}}}))
    sim = simulate(s)
    return s, sim, to_chrome(sim.timeline())


def _by_ph(trace: dict, ph: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def test_processes_are_ranks_and_threads_are_lanes(planned) -> None:
    _, _, trace = planned
    meta = _by_ph(trace, "M")
    names = {(e["pid"], e["name"]): e["args"] for e in meta if e["name"] in ("process_name", "process_sort_index")}
    assert names[2, "process_name"] == {"name": "rank 2"} and names[2, "process_sort_index"] == {"sort_index": 2}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[0, 0] == "compute"  # compute first, then the lanes in order of first use
    assert {threads[0, 1], threads[0, 2]} == {"send", "recv"}
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert sort == {k: k[1] for k in threads}


def test_every_op_is_one_complete_event_in_microseconds(planned) -> None:
    s, sim, trace = planned
    xs = _by_ph(trace, "X")
    assert len(xs) == len(s.ops)
    f = next(e for e in xs if e["args"]["op"] == "r1/compute/F s1 mb0")
    i = next(k for k, op in enumerate(s.ops) if op.id == "r1/compute/F s1 mb0")
    assert f["ts"] == pytest.approx(1000 * sim.start[i]) and f["dur"] == pytest.approx(1000.0)  # 1 unit = 1 ms
    assert f["name"] == "F s1 mb0" and f["cat"] == "F" and f["pid"] == 1 and f["tid"] == 0
    assert f["args"]["stage"] == 1 and f["args"]["chunk"] == 0 and f["args"]["waits_on"]
    assert trace["otherData"]["us_per_unit"] == 1000.0 and trace["otherData"]["source"] == "planned"


def test_one_flow_arrow_per_send_recv_pair(planned) -> None:
    s, _, trace = planned
    sends = sum(op.kind == "SEND" for op in s.ops)
    starts, ends = _by_ph(trace, "s"), _by_ph(trace, "f")
    assert len(starts) == len(ends) == sends
    assert sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends) == list(range(1, sends + 1))
    first = {e["id"]: e for e in ends}
    for st in starts:
        end = first[st["id"]]
        assert end["ts"] >= st["ts"] and end["pid"] != st["pid"] and st["name"] == end["name"]


def test_activation_counter_peaks_like_the_simulator(planned) -> None:
    _, sim, trace = planned
    counters = _by_ph(trace, "C")
    for r in sim.ranks:
        values = [e["args"]["activation"] for e in counters if e["pid"] == r.rank]
        assert values[0] == 0 and values[-1] == 0
        assert max(values) == r.peak_activation


def test_measured_timeline_converts_its_units() -> None:
    ev = [Event(op="r0/compute/F s0 mb0", rank=0, lane="compute", start=2.0, end=3.5, kind="F", stage=0, mb=0)]
    trace = to_chrome(Timeline(ev, TimelineMeta(source="measured", units="ms")))
    x = _by_ph(trace, "X")[0]
    assert (x["ts"], x["dur"]) == (0.0, 1500.0)
    trace = to_chrome(Timeline(ev, TimelineMeta(source="measured", units="us")))
    assert _by_ph(trace, "X")[0]["dur"] == 1.5


@pytest.mark.parametrize("name", ["t.json.gz", "T.JSON.GZ", "t.Gz"])
def test_write_gz_when_asked(tmp_path: Path, planned, name: str) -> None:
    # any case: the readers take T.JSON.GZ as gzip (pptl.fileio.is_gz), so the writer must write it so
    _, sim, trace = planned
    out = write_chrome(sim.timeline(), tmp_path / name)
    assert json.loads(gzip.decompress(out.read_bytes())) == json.loads(json.dumps(trace))


def test_write_plain_json_elsewhere(tmp_path: Path, planned) -> None:
    _, sim, trace = planned
    out = write_chrome(sim.timeline(), tmp_path / "t.json.gzip")
    assert json.loads(out.read_text()) == json.loads(json.dumps(trace))


def test_cli_export_chrome_from_config_and_csv(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    r = runner.invoke(app, ["export", str(FIXTURES / "1f1b.yaml"), "--to", "chrome", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "open it in https://ui.perfetto.dev" in r.stderr
    data = json.loads(out.read_text())
    assert data["displayTimeUnit"] == "ms" and _by_ph(data, "X")
    gz = tmp_path / "trace.json.gz"
    r = runner.invoke(app, ["export", str(FIXTURES / "csv/dualpipev_pp4_m8_comms.csv"), "--to", "chrome",
                            "-o", str(gz)])
    assert r.exit_code == 0, r.output
    data = json.loads(gzip.decompress(gz.read_bytes()))
    assert any(e["ph"] == "X" and e["cat"] == "FB" for e in data["traceEvents"])


def test_cli_export_chrome_of_a_deadlock_is_exit_1(tmp_path: Path) -> None:
    r = runner.invoke(app, ["export", str(FIXTURES / "invalid/deadlock_two_ranks.json"), "--to", "chrome",
                            "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 1
    assert r.stderr.startswith("error: the schedule deadlocks")


def _pair(send_op: str, recv_op: str, *, flow: str, send_stage: int, recv_stage: int) -> list[Event]:
    """Rank 0 sends micro-batch 3 to rank 1 (0-1 ms), which receives it (0.5-1.5 ms)."""
    return [Event(send_op, 0, "send", 0.0, 1.0, "SEND", stage=send_stage, mb=3, peer=1, flow=flow),
            Event(recv_op, 1, "recv", 0.5, 1.5, "RECV", stage=recv_stage, mb=3, peer=0, flow=flow)]


@pytest.mark.parametrize("send_op,recv_op,flow,send_stage,recv_stage", [
    # a reader that set the pass, with op ids that do not name it (an imported trace's)
    ("r0/send/nccl:send 0->1", "r1/recv/nccl:recv 0->1", "F", 0, 1),
    ("r0/send/nccl:send 0->1", "r1/recv/nccl:recv 0->1", "B", 2, 1),
    # neither tells the pass: a forward's data (stage 0 to 1) and a gradient (stage 2 to 1) both pair
    ("r0/send/send s0 mb3", "r1/recv/recv s1 mb3", "", 0, 1),
    ("r0/send/send s2 mb3", "r1/recv/recv s1 mb3", "", 2, 1),
])
def test_a_transfer_whose_pass_the_op_id_does_not_name_still_gets_its_arrow(send_op, recv_op, flow, send_stage,
                                                                             recv_stage) -> None:
    trace = to_chrome(Timeline(_pair(send_op, recv_op, flow=flow, send_stage=send_stage, recv_stage=recv_stage),
                               TimelineMeta(source="measured", units="ms")))
    arrows = [e for e in trace["traceEvents"] if e.get("cat") == "p2p"]
    assert [(a["ph"], a["pid"], a["ts"]) for a in arrows] == [("s", 0, 0.0), ("f", 1, 500.0)]


def test_a_forward_receive_does_not_take_a_gradient_send() -> None:
    """A RECV the op id calls F, at stage 1 from rank 0: only stage 0's SEND is its source, not stage 2's."""
    ev = _pair("r0/send/SEND_B s2 mb3 ->r1", "r1/recv/RECV_F s1 mb3 <-r0", flow="", send_stage=2, recv_stage=1)
    trace = to_chrome(Timeline(ev, TimelineMeta(source="measured", units="ms")))
    assert [e for e in trace["traceEvents"] if e.get("cat") == "p2p"] == []
