"""Scale of the renderers: time and output size for PNG, SVG and HTML at 1k, 10k and 100k ops.

The timeline is 1F1B-shaped on 16 ranks (``pptl.render.samples.scaled``) with every op a drawn
block, the worst case for a renderer (planned timelines also hold zero-time RECVs and lanes that
are not drawn). Each case is timed from the Timeline to the bytes written, layout included, after
the libraries are imported (import costs are printed once, separately). Prints a markdown table.
Target (issue 3): 100k ops to PNG in under 5 s on a 2-core machine.

    python bench/render_scale.py [--ops 1000,10000,100000] [--formats png,svg,html] [--repeat 1]
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

# This checkout's pptl, not the installed one: several checkouts are timed side by side.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _imports() -> dict[str, float]:
    out = {}
    for name, stmt in (("matplotlib", "import matplotlib.figure, matplotlib.backends.backend_agg"),
                       ("plotly", "import plotly.io")):
        t = time.perf_counter()
        exec(stmt, {})
        out[name] = time.perf_counter() - t
    return out


def one(ops: int, fmt: str, folder: Path) -> tuple[int, float, int]:
    from pptl.render import write_file
    from pptl.render.layout import build_layout
    from pptl.render.samples import scaled

    tl = scaled(ops, ranks=16)
    path = folder / f"t{ops}.{fmt}"
    t = time.perf_counter()
    write_file(tl, path)
    dt = time.perf_counter() - t
    return len(build_layout(tl).blocks), dt, path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="1000,10000,100000")
    ap.add_argument("--formats", default="png,svg,html")
    ap.add_argument("--repeat", type=int, default=1, help="Runs per case; the fastest is reported.")
    args = ap.parse_args()
    imports = _imports()
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}; "
          f"imports: matplotlib {imports['matplotlib']:.2f} s, plotly {imports['plotly']:.2f} s (not in the table)")
    print()
    print("| ops | blocks | format | seconds | size |")
    print("|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for ops in (int(x) for x in args.ops.split(",")):
            for fmt in args.formats.split(","):
                runs = [one(ops, fmt, Path(tmp)) for _ in range(max(1, args.repeat))]
                blocks, dt, size = min(runs, key=lambda r: r[1])
                print(f"| {ops} | {blocks} | {fmt.upper()} | {dt:.2f} | {size / 1e6:.2f} MB |", flush=True)


if __name__ == "__main__":
    main()
