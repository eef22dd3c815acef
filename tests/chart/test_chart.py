"""The Helm chart: lint, golden `helm template` output, least-privilege RBAC, CRDs, schema errors, operator settings.

Runs the real helm binary (built once from Go modules by warmstart.localcluster, helm alone, about 2 minutes cold).
Regenerate the golden files with UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import subprocess
from typing import Any

import pytest
import yaml

import golden
from warmstart.api import inferencepools
from warmstart.controllers import settings as settings_module
from warmstart.render import cache_volumes, daemonsets, priority

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "warmstart"
GOLDEN = pathlib.Path(__file__).parent / "golden"
KUBE_VERSION = "1.31.0"

#: one values set per golden file; "ha" turns on everything optional
VALUES: dict[str, dict[str, Any]] = {
    "default": {},
    "ha": {
        "replicaCount": 2,
        "watchNamespaces": ["team-a", "team-b"],
        "image": {"repository": "example.com/ml/warmstart", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
        "serviceAccount": {"roleArn": "arn:aws:iam::123456789012:role/warmstart-operator"},
        "jumpstart": {"region": "us-east-1", "bucket": "my-jumpstart-mirror", "gatedBucket": "my-gated-mirror"},
        "preload": {
            "endpoints": {"AWS_ENDPOINT_URL_S3": "http://s3.local:9000"},
            "env": {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE"},
            "podAnnotations": {"team": "ml"},
        },
        "fsx": {
            "allowedFileSystems": {
                "team-a": [{"fileSystemId": "fs-0123456789abcdef0", "dnsName": "fs.fsx.local", "mountName": "abcd"}]
            }
        },
        "cache": {
            "allowedHostPaths": ["/opt/dlami/nvme", "/mnt/cache"],
            "extraTolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        },
        "cacheSharing": {"namespaceGroups": {"ml": ["team-a", "team-b"]}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "priorityClassName": "system-cluster-critical",
        "gatewayInference": {"installInferencePoolCRD": True},
        "router": {"trustedProxies": ["10.0.0.0/8", "fd00::/8"]},
    },
}


def run_helm(helm: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=check, timeout=120)


def template(helm: pathlib.Path, values: dict[str, Any], tmp_path: pathlib.Path) -> str:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return run_helm(
        helm, "template", "warmstart", str(CHART), "--namespace", "warmstart-system", "--kube-version", KUBE_VERSION,
        "--values", str(values_file),
    ).stdout  # fmt: skip


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys (a label set twice is a template bug that YAML would hide)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    duplicated = {key for key in keys if keys.count(key) > 1}
    assert not duplicated, f"duplicate keys {duplicated} at line {node.start_mark.line + 1}"
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_helm_lint_passes_for_every_values_set(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    for name, values in VALUES.items():
        values_file = tmp_path / f"{name}.yaml"
        values_file.write_text(yaml.safe_dump(values))
        result = run_helm(
            helm,
            "lint",
            str(CHART),
            "--strict",
            "--values",
            str(values_file),
            "--kube-version",
            KUBE_VERSION,
            check=False,
        )
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", sorted(VALUES))
def test_helm_template_matches_golden(helm: pathlib.Path, tmp_path: pathlib.Path, name: str) -> None:
    rendered = template(helm, VALUES[name], tmp_path)
    # the CSI driver's Job signing key is random per install (kept on upgrade): not part of what the golden pins
    stable = re.sub(r"(job-signing-key: )[A-Za-z0-9+/=]+", r"\1<random per install>", rendered)
    golden.check_text(GOLDEN / f"{name}.yaml", stable)
    assert documents(rendered)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_rbac_has_no_wildcards(helm: pathlib.Path, tmp_path: pathlib.Path, name: str) -> None:
    docs = documents(template(helm, VALUES[name], tmp_path))
    roles = by_kind(docs, "ClusterRole") + by_kind(docs, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
                assert not any("*" in item for item in rule.get(field, [])), (
                    f"{role['metadata']['name']}: {field} {rule}"
                )
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


def _rules(
    docs: list[dict[str, Any]], kind: str = "ClusterRole", component: str = "operator"
) -> dict[tuple[str, str], set[str]]:
    """What the roles of one component (the operator, or the CSI driver) grant: (group, resource) -> verbs."""
    granted: dict[tuple[str, str], set[str]] = {}
    roles = by_kind(docs, kind)
    for role in [r for r in roles if r["metadata"]["labels"].get("app.kubernetes.io/component") == component]:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_rbac_grants_what_the_controllers_need_and_nodes_read_and_patch_only(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    granted = _rules(documents(template(helm, {}, tmp_path)))
    assert granted[("", "nodes")] == {"get", "list", "watch", "patch"}
    # create: only the dry run of a model pod (the dry-run-pods policy refuses any other)
    assert granted[("", "pods")] == {"get", "list", "watch", "create"}
    full = {"get", "list", "watch", "create", "patch", "update", "delete"}
    for key in [
        ("batch", "jobs"),
        ("apps", "daemonsets"),
        ("apps", "deployments"),
        ("", "services"),
        ("", "configmaps"),
    ]:
        assert granted[key] == full, key
    group = "inference.sagemaker.aws.amazon.com"
    for plural in ("inferenceendpointconfigs", "jumpstartmodels", "modeldatacacheconfigs", "modelimagecaches"):
        assert {"get", "list", "watch", "patch"} <= granted[(group, plural)]
        assert {"patch", "update"} <= granted[(group, f"{plural}/status")]
        assert {"patch", "update"} <= granted[(group, f"{plural}/finalizers")]
    assert {"create"} <= granted[("", "events")]
    assert {"create"} <= granted[("scheduling.k8s.io", "priorityclasses")]
    # the router's Role reads EndpointSlices: the operator must hold that to grant it
    assert {"get", "list", "watch"} <= granted[("discovery.k8s.io", "endpointslices")]
    # the routers' sync keys, one Secret per endpoint: read by name (to keep its key and check its owner), never
    # listed or watched
    assert granted[("", "secrets")] == {"get", "create", "patch", "delete"}
    assert granted[("", "persistentvolumeclaims")] == {"list", "create", "patch", "delete"}
    assert granted[("keda.sh", "scaledobjects")] == {"create", "patch", "delete"}
    # gateway mode: the endpoint's InferencePool by name (never listed or watched), and the picker's Lease, whose get
    # and update the picker's Role grants
    assert granted[("inference.networking.k8s.io", "inferencepools")] == {"get", "create", "patch", "delete"}
    assert granted[("coordination.k8s.io", "leases")] == {"get", "create", "patch", "update", "delete"}


def test_the_inference_pool_crd_is_installed_only_when_asked(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    assert by_kind(documents(template(helm, {}, tmp_path)), "CustomResourceDefinition") == []
    (crd,) = by_kind(documents(template(helm, VALUES["ha"], tmp_path)), "CustomResourceDefinition")
    assert crd == inferencepools.crd()
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    generated = (CHART / inferencepools.CHART_FILE).read_text()
    assert yaml.safe_load(generated) == inferencepools.crd(), "charts/warmstart/files is stale: make crds"


def test_namespaced_permissions_bind_only_in_watched_namespaces(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = documents(template(helm, VALUES["ha"], tmp_path))
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert {b["roleRef"]["kind"] for b in bindings} == {"Role"}, "Roles in the watched namespaces, not ClusterRoles"
    assert sorted(r["metadata"]["namespace"] for r in by_kind(docs, "Role")) == ["team-a", "team-b"]
    # the operator's cluster-wide rights, and the CSI driver's (it reads pods and caches on its node)
    assert sorted(b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")) == [
        "warmstart-cluster",
        "warmstart-csi",
    ]
    peerings = by_kind(docs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert _rules(docs, "Role")[("kopf.dev", "kopfpeerings")] >= {"get", "list", "watch", "patch"}
    # outside the watched namespaces: node labels, reading CRDs, namespaces (kopf) and the PriorityClass; no
    # workload, no ConfigMap, no RBAC object, no write to anything cluster-scoped but node labels
    cluster = _rules(docs)
    assert cluster[("", "namespaces")] == {"get", "list", "watch"}
    assert set(cluster) == {
        ("", "namespaces"),
        ("", "nodes"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("", "persistentvolumes"),
    }
    # FSx sources' static volumes: no list or watch; admission.yaml confines the writes to warmstart-fsx-* volumes
    assert cluster[("", "persistentvolumes")] == {"create", "patch", "delete"}
    assert cluster[("scheduling.k8s.io", "priorityclasses")] == {"get", "list", "watch"}
    assert cluster[("", "nodes")] == {"get", "list", "watch", "patch"}
    assert _rules(docs, "Role")[("", "secrets")] == {"get", "create", "patch", "delete"}  # routers' sync keys only


def test_chart_crds_are_the_generated_crds(helm: pathlib.Path) -> None:
    top = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "no top-level CRDs"
    assert {name: chart.get(name) for name in top} == top, (
        "charts/warmstart/crds differs from crds/: copy them (make crds)"
    )
    assert set(chart) - set(top) == {"kopf.dev_peerings.yaml"}, "only kopf's peering CRDs may be extra"


def test_operator_deployment_is_locked_down(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    (deployment,) = by_kind(documents(template(helm, {}, tmp_path)), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == daemonsets.NON_ROOT_UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # standalone: never two operators at once


def _env(deployment: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """The operator container's environment, `secretKeyRef`s read from the Secrets the chart renders beside it."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    secrets = {s["metadata"]["name"]: s.get("data", {}) for s in by_kind(docs, "Secret")}
    env = {}
    for entry in container["env"]:
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif ref and ref["key"] in secrets.get(ref["name"], {}):
            env[entry["name"]] = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
    return env


