"""End-to-end fixtures: the same REAL control plane as tests/integration (reused, not re-implemented), plus helm.

The cluster, API client and per-test namespace fixtures are tests/integration/conftest.py's own, loaded from that
file, so WARMSTART_KUBECONFIG works the same way (reuse a running cluster). The operator runs as a separate PROCESS
(`warmstart operator`, as the chart's container would run it: same environment, and authenticated as the chart's
ServiceAccount so the chart's RBAC is what it gets). kwok runs no containers, so the chart's own operator pod is only
simulated; the process stands in for it.

Deliberately NOT faked: helm (the real binary, built from Go modules), the API server with its admission, RBAC and
CRD validation, the controllers and the scheduler. Simulated by kwok: kubelets, so preload Jobs "succeed" with the
termination message that a pod annotation asks for.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

from warmstart.localcluster import building, versions

INTEGRATION = pathlib.Path(__file__).resolve().parents[1] / "integration"
sys.path.insert(0, str(INTEGRATION))  # kube.py and friends, as the integration tests import them

_spec = importlib.util.spec_from_file_location("warmstart_integration_fixtures", INTEGRATION / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

cluster = _fixtures.cluster
api_client = _fixtures.api_client
namespace = _fixtures.namespace


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    """The helm binary of the local cluster's toolchain, built (helm only) if missing."""
    path = building.binary_path("helm", versions.HELM)
    if not path.is_file():
        building.build_one(versions.HELM_BUILD)
    return path
