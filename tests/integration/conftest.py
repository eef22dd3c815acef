"""Integration-only fixtures (the cluster itself comes from tests/conftest.py): per-test kwok node pools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from nodepool import NodePool


@pytest.fixture
def own_nodes(api_client: client.ApiClient) -> Iterator[NodePool]:
    """Nodes of test-unique instance types, deleted after the test."""
    pool = NodePool(api_client)
    try:
        yield pool
    finally:
        pool.delete_all()
