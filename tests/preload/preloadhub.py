"""A small Hugging Face Hub look-alike for tests: the HTTP calls huggingface_hub makes, from repos held in memory.

Speaks: GET /api/models/{repo}/revision/{rev} (sha, siblings); GET /api/models/{repo}/tree/{rev}
(recursive listing with size, oid, lfs{oid,size}; paged with Link rel="next"); HEAD/GET
/{repo}/resolve/{rev}/{file} with X-Repo-Commit, ETag, X-Linked-Etag/X-Linked-Size, a 302 to /lfs/<sha256>
for LFS files, Range on GET, and X-Error-Code RepoNotFound/RevisionNotFound/EntryNotFound/GatedRepo.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

PAGE_SIZE = 2  # small, so the client's pagination is exercised


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass
class Repo:
    commits: dict[str, dict[str, bytes]]  # commit sha -> path -> content
    branches: dict[str, str]  # branch -> commit
    gated_token: str | None = None  # if set, downloads need this bearer token
    lfs_suffixes: tuple[str, ...] = (".safetensors", ".bin", ".pth")
    corrupt: set[str] = dataclasses.field(default_factory=set)  # paths served with one byte flipped

    def is_lfs(self, path: str) -> bool:
        return path.endswith(self.lfs_suffixes)


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, bool]] = []  # (method, path, had a bearer token)
        self.blobs: dict[str, bytes] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                server.handle(self, head=True)

            def do_GET(self) -> None:
                server.handle(self, head=False)

        # The Hub, and a "CDN" on another origin that LFS files redirect to (as the real Hub does).
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for httpd in (self.httpd, self.cdn):
            httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def start(self) -> HubServer:
        for httpd in (self.httpd, self.cdn):
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for httpd in (self.httpd, self.cdn):
            httpd.shutdown()
            httpd.server_close()

    def add(self, repo_id: str, repo: Repo) -> None:
        self.repos[repo_id] = repo
        for files in repo.commits.values():
            for data in files.values():
                self.blobs[hashlib.sha256(data).hexdigest()] = data

    # --- plumbing -------------------------------------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(
        self, h: BaseHTTPRequestHandler, status: int, code: str, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        body = json.dumps({"error": code}).encode()
        self._send(
            h,
            status,
            {"X-Error-Code": code, "X-Error-Message": code, "Content-Type": "application/json", **(extra or {})},
            body,
            head,
        )

    def _json(self, h: BaseHTTPRequestHandler, body: Any, head: bool, extra: dict[str, str] | None = None) -> None:
        self._send(h, 200, {"Content-Type": "application/json", **(extra or {})}, json.dumps(body).encode(), head)

    def _data(self, h: BaseHTTPRequestHandler, data: bytes, headers: dict[str, str], head: bool) -> None:
        rng = h.headers.get("Range")
        if rng and not head and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", rng)):
            start, end = int(m.group(1)), int(m.group(2) or len(data) - 1)
            part = data[start : end + 1]
            self._send(
                h,
                206,
                {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}", "Content-Length": str(len(part))},
                part,
                head,
            )
            return
        self._send(h, 200, {**headers, "Content-Length": str(len(data)), "Accept-Ranges": "bytes"}, data, head)

    # --- routes ---------------------------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        auth = h.headers.get("authorization") or ""
        self.requests.append((h.command, path, auth.startswith("Bearer ")))
        if path.startswith("/lfs/"):
            sha = path[len("/lfs/") :]
            if sha not in self.blobs:
                return self._error(h, 404, "EntryNotFound", head)
            return self._data(h, self.blobs[sha], {"ETag": f'"{sha}"'}, head)
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            for verb in ("/revision/", "/tree/"):
                if verb in rest:
                    repo_id, tail = rest.split(verb, 1)
                    return self.api(h, verb.strip("/"), repo_id, tail, parse_qs(url.query), head)
            return self._error(h, 404, "RepoNotFound", head)
        if "/resolve/" in path:
            repo_id, tail = path.lstrip("/").split("/resolve/", 1)
            rev, _, filename = tail.partition("/")
            return self.resolve(h, repo_id, rev, filename, auth, head)
        return self._error(h, 404, "RepoNotFound", head)

    def _commit(self, repo: Repo, rev: str) -> str | None:
        if rev in repo.commits:
            return rev
        return repo.branches.get(rev)

    def api(
        self, h: BaseHTTPRequestHandler, verb: str, repo_id: str, tail: str, query: dict[str, list[str]], head: bool
    ) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 404, "RepoNotFound", head)
        rev, _, _sub = tail.partition("/")
        commit = self._commit(repo, rev)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", head)
        files = repo.commits[commit]
        if verb == "revision":
            siblings = [{"rfilename": p} for p in sorted(files)]
            return self._json(
                h,
                {
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": commit,
                    "siblings": siblings,
                    "private": False,
                    "gated": "manual" if repo.gated_token else False,
                },
                head,
            )
        items = []
        for p in sorted(files):
            data = files[p]
            item: dict[str, Any] = {"type": "file", "path": p, "size": len(data), "oid": git_blob_sha1(data)}
            if repo.is_lfs(p):
                item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            items.append(item)
        dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
        items += [{"type": "directory", "path": d, "size": 0, "oid": "0" * 40} for d in dirs]
        cursor = int(query.get("cursor", ["0"])[0])
        page = items[cursor : cursor + PAGE_SIZE]
        extra = {}
        if cursor + PAGE_SIZE < len(items):
            host = h.headers.get("Host")
            extra["Link"] = (
                f"<http://{host}/api/models/{repo_id}/tree/{rev}"
                f'?recursive=True&expand=False&cursor={cursor + PAGE_SIZE}>; rel="next"'
            )
        return self._json(h, page, head, extra)

    def resolve(self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, filename: str, auth: str, head: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 404, "RepoNotFound", head)
        commit = self._commit(repo, rev)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", head)
        if repo.gated_token is not None and auth != f"Bearer {repo.gated_token}":
            return self._error(h, 401, "GatedRepo", head)
        files = repo.commits[commit]
        if filename not in files:
            return self._error(h, 404, "EntryNotFound", head, {"X-Repo-Commit": commit})
        data = files[filename]
        if filename in repo.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        base = {"X-Repo-Commit": commit}
        if repo.is_lfs(filename):
            sha = hashlib.sha256(files[filename]).hexdigest()
            self.blobs.setdefault(sha, data)
            if filename in repo.corrupt:
                self.blobs[sha] = data
            headers = {
                **base,
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "ETag": f'"{git_blob_sha1(data)}"',
                "Location": f"{self.cdn_url}/lfs/{sha}",
                "Content-Length": "0",
            }
            return self._send(h, 302, headers, b"", head)
        return self._data(h, data, {**base, "ETag": f'"{git_blob_sha1(files[filename])}"'}, head)
