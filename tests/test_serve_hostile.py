"""The explorer against hostile requests: Host headers shaped like loopback names, cross-origin and
non-JSON POSTs, clients that go away mid-request, and paths of this machine in answers.

Every expectation is written out by hand (what a browser or an attacker sends, and what must come
back), not taken from the server's own parse.
"""
from __future__ import annotations

import http.client
import json
import socket
import struct
import time

import pytest

from pptl.config import Config
from pptl.serve import api
from pptl.serve.server import host_name, same_origin

PARAMS = {"schedule": "1f1b", "pp": "2", "microbatches": "2"}




def _port(srv: object) -> int:
    return srv.server_address[1]  # type: ignore[attr-defined]


def _send(srv: object, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", _port(srv), timeout=60)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    res = conn.getresponse()
    res.read()
    conn.close()
    return res.status


# ----------------------------------------------------------------------------------------------
# Host header


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1:8000", "127.0.0.1"),
    ("LOCALHOST:80", "localhost"),
    ("  localhost:65535  ", "localhost"),
    ("[::1]:8000", "[::1]"),
    ("[::1]", "[::1]"),
    ("localhost:", "localhost"),  # an empty port is the default one (RFC 3986)
    ("127.0.0.1.evil.com", "127.0.0.1.evil.com"),  # a name of its own, not a loopback one
    ("localhost.attacker", "localhost.attacker"),
    ("localhost.attacker:8000", "localhost.attacker"),
    ("localhost:80:80", None),
    ("::1", None),  # IPv6 without brackets is no Host
    ("localhost@evil.com", None),
    ("evil.com@localhost", None),
    ("localhost:8x", None),
    ("localhost:123456", None),  # six digits
    ("localhost:\u0661\u0662", None),  # Arabic-Indic digits are digits to str.isdigit
    ("local host", None),
    ("localhost/x", None),
    ("localhost#x", None),
    ("[::1]x", None),
    ("", None),
    (None, None),
], ids=repr)
def test_host_name_of_each_header_shape(header: str | None, name: str | None) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize("host", ["127.0.0.1.evil.com", "localhost.attacker", "localhost.attacker:{port}",
                                  "127.0.0.1.nip.io:{port}", "localhost:{port}:{port}", "evil.com@localhost",
                                  "localhost:{port}x", "127.0.0.2", "0.0.0.0:{port}", ""])
def test_loopback_lookalike_hosts_are_refused(server, host: str) -> None:
    srv, logged = server
    assert _send(srv, "GET", "/api/init", {"Host": host.format(port=_port(srv))}) == 403
    assert logged == []


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "LOCALHOST:{port}", "[::1]:{port}", "localhost"])
def test_loopback_hosts_are_answered(server, host: str) -> None:
    srv, _ = server
    assert _send(srv, "GET", "/api/init", {"Host": host.format(port=_port(srv))}) == 200


# ----------------------------------------------------------------------------------------------
# POST: JSON only, from this server's page or from no page


@pytest.mark.parametrize(("origin", "host", "same"), [
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
    ("http://localhost", "localhost:80", True),
    ("http://localhost:80", "localhost", True),
    ("http://[::1]:8000", "[::1]:8000", True),
    ("http://127.0.0.1:8000/", "127.0.0.1:8000", True),
    ("http://127.0.0.1:8001", "127.0.0.1:8000", False),  # another port is another origin
    ("https://127.0.0.1:8000", "127.0.0.1:8000", False),
    ("http://localhost:8000", "127.0.0.1:8000", False),  # another name, even for the same machine
    ("http://127.0.0.1.evil.com:8000", "127.0.0.1:8000", False),
    ("null", "127.0.0.1:8000", False),
    ("http://user@127.0.0.1:8000", "127.0.0.1:8000", False),
    ("http://127.0.0.1:99999", "127.0.0.1:8000", False),
    ("http://127.0.0.1:8000", None, False),
], ids=repr)
def test_same_origin(origin: str, host: str | None, same: bool) -> None:
    assert same_origin(origin, host) is same


