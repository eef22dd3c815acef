"""The endpoint picker's leader election on the real control plane: two candidates, exactly one leader; the other
takes over when the leader stops renewing (a crash) or gives the Lease up (a stop).

The candidates authenticate as the picker's own ServiceAccount, bound to the Role the operator renders for it, and
campaign for the Lease the operator renders (metadata only): the Role's get and update of that one Lease are enough.
Timings are short (a 3 s lease) to keep the test brief; no assertion is about how fast anything happens.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import kube
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.controllers.storage import Store
from warmstart.render import endpoints, pickers, router
from warmstart.router.electing import LeaseElector, Timing

pytestmark = pytest.mark.cluster

TIMING = Timing(lease_seconds=3.0, renew_deadline_seconds=2.0, retry_seconds=0.3)


def _picker_identity(api: client.ApiClient, namespace: str, uid: str) -> str:
    """Apply what the operator renders for a picker's identity (ServiceAccount, Role, RoleBinding, Lease) under an
    owner that exists; returns the Lease's name."""
    spec = InferenceEndpointConfigSpec.model_validate(
        {
            **yaml.safe_load((kube.ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())[
                "spec"
            ],
            "intelligentRoutingSpec": {"enabled": True, "endpointPicker": {}},
        }
    )
    ref = endpoints.ObjectRef(kind="ConfigMap", name="owner", namespace=namespace, uid=uid)
    endpoint = endpoints.from_iec(ref, spec)
    store = Store(api)
    for manifest in (
        router.service_account(endpoint, router.PICKER),
        pickers.role(endpoint),
        router.role_binding(endpoint, router.PICKER),
        pickers.lease(endpoint),
    ):
        for owner in manifest["metadata"]["ownerReferences"]:
            owner.update(apiVersion="v1", kind="ConfigMap")
        store.apply(manifest)
    return pickers.name(endpoint.ref.name)


async def _watch(electors: list[LeaseElector], until: Any, timeout: float = 60.0) -> None:
    """Sample the electors until `until()` holds; never may two lead at once."""
    deadline = time.monotonic() + timeout
    while not until():
        leaders = [e.identity for e in electors if e.is_leader()]
        assert len(leaders) <= 1, f"two leaders at once: {leaders}"
        assert time.monotonic() < deadline, "timed out: " + ", ".join(f"{e.identity}={e.is_leader()}" for e in electors)
        await asyncio.sleep(0.05)


def _holder(api: client.ApiClient, namespace: str, name: str) -> tuple[str | None, int]:
    spec = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace).spec
    return spec.holder_identity, int(spec.lease_transitions or 0)


def test_two_pickers_elect_one_leader_and_the_other_takes_over(
    cluster: Any, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    owner = client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    lease = _picker_identity(api_client, namespace, owner.metadata.uid)
    kubeconfig = kube.service_account_kubeconfig(
        api_client, Path(cluster.kubeconfig), namespace, lease, tmp_path / "picker.yaml"
    )

    async def scenario() -> None:
        apis = [config.new_client_from_config(config_file=str(kubeconfig)) for _ in range(3)]
        a = LeaseElector(apis[0], namespace, lease, "picker-a", TIMING)
        b = LeaseElector(apis[1], namespace, lease, "picker-b", TIMING)
        try:
            await a.start()
            await b.start()
            await _watch([a, b], lambda: a.is_leader() or b.is_leader())
            leader, standby = (a, b) if a.is_leader() else (b, a)
            holder, transitions = _holder(api_client, namespace, lease)
            assert holder == leader.identity
            # several renewals later: still the same single leader
            for _ in range(3 * round(TIMING.lease_seconds / TIMING.retry_seconds)):
                await _watch([a, b], lambda: True)
                assert leader.is_leader() and not standby.is_leader()
                await asyncio.sleep(TIMING.retry_seconds / 3)
            assert _holder(api_client, namespace, lease) == (holder, transitions)

            # the leader crashes (stops renewing, never releases): the standby takes over once the lease lapses
            await leader.stop(release=False)
            await _watch([leader, standby], standby.is_leader)
            assert not leader.is_leader()
            assert _holder(api_client, namespace, lease) == (standby.identity, transitions + 1)

            # a third candidate joins; the leader stops cleanly and releases: one of the others leads next
            c = LeaseElector(apis[2], namespace, lease, "picker-c", TIMING)
            await c.start()
            await _watch([standby, c], lambda: True)
            await standby.stop(release=True)
            await _watch([standby, c], c.is_leader)
            assert _holder(api_client, namespace, lease)[0] == "picker-c"
            await c.stop()
            assert _holder(api_client, namespace, lease)[0] is None  # released: free for the next leader
        finally:
            for elector in (a, b):
                await elector.stop()
            for api in apis:
                api.close()

    asyncio.run(scenario())


def test_a_candidate_without_the_role_never_leads(
    cluster: Any, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """The default ServiceAccount (no picker Role) can neither read nor take the Lease: it stays unready."""
    owner = client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    lease = _picker_identity(api_client, namespace, owner.metadata.uid)
    kubeconfig = kube.service_account_kubeconfig(
        api_client, Path(cluster.kubeconfig), namespace, "default", tmp_path / "default.yaml"
    )

    async def scenario() -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        intruder = LeaseElector(api, namespace, lease, "intruder", TIMING)
        try:
            await intruder.start()
            for _ in range(round(2 * TIMING.lease_seconds / TIMING.retry_seconds)):
                assert not intruder.is_leader()
                await asyncio.sleep(TIMING.retry_seconds)
        finally:
            await intruder.stop()
            api.close()

    asyncio.run(scenario())
    assert _holder(api_client, namespace, lease) == (None, 0)
