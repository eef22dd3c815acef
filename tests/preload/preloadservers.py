"""Real local servers for the preload tests: moto's S3 server in a subprocess, and a byte-flipping proxy."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """`python -m moto.server` on a free loopback port, in its own process (its own GIL)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/moto-api/")
                conn.getresponse().read()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto server did not start in 60s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def set_auth(self, initial_no_auth_action_count: int) -> None:
        """Turn on moto's IAM checks after this many more unauthenticated requests (0: from now on)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("POST", "/moto-api/reset-auth", body=str(initial_no_auth_action_count).encode())
        conn.getresponse().read()


class CorruptingProxy:
    """An HTTP proxy to an S3 server that flips one byte in GET bodies of chosen keys: a store returning bad data.

    `etags` maps real ETags to others that the proxy shows instead (headers and listings; If-Match is mapped
    back): how an object looks when S3 encrypted it with SSE-KMS or SSE-C, whose ETag is not the content's MD5.

    `served` counts the body bytes of object GETs per path; `ranges` lists each object GET's path and Range header, in
    the order they arrived. With `hold_after` N, object GETs after the first N
    wait (unanswered) until `stop`: the client is frozen at a known point, e.g. to be killed there. With
    `partial_bytes` P as well, GET N+1 gets its head and the first P bytes of its body before it waits."""

    def __init__(
        self,
        upstream: str,
        corrupt_paths: set[str],
        etags: dict[str, str] | None = None,
        hold_after: int | None = None,
        partial_bytes: int = 0,
    ) -> None:
        self.upstream = urlparse(upstream)
        self.corrupt_paths = corrupt_paths
        self.etags = dict(etags or {})
        self.served: dict[str, int] = {}
        self.ranges: list[tuple[str, str]] = []
        self.object_gets = 0
        self.hold_after = hold_after
        self.partial_bytes = partial_bytes
        self.released = threading.Event()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = urlparse(self.path).path
                is_object_get = self.command == "GET" and "/" in path.strip("/")
                partial = False
                if is_object_get:
                    with proxy.lock:
                        proxy.object_gets += 1
                        proxy.ranges.append((path, self.headers.get("Range") or ""))
                        held = proxy.hold_after is not None and proxy.object_gets > proxy.hold_after
                        partial = held and proxy.partial_bytes > 0 and proxy.object_gets == proxy.hold_after + 1
                    if held and not partial:
                        proxy.released.wait()
                        return
                headers = dict(self.headers)
                for real, shown in proxy.etags.items():
                    for k in [k for k in headers if k.lower() == "if-match"]:
                        headers[k] = headers[k].replace(shown, real)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if is_object_get:
                    with proxy.lock:
                        proxy.served[path] = proxy.served.get(path, 0) + len(data)
                if self.command == "GET" and path in proxy.corrupt_paths and data:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                if "xml" in (resp.getheader("Content-Type") or ""):
                    for real, shown in proxy.etags.items():
                        data = data.replace(real.encode(), shown.encode())
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() == "etag":
                        v = proxy.etags.get(v.strip('"'), v.strip('"')).join('""')
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))  # a HEAD tells the object's length
                self.end_headers()
                if partial:  # the first bytes only, then nothing until stop
                    self.wfile.write(data[: proxy.partial_bytes])
                    self.wfile.flush()
                    proxy.released.wait()
                    conn.close()
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
