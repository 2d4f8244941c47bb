"""What a new user's pass over README.md and ``pptl run --device cpu`` found, each pinned here:

- ``-o`` naming an existing folder was taken for a device file, ran the whole plan and only then
  failed (exit 2, the timeline left in the run folder);
- a folder of profiler traces (a measured timeline) ran as if it were a plan;
- the default output cut the plan's name at its first dot (``a.1f1b.json`` -> ``a.measured.json``);
- a CPU run of a weight-update plan the size of a real model was ended by the OOM killer a minute
  in, instead of refused with what it needs;
- a rank lost during set-up read "at op (setup, before any op) (step -1)".

Refusals run with the launcher replaced by one that fails the test: nothing may start.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.formats.plan import dumps, plan_to_dict
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

TINY = {"hidden": 32, "tokens": 8, "layers_per_stage": 1, "dtype": "float32"}
TRACES = Path(__file__).resolve().parent / "data" / "traces" / "Schedule1F1B"
MiB = 2**20


def _plan(path: Path, **config) -> Path:
    cfg = {"schedule": "1f1b", "pp": 2, "microbatches": 2, "workload": TINY, **config}
    path.write_text(dumps(plan_to_dict(build_schedule(config_from_mapping(cfg)))))
    return path


def _run(*args: str):
    r = CliRunner().invoke(app, ["run", *args, "--device", "cpu", "--steps", "1", "--warmup", "0"])
    return r, [line for line in r.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["out", "out.json"])
def test_an_existing_folder_as_output_is_refused_before_the_run(tmp_path, no_launch, name):
    plan = _plan(tmp_path / "p.json")
    (tmp_path / name).mkdir()
    r, err = _run(str(plan), "-o", str(tmp_path / name))
    assert r.exit_code == 2, r.output
    assert err == [f"error: {tmp_path / name}: is a directory, expected a file name"]


def test_profiler_traces_are_refused_as_a_measured_timeline(tmp_path, no_launch):
    traces = shutil.copytree(TRACES, tmp_path / "traces")
    r, err = _run(str(traces), "-o", str(tmp_path / "m.json"))
    assert r.exit_code == 2, r.output
    assert err == [f"error: {traces}: is a measured timeline, not a plan; pptl run takes plans and configs"]


def test_the_torchrun_entry_refuses_traces_before_the_rendezvous(tmp_path, monkeypatch, capsys):
    """Found by each rank after joining the group, it was a rank's failure (exit 1) for torchrun."""
    import pptl.run.worker
    from pptl.run.__main__ import main

    traces = shutil.copytree(TRACES, tmp_path / "traces")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(pptl.run.worker, "run_worker", lambda *a, **k: pytest.fail("the rank started"))
    assert main([str(traces), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {traces}: is a measured timeline, not a plan; pptl run takes plans and configs"]


@pytest.mark.parametrize("name, out", [("a.1f1b.json", "a.1f1b.measured.json"), ("x.json.gz", "x.measured.json"),
                                       ("c.YAML", "c.measured.json"), ("run.v2.toml", "run.v2.measured.json"),
                                       ("plan", "plan.measured.json"), (".json", ".json.measured.json")])
def test_the_default_output_drops_only_the_format_suffix(name, out):
    from pptl.commands.run import default_out

    assert default_out(Path("some") / name) == Path(out)


def test_the_default_output_of_a_dotted_plan_name_is_its_own(tmp_path, monkeypatch, no_launch):
    """With a.1f1b.measured.json there already, the run is refused naming that file (it used to
    look at a.measured.json, find nothing, and start)."""
    monkeypatch.chdir(tmp_path)
    _plan(tmp_path / "a.1f1b.json")
    (tmp_path / "a.1f1b.measured.json").write_text("{}")
    r, err = _run("a.1f1b.json")
    assert r.exit_code == 2, r.output
    assert err == ["error: a.1f1b.measured.json: exists, and pptl does not overwrite a file it named itself; "
                   "pass -o a.1f1b.measured.json to overwrite it"]


def _weight_update(path: Path) -> Path:
    """8 MiB of 1 MiB tensors over 2 owners, buckets of 2 MiB: 4 buckets, 2 tensors each."""
    options = {"model_size": "8MiB", "tensor_size": "1MiB", "bucket_size": "2MiB", "h2d_buffer": True}
    path.write_text(dumps(plan_to_dict(build_schedule(config_from_mapping(
        {"schedule": "weight-update", "pp": 2, "microbatches": 1, "options": options})))))
    return path


def test_weight_update_host_bytes_by_hand(tmp_path):
    """Per rank: the model's 8 MiB of parameters, 2 IPC halves of 2 MiB, 3 MiB while it makes the
    largest (1 MiB) tensor's values: 15 MiB, 30 for 2 ranks; plus an H2D buffer of 2 MiB on each of
    the 2 owners (4) and the owners' host shards, the model once (8): 42 MiB."""
    from pptl.formats.loader import load_any
    from pptl.run.hostmem import weight_update_host_bytes

    assert weight_update_host_bytes(load_any(_weight_update(tmp_path / "wu.json")).schedule) == 42 * MiB


def test_a_cpu_weight_update_run_over_the_free_memory_is_refused(tmp_path, monkeypatch, no_launch):
    import pptl.run.hostmem

    plan = _weight_update(tmp_path / "wu.json")
    monkeypatch.setattr(pptl.run.hostmem, "available_bytes", lambda: 41 * MiB)
    r, err = _run(str(plan), "-o", str(tmp_path / "m.json"))
    assert r.exit_code == 2, r.output
    assert err == [f"error: {plan}: a CPU run of this weight-update plan needs 0.041 GiB of host memory (2 ranks, "
                   "each with a copy of the model and its buffers), 0.04 GiB available here; plan a smaller "
                   "options.model_size, or run it on CUDA"]


def test_a_cpu_weight_update_run_that_fits_goes_on(tmp_path, monkeypatch):
    import pptl.run.hostmem
    import pptl.run.launcher

    plan = _weight_update(tmp_path / "wu.json")
    monkeypatch.setattr(pptl.run.hostmem, "available_bytes", lambda: 42 * MiB)
    started = []
    monkeypatch.setattr(pptl.run.launcher, "launch", lambda job, s, world: started.append(world) or [])
    from pptl.run import run_plans

    run_plans([(str(plan), None)], gpus=2, device="cpu")
    assert started == [2]


def test_a_rank_lost_in_set_up_says_so(tmp_path):
    from pptl.run.launcher import _diagnose
    from pptl.run.progress import NOT_STARTED, Post

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2, "workload": TINY}))
    posts = [Post(NOT_STARTED, -1, -1, 0.0), Post(0, 3, -1, 0.0)]
    lost = {"codes": [-9, None], "lost_at": {0: 1.0}}
    assert _diagnose(lost, str(tmp_path), 2, posts, [s]) == (
        "rank 0 was lost (killed by SIGKILL) during set-up, before any op", 0, 1)
    hung = {"codes": [None, None], "lost_at": {}, "hung": True}
    posts = [Post(0, 3, -1, 0.0), Post(0, 3, -1, 5.0)]
    assert _diagnose(hung, str(tmp_path), 2, posts, [s]) == (
        "run stopped: no rank made progress for the --timeout; rank 0 is stuck between ops (step 3)", 0, 1)
