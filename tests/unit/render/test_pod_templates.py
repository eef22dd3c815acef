"""A writer pod must run its Job's template; only what EKS's identity webhooks add is tolerated
(render/pod_templates.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from warmstart.render import pod_templates as templates

TEMPLATE: dict[str, Any] = {
    "restartPolicy": "Never",
    "automountServiceAccountToken": False,
    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "preload",
            "image": "warmstart:0.1.0",
            "command": ["warmstart"],
            "args": ["preload", "--key", "k"],
            "env": [{"name": "HOME", "value": "/tmp"}, {"name": "AWS_REGION", "value": "us-west-2"}],
            "volumeMounts": [{"name": "cache", "mountPath": "/opt/dlami/nvme/warmstart"}],
        }
    ],
    "volumes": [{"name": "cache", "csi": {"driver": "d", "volumeAttributes": {"key": "k", "access": "write"}}}],
}
IRSA_VOLUME = {
    "name": "aws-iam-token",
    "projected": {"sources": [{"serviceAccountToken": {"audience": "sts.amazonaws.com", "path": "token"}}]},
}
IRSA_MOUNT = {
    "name": "aws-iam-token",
    "mountPath": "/var/run/secrets/eks.amazonaws.com/serviceaccount",
    "readOnly": True,
}
IRSA_ENV = [
    {"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::1:role/r"},
    {"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"},
    {"name": "AWS_REGION", "value": "us-east-1"},  # already set by the template: the webhook would not add it
]


def pod(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(TEMPLATE)
    spec["serviceAccountName"] = "default"
    spec.update(changes)
    return spec


def irsa() -> dict[str, Any]:
    spec = pod()
    spec["volumes"].append(IRSA_VOLUME)
    container = spec["containers"][0]
    container["env"] += IRSA_ENV[:2]
    container["volumeMounts"].append(IRSA_MOUNT)
    return spec


def test_the_job_controllers_pod_matches() -> None:
    assert templates.mismatch(pod(), TEMPLATE) is None


def test_what_irsa_adds_is_tolerated() -> None:
    assert templates.mismatch(irsa(), TEMPLATE) is None


def _with_container(change: dict[str, Any]) -> dict[str, Any]:
    spec = pod()
    spec["containers"][0].update(change)
    return spec


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (_with_container({"command": ["sh"]}), "containers"),
        (_with_container({"image": "evil"}), "containers"),
        (
            _with_container({"env": [*TEMPLATE["containers"][0]["env"], {"name": "LD_PRELOAD", "value": "/x.so"}]}),
            "containers",
        ),
        (
            _with_container(
                {"env": [*TEMPLATE["containers"][0]["env"], {"name": "AWS_ENDPOINT_URL_S3", "value": "http://x"}]}
            ),
            "containers",
        ),
        (
            _with_container({"env": [{"name": "HOME", "value": "/tmp"}, {"name": "AWS_REGION", "value": "evil-1"}]}),
            "containers",
        ),
        (pod(containers=[*TEMPLATE["containers"], {"name": "sidecar", "image": "evil"}]), "containers"),
        (pod(initContainers=[{"name": "first", "image": "evil"}]), "initContainers"),
        (pod(volumes=[*TEMPLATE["volumes"], {"name": "host", "hostPath": {"path": "/"}}]), "volumes"),
        (pod(hostPID=True), "hostPID"),
        (pod(serviceAccountName="other"), "serviceAccountName"),
    ],
)
def test_anything_else_is_a_stranger(spec: dict[str, Any], field: str) -> None:
    assert templates.mismatch(spec, TEMPLATE) == field


def test_a_token_volume_mounted_writable_or_holding_anything_else_is_a_stranger() -> None:
    spec = irsa()
    spec["containers"][0]["volumeMounts"][-1] = {**IRSA_MOUNT, "readOnly": False}
    assert templates.mismatch(spec, TEMPLATE) == "containers"
    spec = irsa()
    spec["volumes"][-1] = {"name": "aws-iam-token", "projected": {"sources": [{"secret": {"name": "s"}}]}}
    assert templates.mismatch(spec, TEMPLATE) == "volumes"
