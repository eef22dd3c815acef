"""FSx sources on the real control plane: a static PV and its claim, bound by the PV controller, mounted, cleaned up.

Real here: the API server (PV/PVC validation), kube-controller-manager's PV binder (which binds the claim to the static
volume) and its PV/PVC protection controllers, the garbage collector, and the operator running in-process. Not real:
the FSx CSI driver (no node mounts anything; binding needs no driver). The operator mounts only file systems of the
admin's allowlist for the namespace (FsxNotAllowed otherwise) and never calls AWS.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.api.sources import FsxStorage
from warmstart.render import fsx

pytestmark = pytest.mark.cluster

STORAGE = {
    "fileSystemId": "fs-0123456789abcdef0",
    "dnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    "mountName": "abcdefgh",
}


def allowed(namespace: str) -> dict[str, Any]:
    """The admin's FSx allowlist: STORAGE, for `namespace` only."""
    return {"fsx_file_systems": {namespace: [STORAGE]}}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _manifest(namespace: str, storage: dict[str, str], name: str = "fsx-model") -> dict[str, Any]:
    return ep.endpoint_manifest(
        name,
        namespace,
        "ml.g5.8xlarge",
        modelSourceConfig={"modelSourceType": "fsx", "fsxStorage": storage, "modelLocation": "models/llama"},
        modelCacheConfig={"weightsCache": {"enabled": False}},
    )


