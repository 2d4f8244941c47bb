"""The families' typed metadata (MoEMeta, WeightUpdateMeta, PipelineMeta): the stored dict form is the file
format, and a malformed value in a plan file from elsewhere is one line and exit 2."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping, load_config
from pptl.errors import InputError
from pptl.formats.plan import plan_from_dict, plan_to_dict
from pptl.formats.torch_csv import read_csv
from pptl.issue_order import given_program
from pptl.schedules import build_schedule
from pptl.schedules._moe_meta import MoEMeta
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules._weight_update_meta import WeightUpdateMeta

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _moe():
    return build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4,
        "options": {"layers_per_chunk": 2, "ep": 2, "host_lag": 3, "offload": True,
                    "costs": {"offload_bytes": 0.5, "hidden_bytes": 0.25}}}))


def _update():
    return build_schedule(load_config(FIXTURES / "weight_update_seed.yaml"))


def test_moe_meta_reads_the_family_fields_and_writes_back_the_stored_dict():
    s = _moe()
    m = MoEMeta.of(s)
    assert (m.layers_per_chunk, m.ep, m.host_lag, m.offload, m.held_saved) == (2, 2, 3, True, True)
    assert m.ep_groups == ((0, 1), (2, 3)) and m.group_of() == {0: 0, 1: 0, 2: 1, 3: 1}
    assert m.held and all(len(span) == 5 for span in m.held)
    stored = {k: v for k, v in s.meta.items() if k in m.to_meta()}
    assert list(m.to_meta()) == list(stored) and json.dumps(m.to_meta()) == json.dumps(stored)


def test_weight_update_meta_reads_the_buckets_and_writes_back_the_stored_dict():
    s = _update()
    m = WeightUpdateMeta.of(s)
    assert m.buckets is not None and len(m.buckets) == 8 and m.bucket_size == 8 * 2**30
    assert [b.owner for b in m.buckets] == [0, 1, 2, 3, 0, 1, 2, 3] and m.h2d_buffer is True
    assert json.dumps(m.to_meta()) == json.dumps({"weight_update": s.meta["weight_update"]})


def _dualpipe():
    return build_schedule(load_config(FIXTURES / "dualpipe_seed.yaml"))


def _csv():
    return read_csv(FIXTURES / "csv/zbv_pp4_m8_comms.csv").schedule


def test_pipeline_meta_reads_the_training_families_and_writes_back_the_stored_dict():
    dp = PipelineMeta.of(_dualpipe())
    assert (dp.copies, dp.per_rank_store, dp.placement) == (2, True, None)
    zbv = build_schedule(load_config(FIXTURES / "zbv.yaml"))
    assert PipelineMeta.of(zbv) == PipelineMeta(weight_grad_store="stage", placement="v")
    one = build_schedule(load_config(FIXTURES / "1f1b.yaml"))
    assert PipelineMeta.of(one) == PipelineMeta() and PipelineMeta.of(one).copies == 1
    s = _csv()
    m = PipelineMeta.of(s)
    assert (m.source_format, m.csv_format, m.placement) == ("torch-csv", "compute_comms", "v")
    assert m.program_order is not None and len(m.program_order) == 4
    assert sum(map(len, m.program_order)) == len(s.ops) and given_program(s) is not None
    assert list(m.to_meta()) == list(s.meta) and json.dumps(m.to_meta()) == json.dumps(s.meta)


def test_pipeline_meta_follows_a_changed_issue_order():
    s = _csv()
    assert PipelineMeta.of(s).program_order is not None
    dropped = replace(s, meta=PipelineMeta.without_program_order(s.meta))
    assert PipelineMeta.of(dropped).program_order is None and given_program(dropped) is None
    # Letters that do not fit the lanes are no given order (derived instead), not an error.
    short = replace(s, meta={**s.meta, "program_order": [t[:-1] for t in s.meta["program_order"]]})
    assert PipelineMeta.of(short).program_order is not None and given_program(short) is None


def test_other_families_and_partial_files_read_as_none():
    one = build_schedule(load_config(FIXTURES / "1f1b.yaml"))
    assert MoEMeta.of(one) == MoEMeta() and WeightUpdateMeta.of(one) == WeightUpdateMeta()
    part = MoEMeta.from_meta({"layers_per_chunk": 3})
    assert part.layers_per_chunk == 3 and part.ep_groups is None and part.ep_size == 1
    assert part.to_meta() == {"layers_per_chunk": 3}


def test_the_typed_view_follows_a_changed_meta():
    s = _moe()
    assert MoEMeta.of(s).host_lag == 3
    s.meta["host_lag"] = 5
    assert MoEMeta.of(s).host_lag == 5
    assert MoEMeta.of(replace(s, meta={**s.meta, "held": []})).held == ()


@pytest.mark.parametrize("make, path, value, field", [
    (_moe, ("ep_groups",), "0,1", "meta.ep_groups"),
    (_moe, ("ep_groups", 1, 0), -2, "meta.ep_groups[1][0]"),
    (_moe, ("layers_per_chunk",), True, "meta.layers_per_chunk"),
    (_moe, ("host_lag",), 1.5, "meta.host_lag"),
    (_moe, ("held", 0, 4), "lots", "meta.held[0]"),
    (_update, ("weight_update", "buckets", 2), {"owner": 0}, "meta.weight_update.buckets[2]"),
    (_update, ("weight_update", "buckets", 0, "bytes"), -1, "meta.weight_update.buckets[0].bytes"),
    (_update, ("weight_update", "h2d_buffer"), "yes", "meta.weight_update.h2d_buffer"),
    (_update, ("weight_update",), [1], "meta.weight_update"),
    (_dualpipe, ("weight_grad_store",), "Rank", "meta.weight_grad_store"),
    (_dualpipe, ("parameter_copies",), 0, "meta.parameter_copies"),
    (_dualpipe, ("parameter_copies",), "2", "meta.parameter_copies"),
    (_dualpipe, ("placement",), ["v"], "meta.placement"),
    (_csv, ("program_order",), "csr", "meta.program_order"),
    (_csv, ("program_order", 2), "ccsx", "meta.program_order[2]"),
    (_csv, ("program_order", 0), 7, "meta.program_order[0]"),
    (_csv, ("csv_format",), "compute", "meta.csv_format"),
])
def test_a_malformed_value_in_a_plan_file_is_one_line_and_exit_2(tmp_path, make, path, value, field):
    data = json.loads(json.dumps(plan_to_dict(make())))
    at = data["schedule"]["meta"]
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    with pytest.raises(InputError, match=f"field '{re.escape(field)}'"):
        plan_from_dict(data, source="p.json")
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    res = CliRunner().invoke(app, ["check", str(f)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and field in res.output


def test_a_runs_issue_order_is_written_as_the_plans_program_order():
    from pptl.run.program import build_program
    from pptl.run.swap import issued_plan

    s = _dualpipe()
    program = build_program(s)
    issued = issued_plan(program)
    assert list(issued.meta) == [*s.meta, "program_order"]  # the other keys stay where they were
    assert PipelineMeta.of(issued).copies == 2
    assert given_program(issued) == {rp.rank: list(rp.issue) for rp in program.ranks}
