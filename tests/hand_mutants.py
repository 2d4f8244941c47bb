"""Hand-written mutants of tune, diagnose, explain, serve, the plan reader, the measured-timeline
rule, the run's GPU clock record and the memory checks, each with the tests that must kill it
(docs/testing.md lists them).

    python tests/hand_mutants.py            # apply each to a copy of the tree, run its tests, report
    python tests/hand_mutants.py --only 3,serve-body-limit
    python tests/hand_mutants.py --list

Each mutant is one edit of one line, written to look like a plausible bug at a boundary (a limit
hit exactly, a tie, a remainder, a two-digit rank, a hostile header). The runner copies ``pptl/``,
``tests/``, ``fixtures/`` and ``pyproject.toml`` to a temporary folder, applies the edit there (the
working tree is never touched), runs the named tests with ``pytest -x``, and counts the mutant as
killed when they fail (pytest exit 1). An edit whose text is not found exactly once is reported as
stale (the source moved): fix the table, don't count it.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    bug: str
    """What the edit does, as a user would see it."""


_B = "tests/test_boundaries.py::"
_H = "tests/test_serve_hostile.py::"
_M = "tests/test_measured_clock.py::"
_G = "tests/test_gpuclock.py::"
_F = "tests/test_tune_free_clock.py::"

MUTANTS: tuple[Mutant, ...] = (
    # --- the plan reader
    Mutant("plan-size-limit", "pptl/formats/plan.py",
           "v < lo or v > 10_000_000:", "v < lo or v >= 10_000_000:",
           (_B + "test_schedule_sizes_up_to_ten_million_are_sizes",),
           "a size of exactly 10,000,000 is called not an integer"),
    Mutant("plan-payload-zero", "pptl/formats/plan.py",
           "not 0 <= v < math.inf:", "not 0 < v < math.inf:",
           (_B + "test_a_payload_of_zero_bytes_is_a_payload",),
           "a payload of 0 bytes refused"),
    Mutant("plan-max-time", "pptl/formats/plan.py",
           "(values <= MAX_TIME))  # also NaN", "(values < MAX_TIME))  # also NaN",
           (_B + "test_timeline_times_up_to_max_time",),
           "a time of exactly MAX_TIME refused"),
    # --- diagnose
    Mutant("diagnose-rank-runs", "pptl/diagnose/ops.py",
           "if j - k >= 2 else", "if j - k >= 1 else",
           (_B + "test_rank_lists",),
           "two ranks in a row printed as a range (0-1)"),
    Mutant("diagnose-rank-order-text", "pptl/diagnose/ops.py",
           "rs = sorted(set(ranks))", "rs = sorted(set(ranks), key=str)",
           (_B + "test_rank_lists",),
           "ranks ordered as text: 10 before 9, so 9-11 is never a range"),
    Mutant("diagnose-ring-wrapped", "pptl/diagnose/waits.py",
           "d.entries[0].record_id > 0:", "d.entries[0].record_id >= 0:",
           (_B + "test_a_wrapped_ring_buffer_is_noted_from_record_one",),
           "every dump said to have wrapped, record 0 first included"),
    Mutant("diagnose-missing-plural", "pptl/diagnose/waits.py",
           "{'s' if len(missing) > 1 else ''}", "{'s' if len(missing) >= 1 else ''}",
           (_B + "test_missing_dumps_are_named",),
           "one missing dump named as 'ranks 2'"),
    # --- explain
    Mutant("explain-receiver-clock", "pptl/explain.py",
           "ready = min(ready, events[rcv].end)", "ready = ready",
           (_B + "test_explain_trusts_the_receivers_clock_when_the_ranks_disagree",),
           "a RECV stamped before its SEND keeps the sender's (other) clock: the receiver's own wait misfiled"),
    Mutant("explain-zero-idle", "pptl/explain.py",
           "if idle > 0 else f\"{v:.4g}\"", "if idle >= 0 else f\"{v:.4g}\"",
           (_B + "test_a_rank_with_no_idle_time_prints_without_a_share",),
           "a rank with no idle time divides by zero"),
    Mutant("explain-measurement-line", "pptl/explain.py",
           "lines = [bad] if bad is not None else []", "lines = []",
           (_B + "test_explain_trusts_the_receivers_clock_when_the_ranks_disagree",
            _M + "test_compare_and_explain_name_the_measurement_error"),
           "a measurement error not reported by explain"),
    # --- tune
    Mutant("tune-even-split-ties", "pptl/tune/split.py",
           "key=lambda s: (abs(s - (stages - 1) / 2), s))", "key=lambda s: (abs(s - (stages - 1) / 2), -s))",
           (_B + "test_even_split_puts_the_remainder_in_the_middle",),
           "an odd remainder goes to the later of two middle stages"),
    Mutant("tune-layout-empty-stage", "pptl/tune/split.py",
           'body = "" if n == 0 else ("t" if n == 1 else f"t*{n}")', 'body = "t" if n == 1 else f"t*{n}"',
           (_B + "test_megatron_layout_edges",),
           "a stage of no layers written t*0 in the Megatron layout"),
    Mutant("tune-head-on-one-stage", "pptl/tune/split.py",
           "(model.head, s == last)", "(model.head, s == last and s > 0)",
           (_B + "test_stage_costs_add_embedding_to_the_first_and_head_to_the_last",),
           "a one-stage pipeline's head cost forgotten"),
    Mutant("tune-embedding-iw-ratio", "pptl/tune/model.py",
           'b * (i if kind == "I" else w) / (i + w)', 'b * (w if kind == "I" else i) / (i + w)',
           (_B + "test_stage_costs_add_embedding_to_the_first_and_head_to_the_last",),
           "an embedding's B split into I and W the wrong way round"),
    Mutant("tune-rank-per-step", "pptl/tune/rank.py",
           "per_mb = r.step / r.structure.microbatches", "per_mb = r.step",
           (_B + "test_ranking_is_per_micro_batch_then_peak_then_named_families",),
           "candidates of different micro-batch counts ranked by step, not throughput"),
    Mutant("tune-rank-named-first", "pptl/tune/rank.py",
           'synth = r.structure.family == "synth"', "synth = False",
           (_B + "test_ranking_is_per_micro_batch_then_peak_then_named_families",),
           "on a tie, a synthesized order ranked before the named family"),
    # --- serve
    Mutant("serve-body-limit", "pptl/serve/server.py",
           "if n > MAX_BODY_BYTES:", "if n >= MAX_BODY_BYTES:",
           (_B + "test_a_body_of_exactly_the_limit_is_read",),
           "a body of exactly the limit refused (413)"),
    Mutant("serve-host-prefix", "pptl/serve/server.py",
           'return host_name(self.headers.get("Host")) in _LOOPBACK',
           'return any((host_name(self.headers.get("Host")) or "").startswith(n) for n in _LOOPBACK)',
           (_H + "test_loopback_lookalike_hosts_are_refused",),
           "Host 127.0.0.1.evil.com taken for this machine (DNS rebinding)"),
    Mutant("serve-origin-port", "pptl/serve/server.py",
           "o_port = o.port or 80", "o_port = o.port",
           (_H + "test_same_origin",),
           "the page's own POST refused when its Origin leaves out port 80"),
    Mutant("serve-content-type-prefix", "pptl/serve/server.py",
           'if ctype != "application/json":', 'if not ctype.startswith("application/json"):',
           (_H + "test_post_needs_a_json_content_type",),
           "Content-Type application/jsonx accepted"),
    Mutant("serve-gone-client-logged", "pptl/serve/server.py",
           "        if isinstance(e, _GONE):\n            return\n", "",
           (_H + "test_handle_error_of_a_gone_client_is_silent",),
           "a client that went away logged as an error"),
    # --- the rule on measured timelines
    Mutant("measured-tolerance-edge", "pptl/checks/measured.py",
           "if recv.end < send.start - tol:", "if recv.end <= send.start - tol:",
           (_M + "test_recv_before_send_at_the_tolerance",),
           "a RECV ending exactly at the tolerance called a measurement error"),
    # --- strict field readers (tune's model file, family options)
    Mutant("fields-int-range-top", "pptl/fields.py",
           "v < lo or (hi is not None and v > hi)", "v < lo or (hi is not None and v >= hi)",
           ("tests/test_fields.py::test_an_integer_at_either_end_of_its_range_is_kept",),
           "an option at exactly its largest allowed value refused"),
    Mutant("fields-number-max", "pptl/fields.py",
           "(f <= MAX_NUMBER or (inf and f == math.inf))", "(f < MAX_NUMBER or (inf and f == math.inf))",
           ("tests/test_fields.py::test_numbers_from_zero_to_the_largest_finite_value",),
           "a cost of exactly the largest finite value refused"),
    # --- tune: I and W measured inside a B
    Mutant("tune-b-part-at-b-start", "pptl/tune/calibrate.py",
           "not 0 <= v <= e.duration", "not 0 < v <= e.duration",
           ("tests/test_tune.py::test_a_b_part_at_either_end_of_its_b_is_a_part",),
           "a B whose I part ended at its start (a mark of 0 ms) makes the run's I and W derived, not measured"),
    Mutant("tune-b-part-at-b-end", "pptl/tune/calibrate.py",
           "not 0 <= v <= e.duration", "not 0 <= v < e.duration",
           ("tests/test_tune.py::test_a_b_part_at_either_end_of_its_b_is_a_part",),
           "a B whose I part took all of it is called no part of it"),
    # --- whatif: the duty exponent a run's loss leaves
    Mutant("whatif-duty-spread-edge", "pptl/whatif/duty.py",
           "abs(math.log(u1 / u0)) < math.log(MIN_DUTY_SPREAD) - 1e-12",
           "abs(math.log(u1 / u0)) <= math.log(MIN_DUTY_SPREAD) + 1e-12",
           ("tests/test_whatif_roles.py::test_loss_bounded_range_at_the_duty_spread_limit",),
           "ranks whose duty differs by exactly the least spread fitted (1.05) left unfitted"),
    # --- MoE run: which compute op makes an all-to-all's output
    Mutant("moe-output-maker-order", "pptl/run/moe.py",
           "pos.get(u, len(issue)) < pos[j]", "pos.get(u, len(issue)) <= pos[j] + 1",
           ("tests/test_offload_costs.py::test_an_all_to_all_output_is_made_by_the_last_compute_op_it_waits_on_issued_"
            "before_it",),
           "an all-to-all's output made by a compute op issued after it (its write could race the op's reads)"),
    # --- MoE run: where a side-lane op's tensors go back to the compute pool
    Mutant("moe-release-copy-edge", "pptl/run/moe.py",
           "(timed and start[i] >= end[j])", "(timed and start[i] > end[j])",
           ("tests/test_offload_costs.py::test_a_side_lane_op_frees_what_it_read_at_the_first_compute_op_ordered_"
            "after_it",),
           "an offloaded tensor held past the compute op the plan starts exactly at the copy's end"),
    Mutant("moe-release-any-lane", "pptl/run/moe.py",
           "waited.get(ops[j].lane, -1) >= pos[j]", "max(waited.values(), default=-1) >= pos[j]",
           ("tests/test_offload_costs.py::test_a_side_lane_op_frees_what_it_read_at_the_first_compute_op_ordered_"
            "after_it",),
           "a copy's tensors freed where compute waited on an all-to-all, not on the copy"),
    # --- run: message modes and the bias gradient
    Mutant("sync-send-tightens-receives", "pptl/run/program.py",
           'return tighten_messages(program, receives=messages == "inline")',
           'return tighten_messages(program, receives=messages != "overlap")',
           ("tests/test_run.py::test_sync_send_posts_a_receive_where_its_data_arrives_not_before_its_consumer",),
           "sync-send posts a RECV right before its consumer (looped-bfs's sender held 40-56 ms)"),
    Mutant("bias-grad-overwrites", "pptl/run/model.py",
           "b.grad.addmv_(du.t(), v)", "b.grad.addmv_(du.t(), v, beta=0)",
           ("tests/test_run_model.py::test_full_backward_after_a_kept_forward_accumulates_by_gemm_from_dropped_"
            "gradients",),
           "a micro-batch's bias gradient replaces the earlier ones' instead of adding to them"),
    # --- the controllable-memory V schedules and the plan writer
    Mutant("v-share-rounds-up", "pptl/schedules/v_shape.py",
           "cap = max(MIN_CAP, int(frac * one_f_one_b_chunks(cfg) + 1e-9))",
           "cap = max(MIN_CAP, round(frac * one_f_one_b_chunks(cfg)))",
           ("tests/schedules/test_v_capped.py::test_default_holds_the_papers_share_of_1f1b",),
           "v-min's 0.4 of 8 chunks (3.2) and v-half's 0.55 of 18 (9.9) round up: a plan holds more than its share"),
    Mutant("v-pattern-kept-only-under", "pptl/schedules/v_shape.py",
           "return None if pattern_chunks(variant, cfg) <= cap else cap",
           "return None if pattern_chunks(variant, cfg) < cap else cap",
           ("tests/schedules/test_v_capped.py::test_the_pattern_is_kept_exactly_where_it_fits",),
           "the paper's pattern, exactly at its share (v-half p = 19: 20 of int(20.9) chunks), is replaced by the capped order"),
    Mutant("v-capped-no-free-chunk", "pptl/schedules/_v_capped.py",
           "held + (2 if s == a else 1) > cap", "held + 1 > cap",
           ("tests/schedules/test_v_capped.py::test_two_ranks_two_chunks_by_hand",),
           "a micro-batch enters a rank that has no chunk left for its oldest micro-batch's chunk-1 forward: "
           "the order stalls"),
    Mutant("plan-o-figure-suffix", "pptl/planning.py",
           "    suffix = path.suffix.lower()", "    suffix = path.suffix",
           ("tests/test_cli_first_hour.py::test_plan_refuses_to_write_a_plan_under_a_figures_name",),
           "pptl plan -o best.HTML writes JSON under a figure's name"),
    Mutant("tune-duty-spread-edge", "pptl/tune/calibrate.py",
           "max(duty) / min(duty) < MIN_DUTY_SPREAD", "max(duty) / min(duty) <= MIN_DUTY_SPREAD",
           ("tests/test_tune.py::test_duty_fit_needs_a_spread_of_duty_that_shows_it",),
           "a run whose ranks' busy shares are exactly 1.4 apart gets the device's exponent, not its own"),
    Mutant("tune-short-layer-edge", "pptl/tune/calibrate.py",
           "not layer_f_ms < SHORT_LAYER_MS", "not layer_f_ms <= SHORT_LAYER_MS",
           ("tests/test_tune.py::test_short_layer_note_at_its_bound",),
           "a layer of exactly 0.3 ms is warned of as short"),
    Mutant("tune-other-model-total", "pptl/tune/calibrate.py",
           "return tuple(split) if min(split) >= 1 and sum(split) == tc.model.layers else None",
           "return tuple(split) if min(split) >= 0 and sum(split) == tc.model.layers else None",
           ("tests/test_tune_plan.py::test_costs_from_a_run_of_another_model_is_one_line",),
           "a run whose first stage held only the embedding's blocks calibrates a split with an empty stage"),
    Mutant("plan-synth-as-config", "pptl/planning.py",
           "return str(family) if isinstance(family, str) and family != inner.get(\"schedule\") else None",
           "return None",
           ("tests/test_tune_plan.py::test_cli_plan_of_a_synthesised_plan_is_the_order_it_holds",),
           "pptl plan best.json of a synthesised order re-builds its config's family and prints another step"),
    Mutant("tune-split-fewer-layers", "pptl/tune/split.py",
           "if c <= 0 or L < stages:", "if c <= 0 or L < stages - 1:",
           ("tests/test_tune.py::test_balanced_split_at_as_many_layers_as_stages",),
           "pptl tune of a model with one layer fewer than a family's stages is a traceback"),
    Mutant("files-device-renamed", "pptl/fileio.py",
           "if p.exists() and not p.is_file():", "if p.exists() and p.is_char_device():",
           ("tests/test_fileio.py::test_atomic_write_to_a_pipe_writes_into_it_and_keeps_it",),
           "-o into a named pipe puts a regular file in the pipe's place"),
    Mutant("whatif-seed-negative", "pptl/commands/whatif.py",
           'typer.Option("--seed", click_type=Whole(min=0)', 'typer.Option("--seed", click_type=Whole()',
           ("tests/test_whatif.py::test_cli_errors_are_one_line_exit_2",),
           "pptl whatif --seed -1 is a numpy traceback"),
    Mutant("export-rank-at-pp", "pptl/export.py",
           "bad = np.flatnonzero((rank < 0) | (rank >= schedule.pp))",
           "bad = np.flatnonzero((rank < 0) | (rank > schedule.pp))",
           ("tests/test_export.py::test_export_refuses_ops_on_a_rank_the_plan_has_not",),
           "a plan with ops on rank pp exports a CSV without them"),
    Mutant("stage-cost-at-num-stages", "pptl/planning.py",
           "out = sorted(s for s in stages if s >= num_stages)", "out = sorted(s for s in stages if s > num_stages)",
           ("tests/test_config.py::test_a_stage_cost_outside_the_plan_is_refused",),
           "a cost for stage p of a p-stage plan is silently ignored"),
    Mutant("memory-zero-time-frees-first", "pptl/simulate.py",
           "zero = (flag == 0) & (time == ", "zero = (flag == 0) & (time < ",
           ("tests/test_simulate.py::test_zero_time_ops_still_hold_their_activations",),
           "a zero-cost plan's peak is 0, so any memory limit passes"),
    Mutant("timeline-rank-at-pp", "pptl/formats/timeline.py",
           "if pp and e.rank >= pp:", "if pp and e.rank > pp:",
           ("tests/test_timeline_hostile.py::test_a_rank_outside_meta_pp_is_refused",),
           "an event on rank pp is drawn as a rank the run never had"),
    Mutant("flight-recorder-rank-bound", "pptl/formats/flight_recorder.py",
           "MAX_RANK = 1_000_000", "MAX_RANK = 999_999",
           ("tests/test_diagnose_hostile.py::test_the_largest_rank_taken_is_1000000",),
           "a group with rank 1,000,000 is refused"),
    # --- run: the GPU clock record (each rank's SM clock over its timed steps)
    Mutant("gpuclock-window-end-open", "pptl/run/gpuclock.py",
           "any(a <= s.ms <= b for a, b in windows)", "any(a <= s.ms < b for a, b in windows)",
           (_G + "test_only_samples_inside_timed_windows_count_ends_included",),
           "a clock sample taken exactly at a timed step's end left out of the rank's record"),
    Mutant("gpuclock-quantile-position", "pptl/run/gpuclock.py",
           "pos = q * (len(s) - 1)", "pos = q * len(s)",
           (_G + "test_only_samples_inside_timed_windows_count_ends_included",),
           "p10 and p90 of the clock read one place too high (1540 and 1800 MHz for 1530 and 1770)"),
    Mutant("gpuclock-quantile-one-sample", "pptl/run/gpuclock.py",
           "hi = min(lo + 1, len(s) - 1)", "hi = lo + 1",
           (_G + "test_no_sample_inside_gives_none_and_unknown_reasons_give_none",),
           "a rank with one clock sample inside its timed steps is an IndexError at the end of the run"),
    Mutant("gpuclock-cap-bit", "pptl/run/gpuclock.py",
           "_REASON_SW_POWER_CAP = 0x4", "_REASON_SW_POWER_CAP = 0x8",
           (_G + "test_only_samples_inside_timed_windows_count_ends_included",
            _G + "test_thermal_slowdown_counts_as_slowed_not_power_capped"),
           "the HW slowdown bit (0x8) read as the software power cap: a capped run recorded as never capped"),
    Mutant("gpuclock-slowing-no-power-brake", "pptl/run/gpuclock.py",
           "_REASON_SLOWING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80", "_REASON_SLOWING = 0x4 | 0x8 | 0x20 | 0x40",
           (_G + "test_every_power_and_thermal_bit_counts_as_slowed_and_no_other",
            _G + "test_thermal_slowdown_counts_as_slowed_not_power_capped"),
           "a clock held by the HW power brake (0x80) not counted as slowed: tune takes the run for free-running"),
    Mutant("gpuclock-reasons-zero-unknown", "pptl/run/gpuclock.py",
           "known = [s.reasons for s in inside if s.reasons >= 0]",
           "known = [s.reasons for s in inside if s.reasons > 0]",
           (_G + "test_only_samples_inside_timed_windows_count_ends_included",),
           "samples the driver said nothing held (reasons 0) dropped as unknown: the capped share overstated"),
    Mutant("gpuclock-none-checks-all-samples", "pptl/run/gpuclock.py",
           "    if not inside:\n        return None", "    if not samples:\n        return None",
           (_G + "test_no_sample_inside_gives_none_and_unknown_reasons_give_none",),
           "a rank whose samples all fall outside its timed steps is a StatisticsError, not 'no record'"),
    # --- pptl.power: whether a run's GPUs ran free of their power and thermal limits
    Mutant("power-free-share-at-limit", "pptl/power.py",
           "not 0 <= share < FREE_CLOCK_SHARE", "not 0 <= share <= FREE_CLOCK_SHARE",
           (_F + "test_unthrottled_only_when_every_rank_ran_free",),
           "a rank held in exactly 20% of its samples taken to run free: no duty law"),
    Mutant("power-more-records-than-ranks", "pptl/power.py",
           "if not isinstance(gpu, dict) or len(gpu) != ranks:", "if not isinstance(gpu, dict) or len(gpu) < ranks:",
           (_F + "test_unthrottled_only_when_every_rank_ran_free",
            _F + "test_unthrottled_needs_one_record_per_rank_and_a_number_for_a_share"),
           "a clock record of more ranks than the run's (another run's record) read as this run's"),
    Mutant("power-bool-share", "pptl/power.py",
           "or isinstance(share, bool) or not 0 <= share", "or not 0 <= share",
           (_F + "test_unthrottled_only_when_every_rank_ran_free",
            _F + "test_unthrottled_needs_one_record_per_rank_and_a_number_for_a_share"),
           "a record whose 'slowed' is false (a flag, not a share) read as held in 0% of samples"),
    # --- memory: rounding slack relative to the activation, not absolute
    Mutant("peak-slack-absolute", "pptl/simulate.py",
           "slack = rounding_slack(delta[lo:hi], 1e-12)", "slack = 1e-12",
           ("tests/test_boundaries_hunt.py::test_peak_counts_activations_of_a_tiny_unit",
            "tests/test_mutation_sample.py::test_peak_pass_applies_the_tolerance"),
           "activations of 1e-13 units counted as rounding: every rank's peak 0"),
    Mutant("limit-slack-absolute", "pptl/checks/memory.py",
           "cur > limit + rounding_slack(ev.delta[lo:hi], 1e-9)", "cur > limit + 1e-9",
           ("tests/test_boundaries_hunt.py::test_memory_limit_one_micro_batch_under_a_tiny_peak_fails",),
           "a peak of 4e-9 passes a memory limit of 3e-9 (PP009 missed in a large unit)"),
    Mutant("formula-bound-slack-absolute", "pptl/checks/family_memory.py",
           "r.peak_activation > bound + _slack(cfg)", "r.peak_activation > bound + 1e-9",
           ("tests/test_boundaries_hunt.py::test_memory_formula_bound_warning_in_a_tiny_unit",),
           "a plan over its family's formula in a large unit (9e-10 against 4e-10) gets no PP023"),
    # --- diagnose: a group made again numbers its collectives from #1; dtypes that a dump leaves out
    Mutant("diagnose-epoch-equal-restarts", "pptl/diagnose/waits.py",
           "if e.collective_seq_id < top.get(e.group, -1):", "if e.collective_seq_id <= top.get(e.group, -1):",
           ("tests/test_inputs_hunt.py::test_a_coalesced_collective_shares_one_number_and_is_no_new_numbering",
            "tests/test_inputs_hunt.py::test_a_group_numbered_again_blames_the_rank_that_stopped"),
           "the members of a coalesced collective (one number) taken for a group made again"),
    Mutant("diagnose-epoch-from-oldest", "pptl/diagnose/waits.py",
           "return [epoch.get(e.group, 0) - k for e, k in zip(entries, out)]", "return out",
           ("tests/test_inputs_hunt.py::test_a_group_numbered_again_blames_the_rank_that_stopped",),
           "numberings counted from each dump's oldest call: a rank whose ring buffer lost the older numbering "
           "is matched against the other ranks' older calls"),
    Mutant("diagnose-dtype-unrecorded-collective", "pptl/diagnose/counts.py",
           "return len({o.dtypes for o in calls if o.dtypes}) > 1", "return len({o.dtypes for o in calls}) > 1",
           ("tests/test_inputs_hunt.py::test_a_call_recorded_without_dtypes_is_no_evidence_of_a_dtype_mismatch",
            "tests/test_inputs_hunt.py::test_matching_dtypes_are_no_fact_and_a_bad_dtype_field_is_one_line",
            "tests/test_diagnose_corpus.py::test_collective_dtype_recorded_on_gpus_is_named_as_torchfrtrace_names_it"),
           "a collective recorded without dtypes on one rank called a dtype mismatch"),
    Mutant("diagnose-dtype-unrecorded-p2p", "pptl/diagnose/ops.py",
           "return bool(a.dtypes) and bool(b.dtypes) and a.dtypes != b.dtypes", "return a.dtypes != b.dtypes",
           ("tests/test_inputs_hunt.py::test_a_call_recorded_without_dtypes_is_no_evidence_of_a_dtype_mismatch",
            "tests/test_inputs_hunt.py::test_a_send_and_its_receive_of_other_dtypes_are_the_cause"),
           "a send recorded without dtypes against its receive with them called a dtype mismatch"),
    # --- run report: each rank's clock, in rank order
    Mutant("report-gpu-rank-order-text", "pptl/run/report.py",
           "for rank in sorted(gpu, key=rank_order):", "for rank in sorted(gpu, key=str):",
           (_G + "test_run_summary_prints_each_rank_clock_in_rank_order",),
           "the run summary prints rank 10's clock before rank 2's"),
    Mutant("power-rank-order-as-text", "pptl/power.py",
           'return (0, int(text), "")', "return (0, 0, text)",
           (_F + "test_ranks_are_named_in_number_order", _F + "test_one_rank_order_for_the_clock_record"),
           "the clock record's ranks in text order: rank 10 before rank 2"),
)


def _copy_tree(dst: Path) -> None:
    for name in ("pptl", "tests", "fixtures"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(ROOT / "pyproject.toml", dst / "pyproject.toml")


def run_one(m: Mutant) -> tuple[str, str]:
    """(outcome, detail): killed, SURVIVED, stale or error."""
    with tempfile.TemporaryDirectory(prefix="pptl-mutant-") as tmp:
        dst = Path(tmp)
        _copy_tree(dst)
        target = dst / m.path
        text = target.read_text()
        if text.count(m.old) != 1:
            return "stale", f"{m.old!r} found {text.count(m.old)} times in {m.path}"
        target.write_text(text.replace(m.old, m.new))
        env = dict(os.environ, PYTHONPATH=str(dst), PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *m.tests],
                           cwd=dst, env=env, capture_output=True, text=True, timeout=900)
        fail = next((line for line in r.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
        if r.returncode == 1:
            return "killed", fail
        if r.returncode == 0:
            return "SURVIVED", "its tests passed"
        return "error", f"pytest exit {r.returncode}: {r.stdout.strip().splitlines()[-1:]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated names or 1-based numbers")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--extra", type=Path, help="a Python file whose MUTANTS (of this Mutant) are run instead")
    args = ap.parse_args()
    table = MUTANTS
    if args.extra is not None:
        spec = importlib.util.spec_from_file_location("extra_mutants", args.extra)
        assert spec is not None and spec.loader is not None
        extra = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(extra)
        table = tuple(extra.MUTANTS)
    picked = list(enumerate(table, 1))
    if args.only:
        want = set(args.only.split(","))
        picked = [(k, m) for k, m in picked if m.name in want or str(k) in want]
    if args.list:
        for k, m in picked:
            print(f"{k:>2} {m.name:<28} {m.path}: {m.bug}")
        return 0
    outcomes: dict[str, int] = {}
    for k, m in picked:
        t = time.monotonic()
        outcome, detail = run_one(m)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        print(f"{k:>2} {m.name:<28} {outcome:<8} {time.monotonic() - t:5.1f} s  {detail}", flush=True)
    print(", ".join(f"{v} {k}" for k, v in sorted(outcomes.items())))
    return 0 if set(outcomes) <= {"killed"} else 1


if __name__ == "__main__":
    sys.exit(main())