def test_rendered_environment_is_what_the_operator_reads(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = documents(template(helm, VALUES["ha"], tmp_path))
    (deployment,) = by_kind(docs, "Deployment")
    settings = settings_module.from_env(_env(deployment, docs))
    assert settings.namespaces == ["team-a", "team-b"]
    assert settings.peering == "warmstart"
    assert settings.metrics_port == 8080 and settings.health_port == 8081
    assert settings.render.operator_image == "example.com/ml/warmstart:0.1.0-rc1"
    assert settings.render.image_pull_policy == "Always"
    assert settings.render.jumpstart_region == "us-east-1"
    assert settings.render.jumpstart_bucket == "my-jumpstart-mirror"
    assert settings.render.jumpstart_gated_bucket == "my-gated-mirror"
    assert settings.render.preload_env_names == ("AWS_ACCESS_KEY_ID",)
    assert settings.render.preload_env_secret == "warmstart-preload-env"
    # the value reaches tenant namespaces in a Secret only, never the operator's or a pod's spec
    assert "AKIAEXAMPLE" not in json.dumps(deployment)
    secrets = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "warmstart-preload-env"]
    assert sorted(s["metadata"]["namespace"] for s in secrets) == ["team-a", "team-b"]
    assert {s["stringData"]["AWS_ACCESS_KEY_ID"] for s in secrets} == {"AKIAEXAMPLE"}
    # connection settings are the admin's plain values, in no tenant's Secret
    assert settings.render.preload_endpoints == {"AWS_ENDPOINT_URL_S3": "http://s3.local:9000"}
    assert not [s for s in secrets if "AWS_ENDPOINT_URL_S3" in s["stringData"]]
    assert settings.render.fsx_file_systems["team-a"][0].dns_name == "fs.fsx.local"
    assert settings.render.preload_pod_annotations == {"team": "ml"}
    assert settings.render.cache_sharing_groups == {"ml": ["team-a", "team-b"]}
    assert settings.render.prepull_priority_class == "warmstart-prepull"
    assert settings.render.router_trusted_proxies == ("10.0.0.0/8", "fd00::/8")
    assert settings.render.allowed_host_paths == ("/opt/dlami/nvme", "/mnt/cache")
    assert settings.render.extra_tolerations == (
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    )
    # the operator's account carries the IAM role; the CSI driver's has none (it reads the API server only)
    (account,) = [a for a in by_kind(docs, "ServiceAccount") if a["metadata"]["name"] == "warmstart"]
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/warmstart-operator"
    }
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"


