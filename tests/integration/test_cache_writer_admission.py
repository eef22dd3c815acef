"""The chart's cache-writer policies on the real API server: a tenant with the built-in `edit` role cannot get its own
code into a pod that writes a weights cache.

The policies are rendered by the real helm (charts/warmstart/templates/cache-writers.yaml), bound to this test's
namespace only, and the tenant is a ServiceAccount bound to the ClusterRole `edit` (RBAC applies as in-cluster). The
writer pod is made by the real Job controller from a Job of the operator's name whose template carries a write-access
cache volume (no node needed: the API server answers before any kubelet). Each attack is refused at admission:

- a copy of the Job's pod (a write-access cache volume, or the Job as its controller) created by the tenant;
- a patch of the writer pod's image, or of its command;
- an ephemeral container added to it (`kubectl debug`);
- `kubectl exec` and `kubectl attach` into it.

Positive controls: the Job controller's own pod exists, a label change on the writer pod is admitted, and exec into
an ordinary pod of the namespace is not refused by the policy.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

import kube
from warmstart.render import cache_volumes, jobs

pytestmark = pytest.mark.cluster

CHART = kube.ROOT / "charts" / "warmstart"
KEY = "0123456789abcdef0123456789abcdef"
NODE = "writer-node"


def _policies(helm: pathlib.Path, release: str, namespace: str) -> list[dict[str, Any]]:
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "-n", namespace, "--kube-version", "1.37.0",
         "-s", "templates/cache-writers.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    found = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in found:  # bound to this test's namespace only: other tests share the cluster
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            doc["spec"]["matchResources"] = {"namespaceSelector": selector}
    return found


@pytest.fixture
def guarded(cluster: Any, helm: pathlib.Path, namespace: str, api_client: client.ApiClient) -> Iterator[str]:
    """The policies, bound to `namespace`; yields its release name."""
    release = f"cw-{uuid.uuid4().hex[:6]}"
    docs = _policies(helm, release, namespace)
    assert {d["kind"] for d in docs} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    kubeconfig = str(cluster.kubeconfig)
    for doc in docs:
        kube.apply(kubeconfig, doc)
    core = client.CoreV1Api(api_client)
    probe = {"metadata": {"name": "probe"}, "spec": _writer_template()}

    def in_force() -> bool | None:  # the API server loads a new policy within seconds
        try:
            core.create_namespaced_pod(namespace, probe, dry_run="All")
        except client.ApiException as error:
            return True if error.status == 403 and "only the Job controller" in str(error.body) else None
        return None

    kube.wait_for(in_force, what="the cache-writer policies in force")
    try:
        yield release
    finally:
        for doc in docs:
            kube.kubectl(kubeconfig, "delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found", check=False)


@pytest.fixture
def tenant(cluster: Any, api_client: client.ApiClient, namespace: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig of a ServiceAccount of `namespace` with the built-in `edit` role there, and ephemeral containers."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "tenant"}})
    binding = {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    }
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role_binding(namespace, binding)
    # `edit` has no ephemeral containers; a namespace owner who debugs its pods does (so the policy must refuse it)
    rule = {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["get", "patch", "update"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "debug"}, "rules": [rule]})
    debug = {**binding, "metadata": {"name": "tenant-debug"}}
    debug["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "debug"}
    rbac.create_namespaced_role_binding(namespace, debug)
    return kube.service_account_kubeconfig(api_client, cluster.kubeconfig, namespace, "tenant", tmp_path / "tenant")


def _writer_template() -> dict[str, Any]:
    volume = cache_volumes.csi_volume("cache", KEY, write=True)
    return {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": NODE},  # no such node: the pod stays Pending, which is enough
        "containers": [
            {
                "name": "preload",
                "image": "warmstart:test",
                "command": ["warmstart", "preload"],
                "volumeMounts": [{"name": "cache", "mountPath": f"/opt/dlami/nvme/warmstart/keys/{KEY}"}],
            }
        ],
        "volumes": [volume],
    }


def _writer_pod(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    """The pod the real Job controller makes from a Job of the operator's name with a write-access cache volume."""
    name = jobs.preload_job_name(KEY, NODE, 1)
    job = {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {"spec": _writer_template()}}}
    client.BatchV1Api(api).create_namespaced_job(namespace, job)
    core = client.CoreV1Api(api)

    def made() -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
        return api.sanitize_for_serialization(pods[0]) if pods else None

    return kube.wait_for(made, what=f"the Job controller's pod of {name}")


