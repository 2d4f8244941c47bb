from __future__ import annotations

from pathlib import Path

import pytest

from pptl.config import Costs, apply_cost_flags, backward_from_split, config_from_mapping, load_config, parse_cost_flags
from pptl.errors import InputError


def test_load_yaml_fixture(fixtures: Path) -> None:
    cfg = load_config(fixtures / "interleaved.yaml")
    assert (cfg.schedule, cfg.pp, cfg.vpp, cfg.microbatches) == ("interleaved-1f1b", 4, 2, 8)
    assert cfg.costs.lookup("F") == 1.0 and cfg.costs.lookup("B") == 2.0
    assert cfg.group == 4


def test_load_toml_fixture(fixtures: Path) -> None:
    cfg = load_config(fixtures / "1f1b_few_microbatches.toml")
    assert (cfg.pp, cfg.microbatches) == (8, 3)


def test_json_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text('{"schedule": "gpipe", "pp": 2, "microbatches": 4}')
    cfg = load_config(p, microbatches=6)
    assert cfg.microbatches == 6 and cfg.source == str(p)


def test_costs_stage_overrides_and_fb_default() -> None:
    cfg = config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2,
                               "costs": {"F": 1, "B": 3, "stages": {1: {"F": 2}}},
                               "comm": {"latency": 0.5, "bandwidth": 100, "bytes": 50}})
    c = cfg.costs
    assert c.lookup("F", 1) == 2 and c.lookup("F", 0) == 1
    assert c.lookup("FB", 1) == 5  # F+B at that stage
    assert c.comm_time(0) == pytest.approx(1.0)


def test_i_and_w_imply_b() -> None:
    cfg = config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2, "costs": {"I": 1.5, "W": 0.5}})
    assert cfg.costs.lookup("B") == 2.0


def test_backward_from_split_only_when_the_split_is_given_without_b() -> None:
    assert backward_from_split({"I": 1.5, "W": 0.5, "B": 9.0}, {"I"})["B"] == 2.0
    assert backward_from_split({"I": 1.5, "W": 0.5, "B": 9.0}, {"I", "B"})["B"] == 9.0  # B given: kept
    assert backward_from_split({"F": 1.0, "B": 9.0}, {"F"})["B"] == 9.0  # the split not touched
    assert "B" not in backward_from_split({"I": 1.5}, {"I"})  # W unknown: no sum to take


def test_cost_flags_set_b_from_the_split_and_the_latency() -> None:
    costs = apply_cost_flags(Costs(), {"W": 3.0}, 0.25)
    assert (costs.lookup("B"), costs.lookup("W"), costs.comm_latency) == (4.0, 3.0, 0.25)  # B = I + W = 1 + 3
    assert apply_cost_flags(Costs(), {"B": 5.0, "W": 3.0}).lookup("B") == 5.0
    assert apply_cost_flags(Costs(), {}) == Costs()
    for bad in (-1.0, float("nan"), float("inf"), 1.0000001e15):
        with pytest.raises(InputError, match=r"--comm-latency: got .*, expected a number from 0 to 1e\+15"):
            apply_cost_flags(Costs(), {}, bad)
    assert apply_cost_flags(Costs(), {}, 1e15).comm_latency == 1e15  # the bound itself is allowed


def test_parse_cost_flags() -> None:
    assert parse_cost_flags(["F=1", "B=2,I=1"]) == {"F": 1.0, "B": 2.0, "I": 1.0}


