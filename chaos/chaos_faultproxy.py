"""An HTTP proxy in front of a real S3 server that injects faults: 5xx answers, slow answers, bodies cut short.

It forwards every request to the upstream server unchanged; on object GETs (the downloads) it applies the fault of its
current `mode` with probability `rate`, from a seeded random generator. Listing and HEAD requests pass untouched unless
the mode says `all` requests, so a run reaches the download before the fault bites.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by the chaos proxy</Message>'
    "<RequestId>chaos</RequestId></Error>"
)
#: mode -> (HTTP status, S3 error code) of the error answers it injects
ERRORS = {
    "500": (500, "InternalError"),
    "503": (503, "SlowDown"),
    "403": (403, "AccessDenied"),
    "404": (404, "NoSuchKey"),
}


class FaultProxy:
    """`mode` is one of: none, 500, 503, 403, 404 (an error answer), slow (a delay, then a trickled body), cut (half the
    body, then the connection closes). `rate` is the share of object GETs hit; `all_requests` hits every request."""

    def __init__(self, upstream: str, seed: int = 0) -> None:
        self.upstream = urlparse(upstream)
        self.mode = "none"
        self.rate = 0.0
        self.delay = 0.5
        self.all_requests = False
        self.injected = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._draw(self.command, self.path)
                if fault in ERRORS:
                    status, code = ERRORS[fault]
                    payload = ERROR_BODY.format(code=code).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=120)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if fault == "slow":
                    time.sleep(proxy.delay)
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault == "cut":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if fault == "slow":
                    step = max(1, len(data) // 8)
                    for start in range(0, len(data), step):
                        self.wfile.write(data[start : start + step])
                        self.wfile.flush()
                        time.sleep(proxy.delay / 8)
                    return
                self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def set(self, mode: str, rate: float = 1.0, all_requests: bool = False, delay: float = 0.5) -> None:
        with self._lock:
            self.mode, self.rate, self.all_requests, self.delay = mode, rate, all_requests, delay
            self.injected = 0

    def _draw(self, method: str, path: str) -> str:
        """The fault for this request ('none' if it passes)."""
        is_download = method == "GET" and "?" not in path and path.count("/") >= 2
        with self._lock:
            if self.mode == "none" or not (is_download or self.all_requests):
                return "none"
            if self._rng.random() >= self.rate:
                return "none"
            self.injected += 1
            return self.mode

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
