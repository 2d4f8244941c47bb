"""The explorer's HTTP server: routing, limits and error handling around :mod:`pptl.serve.api`.

Standard library only (``http.server.ThreadingHTTPServer``): the page asks one JSON endpoint per
change, so a web framework would add a dependency and nothing users see. Rules:

- it binds where it is told (the CLI's default is 127.0.0.1) and, on a loopback address, answers
  only requests whose Host is exactly a loopback name with at most a numeric port (a web page
  elsewhere cannot reach it through DNS rebinding: ``127.0.0.1.evil.com`` and ``localhost.evil``
  are foreign names);
- a POST must say ``Content-Type: application/json`` (else ``415``) and come from this server's
  own origin, or name none (else ``403``): another web page can send a ``text/plain`` form post
  without asking the browser first, and would make the server compute;
- no request kills it: a :class:`~pptl.errors.PptlError` is ``400 {"error", "field"}``, anything
  else is ``500`` with one line, logged as one line; a client that went away (while it sent or
  while it was answered) is ignored, with no traceback;
- bodies are at most :data:`MAX_BODY_BYTES`, plans at most ``api.SERVE_MAX_OPS`` ops, and three plans
  are computed at once; a request that a newer one from the same page has replaced is dropped
  before planning (``409``), so typing quickly never queues stale work;
- every script is served from here (plotly.js from the installed plotly package), and the page's
  Content-Security-Policy forbids any other origin.
"""
from __future__ import annotations

import errno
import json
import sys
import threading
import time
import traceback
from collections import OrderedDict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from pptl.config import Config
from pptl.errors import InputError, PptlError
from pptl.serve import api

__all__ = ["MAX_BODY_BYTES", "REQUEST_TIMEOUT_S", "ExplorerServer", "host_name", "make_server", "same_origin"]

MAX_BODY_BYTES = 64 * 1024
_MAX_CLIENTS = 256
_MAX_PLANNING = 3
#: Seconds a connection may stay silent while the server waits on it (headers, a body, the next
#: request on a kept-alive connection). Without one, a client that opens a request and never
#: finishes it holds a thread and a socket for as long as the server runs.
REQUEST_TIMEOUT_S = 30.0
_STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "app.css": "text/css; charset=utf-8"}
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'")
#: Host names that are this machine (as host_name gives them: IPv6 in brackets).
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
#: A client that went away: while it sent its request, or while it was answered.
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


def _plotly_js() -> bytes:
    """plotly.js as the installed plotly package ships it (no CDN: the page works offline)."""
    try:
        return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    except (OSError, ModuleNotFoundError, AttributeError):  # an unusual install: ask plotly itself
        from plotly.offline import get_plotlyjs

        return get_plotlyjs().encode("utf-8")


def _static_files() -> dict[str, tuple[bytes, str]]:
    root = resources.files("pptl.serve") / "static"
    files = {name: ((root / name).read_bytes(), ctype) for name, ctype in _STATIC.items()}
    files["plotly.min.js"] = (_plotly_js(), "text/javascript; charset=utf-8")
    return files


class ExplorerServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds the explorer's state (config, cache, static files)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, config: Config | None = None,
                 log: Callable[[str], None] | None = None, request_timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.base = config
        self.request_timeout = request_timeout
        self.initial = api.settings_from_config(config) if config is not None else api.Settings(
            schedule="1f1b", pp="4", microbatches="8",
            costs=(("F", "1"), ("B", "2"), ("I", "1"), ("W", "1")))
        self.cache = api.PlanCache()
        self.compute = threading.BoundedSemaphore(_MAX_PLANNING)
        """Plans computed at once. Not one: a stale big plan (which cannot be stopped midway) must not
        hold back the small one the user asked for since; they share the CPU until the stale one ends."""
        self.drawing = threading.Lock()
        """matplotlib is not thread-safe: one figure download at a time."""
        self.latest: OrderedDict[str, int] = OrderedDict()
        self.latest_lock = threading.Lock()
        self.files = _static_files()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
        return f"http://{shown}:{port}/"

    @property
    def loopback(self) -> bool:
        return self.server_address[0] in ("127.0.0.1", "localhost", "::1")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """What escaped a handler (socketserver prints a traceback): a client that went away is
        nothing to report; anything else is one line."""
        e = sys.exc_info()[1]
        if isinstance(e, _GONE):
            return
        self.log(f"error: {type(e).__name__}: {' '.join(str(e).split())}"[:300])

    def note_request(self, client: str, seq: int) -> None:
        with self.latest_lock:
            if seq > self.latest.get(client, -1):
                self.latest[client] = seq
            self.latest.move_to_end(client)
            while len(self.latest) > _MAX_CLIENTS:
                self.latest.popitem(last=False)

    def superseded(self, client: str, seq: int) -> bool:
        with self.latest_lock:
            return self.latest.get(client, seq) > seq


