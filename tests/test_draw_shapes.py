"""bench/draw_shapes.py: the held-out shapes and whatif calls the benchmarks report are the ones their
seeds draw (anyone can draw them again), and every draw lies in the issue's ranges."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import draw_shapes  # noqa: E402
import tune_crossval  # noqa: E402


def _as_rows(shapes: tuple[tune_crossval.Shape, ...]) -> list[tuple[str, int, int, int, int, int, int]]:
    return [(s.name, s.hidden, s.tokens, s.layers, s.embedding, s.head, s.microbatches) for s in shapes]


def test_the_script_drawn_crossval_groups_are_their_seeds_draws() -> None:
    assert len(tune_crossval.DRAWN_SEEDS) == 29
    for name, seed in tune_crossval.DRAWN_SEEDS.items():
        shapes = tune_crossval.GROUPS[name]
        assert _as_rows(shapes) == draw_shapes.draw_tune(seed, len(shapes), pp=shapes[0].pp), name
    assert {s.pp for s in tune_crossval.FOURTEENTH_SHAPES + tune_crossval.FIFTEENTH_SHAPES} == {4}


def test_the_whatif_calls_15_to_18_are_their_seeds_draws() -> None:
    # the options each call ran with, as its stored machine.txt records them
    data = ROOT / "tests" / "data" / "whatif_gpu"
    for seed, call in ((202611280001, "call15_h3200"), (202611280002, "call16_h2432"),
                       (202611280003, "call17_h3968"), (202611280004, "call18_h2816")):
        ran = (data / call / "machine.txt").read_text()
        assert f"bench/whatif_gpu.sh OUT {draw_shapes.draw_whatif(seed)}," in ran, call


def test_the_whatif_calls_19_to_35_are_their_seeds_draws() -> None:
    data = ROOT / "tests" / "data" / "whatif_gpu"
    for seed, pp, call in ((202611280301, 4, "call19_h2176_p4"), (202611280402, 2, "call20_h3712"),
                           (202611280403, 2, "call21_h2304"), (202611281001, 2, "call22_h3968"),
                           (202611281002, 2, "call23_h3584"), (202611281003, 2, "call24_h2304"),
                           (202611281004, 2, "call25_h3072"), (202611281005, 2, "call26_h2432"),
                           (202611281006, 2, "call27_h3072"), (202611281007, 2, "call28_h4096"),
                           (202611281008, 2, "call29_h3072"), (202611281009, 2, "call30_h2560"),
                           (202611281010, 2, "call31_h2432"), (202611281011, 2, "call32_h3584"),
                           (202611281012, 2, "call33_h2176"), (202611281013, 2, "call34_h2048"),
                           (202611281014, 2, "call35_h3840")):
        ran = (data / call / "machine.txt").read_text()
        # from call 34 the calibrating plan also ran in a first launch of its own (a flag, not the draw)
        assert (" --first-launch," in ran) is (call in ("call34_h2048", "call35_h3840")), call
        assert f"bench/whatif_gpu.sh OUT {draw_shapes.draw_whatif(seed, pp)}," in ran.replace(" --first-launch,", ","), call


def test_tune_draws_lie_in_the_issue_ranges_and_the_step_budget() -> None:
    for seed in range(40):
        (name, h, t, layers, emb, head, m), = draw_shapes.draw_tune(seed, 1)
        assert 2048 <= h <= 8192 and h % 128 == 0
        assert 1024 <= t <= 8192 and t % 256 == 0
        assert layers % 2 == 0 and 4 <= layers // 2 <= 16
        assert 1 <= emb <= 2 <= head <= 4 and 4 <= m <= 32
        assert name == f"h{h}-t{t}-l{layers // 2}-m{m}"
        assert draw_shapes.step_ms(h, t, layers + emb + head, m) <= draw_shapes.MAX_STEP_MS


def test_pp4_draws_spread_their_layers_over_four_stages_and_keep_the_step_budget() -> None:
    for seed in range(40):
        (name, h, t, layers, emb, head, m), = draw_shapes.draw_tune(seed, 1, pp=4)
        assert layers % 4 == 0 and 4 <= layers // 4 <= 16
        assert name == f"h{h}-t{t}-l{layers // 4}-m{m}-p4"
        assert draw_shapes.step_ms(h, t, layers + emb + head, m, 4) <= draw_shapes.MAX_STEP_MS


def test_pp2_draws_are_unchanged_by_the_pp_option() -> None:
    # seed 202611280000's first draw, as ELEVENTH_SHAPES stored it before pp was an option
    assert draw_shapes.draw_tune(202611280000, 1) == draw_shapes.draw_tune(202611280000, 1, pp=2) \
        == [("h2688-t1792-l12-m6", 2688, 1792, 24, 2, 3, 6)]


def test_the_cli_refuses_a_pp_it_cannot_run_and_a_count_for_whatif() -> None:
    assert draw_shapes.main(["tune", "7", "2", "--pp", "3"]) == 2
    assert draw_shapes.main(["whatif", "7", "8"]) == 2
    assert draw_shapes.main(["tune", "7", "two"]) == 2


def test_step_estimate_by_hand() -> None:
    # hidden 4096, 2048 tokens, 10 blocks, 8 micro-batches on 2 GPUs: 48 * 2048 * 4096^2 * 10 * 8 / 2 FLOPs
    # = 6.597e13 per GPU, at 5e14 FLOP/s: 131.9 ms
    assert abs(draw_shapes.step_ms(4096, 2048, 10, 8) - 131.94) < 0.01
    # the same work over 4 GPUs: half
    assert abs(draw_shapes.step_ms(4096, 2048, 10, 8, 4) - 65.97) < 0.01


def test_pp4_whatif_draws_slow_any_of_the_four_ranks_and_name_the_gpus() -> None:
    ranks = set()
    for seed in range(60):
        words = draw_shapes.draw_whatif(seed, 4).split()
        opts = dict(zip(words[::2], words[1::2]))
        assert opts["--gpus"] == "4"
        ranks.add(int(opts["--slow-rank"]))
        # the other options are the pp-2 draw's: the rank is the one draw that depends on pp
        assert draw_shapes.draw_whatif(seed, 4).split()[:6] == draw_shapes.draw_whatif(seed).split()[:6]
    assert ranks == {0, 1, 2, 3}


def test_whatif_draws_lie_in_their_ranges() -> None:
    for seed in range(40):
        words = draw_shapes.draw_whatif(seed).split()
        opts = dict(zip(words[::2], words[1::2]))
        assert 2048 <= int(opts["--hidden"]) <= 4096 and 1024 <= int(opts["--tokens"]) <= 4096
        assert 2 <= int(opts["--layers"]) <= 6 and opts["--slow-rank"] in ("0", "1")
        assert 1.1 <= float(opts["--slow-factor"]) <= 1.3
