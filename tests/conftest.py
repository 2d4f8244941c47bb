from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    """Under CI=true, refuse to start when a part of the suite could not run.

    The run tests skip without torch and the browser test without chromium: fine on a laptop, but in
    CI a failed install would otherwise turn into a green build with those tests unrun.
    """
    if os.environ.get("CI", "").lower() not in ("true", "1"):
        return
    missing = []
    if importlib.util.find_spec("torch") is None:
        missing.append("torch (the `pptl run` tests)")
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        missing.append("chromium (the browser tests)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("playwright (the browser test of pptl serve)")
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise pytest.UsageError(f"CI=true but {' and '.join(missing)} {verb} not installed, so those tests would skip; "
                                "run `make install-test` or unset CI")


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def server() -> Iterator[tuple[object, list[str]]]:
    """A `pptl serve` server on a free loopback port in a thread, and the lines it logged."""
    import threading

    from pptl.serve.server import make_server

    logged: list[str] = []
    srv = make_server("127.0.0.1", 0, log=logged.append)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv, logged
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if a run gets as far as starting its processes."""
    import pptl.run.launcher

    def launch(*a, **k):
        raise AssertionError("pptl run started processes")

    monkeypatch.setattr(pptl.run.launcher, "launch", launch)