def make_server(host: str = "127.0.0.1", port: int = 8000, *, config: Config | None = None,
                log: Callable[[str], None] | None = None, request_timeout: float = REQUEST_TIMEOUT_S) -> ExplorerServer:
    """Bind the explorer (``port=0`` picks a free port; see :attr:`ExplorerServer.url`).

    Raises:
        InputError: the address is empty or cannot be bound (in use, not this machine's, no permission).
    """
    if not host.strip():  # the socket reads "" as every address: an empty --host would open the page to the network
        raise InputError(f"--host: got {host!r}, expected an address to listen on (127.0.0.1, the default, or "
                         "0.0.0.0 to let other machines in)")
    try:
        return ExplorerServer((host, port), config=config, log=log, request_timeout=request_timeout)
    except OSError as e:
        reason = e.strerror or str(e)
        # in use or privileged: the port is at fault; an unknown name or another machine's address: the host
        fix = "pick another --port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "check --host"
        raise InputError(f"--host {host} --port {port}: cannot listen there: {reason}; {fix}") from None


class _Reply(Exception):
    """A finished response raised out of a route (status, JSON body)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error", ""))
        self.status = status
        self.body = body


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    server_version = "pptl-serve"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -- plumbing ---------------------------------------------------------------------------

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # StreamRequestHandler puts it on the socket
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass  # one line per request would bury the errors; errors are logged where they happen

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._guarded(self._get)

    def do_HEAD(self) -> None:  # noqa: N802
        self._guarded(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._guarded(self._post)

    def _guarded(self, route: Callable[[], None]) -> None:
        try:
            if not self._host_ok():
                raise _Reply(HTTPStatus.FORBIDDEN, {"error": "request: Host is not this machine", "field": None})
            route()
        except _Reply as r:
            self._answer(r.status, r.body)
        except PptlError as e:
            self._answer(HTTPStatus.BAD_REQUEST, api.error_body(e))
        except _GONE:
            self.close_connection = True  # the page aborted this request; nothing to tell it
        except Exception as e:  # a bug: one line to the page and to the log, the server goes on
            frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
            where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
            line = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
            self.server.log(f"error: {self.command} {urlsplit(self.path).path}: {line}{where}")
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {line}", "field": None})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        """An error reply to a client that may have gone away meanwhile (it closed mid-body, or the
        page aborted a request a newer one replaced): then there is no one to tell."""
        try:
            self._json(status, body)
        except OSError:
            self.close_connection = True

    def _host_ok(self) -> bool:
        if not self.server.loopback:
            return True
        return host_name(self.headers.get("Host")) in _LOOPBACK

    def _post_allowed(self) -> None:
        """A POST from this server's own page (or from no page: curl, scripts), with a JSON body.

        A refusal comes before the body is read: the connection is closed after it, or the unread
        body would be taken for the next request."""
        keep, self.close_connection = self.close_connection, True
        origin = self.headers.get("Origin")
        if origin is not None and not same_origin(origin, self.headers.get("Host")):
            raise _Reply(HTTPStatus.FORBIDDEN, {"error": "request: Origin is not this server", "field": None})
        if (self.headers.get("Sec-Fetch-Site") or "").strip().lower() == "cross-site":
            raise _Reply(HTTPStatus.FORBIDDEN, {"error": "request: sent by another site", "field": None})
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise _Reply(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                         {"error": f"request: Content-Type {ctype or '(none)'}, expected application/json",
                          "field": None})
        self.close_connection = keep

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:  # the client learns it too, not only from the closed socket
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        body = json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")
        self._send(status, body, "application/json", {"Cache-Control": "no-store", **(extra or {})})

    # -- routes -----------------------------------------------------------------------------

    def _get(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path in ("/", "/index.html"):
            body, ctype = self.server.files["index.html"]
            self._send(HTTPStatus.OK, body, ctype, {"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"})
        elif path.startswith("/static/"):
            name = path[len("/static/"):]
            if name not in self.server.files or name == "index.html":
                raise _Reply(HTTPStatus.NOT_FOUND, {"error": f"{path}: no such file", "field": None})
            body, ctype = self.server.files[name]
            cache = "max-age=86400" if name == "plotly.min.js" else "no-cache"
            self._send(HTTPStatus.OK, body, ctype, {"Cache-Control": cache})
        elif path == "/api/init":
            self._json(HTTPStatus.OK, api.init_view(self.server.initial, self.server.base))
        elif path.startswith("/api/download/"):
            self._download(path[len("/api/download/"):], url.query)
        elif path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        else:
            raise _Reply(HTTPStatus.NOT_FOUND, {"error": f"{path}: no such page", "field": None})

    def _post(self) -> None:
        path = urlsplit(self.path).path
        if path != "/api/plan":
            raise _Reply(HTTPStatus.NOT_FOUND, {"error": f"{path}: no such endpoint", "field": None})
        self._post_allowed()
        data = self._body()
        client = data.get("client", "")
        seq = data.get("seq", 0)
        if not isinstance(client, str) or len(client) > 64 or isinstance(seq, bool) or not isinstance(seq, int):
            raise InputError("request: client is a short string and seq an integer")
        req = api.parse_request(data.get("params", {}))
        if client:
            self.server.note_request(client, seq)
        with self.server.compute:
            if client and self.server.superseded(client, seq):
                raise _Reply(HTTPStatus.CONFLICT, {"error": "superseded by a newer request", "field": None})
            t = time.perf_counter()
            view = api.plan_view(req, cache=self.server.cache, base=self.server.base)
            ms = 1000 * (time.perf_counter() - t)
        self._json(HTTPStatus.OK, view, {"Server-Timing": f"plan;dur={ms:.1f}"})

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        # ASCII digits only: str.isdigit() also takes "²" and other scripts' digits, which int() refuses
        if length is None or not (length.strip().isascii() and length.strip().isdigit()):
            self.close_connection = True
            raise _Reply(HTTPStatus.LENGTH_REQUIRED, {"error": "request: Content-Length required", "field": None})
        n = int(length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would be taken for the next request
            raise _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                         {"error": f"request: body of {n} bytes, at most {MAX_BODY_BYTES} accepted", "field": None})
        try:
            raw = self.rfile.read(n)
        except TimeoutError:
            # a client that announced more than it sends would hold this thread (and socket) for good
            self.close_connection = True
            raise _Reply(HTTPStatus.REQUEST_TIMEOUT, {"error": f"request: body of {n} bytes did not arrive within "
                                                               f"{self.server.request_timeout:g} s", "field": None}) from None
        if len(raw) < n:  # the client closed its side before the whole body came
            self.close_connection = True
            raise InputError(f"request: body of {len(raw)} bytes, but Content-Length says {n}")
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise InputError(f"request: not valid JSON: {' '.join(str(e).split())[:120]}") from None
        if not isinstance(data, dict):
            raise InputError("request: expected a JSON object with params")
        return data

    def _download(self, what: str, query: str) -> None:
        if len(query) > api.MAX_PARAMS * (api.MAX_VALUE_CHARS + 48):
            raise InputError("request: query too long")
        try:
            pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=api.MAX_PARAMS + 1)
        except ValueError:
            raise InputError(f"request: more than {api.MAX_PARAMS} parameters") from None
        params = dict(pairs)
        which = params.pop("which", "a")
        req = api.parse_request(params)
        with self.server.compute, self.server.drawing:
            got = api.download(what, req, which, cache=self.server.cache, base=self.server.base)
        self._send(HTTPStatus.OK, got.data, got.content_type,
                   {"Content-Disposition": f'attachment; filename="{got.filename}"', "Cache-Control": "no-store"})


def host_name(header: str | None) -> str | None:
    """The host name of a ``Host`` header, lower case, brackets kept for IPv6 (``[::1]``); None
    for a header of any other shape: empty, a port that is not 1-5 digits, spaces, a user part,
    a path, a second colon outside brackets. ``127.0.0.1.evil.com`` is a name of its own."""
    parts = _host_port(header)
    return parts[0] if parts is not None else None


def _host_port(header: str | None) -> tuple[str, int] | None:
    """(name, port) of a ``Host`` header (port 80 when it names none), or None (see host_name)."""
    if header is None:
        return None
    h = header.strip().lower()
    if h.startswith("["):
        name, _, rest = h.partition("]")
        name += "]"
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
    else:
        name, _, port = h.partition(":")
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    if not name or any(c in name for c in " \t/@?#\\"):
        return None
    return name, int(port) if port else 80


def same_origin(origin: str, host: str | None) -> bool:
    """Whether an ``Origin`` header names the server the ``Host`` header reached: scheme http,
    the same host name and the same port (80 when either leaves it out). ``null`` (a sandboxed or
    file page) is never the same."""
    try:
        o = urlsplit(origin.strip())
        o_port = o.port or 80
    except ValueError:
        return False
    if o.scheme != "http" or not o.hostname or o.path not in ("", "/") or o.username or o.query:
        return False
    h = _host_port(host)
    o_name = f"[{o.hostname}]" if ":" in o.hostname else o.hostname
    return h is not None and (o_name, o_port) == h


def _no_constant(name: str) -> Any:
    raise ValueError(f"'{name}' is not a number JSON allows")
