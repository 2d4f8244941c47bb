"""``pptl serve``: the browser page (the page and its API live in pptl/serve/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import Whole, say

__all__ = ["serve"]


def serve(
    config: Annotated[Optional[Path], typer.Argument(metavar="CONFIG", help="Config (or plan) file to start from (YAML, TOML or JSON).",
                                                     show_default=False)] = None,
    port: Annotated[int, typer.Option("--port", click_type=Whole(min=0, max=65535),
                                      help="TCP port (0 picks a free one).")] = 8000,
    host: Annotated[str, typer.Option("--host", metavar="ADDRESS", help="Address to listen on; other machines reach "
                                      "it only if you name a non-loopback one (e.g. 0.0.0.0).")] = "127.0.0.1",
) -> None:
    """Explore schedules in the browser, offline.

    Change pp, micro-batches, costs, memory limit and see the timeline, metrics and violations
    redrawn; compare two families; download plan, figure, CSV.
    """
    import sys

    from pptl.serve.server import make_server

    cfg = None
    if config is not None:
        from pptl.errors import InputError
        from pptl.planning import load_config_or_plan

        try:
            cfg = load_config_or_plan(config)
        except InputError as e:
            from pptl.commands._shared import not_a_config

            raise not_a_config(config, e, lambda what: "pptl serve starts from a schedule config or a plan "
                               "(pptl plan -o)") from None
    server = make_server(host, port, config=cfg, log=lambda line: say(line, stderr=True))
    if host not in ("127.0.0.1", "localhost", "::1"):
        say(f"warning: listening on {host}: other machines on the network can open this page", stderr=True)
    say(f"pptl serve: open {server.url} (Ctrl+C stops)")
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()

