"""A read-only S3-compatible server for the benchmark: files of a directory, served with sendfile(2) from threads.

moto's server re-reads and copies a whole object under a per-object lock for every ranged GET, so with
multi-GB shards it measures moto, not the client. This server answers just what a download needs:
ListObjectsV2, HeadObject (with ?partNumber=1), GetObject with Range and If-Match, from `<dir>/<bucket>/<key>`,
with real multipart ETags (MD5s of 16 MiB parts, as if uploaded with 16 MiB parts) computed at start. With
`checksums=True` each object also has a full-object CRC64NVME, as S3 gives every new object: named in the listing
and returned with `x-amz-checksum-mode: ENABLED`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse
from xml.sax.saxutils import escape

PART = 16 << 20


def multipart_etag(path: str) -> str:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size <= PART:
            return hashlib.md5(f.read(), usedforsecurity=False).hexdigest()
        digests = []
        while chunk := f.read(PART):
            digests.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


def crc64nvme(path: str) -> str:
    from awscrt.checksums import crc64nvme as crc

    value = 0
    with open(path, "rb") as f:
        while chunk := f.read(PART):
            value = crc(chunk, value)
    return base64.b64encode(value.to_bytes(8, "big")).decode()


class FileS3Server:
    def __init__(self, directory: str, checksums: bool = False) -> None:
        self.dir = directory
        self.etags: dict[str, str] = {}
        self.crcs: dict[str, str] = {}
        for dirpath, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(dirpath, name)
                self.etags[os.path.relpath(path, directory)] = multipart_etag(path)
                if checksums:
                    self.crcs[os.path.relpath(path, directory)] = crc64nvme(path)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                server.handle(self, head=True)

            def do_GET(self) -> None:
                server.handle(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _reply(self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", headers.get("Content-Length", str(len(body))))
        h.end_headers()
        if body and h.command != "HEAD":
            h.wfile.write(body)

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        bucket, _, key = unquote(url.path).lstrip("/").partition("/")
        query = parse_qs(url.query)
        if not key:
            return self.list(h, bucket, query)
        rel = os.path.join(bucket, key)
        path = os.path.join(self.dir, rel)
        if rel not in self.etags or not os.path.isfile(path):
            return self._reply(h, 404, {"Content-Type": "application/xml"}, b"<Error><Code>NoSuchKey</Code></Error>")
        etag, size = self.etags[rel], os.path.getsize(path)
        headers = {"ETag": f'"{etag}"', "Accept-Ranges": "bytes", "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"}
        if (match := h.headers.get("If-Match")) and match.strip('"') != etag:
            return self._reply(h, 412, {}, b"<Error><Code>PreconditionFailed</Code></Error>")
        start, end = 0, size - 1
        status = 200
        if query.get("partNumber") and "-" in etag:
            end = min(PART, size) - 1
            status = 206
            headers["x-amz-mp-parts-count"] = etag.rsplit("-", 1)[1]
        elif (rng := h.headers.get("Range")) and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", rng)):
            start, end = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1)
            status = 206
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        elif rel in self.crcs and h.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            headers["x-amz-checksum-crc64nvme"] = self.crcs[rel]
            headers["x-amz-checksum-type"] = "FULL_OBJECT"
        length = end - start + 1
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(length))
        h.end_headers()
        if head:
            return
        h.wfile.flush()
        with open(path, "rb") as f:
            sent = 0
            while sent < length:
                n = os.sendfile(h.connection.fileno(), f.fileno(), start + sent, length - sent)
                if n == 0:
                    break
                sent += n

    def list(self, h: BaseHTTPRequestHandler, bucket: str, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        keys = sorted(k[len(bucket) + 1 :] for k in self.etags if k.startswith(bucket + "/"))
        keys = [k for k in keys if k.startswith(prefix)]
        contents = "".join(
            f"<Contents><Key>{escape(k)}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
            f"<ETag>&quot;{self.etags[bucket + '/' + k]}&quot;</ETag>"
            f"<Size>{os.path.getsize(os.path.join(self.dir, bucket, k))}</Size>"
            + (
                "<ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm><ChecksumType>FULL_OBJECT</ChecksumType>"
                if bucket + "/" + k in self.crcs
                else ""
            )
            + "<StorageClass>STANDARD</StorageClass></Contents>"
            for k in keys
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(keys)}</KeyCount>"
            f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
        ).encode()
        self._reply(h, 200, {"Content-Type": "application/xml"}, body)