@pytest.mark.parametrize(("ctype", "status"), [
    ("application/json", 200),
    ("Application/JSON; charset=utf-8", 200),
    ("text/plain", 415),  # what a cross-origin form or fetch sends without asking the browser first
    ("text/plain; charset=utf-8", 415),
    ("application/x-www-form-urlencoded", 415),
    ("multipart/form-data; boundary=x", 415),
    ("application/jsonx", 415),
    (None, 415),
])
def test_post_needs_a_json_content_type(server, ctype: str | None, status: int) -> None:
    srv, _ = server
    headers = {"Host": f"127.0.0.1:{_port(srv)}"}
    if ctype is not None:
        headers["Content-Type"] = ctype
    assert _send(srv, "POST", "/api/plan", headers, json.dumps({"params": PARAMS}).encode()) == status


@pytest.mark.parametrize(("origin", "site", "status"), [
    (None, None, 200),  # curl, a script: no page
    ("http://127.0.0.1:{port}", "same-origin", 200),
    ("http://evil.example", None, 403),
    ("http://evil.example", "cross-site", 403),
    ("null", None, 403),
    ("http://127.0.0.1:{other}", None, 403),
    (None, "cross-site", 403),  # a browser that sends Sec-Fetch-Site but no Origin
])
def test_post_from_another_origin_is_refused(server, origin: str | None, site: str | None, status: int) -> None:
    srv, _ = server
    port = _port(srv)
    headers = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin.format(port=port, other=port + 1 if port < 65535 else port - 1)
    if site is not None:
        headers["Sec-Fetch-Site"] = site
    assert _send(srv, "POST", "/api/plan", headers, json.dumps({"params": PARAMS}).encode()) == status


# ----------------------------------------------------------------------------------------------
# Clients that go away


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a browser tab that is closed does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_that_go_away_leave_no_traceback(server, capfd) -> None:
    srv, logged = server
    port = _port(srv)
    for k in range(10):
        s = socket.create_connection(("127.0.0.1", port))
        if k % 2:  # closed mid-body: the answer (a 400) meets a closed socket
            s.sendall(b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"par")
        else:  # closed before the request line ended
            s.sendall(b"GET /api/in")
        _reset(s)
    # A request aborted while its (large) answer is written.
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /static/plotly.min.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    s.recv(100)
    _reset(s)
    time.sleep(0.5)
    assert _send(srv, "POST", "/api/plan", {"Host": "127.0.0.1", "Content-Type": "application/json"},
                 json.dumps({"params": PARAMS}).encode()) == 200
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "Exception occurred" not in err, err
    assert logged == []


@pytest.mark.parametrize("gone", [BrokenPipeError, ConnectionResetError, ConnectionAbortedError])
def test_handle_error_of_a_gone_client_is_silent(server, capsys, gone: type[Exception]) -> None:
    srv, logged = server
    try:
        raise gone("client went away")
    except gone:
        srv.handle_error(None, ("127.0.0.1", 1))  # type: ignore[attr-defined]
    assert logged == [] and capsys.readouterr().err == ""


def test_handle_error_of_anything_else_is_one_line(server, capsys) -> None:
    srv, logged = server
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        srv.handle_error(None, ("127.0.0.1", 1))  # type: ignore[attr-defined]
    assert logged == ["error: ValueError: bad thing"] and capsys.readouterr().err == ""


# ----------------------------------------------------------------------------------------------
# No path of this machine in answers


@pytest.mark.parametrize(("source", "shown"), [
    ("/home/alice/secret-project/pp.yaml", "pp.yaml"),
    ("C:\\Users\\alice\\pp.yaml", "pp.yaml"),
    ("pp.yaml", "pp.yaml"),
    ("configs/pp.yaml", "pp.yaml"),
    ("<flags>", "<flags>"),
])
def test_init_names_the_config_file_only(source: str, shown: str) -> None:
    base = Config(schedule="1f1b", pp=2, microbatches=2, source=source)
    view = api.init_view(api.settings_from_config(base), base)
    assert view["config"] == shown
    assert "alice" not in json.dumps(view)


def test_a_refused_post_closes_its_connection(server) -> None:
    # Refused before its body is read: the body must not be read as the next request on the connection.
    srv, _ = server
    hidden = b"GET /api/init HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # a request in the body
    s = socket.create_connection(("127.0.0.1", _port(srv)), timeout=30)
    s.sendall(b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
              b"Content-Length: %d\r\n\r\n" % len(hidden) + hidden)
    got = b""
    while chunk := s.recv(65536):  # until the server closes
        got += chunk
    s.close()
    assert got.startswith(b"HTTP/1.1 415 ") and b"\r\nConnection: close\r\n" in got
    assert got.count(b"HTTP/1.1 ") == 1, got  # the hidden request was never answered