def _pv(api: client.ApiClient, name: str) -> Any:
    try:
        return client.CoreV1Api(api).read_persistent_volume(name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _pvc(api: client.ApiClient, namespace: str, name: str) -> Any:
    try:
        return client.CoreV1Api(api).read_namespaced_persistent_volume_claim(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_fsx_source_becomes_a_bound_static_volume_the_deployment_mounts_and_is_cleaned_up(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    storage = FsxStorage.model_validate(STORAGE)
    claim, volume = fsx.claim_name(storage), fsx.volume_name(namespace, storage)
    apps = client.AppsV1Api(api_client)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=allowed(namespace)):
        kube.apply(str(cluster.kubeconfig), _manifest(namespace, STORAGE))
        bound = kube.wait_for(
            lambda: (c := _pvc(api_client, namespace, claim)) is not None and c.status.phase == "Bound" and c,
            what="the FSx claim Bound by the PV controller",
        )
        assert bound.spec.volume_name == volume
        pv = kube.wait_for(lambda: (v := _pv(api_client, volume)) is not None and v.status.phase == "Bound" and v)
        assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (namespace, claim)
        assert pv.spec.csi.driver == "fsx.csi.aws.com" and pv.spec.csi.volume_handle == STORAGE["fileSystemId"]
        assert pv.spec.csi.volume_attributes == {"dnsname": STORAGE["dnsName"], "mountname": STORAGE["mountName"]}
        assert pv.spec.persistent_volume_reclaim_policy == "Retain"

        deployment = kube.wait_for(
            lambda: next(iter(apps.list_namespaced_deployment(namespace).items), None), what="the model Deployment"
        )
        volumes = deployment.spec.template.spec.volumes
        claims = [v.persistent_volume_claim for v in volumes if v.persistent_volume_claim]
        assert [(c.claim_name, c.read_only) for c in claims] == [(claim, True)]
        assert not [v for v in volumes if v.csi], "no inline CSI volume: the FSx driver does not support it"

        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "fsx-model"
        )
        kube.wait_for(lambda: _pv(api_client, volume) is None, what="the cluster-scoped PV deleted by the finalizer")
        kube.wait_for(lambda: _pvc(api_client, namespace, claim) is None, what="the claim deleted")


def test_a_claim_in_another_namespace_cannot_bind_the_volume(api_client: client.ApiClient, namespace: str) -> None:
    """The claimRef pins the PV to its namespace and claim: another tenant naming it in volumeName stays Pending."""
    storage = FsxStorage.model_validate(STORAGE)
    core = client.CoreV1Api(api_client)
    core.create_persistent_volume(fsx.persistent_volume(namespace, storage))
    other = f"{namespace}-other"
    core.create_namespace({"metadata": {"name": other, "labels": {"warmstart.io/test": "true"}}})
    try:
        thief = fsx.persistent_volume_claim(other, storage, {})
        del thief["metadata"]["ownerReferences"]
        thief["spec"]["volumeName"] = fsx.volume_name(namespace, storage)
        core.create_namespaced_persistent_volume_claim(other, thief)
        # the PV controller refuses it with a FailedBinding event (and retries on every sync, refusing again)
        refused = kube.wait_for(
            lambda: [e for e in core.list_namespaced_event(other).items if e.reason == "FailedBinding"],
            timeout=60,
            what="the PV controller's FailedBinding event on the foreign claim",
        )
        assert "already bound to a different claim" in refused[0].message
        assert _pvc(api_client, other, thief["metadata"]["name"]).status.phase == "Pending"
        pv = _pv(api_client, fsx.volume_name(namespace, storage))
        assert pv.status.phase == "Available" and pv.spec.claim_ref.namespace == namespace
    finally:
        core.delete_namespace(other)
        core.delete_persistent_volume(fsx.volume_name(namespace, storage))


@pytest.mark.parametrize(
    "storage",
    [
        {"fileSystemId": "fs-0fedcba9876543210"},
        {"fileSystemId": "fs-0fedcba9876543210", "dnsName": "other.fsx.internal", "mountName": "other"},
        {**STORAGE, "dnsName": "attacker-lustre.internal"},
    ],
    ids=["not-listed", "not-listed-with-names", "listed-id-other-server"],
)
def test_a_file_system_the_admin_did_not_allow_for_the_namespace_is_never_mounted(
    cluster: Any, api_client: client.ApiClient, namespace: str, storage: dict[str, str]
) -> None:
    """A Lustre mount is authorized by the network: a tenant naming another team's file system (by id, or by DNS and
    mount name) gets FsxNotAllowed, and no PersistentVolume or claim exists for it."""
    with operating.operator(str(cluster.kubeconfig), [namespace], render=allowed(namespace)):
        kube.apply(str(cluster.kubeconfig), _manifest(namespace, storage))
        resolved = kube.wait_for(
            lambda: ep.condition(ep.status(api_client, namespace, "fsx-model"), "Resolved"), what="Resolved"
        )
    assert resolved["status"] == "False" and resolved["reason"] == "FsxNotAllowed"
    assert "fsx.allowedFileSystems" in resolved["message"]
    assert ep.status(api_client, namespace, "fsx-model")["state"] == "DeploymentFailed"
    assert not client.CoreV1Api(api_client).list_namespaced_persistent_volume_claim(namespace).items
    volumes = client.CoreV1Api(api_client).list_persistent_volume().items
    assert not [v for v in volumes if (v.spec.claim_ref and v.spec.claim_ref.namespace == namespace)]


def test_the_names_come_from_the_allowlist_when_the_spec_leaves_them_out(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    storage = FsxStorage.model_validate(STORAGE)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=allowed(namespace)):
        kube.apply(str(cluster.kubeconfig), _manifest(namespace, {"fileSystemId": STORAGE["fileSystemId"]}))
        pv = kube.wait_for(lambda: _pv(api_client, fsx.volume_name(namespace, storage)), what="the static PV")
    assert pv.spec.csi.volume_attributes == {"dnsname": STORAGE["dnsName"], "mountname": STORAGE["mountName"]}


def test_an_endpoint_and_its_weights_cache_share_one_claim_and_the_last_to_go_removes_it(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    """Model pods and preload Jobs mount one claim; each user holds an owner reference; the volume outlives neither."""
    storage = FsxStorage.model_validate(STORAGE)
    claim, volume = fsx.claim_name(storage), fsx.volume_name(namespace, storage)
    with (
        ep.own_nodes(api_client, 2) as (instance_type, _nodes),
        operating.operator(
            str(cluster.kubeconfig),
            [namespace],
            render={"preload_pod_annotations": {"sim.warmstart.io/duration": "2s"}, **allowed(namespace)},
        ),
    ):
        manifest = _manifest(namespace, STORAGE)
        manifest["spec"].update(instanceType=instance_type, modelCacheConfig={"weightsCache": {"enabled": True}})
        kube.apply(str(cluster.kubeconfig), manifest)
        jobs = kube.wait_for(
            lambda: client.BatchV1Api(api_client).list_namespaced_job(namespace).items, what="preload Jobs"
        )
        job_claims = {
            v.persistent_volume_claim.claim_name
            for j in jobs
            for v in j.spec.template.spec.volumes
            if v.persistent_volume_claim
        }
        assert job_claims == {claim}
        owners = kube.wait_for(
            lambda: len(refs := (_pvc(api_client, namespace, claim).metadata.owner_references or [])) == 2 and refs,
            what="the claim owned by the endpoint and by its weights cache",
        )
        assert sorted(r.kind for r in owners) == ["InferenceEndpointConfig", "ModelDataCacheConfig"]
        assert _pv(api_client, volume) is not None

        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "fsx-model"
        )
        # the endpoint lets go first; its weights cache still holds the claim while its finalizer runs
        kube.wait_for(
            lambda: (
                (c := _pvc(api_client, namespace, claim)) is not None
                and [r.kind for r in c.metadata.owner_references or []] == ["ModelDataCacheConfig"]
            ),
            what="the endpoint's owner reference dropped, the cache's kept",
        )
        kube.wait_for(lambda: _pv(api_client, volume) is None, timeout=120, what="the PV gone with its last user")
        assert _pvc(api_client, namespace, claim) is None
        kube.wait_for(lambda: not ep.caches(api_client, namespace, "modeldatacacheconfigs"), what="the cache gone")
