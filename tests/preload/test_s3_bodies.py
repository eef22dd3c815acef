"""A ranged GET's body read into a reused buffer: the right bytes, straight from the socket, the connection kept,
and a body cut short fetched again."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import chaos_preload
from preloadhelpers import cache_dir, digests, preload_process, s3_source, tree_digests
from warmstart.preload.sources import s3, s3bodies

MIB = 1 << 20


def _read_all(body: Any, length: int) -> bytes:
    read_into, view = s3bodies.reader(body), s3bodies.buffer()
    got = bytearray()
    while len(got) < length:
        n = read_into(view[: min(len(view), length - len(got))])
        assert n, "the body ended early"
        got += view[:n]
    body.close()
    return bytes(got)


def test_ranges_read_from_the_socket_are_the_objects_bytes_and_reuse_one_connection(bucket: str, env: Any) -> None:
    data = os.urandom(3 * s3bodies.CHUNK + 12345)
    client = s3.client("us-east-1", env["AWS_ENDPOINT_URL_S3"], concurrency=1)
    client.put_object(Bucket=bucket, Key="shard", Body=data)
    pieces = [(0, 100), (100, 2 * s3bodies.CHUNK + 7), (2 * s3bodies.CHUNK + 107, len(data) - 2 * s3bodies.CHUNK - 107)]
    connections = set()
    for offset, length in pieces:
        body = client.get_object(Bucket=bucket, Key="shard", Range=f"bytes={offset}-{offset + length - 1}")["Body"]
        connections.add(id(body._raw_stream._connection))
        assert s3bodies.reader(body).__qualname__.startswith("_socket_reader")
        assert _read_all(body, length) == data[offset : offset + length]
        assert body._raw_stream._connection is None, "a body read to its end gives its connection back"
    assert len(connections) == 1, "each GET after the first reuses the connection the previous body gave back"


def test_a_body_without_a_socket_underneath_is_read_by_copying() -> None:
    class Plain:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, n: int) -> bytes:
            chunk, self.data = self.data[:n], self.data[n:]
            return chunk

        def close(self) -> None:
            pass

    assert _read_all(Plain(b"x" * 3_000_000), 3_000_000) == b"x" * 3_000_000


def test_parts_whose_bodies_are_cut_short_are_fetched_again_in_the_same_run(tmp_path: Path) -> None:
    bench = chaos_preload.Bench(seed=5)
    try:
        bucket, files = bench.model(2, 3 * MIB, random.Random(5))
        bench.proxy.set("cut", rate=0.3)
        root = tmp_path / "nvme"
        root.mkdir()
        argv = ["--source-json", s3_source(bucket, "m"), "--key", "cut", "--concurrency", "4", "--part-size-mb", "1"]
        proc = preload_process(*argv, root=root, env=bench.env(through_proxy=True), tlog=tmp_path / "tlog")
        assert proc.wait(180) == 0, (tmp_path / "tlog").read_text()
        assert bench.proxy.injected > 0, "the proxy cut no body: the test proved nothing"
        assert tree_digests(cache_dir(root, "cut")) == digests(files)
    finally:
        bench.close()
