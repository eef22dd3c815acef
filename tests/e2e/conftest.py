"""End-to-end set-up: the same REAL control plane and helm fixtures as everywhere (tests/conftest.py).

The cluster, API client and per-test namespace fixtures come from tests/conftest.py, shared with the integration
tests, so one session starts at most one cluster and WARMSTART_KUBECONFIG works the same way (reuse a running one).
The operator runs as a separate PROCESS
(`warmstart operator`, as the chart's container would run it: same environment, and authenticated as the chart's
ServiceAccount so the chart's RBAC is what it gets). kwok runs no containers, so the chart's own operator pod is only
simulated; the process stands in for it.

Deliberately NOT faked: helm (the real binary, built from Go modules), the API server with its admission, RBAC and
CRD validation, the controllers and the scheduler. Simulated by kwok: kubelets, so preload Jobs "succeed" with the
termination message that a pod annotation asks for.
"""

from __future__ import annotations
