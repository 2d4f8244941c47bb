"""A third new user's pass over every command with the wrong file, the wrong name and the wrong value,
each defect it found pinned here (exit code, one line on stderr, the words that say what to fix):

- a JSON, TOML or torch CSV file that starts with a byte-order mark (what Windows editors write) was
  refused: "not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)", "not valid TOML: Invalid
  statement", and a CSV's first action read as "'\\ufeff0F0' is not an action"; YAML took it;
- a ``.json.gz`` that is not gzip read "not valid gzip: Error -3 while decompressing data: incorrect
  header check" (zlib's words);
- an empty ``.json`` given to check, render, export, compare, explain, whatif or run read "not valid
  JSON: Expecting value: line 1 column 1 (char 0)", where plan and tune said "the file is empty";
- ``pptl render PLAN -o out/`` (a folder) read "cannot draw to 'no suffix'", and ``-o noext`` quoted
  "'no suffix'" as if it were one (compare, explain and tune say "a name with no suffix");
- ``pptl render PLAN --time 0:inf`` drew a window of no visible op, exit 0, its axis labelled "inf";
- ``pptl export PLAN --to torch-csv -o x.png`` wrote a CSV under a figure's name (and ``--to chrome -o
  x.csv`` JSON under a CSV's), exit 0, where ``--to torchtitan`` refuses a name other than .toml and
  ``pptl plan -o x.png`` one other than .json;
- ``pptl tune CONFIG -o best.json --csv best.json`` wrote the plan, then the CSV over it: exit 0, "wrote
  best.json" twice, and no plan; ``--csv best.png`` a CSV under a figure's name;
- ``pptl serve --host ""`` listened on every address of the machine (the socket's reading of ""), with
  "warning: listening on : other machines on the network can open this page";
- ``pptl serve measured.json`` (or a torch CSV, a tune model file, a Chrome export) read the config
  reader's "unknown field 'events'; known fields: ...", a field the user never wrote;
- ``pptl explain run.json run2.json`` (two measured timelines, or a plan beside one) read "run.json: not
  a torch profiler trace or an event list", though it is pptl's own timeline;
- ``pptl diagnose`` of a gzipped dump, or of JSON under a dump's name, read "refused: opcode b'\\x1f' at
  byte 0, which builds no plain data" (a bytes repr, and no word of gzip or JSON);
- ``pptl export PLAN --to chrome -o /dev/full`` (a write that fails) printed its "note: planned timeline,
  160 events; open it in https://ui.perfetto.dev" before the error: two lines on stderr; ``pptl plan --from
  sched.csv -o best.png`` (or a write that fails) printed the CSV reader's three notes before the error;
- a config's ``pp: 1e30`` read "got 1000000000000000019884624838656, expected at most 1000000" (the float's
  int), where ``pptl tune`` says "got 1e+30";
- ``pptl run PLAN --timeout 1e30`` started the ranks, each of which failed with "OverflowError: Python int
  too large to convert to C int" (torch's timedelta);
- ``pptl run PLAN --device cpu --hidden 65536 --tokens 1048576`` (both at their largest) ended with
  "rank 1 failed: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't
  allocate memory: you tried to allocate 274877906944 bytes. Error code 12 ..."; a rank that runs out of
  memory now says so, with what it asked for and the options that size it;
- a command a message suggests named a path with a space bare (``pass -o p10 interleaved.html to
  overwrite it``, ``(pptl compare my run.json p.json)``): pasted into a shell, it split in two. Such a
  path is now in double quotes (the suggestions sit inside single quotes);
- ``pptl explain traces/ --plan other.json`` (or ``-o`` a figure it cannot write) printed the trace
  reader's notes first, 27 lines for 12 ranks, then the error; and ``pptl explain plan.json`` explained a
  plan as if it were a measured run, without the word compare says ("is a plan, not a measured run");
- a ``pptl tune`` model file given to check, render, export, run, whatif, compare or ``--plan`` read "not a
  pptl plan, timeline or config (expected 'format': 'pptl-plan' or 'pptl-timeline', or a 'schedule'
  field)", where ``pptl plan`` says what it is and which command takes it;
- a flight-recorder dump (a pickle named ``nccl_trace_rank_0``) given to plan, tune or serve read "not
  UTF-8 text", and to check, render, export, compare, explain, whatif or run "no file suffix; expected a
  folder of traces, or a .json, .yaml, .toml or .csv file": neither names diagnose, the command that
  reads it;
- a figure pptl drew, given back to it: a .png or .pdf read "not UTF-8 text" where a .svg or .html read
  "unknown file type '.svg'"; and check, render, export, compare... listed ".yaml, .yml, .toml, .json or
  .json.gz" as what they take, leaving out the torch CSVs and trace folders they read;
- ``pptl render PLAN -o f.png --dpi 1200 --size 60,60`` (each in its range) ended in a traceback from
  matplotlib (a 72000 x 72000 canvas: "Image size ... is too large", or MemoryError: std::bad_alloc);
- ``pptl render PLAN -o f.png --title XXXX...`` (one word of 1000 characters, a pasted hash or path) took
  48 s, and 5000 characters more than 2 minutes: the title's wrap measured every head of the word.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
RUN = ROOT / "tests" / "data" / "whatif_gpu" / "call2" / "measured_calibrate.json"  # pptl run: 1f1b, 2 ranks


def _pptl(*args: str):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def _one_error(r, code: int = 2) -> str:
    lines = r.stderr.splitlines()
    assert r.exit_code == code, (r.exit_code, r.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in r.output and "PosixPath(" not in lines[0]
    return lines[0]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    r = _pptl("plan", FIXTURES / "1f1b.yaml", "-o", p)
    assert r.exit_code == 0, r.output
    return p


# 1. a byte-order mark ---------------------------------------------------------------------------------------------


def test_a_json_plan_with_a_byte_order_mark_is_read(tmp_path: Path, plan_file: Path) -> None:
    bom = tmp_path / "bom.json"
    bom.write_text(plan_file.read_text(), encoding="utf-8-sig")
    for args in (["plan", bom], ["check", bom], ["render", bom], ["export", bom, "--to", "chrome"]):
        r = _pptl(*args)
        assert r.exit_code == 0, (args, r.output)


def test_a_toml_config_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    bom = tmp_path / "bom.toml"
    bom.write_text((FIXTURES / "1f1b_few_microbatches.toml").read_text(), encoding="utf-8-sig")
    r = _pptl("plan", bom)
    assert r.exit_code == 0, r.output


def test_a_torch_csv_with_a_byte_order_mark_checks_as_without(tmp_path: Path) -> None:
    bom = tmp_path / "bom.csv"
    bom.write_text((FIXTURES / "csv" / "gpipe_pp4_m6.csv").read_text(), encoding="utf-8-sig")
    r = _pptl("check", bom)
    assert r.exit_code == 0, r.output
    assert "\\ufeff" not in r.output


# 2. a .gz that is no gzip ------------------------------------------------------------------------------------------


def test_a_gz_name_on_plain_text_says_it_is_not_gzip(tmp_path: Path, plan_file: Path) -> None:
    fake = tmp_path / "plan.json.gz"
    fake.write_bytes(plan_file.read_bytes())
    for command in ("plan", "check", "render"):
        line = _one_error(_pptl(command, fake))
        assert line == (f"error: {fake}: not gzip data (named .gz, but it does not start as gzip does); gzip it, "
                        "or name it without .gz"), line
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(b"")
    assert _one_error(_pptl("plan", empty)) == f"error: {empty}: the file is empty"
    real = tmp_path / "real.json.gz"
    real.write_bytes(gzip.compress(plan_file.read_bytes()))
    assert _pptl("check", real).exit_code == 0


# 3. an empty .json, whichever command reads it ---------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["check", "E"], ["render", "E"], ["export", "E", "--to", "chrome"], ["compare", "PLAN", "E"], ["explain", "E"],
    ["whatif", "E"], ["run", "E", "--device", "cpu"], ["explain", str(RUN), "--plan", "E"],
])
def test_an_empty_json_is_the_file_is_empty_for_every_command(tmp_path: Path, plan_file: Path, args: list[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    line = _one_error(_pptl(*[empty if a == "E" else plan_file if a == "PLAN" else a for a in args]))
    assert line == f"error: {empty}: the file is empty", line


# 4. render's -o and --time ------------------------------------------------------------------------------------------


def test_render_to_a_folder_says_it_is_one(tmp_path: Path, plan_file: Path) -> None:
    for args in (["-o", tmp_path], ["--html", "-o", tmp_path]):
        assert _one_error(_pptl("render", plan_file, *args)) == f"error: {tmp_path}: is a directory, expected a file name"
    noext = tmp_path / "noext"
    line = _one_error(_pptl("render", plan_file, "-o", noext))
    assert line == f"error: {noext}: cannot draw to a name with no suffix, expected one of .png, .svg, .pdf, .html"
    assert not noext.exists()


@pytest.mark.parametrize("window", ["0:inf", "-inf:5", "-inf:inf"])
def test_render_refuses_an_endless_time_window(plan_file: Path, window: str) -> None:
    line = _one_error(_pptl("render", plan_file, "--time", window))
    assert line == f"error: --time: got '{window}', expected a finite START and END (e.g. --time 80:110)"


# 5. an output named as another format ------------------------------------------------------------------------------


@pytest.mark.parametrize("to, name, expected", [
    ("torch-csv", "x.png", "--to torch-csv writes a CSV, expected a .csv name"),
    ("torch-csv", "x.json", "--to torch-csv writes a CSV, expected a .csv name"),
    ("chrome", "x.csv", "--to chrome writes JSON, expected a .json or .json.gz name"),
    ("chrome", "x.gz", "--to chrome writes JSON, expected a .json or .json.gz name"),
])
def test_export_refuses_an_output_named_as_another_format(tmp_path: Path, plan_file: Path, to: str, name: str,
                                                          expected: str) -> None:
    out = tmp_path / name
    assert _one_error(_pptl("export", plan_file, "--to", to, "-o", out)) == f"error: -o {out}: {expected}"
    assert not out.exists()


def test_export_names_that_say_the_format_still_write(tmp_path: Path, plan_file: Path) -> None:
    for to, name in (("torch-csv", "s.CSV"), ("chrome", "t.JSON"), ("chrome", "t.json.gz")):
        r = _pptl("export", plan_file, "--to", to, "-o", tmp_path / name)
        assert r.exit_code == 0 and (tmp_path / name).stat().st_size > 100, r.output


def test_export_torchtitan_refuses_a_schedule_csv_named_as_another_format(tmp_path: Path, plan_file: Path) -> None:
    toml, csv = tmp_path / "pp.toml", tmp_path / "pp.png"
    line = _one_error(_pptl("export", plan_file, "--to", "torchtitan", "-o", toml, "--csv", csv))
    assert line == f"error: --csv {csv}: torchtitan's schedule is written as a CSV, expected a .csv name"
    assert not toml.exists() and not csv.exists()


@pytest.mark.parametrize("name", ["best.json", "best.png"])
def test_tune_csv_must_be_named_csv_and_never_replaces_the_plan(tmp_path: Path, name: str) -> None:
    plan, csv = tmp_path / "best.json", tmp_path / name
    line = _one_error(_pptl("tune", FIXTURES / "tune" / "skewed.yaml", "-o", plan, "--csv", csv))
    assert line == f"error: --csv {csv}: writes the best plan as a torch CSV, expected a .csv name"
    assert not plan.exists() and not csv.exists()


# 6. serve's arguments ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["", "  "])
def test_serve_refuses_an_empty_host_rather_than_listen_everywhere(host: str) -> None:
    line = _one_error(_pptl("serve", "--host", host, "--port", "0"))
    assert line == (f"error: --host: got {host!r}, expected an address to listen on (127.0.0.1, the default, or "
                    "0.0.0.0 to let other machines in)")


@pytest.mark.parametrize("given, what", [
    (RUN, "a measured timeline"),
    (FIXTURES / "csv" / "gpipe_pp4_m6.csv", "a torch CSV schedule"),
    (FIXTURES / "tune" / "skewed.yaml", "a pptl tune config (a model description)"),
])
def test_serve_says_what_a_file_that_is_not_a_config_is(given: Path, what: str) -> None:
    line = _one_error(_pptl("serve", given, "--port", "0"))
    assert line == (f"error: {given}: is {what}, not a config or plan; pptl serve starts from a schedule config or a "
                    "plan (pptl plan -o)")


def test_serve_keeps_the_config_readers_word_for_a_misspelt_field(tmp_path: Path) -> None:
    c = tmp_path / "c.yaml"
    c.write_text("schedule: 1f1b\npp: 4\nmicrobatch: 8\n")
    assert _one_error(_pptl("serve", c, "--port", "0")).startswith(f"error: {c}: unknown field 'microbatch'; known")


# 7. explain of several pptl files; diagnose of what a dump is mistaken for -------------------------------------------


def test_explain_of_two_pptl_files_says_one_is_read_alone(plan_file: Path) -> None:
    for first, what in ((RUN, "timeline"), (plan_file, "plan")):
        line = _one_error(_pptl("explain", first, RUN))
        assert line == (f"error: {first}: a pptl {what}, which is read alone, not as one rank's trace among 2 files; "
                        "give it as the only file, or one torch profiler trace per rank"), line


def test_diagnose_names_a_gzipped_dump_and_json_under_a_dumps_name(tmp_path: Path, plan_file: Path) -> None:
    hang = FIXTURES / "flight_recorder" / "hang1_torch_csv"
    gz, js = tmp_path / "gz", tmp_path / "js"
    gz.mkdir()
    js.mkdir()
    (gz / "nccl_trace_rank_0").write_bytes(gzip.compress((hang / "nccl_trace_rank_0").read_bytes()))
    (gz / "nccl_trace_rank_1").write_bytes((hang / "nccl_trace_rank_1").read_bytes())
    (js / "nccl_trace_rank_0").write_bytes(plan_file.read_bytes())
    line = _one_error(_pptl("diagnose", gz))
    assert line == f"error: {gz / 'nccl_trace_rank_0'}: gzip data, not a flight-recorder dump (a pickle); gunzip it first"
    line = _one_error(_pptl("diagnose", js))
    assert line == f"error: {js / 'nccl_trace_rank_0'}: JSON text, not a flight-recorder dump (a pickle, as torch writes it)"


# 8. a write that fails is the one line --------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_export_whose_write_fails_prints_no_note_first(plan_file: Path) -> None:
    line = _one_error(_pptl("export", plan_file, "--to", "chrome", "-o", "/dev/full"))
    assert line == "error: /dev/full: cannot write: No space left on device"


def test_plan_from_a_csv_to_a_refused_name_prints_no_note_first(tmp_path: Path) -> None:
    csv, png = FIXTURES / "csv" / "gpipe_pp4_m6.csv", tmp_path / "best.png"
    line = _one_error(_pptl("plan", "--from", csv, "-o", png))
    assert line.startswith(f"error: {png}: a plan is written as .json (or .json.gz)"), line
    r = _pptl("plan", "--from", csv, "-o", tmp_path / "best.json")  # a write that succeeds keeps its notes
    assert r.exit_code == 0 and r.stderr.count("note: ") == 3 and r.stderr.splitlines()[-1].startswith("wrote ")


# 9. a config's number as written --------------------------------------------------------------------------------------


def test_a_config_count_past_the_bound_is_quoted_as_written(tmp_path: Path) -> None:
    c = tmp_path / "c.yaml"
    c.write_text("schedule: 1f1b\npp: 1e30\nmicrobatches: 8\n")
    assert _one_error(_pptl("plan", c)) == f"error: {c}: field 'pp': got 1e+30, expected at most 1000000"
    c.write_text("schedule: 1f1b\npp: 4\nmicrobatches: 2000000\n")  # an int as it is
    assert _one_error(_pptl("plan", c)) == f"error: {c}: field 'microbatches': got 2000000, expected at most 1000000"


# 10. run's limits: the timeout, a rank out of memory ----------------------------------------------------------


def test_run_refuses_a_timeout_past_its_bound_before_any_rank(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    assert _pptl("plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", plan).exit_code == 0
    out = tmp_path / "m.json"
    line = _one_error(_pptl("run", plan, "--device", "cpu", "-o", out, "--timeout", "1e30"))
    assert line == "error: --timeout: got 1e+30, expected at most 1e+06 seconds (about 11 days)"
    assert not out.exists()


def test_a_timeout_of_exactly_the_bound_is_taken() -> None:
    from pptl.errors import InputError
    from pptl.run.options import MAX_TIMEOUT, Job, PlanJob

    assert Job(plans=(PlanJob("p.json"),), timeout=MAX_TIMEOUT).validate().timeout == 1e6
    with pytest.raises(InputError, match=r"--timeout: got 1e\+06, expected at most"):
        Job(plans=(PlanJob("p.json"),), timeout=MAX_TIMEOUT * (1 + 1e-15)).validate()


@pytest.mark.parametrize("error, expected", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                  "tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)"),
     "rank 1 ran out of memory allocating 32 GiB; lower --hidden or --tokens (the synthetic model's width and "
     "micro-batch rows)"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139 GiB"),
     "rank 1 ran out of memory allocating 2.00 GiB; lower --hidden or --tokens (the synthetic model's width and "
     "micro-batch rows)"),
    (MemoryError(), "rank 1 ran out of memory; lower --hidden or --tokens (the synthetic model's width and micro-batch "
     "rows)"),
    (ValueError("bad\nsecond line"), "rank 1 failed: ValueError: bad"),
])
def test_a_rank_that_runs_out_of_memory_says_so_in_its_own_words(error: BaseException, expected: str) -> None:
    pytest.importorskip("torch")
    from pptl.run.worker import _failure_line

    assert _failure_line(1, error) == expected


# 11. a suggested command pastes into a shell ---------------------------------------------------------------------


def test_suggested_commands_quote_a_path_with_a_space(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my run.json").write_bytes(RUN.read_bytes())
    (tmp_path / "my sched.csv").write_bytes((FIXTURES / "csv" / "gpipe_pp4_m6.csv").read_bytes())
    assert _pptl("plan", FIXTURES / "1f1b.yaml", "-o", "my plan.json").exit_code == 0
    assert _pptl("render", "my plan.json", "--html").exit_code == 0
    cases = [
        (["render", "my plan.json", "--html"], "error: my plan.html: exists, and pptl does not overwrite a file it "
         'named itself; pass -o "my plan.html" to overwrite it'),
        (["compare", "my run.json", "my plan.json"], "error: my run.json: is a measured run and my plan.json a plan: "
         'give the plan first (pptl compare "my plan.json" "my run.json")'),
        (["plan", "my run.json"], "error: my run.json: is a measured timeline, not a config or plan; to take its "
         'durations, give it to --costs-from (pptl plan CONFIG --costs-from "my run.json")'),
        (["plan", "my sched.csv"], "error: my sched.csv: is a torch CSV schedule, not a config or plan; plan it with "
         "'pptl plan --from \"my sched.csv\"'"),
    ]
    for args, expected in cases:
        assert _one_error(_pptl(*args)) == expected


def test_shell_word_leaves_a_plain_path_bare_and_quotes_the_rest_safely() -> None:
    import shlex

    from pptl.formats._quote import shell_word

    assert shell_word("a/b-1.json") == "a/b-1.json"
    for name in ("my run.json", "it's.json", 'say "hi".json', "$HOME.json", "a`b`.json", "back\\slash.json"):
        assert shlex.split(shell_word(name)) == [name], name


# 12. explain: its notes after the work, and a plan said to be one ------------------------------------------------


def test_explain_prints_no_note_before_a_refused_plan_or_a_failed_write(plan_file: Path) -> None:
    traces = FIXTURES / "traces_cpu_gloo" / "Schedule1F1B"
    line = _one_error(_pptl("explain", traces, "--plan", plan_file))
    assert line == f"error: {plan_file}: not the plan that ran Schedule1F1B: the plan has pp 4, the run 12"
    if Path("/proc").is_dir():
        assert _one_error(_pptl("explain", traces, "-o", "/proc/x.png")).startswith("error: /proc/x.png: cannot write")
    r = _pptl("explain", traces)
    assert r.exit_code == 0 and r.stderr.startswith("note: torch profiler traces: 12 files"), r.stderr


def test_explain_of_a_plan_says_it_is_one(plan_file: Path) -> None:
    r = _pptl("explain", plan_file)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"note: {plan_file.name} is a plan, not a measured run: its idle is the simulated "
                                     "schedule's (pptl run it to measure one)"]
    assert _pptl("explain", RUN).stderr == ""


# 13. a tune model file where a plan goes -------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["check", "M"], ["render", "M"], ["export", "M", "--to", "chrome"], ["whatif", "M"],
                                  ["run", "M", "--device", "cpu"], ["compare", "M", str(RUN)],
                                  ["explain", str(RUN), "--plan", "M"]])
def test_a_tune_model_file_where_a_plan_goes_is_named(args: list[str]) -> None:
    model = FIXTURES / "tune" / "skewed.yaml"
    line = _one_error(_pptl(*[model if a == "M" else a for a in args]))
    assert line == (f"error: {model}: is a pptl tune config (a model description), not a plan or schedule config; "
                    f"rank schedules for it with 'pptl tune {model}'")


# 14. a flight-recorder dump where a plan or trace goes ------------------------------------------------------------


DUMP = FIXTURES / "flight_recorder" / "hang1_torch_csv" / "nccl_trace_rank_0"


@pytest.mark.parametrize("args", [["check", "D"], ["render", "D"], ["export", "D", "--to", "chrome"], ["explain", "D"],
                                  ["whatif", "D"], ["run", "D", "--device", "cpu"], ["compare", "PLAN", "D"]])
def test_a_dump_where_a_plan_or_trace_goes_names_diagnose(plan_file: Path, args: list[str]) -> None:
    line = _one_error(_pptl(*[DUMP if a == "D" else plan_file if a == "PLAN" else a for a in args]))
    assert line == f"error: {DUMP}: a pickle with no file suffix (a flight-recorder dump? pptl diagnose reads those)"


@pytest.mark.parametrize("command", ["plan", "tune", "serve"])
def test_a_dump_where_a_config_goes_names_diagnose(tmp_path: Path, command: str) -> None:
    named = tmp_path / "dump.yaml"  # a config's name, a dump's bytes
    named.write_bytes(DUMP.read_bytes())
    for given in (DUMP, named):
        line = _one_error(_pptl(command, given, *(["--port", "0"] if command == "serve" else [])))
        assert line == f"error: {given}: a pickle, not text (a flight-recorder dump? pptl diagnose reads those)"


# 15. a figure where a plan goes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg", ".html"])
def test_a_figure_where_a_plan_goes_is_named_by_its_suffix(tmp_path: Path, plan_file: Path, suffix: str) -> None:
    fig = tmp_path / f"fig{suffix}"
    assert _pptl("render", plan_file, "-o", fig).exit_code == 0
    line = _one_error(_pptl("plan", fig))
    assert line == f"error: {fig}: unknown file type '{suffix}', expected .yaml, .yml, .toml, .json or .json.gz"
    for args in (["check", fig], ["render", fig], ["compare", plan_file, fig], ["explain", fig]):
        line = _one_error(_pptl(*args))
        assert line == (f"error: {fig}: unknown file type '{suffix}', expected a plan, config, timeline, torch CSV or "
                        "traces: .json, .json.gz, .yaml, .yml, .toml, .csv, or a folder"), (args, line)


def test_a_missing_file_or_a_folder_with_an_unknown_suffix_keeps_its_own_word(tmp_path: Path) -> None:
    missing, folder = tmp_path / "nope.png", tmp_path / "runs.v2"
    folder.mkdir()
    assert _one_error(_pptl("render", missing)) == f"error: {missing}: no such file"
    assert _one_error(_pptl("render", folder)) == f"error: {folder}: is a folder, expected a file"


# 16. a PNG of too many pixels ----------------------------------------------------------------------------------------


def test_a_png_of_too_many_pixels_is_one_line_naming_dpi_and_size(tmp_path: Path, plan_file: Path) -> None:
    png = tmp_path / "big.png"
    line = _one_error(_pptl("render", plan_file, "-o", png, "--dpi", "1200", "--size", "60,60"))
    assert line == ("error: a 60 x 60 inch figure at 1200 dpi is a 72,000 x 72,000 pixel PNG, more than the 268,435,456 "
                    "pixels (or 65,535 a side) pptl draws; lower --dpi or --size, or draw to .svg or .pdf")
    assert not png.exists()


def test_a_png_of_exactly_the_most_pixels_is_drawn(monkeypatch) -> None:
    import matplotlib.figure

    import pptl.render.mpl
    from pptl.errors import InputError
    from pptl.render.mpl import image_bytes

    monkeypatch.setattr(pptl.render.mpl, "MAX_PNG_PIXELS", 100 * 100)  # the bound, small enough to draw
    fig = matplotlib.figure.Figure(figsize=(1, 1), dpi=100)
    assert image_bytes(fig, "png")[:4] == b"\x89PNG"
    fig.set_dpi(101)
    with pytest.raises(InputError, match="is a 101 x 101 pixel PNG, more than the 10,000 pixels"):
        image_bytes(fig, "png")


# 17. a long one-word title -----------------------------------------------------------------------------------------


def _fits(s: str, width_in: float = 3.0, fontsize: float = 9) -> bool:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    w = TextToPath().get_text_width_height_descent(s, FontProperties(size=fontsize, weight="bold"), ismath=False)[0]
    return w / 72 <= width_in


@pytest.mark.parametrize("text", ["x" * 150, "pipeline " * 5 + "0123456789abcdef" * 8 + " end", "W" * 40 + "\nii" * 3])
def test_a_long_word_is_cut_at_the_longest_head_that_fits(text: str) -> None:
    # what the wrap owes, measured apart from it: every line fits (or is one character), no character is lost
    # or added, and a word cut in two is cut late: its head plus the next character would not fit
    from pptl.render.mpl import _wrap

    lines = _wrap(text, 3.0, 9)
    assert all(_fits(x) or len(x) == 1 for x in lines), lines
    assert "".join(lines).replace(" ", "") == text.replace(" ", "").replace("\n", "")
    # where the lines meet inside a word (not at a word's end, counted on the text without spaces)
    ends, at = set(), 0
    for w in text.split():
        at += len(w)
        ends.add(at)
    at = 0
    for a, b in zip(lines, lines[1:]):
        at += len(a.replace(" ", ""))
        if at not in ends:  # a head cut from a longer word
            assert not _fits(a + b[0]), (a, b)


def test_a_long_word_costs_a_few_measures_a_line(monkeypatch) -> None:
    # a 1500-character word: cut by bisection each line measures about log2(1500) = 11 heads, where measuring
    # every length measured hundreds a line (a 1000-character title took 48 s to draw)
    from matplotlib.textpath import TextToPath

    from pptl.render.mpl import _wrap

    calls = []
    real = TextToPath.get_text_width_height_descent
    monkeypatch.setattr(TextToPath, "get_text_width_height_descent",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    lines = _wrap("x" * 1500, 3.0, 9)
    assert len(lines) > 10 and len(calls) <= 14 * len(lines), (len(lines), len(calls))


def test_a_title_of_one_long_word_is_drawn(tmp_path: Path, plan_file: Path) -> None:
    r = _pptl("render", plan_file, "-o", tmp_path / "t.png", "--title", "x" * 1500)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.png").stat().st_size > 0