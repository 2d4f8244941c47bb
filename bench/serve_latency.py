"""How long `pptl serve` takes to redraw after a change: server time + client render, in Chromium.

    python bench/serve_latency.py [--repeat 7]

Starts the explorer on a free port, opens it in headless Chromium (playwright, the system
chromium), and for each case types a new cost into the page (a new value each time, so nothing
comes from the plan cache) and reads the page's own timings: server (plan + check + simulate +
figure data), fetch (request to parsed answer, server included), render (Plotly.react and the
panels) and total (fetch + render; the 150 ms typing debounce is not included). Prints the
minimum and the median per case.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import threading

from playwright.sync_api import sync_playwright

from pptl.serve.server import make_server

CASES = [
    ("1f1b pp=8 m=64", "schedule=1f1b&pp=8&microbatches=64"),
    ("interleaved-1f1b pp=8 vpp=2 m=64", "schedule=interleaved-1f1b&pp=8&vpp=2&microbatches=64"),
    ("zb-h1 pp=8 m=64 (split I/W)", "schedule=zb-h1&pp=8&microbatches=64"),
    ("1f1b vs zb-h1 pp=8 m=64 (two)", "schedule=1f1b&pp=8&microbatches=64&compare=zb-h1&compare_vpp=1"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    srv = make_server("127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        print(f"{'case':36} {'blocks':>6} {'server':>14} {'fetch':>14} {'render':>14} {'total':>14}   (min / median ms)")
        for name, params in CASES:
            page = browser.new_page(viewport={"width": 1400, "height": 900})  # a fresh page: a new hash only
            page.goto(f"{srv.url}#{params}&cost.F=1&cost.B=2&cost.I=1&cost.W=1")  # would not reload
            page.wait_for_function("() => Number(document.body.dataset.done || 0) >= 1")
            rows = []
            for i in range(args.repeat):
                done = int(page.evaluate("document.body.dataset.done"))
                page.locator('[name="cost.F"]').fill(f"{1 + (i + 1) / 1000:g}")
                page.wait_for_function(f"() => Number(document.body.dataset.done) > {done} && "
                                       "document.body.dataset.state !== 'busy'", timeout=120_000)
                state = page.evaluate("document.body.dataset.state")
                if state != "idle":
                    raise SystemExit(f"{name}: the page says {state}: {page.inner_text('body')[:300]}")
                rows.append(page.evaluate("window.pptl.timings[window.pptl.timings.length - 1]"))
            cols = []
            for key in ("server_ms", "fetch_ms", "render_ms", "total_ms"):
                vals = [r[key] for r in rows]
                cols.append(f"{min(vals):6.0f} / {statistics.median(vals):5.0f}")
            print(f"{name:36} {rows[-1]['blocks']:6d} " + " ".join(f"{c:>14}" for c in cols))
            page.close()
        browser.close()
    srv.shutdown()


if __name__ == "__main__":
    main()
