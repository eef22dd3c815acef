"""Beside AWS's inference operator (its CRDs: the same group and kinds, without warmstart's owner label), the chart
refuses to install and the operator refuses to start, each with a message that says why and what to do.

AWS's CRDs are played by a CRD of the same name with AWS's shape (no owner label, no `modelCacheConfig`): one cluster
holds one CRD per name, so warmstart's own is put back afterwards.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import kube
from warmstart.api import CRD_OWNER, CRD_OWNER_LABEL

pytestmark = pytest.mark.cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com"
WARMSTART = pathlib.Path(sys.executable).with_name("warmstart")


def aws_shaped(kubeconfig: str) -> dict[str, Any]:
    """Our IEC CRD as AWS's would look to the checks: no owner label, no modelCacheConfig."""
    crd = kube.kubectl(kubeconfig, "get", "crd", CRD, "-o", "json").stdout
    body: dict[str, Any] = json.loads(crd)
    body["metadata"] = {"name": CRD, "labels": {"app.kubernetes.io/name": "hyperpod-inference-operator"}}
    for version in body["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"]["modelCacheConfig"]
        # and our rules that name it, or the API server refuses the CRD before the checks see it
        spec["x-kubernetes-validations"] = [
            rule for rule in spec.get("x-kubernetes-validations", []) if "modelCacheConfig" not in rule["rule"]
        ]
    body.pop("status", None)
    return body


@pytest.fixture
def foreign_crd(cluster: Any) -> Iterator[str]:
    kubeconfig = str(cluster.kubeconfig)
    kube.install_crds(kubeconfig)
    foreign = aws_shaped(kubeconfig)
    kube.kubectl(kubeconfig, "label", "crd", CRD, f"{CRD_OWNER_LABEL}-")
    kube.kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(foreign))
    try:
        yield kubeconfig
    finally:
        kube.install_crds(kubeconfig)
        kube.kubectl(kubeconfig, "label", "--overwrite", "crd", CRD, f"{CRD_OWNER_LABEL}={CRD_OWNER}")


def test_an_earlier_warmstarts_crds_without_the_label_are_not_refused(cluster: Any, helm: pathlib.Path) -> None:
    kubeconfig = str(cluster.kubeconfig)
    kube.install_crds(kubeconfig)
    kube.kubectl(kubeconfig, "label", "crd", CRD, f"{CRD_OWNER_LABEL}-")
    try:
        result = helm_dry_run(helm, kubeconfig)
        assert result.returncode == 0, result.stderr
    finally:
        kube.kubectl(kubeconfig, "label", "--overwrite", "crd", CRD, f"{CRD_OWNER_LABEL}={CRD_OWNER}")


def helm_dry_run(helm: pathlib.Path, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    """`helm install --dry-run=server`: renders against the live cluster, so `lookup` sees its CRDs."""
    return subprocess.run(
        [str(helm), "--kubeconfig", kubeconfig, "install", "ws-coexist", str(ROOT / "charts" / "warmstart"),
         "--namespace", "default", "--dry-run=server", "--set", "prepull.priorityClass.create=false"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_chart_installs_where_the_crds_are_warmstarts(cluster: Any, helm: pathlib.Path) -> None:
    kube.install_crds(str(cluster.kubeconfig))
    result = helm_dry_run(helm, str(cluster.kubeconfig))
    assert result.returncode == 0, result.stderr


def test_the_chart_refuses_to_install_beside_aws_crds(foreign_crd: str, helm: pathlib.Path) -> None:
    result = helm_dry_run(helm, foreign_crd)
    assert result.returncode != 0
    assert f"the CRD {CRD} is installed but is not warmstart's" in result.stderr
    assert "AWS's HyperPod inference operator" in result.stderr


def test_the_operator_exits_non_zero_beside_aws_crds(foreign_crd: str) -> None:
    result = subprocess.run(
        [str(WARMSTART), "operator", "--kubeconfig", foreign_crd, "--metrics-port", "0", "--health-port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3
    assert f"not starting: the CRDs {CRD} are installed but are not warmstart's" in result.stderr