def test_default_environment_keeps_operator_defaults(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = documents(template(helm, {}, tmp_path))
    (deployment,) = by_kind(docs, "Deployment")
    settings = settings_module.from_env(_env(deployment, docs))
    assert settings.namespaces == [] and settings.peering is None
    assert settings.render.operator_image == "warmstart:0.1.0"
    # the default install reaches the cache through the CSI driver, with a signing key of its own
    assert settings.render.cache_access == cache_volumes.CacheAccess.CSI
    assert len(settings.render.job_signing_key.get_secret_value()) == 48


def test_prepull_priority_class_matches_the_operators(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    (chart_class,) = by_kind(documents(template(helm, {}, tmp_path)), "PriorityClass")
    operator_class = priority.priority_class()
    for field in ("value", "preemptionPolicy", "globalDefault", "description"):
        assert chart_class[field] == operator_class[field], field
    assert chart_class["metadata"]["name"] == operator_class["metadata"]["name"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 0}, "/replicaCount"),
        ({"repliaCount": 2}, "additional properties 'repliaCount' not allowed"),
        ({"jumpstart": {"region": "Oregon"}}, "/jumpstart/region"),
        ({"cache": {"defaultHostPath": "/var/lib/warmstart"}}, "additional properties 'defaultHostPath' not allowed"),
        ({"cache": {"allowedHostPaths": ["/"]}}, "/cache/allowedHostPaths/0"),
        ({"cache": {"allowedHostPaths": ["/opt/../etc"]}}, "/cache/allowedHostPaths/0"),
        ({"cache": {"allowedHostPaths": []}}, "/cache/allowedHostPaths"),
        ({"serviceAccount": {"roleArn": "my-role"}}, "/serviceAccount/roleArn"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"preload": {"env": {"RETRIES": 3}}}, "/preload/env/RETRIES"),
        ({"preload": {"endpoints": {"AWS_SECRET_ACCESS_KEY": "x"}}}, "invalid propertyName 'AWS_SECRET_ACCESS_KEY'"),
        ({"fsx": {"allowedFileSystems": {"team-a": [{"fileSystemId": "fs-0123456789abcdef0"}]}}}, "dnsName"),
        ({"cacheSharing": {"namespaceGroups": {"ml": ["Team_A"]}}}, "/cacheSharing/namespaceGroups/ml/0"),
        ({"router": {"trustedProxies": ["envoy.internal"]}}, "/router/trustedProxies/0"),
        # the driver's sockets go under it, and a unix socket path has at most 107 characters
        ({"csi": {"kubeletDir": "/" + "k" * 67}}, "/csi/kubeletDir"),
    ],
)
def test_bad_values_fail_with_a_clear_message(
    helm: pathlib.Path, tmp_path: pathlib.Path, values: dict[str, Any], message: str
) -> None:
    values_file = tmp_path / "bad.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = run_helm(
        helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--values", str(values_file), check=False
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def test_values_schema_is_valid_json_and_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])


