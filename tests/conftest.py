"""Shared fixtures: one REAL Kubernetes control plane for the whole test session (integration and e2e alike).

Sets up etcd, kube-apiserver (client certs, RBAC), kube-controller-manager and kube-scheduler,
built from the Go module proxy (see docs/localcluster.md), plus kwok with warmstart's stages and
six fake GPU nodes (4 x ml.g5.24xlarge, 2 x ml.p5.48xlarge). If ``WARMSTART_KUBECONFIG`` names
the kubeconfig of a running local cluster (``warmstart cluster up``), that one is reused and left
running; otherwise a cluster is started in a temporary directory and stopped at the end.

Deliberately NOT faked: the API server with its validation, admission and RBAC; scheduling; and
the controllers (Deployment, ReplicaSet, Job, DaemonSet, garbage collection, namespaces, ...).
Simulated by kwok: the kubelets. No container runs and no image is pulled; pods move through
their phases by stage rules that pod annotations steer (``sim.warmstart.io/*``, see
operator/warmstart/localcluster/stages/pod.yaml).

The cluster is shared by every test: a test that needs other nodes creates its own with
``warmstart.localcluster.nodes.create_nodes(..., prefix=<unique>)`` and deletes them afterwards.

Tests marked ``realnode`` get a SECOND cluster (``real_cluster``): the same control plane and kwok
nodes plus one REAL kubelet node (containerd + runc: images are pulled, containers run), a local
registry and an S3 server (versitygw). It is separate so that pods of the kwok-only tests, some of
which have no node selector, never land on a real node. A host runs one such cluster at a time; it
starts on first use (~30 s) and stops at the end of the session, restoring the host. Nothing about
it is skipped: if the real node cannot start, the tests that need it fail with the reason. Before its first
real-node test a session takes the host's real-node lock (:mod:`realnodelock`), which other sessions' real nodes
take too.

Run in parallel (``make test``: pytest-xdist, ``--dist loadgroup``), each worker is a session of its own: a worker
that runs a cluster test starts its own cluster (the first worker reuses ``WARMSTART_KUBECONFIG``), since some tests
restart the control plane or install cluster-wide CRDs. The tests of one module form one group (its module fixtures
start once); every real-node test is in one group, so one worker runs the host's single real node.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import realnodelock
import xdistgroups
from warmstart.localcluster import building, running, versions

#: the xdist group of every real-node test: one worker runs them all, as the host runs one real node
REAL_NODE_GROUP = "realnode"
#: a test that waits for CI's background build (KEDA, the engine image) may wait this long, on top of its own time
BUILD_WAIT_SECONDS = 2700


#: each module's test time (seconds) in a measured run: the slow modules start first, so that none is left to run
#: alone at the end; a module not in it counts as fast (regenerate: bench/ci_breakdown.py --module-seconds)
MODULE_SECONDS: dict[str, float] = json.loads((pathlib.Path(__file__).parent / "module_seconds.json").read_text())


def _order(item: pytest.Item) -> tuple[bool, bool, bool, bool, float]:
    """Where a test runs: the real-node group first (the longest: a worker starts on it at once), the llama.cpp
    engine's tests last within it; then the other cluster tests; then the rest; the KEDA test last of all. Within
    each, the slowest modules first (:data:`MODULE_SECONDS`)."""
    return (
        item.get_closest_marker("keda") is not None,
        item.get_closest_marker("cluster") is None,
        item.get_closest_marker("realnode") is None,
        item.get_closest_marker("engine") is not None,
        -MODULE_SECONDS.get(item.nodeid.split("::", 1)[0], 0.0),
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests (:func:`_order`) and group them for ``--dist loadgroup``: each module is one group (its module
    fixtures start once) but every real-node test is in one; a test that waits for a slow build (~12 min and more cold)
    gets time for it.

    CI builds KEDA and the engine image in the background (.ci/run): the tests that need them run last, and wait
    for them through the build lock."""
    items.sort(key=_order)
    groups = {}
    for item in items:
        real = item.get_closest_marker("realnode") is not None
        groups[item.nodeid] = REAL_NODE_GROUP if real else item.nodeid.split("::", 1)[0]
        if item.get_closest_marker("keda") or item.get_closest_marker("engine"):
            timeout = item.get_closest_marker("timeout")
            own = float(timeout.args[0]) if timeout and timeout.args else float(item.config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(max(own, BUILD_WAIT_SECONDS)), append=False)
    xdistgroups.write(config, groups)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` schedules the groups of :func:`pytest_collection_modifyitems` (:mod:`xdistgroups`)."""
    return xdistgroups.GroupScheduling(config, log) if xdistgroups.is_controller(config) else None


def _reused_kubeconfig() -> str | None:
    """``WARMSTART_KUBECONFIG``, for a session that runs alone or the first of pytest-xdist's workers (``gw0``)."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return None
    return os.environ.get("WARMSTART_KUBECONFIG") or None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing binaries before any test runs, outside pytest-timeout's per-test budget; a collection that
    runs nothing (``--collect-only``) builds nothing."""
    if session.config.option.collectonly:
        return
    wanted: tuple[versions.Build, ...] = ()
    if any(item.get_closest_marker("cluster") for item in session.items) and not _reused_kubeconfig():
        wanted += versions.CONTROL_PLANE
    if any(item.get_closest_marker("realnode") for item in session.items) and not os.environ.get(REAL_KUBECONFIG):
        wanted += tuple(build for build in versions.CONTROL_PLANE + versions.REAL_NODES if build not in wanted)
    if building.missing(wanted):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("building the local cluster from Go modules, first time only (~30 min)")
        building.ensure(wanted)


@pytest.hookimpl(tryfirst=True, wrapper=True)  # before pytest-timeout starts the test's clock: waiting is no test time
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A real-node test first takes the host's real-node lock (kept to the session's end), unless it reuses a
    running real-node cluster (``WARMSTART_REAL_KUBECONFIG``)."""
    if item.get_closest_marker("realnode") and not os.environ.get(REAL_KUBECONFIG):
        REAL_NODE_LOCK.take()
    return (yield)


def pytest_sessionfinish() -> None:
    """The session's real-node cluster stopped with its fixtures: the host's real node is free again."""
    REAL_NODE_LOCK.release()


class TestTimes:
    """``WARMSTART_TEST_TIMES=FILE``: every session (each worker) appends where its time goes, one tab-separated line
    per test phase and per fixture setup of at least :data:`SLOW_FIXTURE_SECONDS` (bench/ci_breakdown.py sums them).

    A plugin, not conftest hooks: a conftest's hooks miss the session-scoped fixtures (the clusters)."""

    SLOW_FIXTURE_SECONDS = 0.5

    def __init__(self, path: str) -> None:
        self._path = path
        self._worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    def _record(self, *fields: object) -> None:
        with open(self._path, "a") as out:  # one short line per write: workers' lines do not interleave
            out.write("\t".join(str(f) for f in (self._worker, *fields)) + "\n")

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
    ) -> Iterator[object]:
        """How long a slow fixture's own setup took (the fixtures it depends on are set up before)."""
        started = time.time()
        try:
            return (yield)
        finally:
            seconds = time.time() - started
            if seconds >= self.SLOW_FIXTURE_SECONDS:
                where = request.node.nodeid
                self._record("fixture", f"{started:.1f}", f"{seconds:.2f}", fixturedef.scope, fixturedef.argname, where)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Each phase (setup, call, teardown) of each test, with its start."""
        if not hasattr(report, "node"):  # in a parallel run the worker records its own, not the controller
            self._record(report.when, f"{report.start:.1f}", f"{report.duration:.2f}", report.outcome, report.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    if xdistgroups.is_controller(config):
        xdistgroups.controller_setup()
    times = os.environ.get("WARMSTART_TEST_TIMES")
    if times:
        config.pluginmanager.register(TestTimes(times), "warmstart-test-times")


def pytest_unconfigure(config: pytest.Config) -> None:
    if xdistgroups.is_controller(config):
        xdistgroups.controller_cleanup()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[running.Cluster]:
    """The running local cluster (``.kubeconfig``, ``.dir``, ``.server``): ``WARMSTART_KUBECONFIG``'s when set (in a
    parallel run, for the first worker only), otherwise one this session starts and stops."""
    reused = _reused_kubeconfig()
    if reused:
        kubeconfig = pathlib.Path(reused).resolve()
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        yield running.Cluster(dir=kubeconfig.parent, kubeconfig=kubeconfig, server=server)
        return
    directory = tmp_path_factory.mktemp("cluster")
    started = running.up(directory)
    try:
        yield started
    finally:
        running.down(directory)


REAL_KUBECONFIG = "WARMSTART_REAL_KUBECONFIG"
REAL_NODE_LOCK = realnodelock.RealNodeLock()


#: starts of the real-node cluster before the session gives up (running.up stops what it started on failure)
START_ATTEMPTS = 2


class RealClusters:
    """The session's cluster with a real node: started on first :meth:`get`, at most one at a time.

    ``WARMSTART_REAL_KUBECONFIG`` names the kubeconfig of a running cluster with real nodes
    (``warmstart cluster up --dir D --real-nodes 1``) to reuse instead; it is never stopped.
    """

    def __init__(self, base: pathlib.Path) -> None:
        self._base = base
        self._started = 0
        self._directory: pathlib.Path | None = None
        reused = os.environ.get(REAL_KUBECONFIG)
        self.reused = pathlib.Path(reused).resolve().parent if reused else None

    def get(self) -> running.Cluster:
        if self.reused is not None:
            found = running.running_cluster(self.reused)
            if found is None or found.real is None:
                pytest.fail(f"{REAL_KUBECONFIG}: no running cluster with real nodes in {self.reused}")
            return found
        if self._directory is not None:
            found = running.running_cluster(self._directory)
            if found is not None:
                return found
            pytest.fail(f"the session's real-node cluster in {self._directory} stopped; see its logs/")
        failures = []
        for _ in range(START_ATTEMPTS):  # the fixtures that use it are session-wide: one failed start fails them all
            self._started += 1
            self._directory = self._base / f"real-{self._started}"
            self._directory.mkdir(parents=True)
            try:
                return running.up(self._directory, real_nodes=1, timeout=300.0)
            except Exception as error:  # noqa: BLE001 - any start failure fails the test with its reason
                self._directory = None
                failures.append(str(error))
        pytest.fail(f"the real node did not start ({START_ATTEMPTS} attempts): " + "\n".join(failures))

    def stop(self) -> None:
        """Stop the running one (if this session started it); raises if it left host state behind."""
        directory, self._directory = self._directory, None
        if directory is not None:
            running.down(directory)


@pytest.fixture(scope="session")
def real_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealClusters]:
    """The manager of the session's real-node cluster (see :class:`RealClusters`); stops it at the end."""
    clusters = RealClusters(tmp_path_factory.mktemp("real"))
    try:
        yield clusters
    finally:
        clusters.stop()


@pytest.fixture
def real_cluster(real_clusters: RealClusters) -> running.Cluster:
    """A running cluster whose ``.real`` (``warmstart.localcluster.realnodes.RealNodes``) has one real node:
    ``.names``, ``.registry``, ``.image("busybox:1")``, ``.s3`` (``.host_url``, ``.pod_url``, keys),
    ``.hostpath_root``, ``.node_ip``."""
    return real_clusters.get()


@pytest.fixture
def real_api_client(real_cluster: running.Cluster) -> Iterator[client.ApiClient]:
    """An admin ``ApiClient`` of the real-node cluster."""
    api = config.new_client_from_config(config_file=str(real_cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def api_client(cluster: running.Cluster) -> Iterator[client.ApiClient]:
    """A ``kubernetes.client.ApiClient`` authenticated as the cluster admin (system:masters)."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists; deleted (not awaited) after the test."""
    yield from _fresh_namespace(api_client)


@pytest.fixture
def second_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """Another fresh namespace, for tests of two tenants."""
    yield from _fresh_namespace(api_client)


@pytest.fixture
def real_namespace(real_api_client: client.ApiClient) -> Iterator[str]:
    """The same as ``namespace``, in the real-node cluster."""
    yield from _fresh_namespace(real_api_client)


def _fresh_namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"warmstart.io/test": "true"}}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30 s"
        time.sleep(0.1)
    try:
        yield name
    finally:
        _release_finalizers(api, name)
        core.delete_namespace(name, propagation_policy="Background")


def _release_finalizers(api: client.ApiClient, namespace: str) -> None:
    """Drop warmstart finalizers left by a test that stopped its operator first, so the namespace can go away."""
    objects = client.CustomObjectsApi(api)
    group, version = "inference.sagemaker.aws.amazon.com", "v1"
    for plural in ("inferenceendpointconfigs", "jumpstartmodels", "modeldatacacheconfigs", "modelimagecaches"):
        try:
            items = objects.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except client.ApiException:
            continue  # CRDs not installed by this test
        for item in items:
            if item["metadata"].get("finalizers"):
                objects.patch_namespaced_custom_object(
                    group, version, namespace, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                )


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    """The helm binary of the local cluster's toolchain, built (helm only) if missing."""
    path = building.binary_path("helm", versions.HELM)
    if not path.is_file():
        building.build_one(versions.HELM_BUILD)
    return path
