"""The chart's pass-through policies on the real API server: what a tenant passes into a model pod is refused at
`kubectl apply` when a Pod of the namespace's level could not have it, and the operator creates pods only as dry runs.

The policies are rendered by the real helm (charts/warmstart/templates/admission.yaml), scoped to this test's
namespaces, and applied to the real API server (ValidatingAdmissionPolicy, with `namespaceObject` for the level):

- `<release>-pass-through`: hostPath volumes outside the allowed roots, not normalized, inside warmstart's cache, or
  mounted writable by an init container are refused whatever the namespace, and so is an init container beyond Pod
  Security baseline (privileged, an added capability, a host port, an Unconfined profile, a procMount, SELinux
  options), or a legacy AppArmor or seccomp annotation that sets such a profile for an init container, in an
  InferenceEndpointConfig or a JumpStartModel; in a namespace labelled `baseline` or `restricted`, a hostPath volume
  is refused too. It is admitted in a `privileged` namespace (positive control), and an unlabelled namespace is left
  to the operator's dry run.
- `<release>-dry-run-pods`: the operator's ServiceAccount may create a Pod with dryRun=All, never for real.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import kube
from warmstart.api import GROUP, VERSION

pytestmark = pytest.mark.cluster

CHART = kube.ROOT / "charts" / "warmstart"
PLURAL = "inferenceendpointconfigs"
NVME = yaml.safe_load((kube.ROOT / "tests" / "hyperpod-corpus" / "iec-v1-nvme-volume.yaml").read_text())


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _labelled(api: client.ApiClient, namespace: str, level: str | None) -> str:
    if level is not None:
        body = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}}
        client.CoreV1Api(api).patch_namespace(namespace, body)
    return namespace


@pytest.fixture
def spaces(api_client: client.ApiClient) -> Iterator[dict[str, str]]:
    """Namespaces labelled baseline, restricted and privileged, and one without a label."""
    core = client.CoreV1Api(api_client)
    made: dict[str, str] = {}
    for level in ("baseline", "restricted", "privileged", "unlabelled"):
        name = f"t-adm-{level[:4]}-{uuid.uuid4().hex[:6]}"
        labels = {"warmstart.io/test": "true"}
        if level != "unlabelled":
            labels["pod-security.kubernetes.io/enforce"] = level
        core.create_namespace({"metadata": {"name": name, "labels": labels}})
        made[level] = name
    try:
        yield made
    finally:
        for name in made.values():
            core.delete_namespace(name, propagation_policy="Background")


def _render(helm: pathlib.Path, release: str, namespace: str, values: dict[str, Any], tmp: pathlib.Path) -> list[Any]:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "-n", namespace, "-f", str(path), "--kube-version", "1.37.0",
         "-s", "templates/admission.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(rendered) if d]


@pytest.fixture
def policies(
    cluster: Any, helm: pathlib.Path, spaces: dict[str, str], tmp_path: pathlib.Path
) -> Iterator[dict[str, Any]]:
    """The pass-through and dry-run-pods policies with their bindings, applied; removed afterwards."""
    release = f"pt-{uuid.uuid4().hex[:6]}"
    home = spaces["unlabelled"]
    values = {"watchNamespaces": sorted(spaces.values()), "cache": {"allowedHostPaths": ["/opt/dlami/nvme"]}}
    docs = [
        d
        for d in _render(helm, release, home, values, tmp_path)
        if d["metadata"]["name"].endswith(("-pass-through", "-dry-run-pods"))
    ]
    assert (
        sorted(d["kind"] for d in docs) == ["ValidatingAdmissionPolicy"] * 2 + ["ValidatingAdmissionPolicyBinding"] * 2
    )
    kube.apply(str(cluster.kubeconfig), yaml.safe_dump_all(docs))
    try:
        yield {"release": release, "namespace": home, "docs": docs}
    finally:
        for doc in reversed(docs):
            kube.kubectl(
                str(cluster.kubeconfig), "delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found",
                check=False,
            )  # fmt: skip


def _iec(name: str, namespace: str, kubernetes: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The NVMe manifest (or `spec`) in `namespace` with this `kubernetes` block."""
    doc = copy.deepcopy(NVME)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"] = {**(spec or doc["spec"]), "kubernetes": kubernetes}
    return doc


def _jsm(name: str, namespace: str, kubernetes: dict[str, Any]) -> dict[str, Any]:
    """A JumpStartModel in `namespace` with this `kubernetes` block."""
    spec = {
        "model": {"modelId": "huggingface-llm-example", "modelVersion": "1.0.0"},
        "server": {"instanceType": "ml.g5.12xlarge"},
        "kubernetes": kubernetes,
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JumpStartModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _create(api: client.ApiClient, manifest: dict[str, Any]) -> str | None:
    """Create with dryRun=All; the refusal's message, or None when admitted."""
    plural = "jumpstartmodels" if manifest.get("kind") == "JumpStartModel" else PLURAL
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, manifest["metadata"]["namespace"], plural, manifest, dry_run="All"
        )
    except client.ApiException as error:
        assert error.status in (403, 422), error.body
        return str(json.loads(error.body)["message"])
    return None


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


