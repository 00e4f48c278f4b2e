"""A fault-injecting HTTPS proxy on loopback in front of the test kube-apiserver.

It terminates TLS with the apiserver's own serving certificate (issued for 127.0.0.1 by the
test CA, so clients verify it as they would the apiserver), forwards each request upstream
with its headers, and replaces the answer of matching requests with a fault:

* ``429``: Too Many Requests with ``Retry-After`` (seconds);
* ``500`` / ``503``: a server error with a Kubernetes Status body;
* ``reset``: the upstream status and headers, half the body, then a TCP reset;
* ``stall``: no answer at all until the proxy stops (past any client timeout);
* ``stall-body``: the upstream status and headers, half the body, then nothing until the proxy
  stops;
* ``trickle``: the upstream answer, status line and headers included, one byte every
  ``TRICKLE_INTERVAL_S`` (a read never waits long enough for a per-read timeout to fire);
* ``410``: Gone (an expired continue token), only for requests that carry ``continue=``.

A rule fires ``times`` times (None: always); ``fired`` counts what was injected.

``silent_server`` is no proxy: a TLS port that accepts connections and never says a word.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAULTS = ("429", "500", "503", "reset", "stall", "stall-body", "trickle", "410")
# Forwarded answers: the proxy fetches them upstream, then breaks them on the way back.
BROKEN_ANSWERS = ("reset", "stall-body", "trickle")
TRICKLE_INTERVAL_S = 1.0
UPSTREAM_TIMEOUT_S = 60.0
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"}


@dataclass
class Rule:
    fault: str
    path_suffix: str  # matched against the request path without its query
    times: int | None = 1
    retry_after: int = 1
    fired: int = 0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r} (one of {', '.join(FAULTS)})")

    def matches(self, path: str, query: dict[str, list[str]]) -> bool:
        if not path.endswith(self.path_suffix):
            return False
        if self.fault == "410" and not query.get("continue"):
            return False
        return self.times is None or self.fired < self.times


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    ca_file: str
    cert_file: str
    key_file: str
    rules: list[Rule] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "GET /api/v1/pods?limit=2", in order
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    def add(self, fault: str, path_suffix: str, times: int | None = 1, **kw: Any) -> Rule:
        rule = Rule(fault, path_suffix, times, **kw)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.requests.clear()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _take(self, method: str, target: str) -> Rule | None:
        split = urlsplit(target)
        query = parse_qs(split.query)
        with self.lock:
            self.requests.append(f"{method} {target}")
            for rule in self.rules:
                if rule.matches(split.path, query):
                    rule.fired += 1
                    return rule
        return None

    def upstream(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=self.ca_file)
        return http.client.HTTPSConnection(
            self.upstream_host, self.upstream_port, context=context, timeout=UPSTREAM_TIMEOUT_S
        )


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest shows the proxy's request list on failure instead."""

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            rule = proxy._take(self.command, self.path)
            if rule is None or rule.fault in BROKEN_ANSWERS:
                status, headers, data = self._forward(body)
                if rule is None:
                    self._answer(status, headers, data)
                elif rule.fault == "reset":
                    self._reset_mid_body(status, headers, data)
                elif rule.fault == "stall-body":
                    self._stall_mid_body(status, headers, data)
                else:
                    self._trickle(status, headers, data)
            elif rule.fault == "stall":
                proxy.stopping.wait()
                self.close_connection = True
            else:
                self._fault(rule)

        def _forward(self, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
            connection = proxy.upstream()
            try:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in HOP_BY_HOP and k.lower() != "host"
                }
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                kept = [
                    (k, v)
                    for k, v in response.getheaders()
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"
                ]
                return response.status, kept, data
            finally:
                connection.close()

        def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stall_mid_body(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.wfile.write(_head(status, headers, data) + data[: len(data) // 2])
            self.wfile.flush()
            proxy.stopping.wait()
            self.close_connection = True

        def _trickle(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            answer = _head(status, headers, data) + data
            for index in range(len(answer)):
                if proxy.stopping.wait(TRICKLE_INTERVAL_S):
                    break
                try:
                    self.wfile.write(answer[index : index + 1])
                    self.wfile.flush()
                except OSError:  # the client gave up and closed the connection
                    break
            self.close_connection = True

        def _reset_mid_body(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.wfile.write(_head(status, headers, data) + data[: len(data) // 2])
            self.wfile.flush()
            # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def _fault(self, rule: Rule) -> None:
            status = int(rule.fault)
            reason = {429: "TooManyRequests", 410: "Expired", 500: "InternalError"}
            status_body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f"injected by the fault proxy ({rule.fault})",
                "reason": reason.get(status, "ServiceUnavailable"),
                "code": status,
            }
            data = json.dumps(status_body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if status == 429:
                self.send_header("Retry-After", str(rule.retry_after))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _head(status: int, headers: list[tuple[str, str]], data: bytes) -> bytes:
    """The status line and headers of an answer with this body, as bytes on the wire."""
    lines = [
        f"HTTP/1.1 {status} {http.client.responses.get(status, '')}",
        *(f"{key}: {value}" for key, value in headers),
        f"Content-Length: {len(data)}",
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        return self.context.wrap_socket(sock, server_side=True), address


@contextmanager
def running_proxy(server: str, ca_file: str) -> Iterator[FaultProxy]:
    """A FaultProxy in front of `server`, serving with the certificate next to `ca_file`."""
    upstream = urlsplit(server)
    certs = Path(ca_file).parent
    proxy = FaultProxy(
        upstream.hostname or "127.0.0.1",
        upstream.port or 443,
        ca_file,
        str(certs / "apiserver.crt"),
        str(certs / "apiserver.key"),
    )
    httpd = _TLSServer(("127.0.0.1", 0), _handler(proxy))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(proxy.cert_file, proxy.key_file)
    httpd.context = context
    proxy.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@dataclass
class SilentServer:
    port: int = 0
    accepted: int = 0  # TCP connections taken (one per attempt: a client that retries shows)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@contextmanager
def silent_server() -> Iterator[SilentServer]:
    """A loopback port that accepts connections, reads nothing and never sends a byte (not
    even its half of the TLS handshake), until it stops."""
    silent = SilentServer()
    stopping = threading.Event()
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.1)
        silent.port = int(listener.getsockname()[1])

        def accept() -> None:
            while not stopping.is_set():
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                held.append(connection)
                silent.accepted += 1

        thread = threading.Thread(target=accept, name="silent-server", daemon=True)
        thread.start()
        try:
            yield silent
        finally:
            stopping.set()
            thread.join(10)
            for connection in held:
                connection.close()
