"""The explorer's HTTP server: routes, limits, errors, and that no request takes it down."""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.serve import api
from pptl.serve.server import MAX_BODY_BYTES, make_server

ROOT = Path(__file__).resolve().parent.parent




def _request(srv: object, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
    if headers is None and method == "POST":
        headers = {"Content-Type": "application/json"}  # what the page sends
    conn.request(method, path, body=body, headers=headers or {})
    res = conn.getresponse()
    data = res.read()
    conn.close()
    return res.status, {k.lower(): v for k, v in res.getheaders()}, data


def _plan(srv: object, params: dict, **extra: object) -> tuple[int, dict]:
    status, _, data = _request(srv, "POST", "/api/plan", json.dumps({"params": params, **extra}).encode(),
                               {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_page_and_scripts_are_served_locally(server) -> None:
    srv, _ = server
    status, headers, page = _request(srv, "GET", "/")
    assert status == 200 and b"/static/plotly.min.js" in page
    assert "default-src 'self'" in headers["content-security-policy"]
    # Every script and stylesheet the page names comes from this server.
    for src in re.findall(rb'(?:src|href)="([^"#]+)"', page):
        assert src.startswith(b"/static/"), src
        status, headers, body = _request(srv, "GET", src.decode())
        assert status == 200 and len(body) > 100
    status, _, js = _request(srv, "GET", "/static/plotly.min.js")
    assert b"plotly.js" in js[:2000] and len(js) > 1_000_000


def test_plan_round_trip_and_server_timing(server) -> None:
    srv, _ = server
    status, headers, data = _request(srv, "POST", "/api/plan", json.dumps(
        {"params": {"schedule": "zb-h1", "pp": "4", "microbatches": "8"}}).encode())
    body = json.loads(data)
    assert status == 200 and body["a"]["family"] == "zb-h1"
    assert headers["server-timing"].startswith("plan;dur=")


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), [
    ("POST", "/api/plan", b"{not json", 400, "request: not valid JSON"),
    ("POST", "/api/plan", b"[1, 2]", 400, "expected a JSON object"),
    ("POST", "/api/plan", b'{"params": {"pp": NaN}}', 400, "not valid JSON"),
    ("POST", "/api/plan", b'{"params": {"schedule": "1f1b", "pp": "4", "microbatches": "8"}, "seq": "x"}', 400,
     "seq an integer"),
    ("POST", "/api/nope", b"{}", 404, "no such endpoint"),
    ("GET", "/static/../server.py", None, 404, "no such file"),
    ("GET", "/etc/passwd", None, 404, "no such page"),
    ("GET", "/api/download/exe?schedule=1f1b&pp=4&microbatches=8", None, 400, "expected one of plan, png"),
    ("GET", "/api/download/plan?" + "&".join(f"cost.K{i}=1" for i in range(80)), None, 400,
     "more than 64 parameters"),
], ids=["bad-json", "not-object", "nan", "seq", "post-404", "traversal", "get-404", "download-kind", "many-params"])
def test_bad_requests_get_one_json_line(server, method: str, path: str, body: bytes | None, status: int,
                                        message: str) -> None:
    srv, logged = server
    got, headers, data = _request(srv, method, path, body)
    assert got == status
    err = json.loads(data)
    assert message in err["error"] and "\n" not in err["error"]
    assert logged == []  # user errors are answers, not server errors


def test_user_error_names_its_field(server) -> None:
    srv, _ = server
    status, body = _plan(srv, {"schedule": "1f1b", "pp": "0", "microbatches": "8"})
    assert status == 400 and body == {"error": "field 'pp': got 0, expected an integer >= 1", "field": "pp"}


def test_oversized_and_unsized_bodies_are_refused(server) -> None:
    srv, _ = server
    status, _, data = _request(srv, "POST", "/api/plan", b"x" * (MAX_BODY_BYTES + 1))
    assert status == 413 and "at most 65536" in json.loads(data)["error"]
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    conn.putrequest("POST", "/api/plan")
    conn.putheader("Content-Type", "application/json")
    conn.endheaders()
    res = conn.getresponse()
    assert res.status == 411
    conn.close()


def test_a_bug_is_500_one_line_logged_and_the_server_goes_on(server, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, logged = server

    def broken(*a: object, **k: object) -> None:
        raise ZeroDivisionError("boom\nsecond line")

    monkeypatch.setattr(api, "plan_view", broken)
    status, body = _plan(srv, {"schedule": "1f1b", "pp": "4", "microbatches": "8"})
    assert status == 500 and body == {"error": "internal error: ZeroDivisionError: boom second line", "field": None}
    assert len(logged) == 1 and logged[0].startswith("error: POST /api/plan: ZeroDivisionError: boom second line at ")
    monkeypatch.undo()
    status, body = _plan(srv, {"schedule": "1f1b", "pp": "4", "microbatches": "8"})
    assert status == 200


def test_a_client_that_hangs_up_does_not_stop_the_server(server) -> None:
    srv, logged = server
    s = socket.create_connection(("127.0.0.1", srv.server_address[1]))
    s.sendall(b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"par")
    s.close()
    s = socket.create_connection(("127.0.0.1", srv.server_address[1]))
    s.sendall(b"GARBAGE\r\n\r\n")
    s.recv(1000)
    s.close()
    status, _ = _plan(srv, {"schedule": "1f1b", "pp": "4", "microbatches": "8"})
    assert status == 200


def test_a_superseded_request_is_dropped_before_planning(server) -> None:
    srv, _ = server
    params = {"schedule": "1f1b", "pp": "4", "microbatches": "8"}
    assert _plan(srv, params, client="page1", seq=5)[0] == 200
    status, body = _plan(srv, params, client="page1", seq=4)  # older than what the page asked since
    assert status == 409 and "superseded" in body["error"]
    assert _plan(srv, params, client="page2", seq=1)[0] == 200  # another page is not affected


def test_foreign_host_header_is_refused(server) -> None:
    srv, _ = server
    status, _, data = _request(srv, "GET", "/api/init", headers={"Host": "evil.example:8000"})
    assert status == 403 and "Host" in json.loads(data)["error"]
    assert _request(srv, "GET", "/api/init", headers={"Host": f"localhost:{srv.server_address[1]}"})[0] == 200


def test_download_sets_attachment_name(server) -> None:
    srv, _ = server
    status, headers, data = _request(srv, "GET", "/api/download/csv?schedule=1f1b&pp=2&microbatches=2")
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert headers["content-disposition"] == 'attachment; filename="1f1b-pp2-mb2.csv"'
    assert data.decode().splitlines()[0].startswith("0F0")


def test_port_in_use_is_one_line() -> None:
    srv = make_server("127.0.0.1", 0)
    try:
        with pytest.raises(InputError, match=r"--port \d+: cannot listen there: .*pick another --port"):
            make_server("127.0.0.1", srv.server_address[1])
    finally:
        srv.server_close()


def test_an_unknown_host_is_one_line_naming_the_host() -> None:
    with pytest.raises(InputError, match=r"--host no-such-host\.invalid --port 0: cannot listen there: .*; "
                       r"check --host$"):
        make_server("no-such-host.invalid", 0)


# -- the command line ---------------------------------------------------------------------------


def _pptl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pptl", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def test_cli_serve_starts_from_a_config_and_prints_its_address() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # An absolute path, as a user's shell completion gives it: the page learns the file's name only.
    proc = subprocess.Popen([sys.executable, "-m", "pptl", "serve", str(ROOT / "fixtures" / "interleaved.yaml"),
                             "--port", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.fullmatch(r"pptl serve: open http://127\.0\.0\.1:(\d+)/ \(Ctrl\+C stops\)\n", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=30)
        conn.request("GET", "/api/init")
        raw = conn.getresponse().read()
        init = json.loads(raw)
        assert init["params"]["schedule"] == "interleaved-1f1b" and init["config"] == "interleaved.yaml"
        assert str(ROOT).encode() not in raw and b"fixtures/" not in raw
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("args", "message"), [
    (["serve", "fixtures/nope.yaml", "--port", "0"], "error: fixtures/nope.yaml: no such file"),
    (["serve", "--port", "70000"], "error: --port: got 70000, expected an integer from 0 to 65535"),
    (["serve", "--host", "203.0.113.7", "--port", "0"], "error: --host 203.0.113.7 --port 0: cannot listen there"),
], ids=["missing-config", "bad-port", "foreign-host"])
def test_cli_serve_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    res = _pptl(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().startswith(message) and len(res.stderr.strip().splitlines()) == 1