def _init(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "command": ["true"], **fields}


MODEL = [_host("model-weights", "/opt/dlami/nvme/qwen")]
#: refused whatever the namespace: (kubernetes block, words of the refusal)
ALWAYS_REFUSED = [
    ({"volumes": [_host("model-weights", "/")]}, "hostPath of model-weights (/) must be a normalized absolute path"),
    ({"volumes": [_host("model-weights", "/etc")]}, "model-weights (/etc)"),
    ({"volumes": [_host("model-weights", "/opt/dlami/nvme")]}, "strictly under an allowed root (/opt/dlami/nvme"),
    ({"volumes": [_host("model-weights", "/opt/dlami/nvme/../../etc")]}, "(/opt/dlami/nvme/../../etc)"),
    ({"volumes": [_host("model-weights", "/opt/dlami/nvme/x/")]}, "(/opt/dlami/nvme/x/)"),
    ({"volumes": [_host("model-weights", "/opt/dlami/nvme/warmstart/weights/k")]}, "outside warmstart's cache"),
    (
        {
            "volumes": MODEL,
            "initContainers": [_init("fill", volumeMounts=[{"name": "model-weights", "mountPath": "/m"}])],
        },
        "spec.kubernetes.initContainers: fill must mount hostPath volumes readOnly: true",
    ),
]
#: refused where the level is baseline or restricted, admitted where it is privileged
LEVEL_REFUSED = [
    ({"volumes": MODEL}, "spec.kubernetes.volumes: model-weights is a hostPath volume, which Pod Security"),
]


def _secured(name: str, **security: Any) -> dict[str, Any]:
    return {"initContainers": [_init(name, securityContext=security)]}


#: init containers beyond baseline, refused whatever the namespace's level (a privileged namespace included)
INIT_REFUSED = [
    (_secured("escalate", privileged=True), "spec.kubernetes.initContainers: escalate sets securityContext.privileged"),
    (_secured("caps", capabilities={"add": ["SYS_ADMIN"]}), "spec.kubernetes.initContainers: caps adds capabilities"),
    (
        {"initContainers": [_init("port", ports=[{"containerPort": 80, "hostPort": 80}])]},
        "spec.kubernetes.initContainers: port sets a hostPort",
    ),
    (_secured("seccomp", seccompProfile={"type": "Unconfined"}), "initContainers: seccomp sets an Unconfined"),
    (_secured("apparmor", appArmorProfile={"type": "Unconfined"}), "initContainers: apparmor sets an Unconfined"),
    (_secured("proc", procMount="Unmasked"), "spec.kubernetes.initContainers: proc sets an Unconfined"),
    (_secured("selinux", seLinuxOptions={"type": "spc_t"}), "spec.kubernetes.initContainers: selinux sets"),
]


def _annotated(annotations: dict[str, str], inits: tuple[str, ...] = ("step",)) -> dict[str, Any]:
    """A `kubernetes` block with these pod annotations and plain init containers of these names."""
    return {"annotations": annotations, "initContainers": [_init(name) for name in inits]}


APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP = "container.seccomp.security.alpha.kubernetes.io/"
SECCOMP_POD = "seccomp.security.alpha.kubernetes.io/pod"
#: legacy profile annotations that take an init container beyond baseline, refused whatever the namespace's level
ANNOTATIONS_REFUSED = [
    (_annotated({APPARMOR + "step": "unconfined"}), f"spec.kubernetes.annotations: {APPARMOR}step=unconfined sets"),
    (_annotated({SECCOMP + "step": "unconfined"}), f"spec.kubernetes.annotations: {SECCOMP}step=unconfined sets"),
    (_annotated({SECCOMP_POD: "unconfined"}), f"spec.kubernetes.annotations: {SECCOMP_POD}=unconfined sets"),
    # warmstart's own init container keeps its profile too
    (_annotated({APPARMOR + "warmstart-preload": "unconfined"}), f"{APPARMOR}warmstart-preload=unconfined sets"),
]
#: positive controls: annotations within baseline, or for the model server (the namespace's level decides for it)
ANNOTATIONS_ADMITTED = [
    _annotated({APPARMOR + "step": "runtime/default", SECCOMP + "step": "localhost/step.json"}),
    _annotated({APPARMOR + "worker": "unconfined", SECCOMP + "worker": "unconfined", "example.com/x": "unconfined"}),
    _annotated({SECCOMP_POD: "unconfined"}, inits=()),  # no init container passed through: the model server's alone
]