def test_argocd_application_values_pass_the_schema(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    app = yaml.safe_load((ROOT / "examples" / "07-argocd" / "application.yaml").read_text())
    helm_source = app["spec"]["source"]["helm"]
    docs = documents(template(helm, helm_source["valuesObject"], tmp_path))
    (deployment,) = by_kind(docs, "Deployment")
    assert _env(deployment, docs)["WARMSTART_OPERATOR_IMAGE"] == "example.com/ml/warmstart:0.1.0"
    assert by_kind(docs, "ServiceMonitor")


def test_admission_policy_names_the_allowed_roots_and_scopes_to_watched_namespaces(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    docs = documents(template(helm, VALUES["ha"], tmp_path))
    (policy,) = [p for p in by_kind(docs, "ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("cache-roots")]
    (binding,) = [
        b for b in by_kind(docs, "ValidatingAdmissionPolicyBinding") if b["metadata"]["name"].endswith("cache-roots")
    ]
    allowed = next(v for v in policy["spec"]["variables"] if v["name"] == "allowed")
    assert json.loads(allowed["expression"]) == ["/opt/dlami/nvme", "/mnt/cache"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"inferenceendpointconfigs", "jumpstartmodels", "modeldatacacheconfigs"}
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector["values"] == ["team-a", "team-b"]
    default_docs = documents(template(helm, {}, tmp_path))
    (default_binding,) = [
        b
        for b in by_kind(default_docs, "ValidatingAdmissionPolicyBinding")
        if b["metadata"]["name"].endswith("cache-roots")
    ]
    assert "matchResources" not in default_binding["spec"]  # cluster-wide mode: every namespace


def test_node_label_policy_matches_only_the_operators_service_account(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    docs = documents(template(helm, {}, tmp_path))
    (policy,) = [p for p in by_kind(docs, "ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("node-labels")]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:warmstart-system:warmstart'"
    )
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]


@pytest.mark.parametrize("name", ["HF_ENDPOINT", "AWS_ENDPOINT_URL_S3", "HTTPS_PROXY", "AWS_CA_BUNDLE"])
def test_a_connection_setting_in_the_tenant_readable_preload_env_is_refused(
    helm: pathlib.Path, tmp_path: pathlib.Path, name: str
) -> None:
    """preload.env reaches pods from a Secret in each tenant namespace: a tenant who may edit it could fill a shared
    cache from its own mirror. The chart refuses such names and says where they belong."""
    values_file = tmp_path / "bad.yaml"
    values_file.write_text(yaml.safe_dump({"preload": {"env": {name: "http://mirror.local"}}}))
    result = run_helm(
        helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--values", str(values_file), check=False
    )
    assert result.returncode != 0
    assert f"preload.env.{name} is a connection setting" in result.stderr and "preload.endpoints" in result.stderr


def test_pass_through_and_dry_run_pod_policies_are_installed_and_scoped(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    docs = documents(template(helm, VALUES["ha"], tmp_path))
    policies = {p["metadata"]["name"]: p for p in by_kind(docs, "ValidatingAdmissionPolicy")}
    bindings = {b["metadata"]["name"]: b for b in by_kind(docs, "ValidatingAdmissionPolicyBinding")}
    (passing,) = [p for n, p in policies.items() if n.endswith("-pass-through")]
    allowed = next(v for v in passing["spec"]["variables"] if v["name"] == "allowed")
    assert json.loads(allowed["expression"]) == ["/opt/dlami/nvme", "/mnt/cache"]
    (rule,) = passing["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"inferenceendpointconfigs", "jumpstartmodels"}
    binding = bindings[passing["metadata"]["name"]]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector["values"] == ["team-a", "team-b"]
    (dry,) = [p for n, p in policies.items() if n.endswith("-dry-run-pods")]
    (condition,) = dry["spec"]["matchConditions"]
    assert "request.userInfo.username == 'system:serviceaccount:" in condition["expression"]
    assert [v["expression"] for v in dry["spec"]["validations"]] == ["request.dryRun == true"]
    assert bindings[dry["metadata"]["name"]]["spec"]["validationActions"] == ["Deny"]
