"""EndpointSlice objects -> replica URLs: ready and not terminating only, the right port."""

from __future__ import annotations

from types import SimpleNamespace as NS

from warmstart.router.discovery import ready_replicas, ready_urls


def endpoint(address: str, ready: bool | None = True, terminating: bool | None = None, node: str | None = None) -> NS:
    return NS(addresses=[address], conditions=NS(ready=ready, terminating=terminating), node_name=node)


def eps(endpoints: list[NS], ports: list[tuple[str, int]]) -> NS:
    return NS(endpoints=endpoints, ports=[NS(name=name, port=port) for name, port in ports])


def test_only_ready_not_terminating_endpoints_count_and_nil_ready_means_ready() -> None:
    slices = [
        eps(
            [
                endpoint("10.0.0.1"),
                endpoint("10.0.0.2", ready=False),
                endpoint("10.0.0.3", ready=None),
                endpoint("10.0.0.4", terminating=True),
            ],
            [("http", 8000)],
        )
    ]
    assert ready_urls(slices) == ["http://10.0.0.1:8000", "http://10.0.0.3:8000"]


def test_named_port_is_used_and_an_unknown_name_falls_back_to_the_first_port() -> None:
    slices = [eps([endpoint("10.0.0.1")], [("metrics", 9090), ("http", 8000)])]
    assert ready_urls(slices, "http") == ["http://10.0.0.1:8000"]
    assert ready_urls(slices, "missing") == ["http://10.0.0.1:9090"]


def test_ipv6_addresses_are_bracketed_and_duplicates_merged() -> None:
    slices = [eps([endpoint("fd00::1")], [("http", 8000)]), eps([endpoint("fd00::1")], [("http", 8000)])]
    assert ready_urls(slices) == ["http://[fd00::1]:8000"]


def test_a_slice_without_ports_contributes_nothing() -> None:
    assert ready_urls([eps([endpoint("10.0.0.1")], [])]) == []


def test_each_ready_replica_carries_its_node_name() -> None:
    slices = [eps([endpoint("10.0.0.1", node="gpu-a"), endpoint("10.0.0.2")], [("http", 8000)])]
    assert ready_replicas(slices) == {"http://10.0.0.1:8000": "gpu-a", "http://10.0.0.2:8000": None}
