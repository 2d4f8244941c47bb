"""Sampled mutation run (`make mutate-sample`): a fixed-seed random sample of mutmut's mutants per module.

The full run (`make mutate`) is ~9,900 mutants, hours on 2 cores. This draws SIZE mutants from each module
group below with `random.Random(f"{SEED}:{group}")` over mutmut's sorted mutant names, so the same seed,
size and source give the same sample; mutmut then runs just those (`mutmut run NAME...`, each against the
tests that reach its function) and this prints the kill rate per group and every survivor's name
(`python3 -m mutmut show NAME` prints its diff).

    python3 tests/mutate_sample.py --seed 2026 --size 50 --jobs 2        # sample, run, report
    python3 tests/mutate_sample.py --seed 2026 --size 50 --list          # only print the sample
    python3 tests/mutate_sample.py --seed 2026 --size 50 --report        # report the last run's results

Pinned to mutmut 3.8.1: it enumerates mutants with `mutmut.mutation.file_mutation.mutate_file_contents`
(what `mutmut run` writes to mutants/) and reads results from mutants/<path>.meta.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (group, files): the modules of issue 23's kill-rate goal, in the order reported.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pptl/checks", ("pptl/checks/*.py",)),
    ("pptl/simulate.py", ("pptl/simulate.py",)),
    ("pptl/deps.py", ("pptl/deps.py",)),
    ("pptl/schedules", ("pptl/schedules/*.py",)),
    ("pptl/formats/torch_csv.py", ("pptl/formats/torch_csv.py",)),
)

# mutmut's exit-code meaning (mutmut.stats.status_by_exit_code, 3.8.1); a timeout counts as killed, as mutmut's own score does.
KILLED = {1: "killed", 3: "killed", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}
NO_TESTS = {5, 33}


@dataclass(frozen=True)
class Mutant:
    group: str
    source: str  # path of the mutated file, relative to ROOT
    name: str  # mutmut's name, e.g. pptl.deps.x_roles__mutmut_3


def mutants_of(source: str) -> list[str]:
    """Every mutant name mutmut makes for one file, as `mutmut run` would (no coverage filter)."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    path = Path(source)
    mutated = mutate_file_contents(source, (ROOT / path).read_text())
    return sorted(get_mutant_name(path, n) for n in mutated.mutant_names)


def sample(seed: int, size: int) -> list[Mutant]:
    picked: list[Mutant] = []
    for group, patterns in GROUPS:
        pool: list[Mutant] = []
        for pattern in patterns:
            for file in sorted(ROOT.glob(pattern)):
                src = str(file.relative_to(ROOT))
                pool.extend(Mutant(group, src, n) for n in mutants_of(src))
        # The name order is fixed by the source, so the seed alone decides the sample.
        rng = random.Random(f"{seed}:{group}")
        chosen = rng.sample(pool, min(size, len(pool)))
        picked.extend(sorted(chosen, key=lambda m: m.name))
    return picked


def exit_codes(mutants: Sequence[Mutant]) -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for src in {m.source for m in mutants}:
        meta = ROOT / "mutants" / (src + ".meta")
        if meta.exists():
            codes.update(json.loads(meta.read_text()).get("exit_code_by_key", {}))
    return {m.name: codes.get(m.name) for m in mutants}


def report(mutants: Sequence[Mutant]) -> int:
    codes = exit_codes(mutants)
    print(f"{'module':28} {'sampled':>7} {'killed':>6} {'survived':>8} {'no test':>7} {'other':>5} {'kill rate':>9}")
    survivors: list[str] = []
    for group, _ in GROUPS:
        mine = [m for m in mutants if m.group == group]
        killed = sum(codes[m.name] in KILLED for m in mine)
        lived = [m.name for m in mine if codes[m.name] == 0]
        untested = sum(codes[m.name] in NO_TESTS for m in mine)
        other = len(mine) - killed - len(lived) - untested
        reached = killed + len(lived)
        rate = f"{100 * killed / reached:.0f}%" if reached else "-"
        print(f"{group:28} {len(mine):7} {killed:6} {len(lived):8} {untested:7} {other:5} {rate:>9}")
        survivors += lived
    for name in survivors:
        print(f"survived: {name}")
    for m in mutants:
        if codes[m.name] not in KILLED and codes[m.name] != 0:
            print(f"not killed ({codes[m.name]}): {m.name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--size", type=int, default=50, help="mutants per module group")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--group", action="append", help="only these groups (default all)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print the sample and stop")
    mode.add_argument("--report", action="store_true", help="report the last run's results without running")
    args = ap.parse_args(argv)

    mutants = sample(args.seed, args.size)
    if args.group:
        mutants = [m for m in mutants if m.group in args.group]
    if args.list:
        print("\n".join(m.name for m in mutants))
        return 0
    if not args.report:
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.jobs), *(m.name for m in mutants)]
        # mutmut exits non-zero on survivors in some versions; the table below is the result either way.
        subprocess.run(cmd, cwd=ROOT, check=False)
    return report(mutants)


if __name__ == "__main__":
    sys.exit(main())
