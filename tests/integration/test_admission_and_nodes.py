"""The operator under the chart's admission policies, as the chart's ServiceAccount, on the real control plane.

- EvictUnreferencedLRU with the node-labels policy installed: an eviction marks the node with the operator's own
  `cache.inference.sagemaker.aws.amazon.com/evicted-weights-<key>` annotation, which the policy admits, so a cache
  that needs one eviction becomes Ready.
- FSx sources: the chart's `-fsx-sources` policy refuses a file system not listed for the namespace, or a listed id
  with another DNS or mount name, for endpoints and caches alike.
- One node's failed step (here a test policy refuses, with 403, every operator write naming one node, its preload
  Job included, as a node-specific admission webhook could) does not stop the others: the other node gets its Job
  and its label, status is written, a Warning Event names the refused node. The refused node is the first the plan
  reaches, so without the per-node handling the other node never got a Job.

Real: the API server and its ValidatingAdmissionPolicy engine, the chart's policies rendered by the real helm, a
ServiceAccount token (the policies match the operator by its username), kwok nodes. RBAC is not under test here:
that ServiceAccount is bound to cluster-admin, so only the policies confine it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import endpointing as ep
import fleet
import kube
import operating
from nodepool import NodePool
from warmstart.api import GROUP, VERSION, nodelabels
from warmstart.placement import GB
from warmstart.render import labels

pytestmark = pytest.mark.cluster

CHART = kube.ROOT / "charts" / "warmstart"
ACCOUNT = "warmstart-under-policy"
FSX = {"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs-a.fsx.internal", "mountName": "abcd"}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _token_kubeconfig(cluster: Any, api: client.ApiClient, namespace: str, path: pathlib.Path) -> str:
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        {
            "metadata": {"name": f"{namespace}-{ACCOUNT}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
        }
    )
    token = core.create_namespaced_service_account_token(
        ACCOUNT, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(pathlib.Path(cluster.kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _wait_until_enforced(kubeconfig: str) -> None:
    """Until the API server has loaded the node-labels policy: a dry-run label outside the cache's prefix, patched
    by the operator's ServiceAccount, is refused (a test that ran before would prove nothing about the policy)."""
    operator = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(operator)
    node = core.list_node().items[0].metadata.name
    probe = {"metadata": {"labels": {"example.com/probe": "x"}}}

    def refused() -> bool:
        try:
            core.patch_node(node, probe, dry_run="All")
        except client.ApiException as error:
            return error.status in (403, 422) and "the warmstart operator may only change" in str(error.body)
        return False

    try:
        kube.wait_for(refused, 60, what="the chart's node-labels policy to refuse")
    finally:
        operator.close()


@pytest.fixture
def under_policies(
    cluster: Any, api_client: client.ApiClient, helm: pathlib.Path, namespace: str, tmp_path: pathlib.Path
) -> Iterator[str]:
    """Every admission policy of the chart, for a release in `namespace` whose ServiceAccount is ACCOUNT; yields a
    kubeconfig of that ServiceAccount."""
    release = f"pol-{uuid.uuid4().hex[:6]}"
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "watchNamespaces": [namespace],
                "serviceAccount": {"name": ACCOUNT},
                "fsx": {"allowedFileSystems": {namespace: [FSX]}},
            }
        )
    )
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "-n", namespace, "-f", str(values), "--kube-version", "1.37.0",
         "-s", "templates/admission.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert any(d["metadata"]["name"].endswith("-node-labels") for d in docs)
    kubeconfig = _token_kubeconfig(cluster, api_client, namespace, tmp_path / "operator.kubeconfig")
    kube.apply(str(cluster.kubeconfig), yaml.safe_dump_all(docs))
    try:
        _wait_until_enforced(kubeconfig)
        yield kubeconfig
    finally:
        registration = client.AdmissionregistrationV1Api(api_client)
        for doc in reversed(docs):
            if doc["kind"] == "ValidatingAdmissionPolicyBinding":
                registration.delete_validating_admission_policy_binding(doc["metadata"]["name"])
            else:
                registration.delete_validating_admission_policy(doc["metadata"]["name"])
        client.RbacAuthorizationV1Api(api_client).delete_cluster_role_binding(f"{namespace}-{ACCOUNT}")


def test_an_eviction_under_the_charts_node_policy_makes_room_and_the_cache_becomes_ready(
    api_client: client.ApiClient, namespace: str, own_nodes: NodePool, under_policies: str
) -> None:
    instance_type, targets = own_nodes.add(1, nvme=100 * GB)
    settings = fleet.render(cache_eviction_policy="EvictUnreferencedLRU")
    with operating.operator(under_policies, [namespace], render=settings):
        idle = kube.create_custom(
            api_client, fleet.mdcc(namespace, [instance_type], "models/idle", modelSizeBytes=60 * GB)
        )
        fleet.wait_status(api_client, namespace, idle, "ready", state="Ready", readyNodes=1)
        made = client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {"metadata": {"name": "used"}})
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "used", "uid": made.metadata.uid}
        used = kube.create_custom(
            api_client,
            fleet.mdcc(namespace, [instance_type], "models/used", modelSizeBytes=60 * GB, parentReferences=[ref]),
        )
        fleet.wait_status(api_client, namespace, used, "ready after one eviction", state="Ready", readyNodes=1)
        node = client.CoreV1Api(api_client).read_node(targets[0])
        assert nodelabels.weights_evicted_annotation(idle.removeprefix("weights-")) in node.metadata.annotations
        fleet.delete_all(api_client, namespace)


@pytest.fixture
def one_node_refused(api_client: client.ApiClient, namespace: str) -> Iterator[list[str]]:
    """A policy refusing every update of the operator to the nodes listed in the yielded list."""
    refused: list[str] = []
    yield refused
    _allow(api_client, namespace)