@pytest.mark.parametrize(
    "data, match",
    [
        ({"pp": 4, "microbatches": 2}, r"field 'schedule' is required. Example"),
        ({"schedule": "1f1b", "microbatches": 2}, r"field 'pp' is required"),
        ({"schedule": "1f1b", "pp": 0, "microbatches": 2}, r"field 'pp': got 0, expected an integer >= 1"),
        ({"schedule": "1f1b", "pp": "four", "microbatches": 2}, r"field 'pp': got 'four', expected an integer"),
        ({"schedule": "1f1b", "pp": True, "microbatches": 2}, r"field 'pp': got True"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 10**9}, r"expected at most 1000000"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "costs": {"F": -1}}, r"costs.F': got -1, expected a finite number >= 0"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "costs": {"F": float("nan")}}, r"got NaN"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "costs": [1, 2]}, r"field 'costs': got a list"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "comm": {"bandwidth": 0}}, r"comm.bandwidth': got 0, expected a number > 0"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "comm": {"speed": 1}}, r"field 'comm.speed' is unknown"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "colour": "red"}, r"unknown field 'colour'; known fields:"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "workload": {"dtype": "int8"}}, r"workload.dtype': got 'int8'"),
        ({"schedule": "1f1b", "pp": 2, "microbatches": 2, "w_activation": 2}, r"expected at most 1.0"),
    ],
    ids=["no-schedule", "no-pp", "zero-pp", "text-pp", "bool-pp", "huge-mb", "negative-cost", "nan-cost",
         "costs-list", "zero-bandwidth", "unknown-comm", "unknown-field", "bad-dtype", "w-activation"],
)
def test_bad_configs(data: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        config_from_mapping(data, source="c.yaml")


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("c.yaml", "schedule: 1f1b\npp: [4\n", r"c.yaml: not valid YAML"),
        ("c.yaml", "schedule: 1f1b\npp: 2\npp: 3\nmicrobatches: 1\n", r"duplicate key 'pp'"),
        ("c.json", '{"schedule": "1f1b", "pp": 2, "pp": 3}', r"duplicate key 'pp'"),
        ("c.json", '{"schedule": "1f1b", "pp": NaN}', r"'NaN' is not a number JSON allows"),
        ("c.toml", "schedule = ", r"not valid TOML"),
        ("c.yaml", "- 1\n- 2\n", r"expected a mapping of fields at the top level, got a list"),
        ("c.ini", "x", r"unknown file type '.ini'"),
        ("c.yaml", "", r"^.*c.yaml: the file is empty$"),
    ],
    ids=["broken-yaml", "dup-yaml", "dup-json", "nan-json", "broken-toml", "list-top", "unknown-suffix", "empty"],
)
def test_bad_files(tmp_path: Path, name: str, text: str, match: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        load_config(p)


def test_binary_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not UTF-8 text"):
        load_config(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.yaml: no such file$"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("schedule, pp, stage, ok", [
    ("1f1b", 4, 3, True), ("1f1b", 4, 4, False), ("1f1b", 4, 9, False),
    # the V families hold 2p stages without --vpp: 3 is the last of pp 2's four
    ("zbv", 2, 3, True), ("zbv", 2, 4, False),
])
def test_a_stage_cost_outside_the_plan_is_refused(schedule: str, pp: int, stage: int, ok: bool) -> None:
    """A per-stage cost for a stage the plan has not changed nothing, silently (a 1-based stage, a
    config of a deeper pipeline); the plan's last stage is still taken."""
    from pptl.planning import plan

    cfg = config_from_mapping({"schedule": schedule, "pp": pp, "microbatches": 8,
                               "costs": {"stages": {stage: {"F": 2}}}}, source="c.yaml")
    if ok:
        assert plan(cfg).simulation.makespan > plan(config_from_mapping(
            {"schedule": schedule, "pp": pp, "microbatches": 8}, source="c.yaml")).simulation.makespan
    else:
        with pytest.raises(InputError, match=rf"^c\.yaml: field 'costs\.stages': stage {stage} is not in this plan "
                                             rf"\(stages 0-{2 * pp - 1 if schedule == 'zbv' else pp - 1}\)$"):
            plan(cfg)


def test_a_stage_given_twice_is_refused() -> None:
    with pytest.raises(InputError, match="stage 0 is given twice"):
        config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2,
                             "costs": {"stages": {0: {"F": 2}, "0": {"F": 3}}}}, source="c.yaml")


@pytest.mark.parametrize("flag, match", [
    ("F=1_000", "got '1_000', expected a number"),   # float() reads it as 1000
    ("F=\uff11", "expected a number"),               # a full-width 1: float() reads it as 1
    ("F=1,F=2", "F is given twice"),                 # the last won, silently
    ("F=0x10", "expected a number"),
])
def test_cost_flags_take_plain_numbers_once(flag: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_cost_flags([flag])


def test_cost_flags_in_every_plain_spelling() -> None:
    assert parse_cost_flags(["F=1.5e0,B=.5", "I=+2", "W=3."]) == {"F": 1.5, "B": 0.5, "I": 2.0, "W": 3.0}