def test_pass_through_policy_refuses_what_a_pod_could_not_have(
    api_client: client.ApiClient, spaces: dict[str, str], policies: dict[str, Any]
) -> None:
    baseline, restricted, privileged = spaces["baseline"], spaces["restricted"], spaces["privileged"]
    # the policy takes effect once the API server has loaded it: wait for the first refusal
    kube.wait_for(
        lambda: _create(api_client, _iec("probe", privileged, {"volumes": [_host("model-weights", "/")]})),
        60,
        what="the pass-through policy to refuse",
    )
    for index, (kubernetes, words) in enumerate(ALWAYS_REFUSED):
        for namespace in (privileged, spaces["unlabelled"]):
            message = _create(api_client, _iec(f"always-{index}", namespace, kubernetes))
            assert message is not None and words in message, (kubernetes, message)
    for index, (kubernetes, words) in enumerate(LEVEL_REFUSED):
        # the NVMe manifest when the case is its hostPath volume, else the same endpoint reading S3
        spec = None if "volumes" in kubernetes else _spec_without_volume()
        for namespace, level in ((baseline, "baseline"), (restricted, "restricted")):
            message = _create(api_client, _iec(f"level-{index}", namespace, kubernetes, spec))
            assert message is not None and words in message and f"Pod Security {level}" in message, (level, message)
        # positive controls: the level allows it, and an unlabelled namespace is the operator's dry run's to decide
        for namespace in (privileged, spaces["unlabelled"]):
            assert _create(api_client, _iec(f"level-{index}", namespace, kubernetes, spec)) is None, kubernetes
    for index, (kubernetes, words) in enumerate([*INIT_REFUSED, *ANNOTATIONS_REFUSED]):
        for namespace in spaces.values():
            message = _create(api_client, _iec(f"init-{index}", namespace, kubernetes, _spec_without_volume()))
            assert message is not None and words in message, (namespace, kubernetes, message)
            cap = (
                "restricted (this namespace's level) forbids"
                if namespace == restricted
                else "at most at Pod Security baseline"
            )
            assert cap in message, message
        # a JumpStartModel passes init containers through the same way
        message = _create(api_client, _jsm(f"init-{index}", spaces["privileged"], kubernetes))
        assert message is not None and words in message, (kubernetes, message)
    # positive control: an init container within baseline, in every namespace and kind
    within = _secured("within", capabilities={"add": ["CHOWN"]}, seccompProfile={"type": "RuntimeDefault"})
    for namespace in (spaces["baseline"], privileged, spaces["unlabelled"]):
        assert _create(api_client, _iec("within", namespace, within, _spec_without_volume())) is None, namespace
    assert _create(api_client, _jsm("within", privileged, within)) is None
    for index, kubernetes in enumerate(ANNOTATIONS_ADMITTED):
        assert _create(api_client, _iec(f"noted-{index}", privileged, kubernetes, _spec_without_volume())) is None
        assert _create(api_client, _jsm(f"noted-{index}", privileged, kubernetes)) is None
    # baseline allows some capabilities (CHOWN), restricted only NET_BIND_SERVICE
    chown = {"initContainers": [_init("own", securityContext={"capabilities": {"add": ["CHOWN"]}})]}
    assert _create(api_client, _iec("chown", baseline, chown, spec=_spec_without_volume())) is None
    message = _create(api_client, _iec("chown", restricted, chown, spec=_spec_without_volume()))
    assert (
        message is not None
        and "own adds capabilities beyond NET_BIND_SERVICE, which Pod Security restricted" in message
    ), message
    # HyperPod's NVMe manifest as AWS writes it: admitted where the level allows hostPath
    assert _create(api_client, {**NVME, "metadata": {"name": "nvme", "namespace": privileged}}) is None


def _spec_without_volume() -> dict[str, Any]:
    """The NVMe manifest's spec with an S3 source instead of the volume (a spec a baseline pod can serve)."""
    spec = copy.deepcopy(NVME["spec"])
    spec["modelSourceConfig"] = {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
        "modelLocation": "models/qwen",
    }
    spec.pop("kubernetes", None)
    return spec


def test_the_operator_may_create_pods_only_as_dry_runs(
    cluster: Any, api_client: client.ApiClient, policies: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    home, release = policies["namespace"], policies["release"]
    account = f"{release}-warmstart"
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(home, {"metadata": {"name": account}})
    rbac = client.RbacAuthorizationV1Api(api_client)
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    rbac.create_namespaced_role(home, {"metadata": {"name": account}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        home,
        {
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": home}],
        },
    )
    kubeconfig = kube.service_account_kubeconfig(
        api_client, pathlib.Path(cluster.kubeconfig), home, account, tmp_path / "operator.kubeconfig"
    )
    operator = config.new_client_from_config(config_file=str(kubeconfig))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    pods = client.CoreV1Api(operator)

    def refused_for_real() -> str | None:
        try:
            pods.create_namespaced_pod(home, pod)
        except client.ApiException as error:
            if "may create pods only with dryRun" in str(error.body):
                return str(error.body)
            raise
        # created before the policy was loaded: remove it (as the admin: the operator may not delete pods), try again
        core.delete_namespaced_pod("probe", home, grace_period_seconds=0)
        kube.wait_for(lambda: not core.list_namespaced_pod(home, field_selector="metadata.name=probe").items, 60)
        return None

    try:
        kube.wait_for(refused_for_real, 60, what="the dry-run-pods policy to refuse a real create")
        assert pods.create_namespaced_pod(home, pod, dry_run="All").metadata.name == "probe"
        assert not core.list_namespaced_pod(home).items
    finally:
        operator.close()