def _allow(api: client.ApiClient, namespace: str) -> None:
    """Lift the refusal of `_refuse` (gone already is fine)."""
    name = f"{namespace}-refuse-node"
    registration = client.AdmissionregistrationV1Api(api)
    for delete in (
        registration.delete_validating_admission_policy_binding,
        registration.delete_validating_admission_policy,
    ):
        try:
            delete(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def _refuse(api: client.ApiClient, namespace: str, node: str) -> None:
    """Refuse (403) every operator write that names `node`: the node itself, and its preload Job."""
    name = f"{namespace}-refuse-node"
    user = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    node_key = labels.NODE_LABEL
    names_node = (
        f"(request.resource.resource == 'nodes' && object.metadata.name == '{node}')"
        f" || (request.resource.resource == 'jobs' && has(object.metadata.labels)"
        f" && '{node_key}' in object.metadata.labels && object.metadata.labels['{node_key}'] == '{node}')"
    )
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]},
        {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]},
    ]
    registration = client.AdmissionregistrationV1Api(api)
    registration.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "matchConditions": [{"name": "operator", "expression": f"request.userInfo.username == '{user}'"}],
                "validations": [
                    {"expression": f"!({names_node})", "message": "refused for a test", "reason": "Forbidden"}
                ],
            },
        }
    )
    registration.create_validating_admission_policy_binding(
        {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    )


def test_one_nodes_failed_step_does_not_stop_the_others(
    api_client: client.ApiClient,
    namespace: str,
    own_nodes: NodePool,
    under_policies: str,
    one_node_refused: list[str],
) -> None:
    instance_type, targets = own_nodes.add(2, nvme=100 * GB)
    for blocked in (sorted(targets)[0],):  # the node the plan reaches first
        _refuse(api_client, namespace, blocked)
        one_node_refused.append(blocked)
    (blocked,), (fine,) = one_node_refused, [n for n in targets if n not in one_node_refused]
    with operating.operator(under_policies, [namespace], render=fleet.render()):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type], "models/half"))
        kube.wait_for(lambda: fleet.labeled(api_client, name) == {fine}, fleet.TIMEOUT, what=f"{fine} labelled")
        status = kube.wait_for(
            lambda: (s := fleet.status_of(api_client, namespace, name)).get("nodes") and s, what="status written"
        )
        by_node = {n["node"]: n for n in status["nodes"]}
        assert by_node[fine]["state"] == "Ready" and by_node[blocked]["reason"] == "NodeStepFailed"
        assert (status["readyNodes"], status["targetNodes"]) == (1, 2)
        events = kube.wait_for(
            lambda: [
                e
                for e in client.CoreV1Api(api_client).list_namespaced_event(namespace).items
                if e.reason == "NodeStepFailed" and blocked in (e.message or "")
            ],
            fleet.TIMEOUT,
            what="the Warning Event naming the refused node",
        )
        assert events[0].type == "Warning" and "refused for a test" in events[0].message
        _allow(api_client, namespace)  # the cleanup Job on the refused node must be admitted for the cache to go
        fleet.delete_all(api_client, namespace)


def _dry_run(api: client.ApiClient, manifest: dict[str, Any]) -> client.ApiException | None:
    meta = manifest["metadata"]
    plural = {"InferenceEndpointConfig": "inferenceendpointconfigs", "ModelDataCacheConfig": "modeldatacacheconfigs"}
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], plural[manifest["kind"]], manifest, dry_run="All"
        )
    except client.ApiException as error:
        return error
    return None


def _fsx_endpoint(namespace: str, name: str, storage: dict[str, str]) -> dict[str, Any]:
    return ep.endpoint_manifest(
        name,
        namespace,
        "ml.g5.8xlarge",
        modelSourceConfig={"modelSourceType": "fsx", "fsxStorage": storage, "modelLocation": "models/m"},
    )


def test_admission_refuses_fsx_file_systems_the_admin_did_not_allow_for_the_namespace(
    api_client: client.ApiClient, namespace: str, under_policies: str
) -> None:
    other = {"fileSystemId": "fs-0fedcba9876543210", "dnsName": "other.fsx.internal", "mountName": "zz"}
    # the policy takes effect once the API server has loaded it: wait for the first refusal
    refused = kube.wait_for(
        lambda: _dry_run(api_client, _fsx_endpoint(namespace, "other-team", other)), 60, what="the policy to refuse"
    )
    assert "FSx file system fs-0fedcba9876543210" in json.loads(refused.body)["message"]
    for manifest in (
        _fsx_endpoint(namespace, "listed-id-other-server", {**FSX, "dnsName": "attacker-lustre.internal"}),
        _fsx_endpoint(namespace, "listed-id-other-mount", {**FSX, "mountName": "other"}),
        _fsx_mdcc(namespace, other),
    ):
        error = _dry_run(api_client, manifest)
        assert error is not None and "fsx.allowedFileSystems" in json.loads(error.body)["message"], manifest
    for manifest in (
        _fsx_endpoint(namespace, "listed", FSX),
        _fsx_endpoint(namespace, "listed-id-only", {"fileSystemId": FSX["fileSystemId"]}),
        _fsx_mdcc(namespace, FSX),
        ep.endpoint_manifest("s3-is-untouched", namespace, "ml.g5.8xlarge"),
    ):
        assert _dry_run(api_client, manifest) is None, manifest


def _fsx_mdcc(namespace: str, storage: dict[str, str]) -> dict[str, Any]:
    body = fleet.mdcc(namespace, ["ml.g5.8xlarge"])
    body["spec"]["modelSourceConfig"] = {"modelSourceType": "fsx", "fsxStorage": storage, "modelLocation": "m"}
    return body
