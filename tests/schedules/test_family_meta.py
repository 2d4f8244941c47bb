"""The families' typed metadata (MoEMeta, WeightUpdateMeta): the stored dict form is the file
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
from pptl.schedules import build_schedule
from pptl.schedules._moe_meta import MoEMeta
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