def _as_tenant(kubeconfig: pathlib.Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def _refused(kubeconfig: pathlib.Path, words: str, *args: str) -> str:
    """The tenant's kubectl command, refused with `words` in its error; retried for a while, because a policy bound a
    moment ago reaches the API server's admission a few seconds later (the exec policy has no dry-run probe)."""

    def probe() -> str | None:
        done = _as_tenant(kubeconfig, *args)
        return done.stderr if done.returncode != 0 and words in done.stderr else None

    return kube.wait_for(probe, timeout=60.0, interval=2.0, what=f"kubectl {args[0]} refused with {words!r}")


def test_a_tenant_cannot_create_a_copy_of_a_cache_writer(
    guarded: str, tenant: pathlib.Path, api_client: client.ApiClient, namespace: str
) -> None:
    writer = _writer_pod(api_client, namespace)
    copy_with_volume = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "copy"}, "spec": _writer_template()}
    refused = _as_tenant(tenant, "create", "-n", namespace, "-f", "-", stdin=json.dumps(copy_with_volume))
    assert refused.returncode != 0 and "only the Job controller may create pod copy" in refused.stderr, refused.stderr
    assert "writes a warmstart cache" in refused.stderr

    # naming the operator's Job (by its real uid) as controller, even without the cache volume
    owner = writer["metadata"]["ownerReferences"][0]
    named = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "named", "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "c", "image": "warmstart:test"}]},
    }
    refused = _as_tenant(tenant, "create", "-n", namespace, "-f", "-", stdin=json.dumps(named))
    assert refused.returncode != 0 and "names a warmstart preload or cleanup Job" in refused.stderr, refused.stderr

    # positive control: the tenant creates ordinary pods
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"}, "spec": named["spec"]}
    admitted = _as_tenant(tenant, "create", "-n", namespace, "-f", "-", stdin=json.dumps(plain))
    assert admitted.returncode == 0, admitted.stderr


def test_a_tenant_cannot_change_a_cache_writers_code_or_join_it(
    guarded: str, tenant: pathlib.Path, api_client: client.ApiClient, namespace: str
) -> None:
    pod = _writer_pod(api_client, namespace)["metadata"]["name"]
    original = client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace).spec.containers[0].image
    for image in ("attacker/image:latest", "warmstart:test-2"):
        patch = json.dumps([{"op": "replace", "path": "/spec/containers/0/image", "value": image}])
        words = f"the containers of pod {pod} may not change"
        _refused(tenant, words, "patch", "pod", pod, "-n", namespace, "--type=json", "-p", patch)
    assert client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace).spec.containers[0].image == original

    debug = ("debug", pod, "-n", namespace, "--profile=general", "--image=busybox", "--", "sh")
    _refused(tenant, f"no ephemeral container may join pod {pod}", *debug)
    assert not client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace).spec.ephemeral_containers

    _refused(tenant, "no exec or attach", "exec", pod, "-n", namespace, "--", "sh")
    _refused(tenant, "no exec or attach", "attach", pod, "-n", namespace)

    # positive controls: a label is metadata, not code; exec into an ordinary pod is not this policy's business
    labelled = _as_tenant(tenant, "label", "pod", pod, "-n", namespace, "team=a")
    assert labelled.returncode == 0, labelled.stderr
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"}}
    plain["spec"] = {"nodeSelector": {"kubernetes.io/hostname": NODE}, "containers": [{"name": "c", "image": "x"}]}
    assert _as_tenant(tenant, "create", "-n", namespace, "-f", "-", stdin=json.dumps(plain)).returncode == 0
    other = _as_tenant(tenant, "exec", "plain", "-n", namespace, "--", "sh")
    assert other.returncode != 0 and "no exec or attach" not in other.stderr, other.stderr  # the pod has no node


def test_the_policies_render_with_the_operators_job_names() -> None:
    """The exec rule goes by pod name: the regular expressions must match the names render/jobs.py gives."""
    template = (CHART / "templates" / "cache-writers.yaml").read_text()
    job_pattern = template.split('$jobName := "')[1].split('"')[0]
    pod_pattern = template.split('$podName := "')[1].split('"')[0]
    names = (
        jobs.preload_job_name(KEY, NODE, 1),
        jobs.preload_job_name(KEY, NODE, 12),
        jobs.cleanup_job_name(KEY, NODE),
    )
    for name in names:
        assert re.match(job_pattern, name), name
        assert re.match(pod_pattern, f"{name}-x7k2p"), name
    assert not re.match(pod_pattern, "model-server-7d9c-x7k2p")
