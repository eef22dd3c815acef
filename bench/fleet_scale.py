"""The fleet size of bench/operator_scale.py: nodes, caches and endpoints created at once, as in a model rollout.

`nodes` kwok nodes in `caches` groups of a unique instance type. `endpoints - 1` InferenceEndpointConfigs (weights
cache on, one replica) each make the cache of one group; the bench creates the other groups' ModelDataCacheConfigs
itself; one more endpoint, the probe, has no cache and is deployed before the fleet starts. The operator runs as the
chart configures it (cache access `csi` with signed Jobs, preload throttle max(16, 25%), resync 10 s), as a
ServiceAccount whose requests the API server counts (apicounting.py).

Measured:
  - create -> every cache Ready, and -> every endpoint DeploymentComplete; the last Job done -> every cache Ready;
  - the operator's peak RSS and CPU seconds, and the CPU seconds of etcd, kube-apiserver, the controller manager,
    the scheduler and kwok over the same span (same 2 cores);
  - the operator's API requests: all of them (the API server's count for its FlowSchema), and its controllers' by
    method (its own counter), per (node + cache);
  - while the fleet warms, every 5 s the probe endpoint's `replicas` flips between 1 and 2: the time until its
    status shows the new generation (`status.observedGeneration`) is what a user waits for.
  - before the fleet starts, the operator's CPU over a minute with every node Ready and nothing to do, next to the
    node watch events of that minute (bench/idle_minute.py); with `--profile`, that minute's samples also go to
    profile-<size>-idle.txt;
  - the operator's CPU from its start until the probe endpoint's first status (its listings and index fill);
  - the control plane's CPU (etcd, kube-apiserver, controller manager, scheduler) apart from kwok's (the simulated
    kubelets: leases, pods) and the operator's, and the operator's share of the three.
With `--profile`, bench/stack_sampler.py samples the operator's on-CPU stacks (20 Hz) into collapsed stacks.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client

import apicounting
import idle_minute
import profiles
from scale_fixtures import cleanup, delta, free_port, mdcc, operator_process, scrape_requests
from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.render import labels

IEC_PLURAL = "inferenceendpointconfigs"
PROBE = "probe"
PROBE_EVERY_SECONDS = 5.0
#: the processes of the control plane proper (kwok, the simulated kubelets, is reported apart)
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: the chart's defaults that change what the operator does per node (charts/warmstart/values.yaml)
CHART_SETTINGS = {
    "WARMSTART_CACHE_ACCESS": "csi",
    "WARMSTART_JOB_SIGNING_KEY": "bench-signing-key-" + "k" * 32,
    "WARMSTART_RESYNC_SECONDS": "10",
}


@dataclass
class FleetFigures:
    nodes: int
    caches: int
    endpoints: int
    create_to_caches_ready_s: float
    create_to_endpoints_complete_s: float | None
    jobs_created_s: float | None
    last_job_to_ready_s: float
    peak_rss_mb: float
    operator_cpu_s: float
    #: every request of the operator, as the API server counted them (its FlowSchema)
    server_requests: int
    server_rejected: int
    server_queue_wait_s: float
    #: the controllers' own requests by method (kopf's watches, annotations, Events not included)
    controller_requests: dict[str, int]
    component_cpu_s: dict[str, float]
    bench_cpu_s: float
    probe_latencies_s: list[float] = field(default_factory=list)
    uptime_start: str = ""
    uptime_end: str = ""
    #: the operator's CPU seconds per minute with the nodes Ready and no cache or endpoint of the fleet yet
    idle_cpu_s_per_min: float = 0.0
    #: the same minute in 10-s slices (CPU seconds each)
    idle_cpu_slices_s: list[float] = field(default_factory=list)
    #: node watch events the API server sent in the idle minute, by type (a watch of the bench's own)
    idle_node_events: dict[str, int] = field(default_factory=dict)
    #: node events the operator's informer received in the idle minute, by outcome (changed, unchanged, bookmark)
    idle_operator_node_events: dict[str, float] = field(default_factory=dict)
    #: the operator's CPU seconds from its start until the probe endpoint's first status
    start_cpu_s: float = 0.0
    #: the controllers' requests by "METHOD resource"
    controller_requests_by_resource: dict[str, int] = field(default_factory=dict)
    profile: str | None = None

    @property
    def requests_per_node_cache(self) -> float:
        return self.server_requests / (self.nodes + self.caches)

    @property
    def control_plane_cpu_s(self) -> float:
        return round(sum(v for k, v in self.component_cpu_s.items() if k in CONTROL_PLANE), 1)

    def to_json(self) -> dict[str, Any]:
        probes = self.probe_latencies_s
        kwok = self.component_cpu_s.get("kwok", 0.0)
        return {
            **vars(self),
            "control_plane_cpu_s": self.control_plane_cpu_s,
            "operator_share_of_cluster_cpu": round(
                self.operator_cpu_s / (self.operator_cpu_s + self.control_plane_cpu_s + kwok), 3
            ),
            "probe_p99_s": round(percentile(probes, 0.99), 2) if probes else None,
            "requests_per_node_cache": round(self.requests_per_node_cache, 2),
            "controller_requests_total": sum(self.controller_requests.values()),
            "operator_cpu_ms_per_node_cache": round(1000 * self.operator_cpu_s / (self.nodes + self.caches), 2),
            "probe_median_s": round(statistics.median(probes), 2) if probes else None,
            "probe_max_s": round(max(probes), 2) if probes else None,
        }


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (`fraction` 0.99: the value that 99% of the values do not exceed)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _endpoint(namespace: str, name: str, instance_type: str, cached: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelName": name,
        "modelSourceConfig": {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": "bench-bucket", "region": "us-west-2"},
            "modelLocation": f"models/{name}",
        },
        "instanceType": instance_type,
        "replicas": 1,
        "worker": {
            "image": "vllm/vllm-openai:v0.11.0",
            "modelInvocationPort": {"containerPort": 8000},
            "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    }
    if cached:
        spec["modelCacheConfig"] = {"weightsCache": {"enabled": True}, "imageCache": {"enabled": False}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceEndpointConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _observed(custom: client.CustomObjectsApi, namespace: str, name: str) -> tuple[int, int]:
    body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, IEC_PLURAL, name)
    return int(body["metadata"]["generation"]), int((body.get("status") or {}).get("observedGeneration") or 0)


class Prober:
    """Flips the probe endpoint's replicas every PROBE_EVERY_SECONDS and times each until its status shows it."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        replicas = 1
        while not self._stop.wait(PROBE_EVERY_SECONDS):
            replicas = 3 - replicas
            started = time.monotonic()
            body = self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, IEC_PLURAL, PROBE, {"spec": {"replicas": replicas}}
            )
            wanted = int(body["metadata"]["generation"])
            while time.monotonic() - started < 120:
                if _observed(self.custom, self.namespace, PROBE)[1] >= wanted:
                    self.latencies.append(round(time.monotonic() - started, 3))
                    break
                time.sleep(0.1)
            else:
                self.latencies.append(float("inf"))

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(130)
        return self.latencies


def _count_jobs(api: client.ApiClient, namespace: str) -> int:
    """The cache Jobs in the namespace, read as metadata only (the bench shares the cores with what it measures)."""
    response = api.call_api(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        "GET",
        query_params=[("labelSelector", labels.MDCC_LABEL)],
        header_params={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return len(json.loads(response.data).get("items") or [])


def measure_fleet(
    api: client.ApiClient,
    kubeconfig: str,
    node_count: int,
    cache_count: int,
    endpoint_count: int,
    out: Path,
    *,
    profile: bool = False,
    deadline_s: float | None = None,
) -> FleetFigures:
    """One fleet, as the module docstring says; `deadline_s` (default 1,500 s, 0.6 s a node above 2,500 nodes) bounds
    the wait for every cache to be Ready."""
    deadline_s = deadline_s if deadline_s is not None else max(1500.0, 0.6 * node_count)
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    run = uuid.uuid4().hex[:6]
    namespace = f"bench-{run}"
    per_group = node_count // cache_count
    types = [f"ml.f{run}x{i}.24xlarge" for i in range(cache_count)]
    core.create_namespace({"metadata": {"name": namespace}})
    created: list[str] = []
    size = f"{node_count}x{cache_count}x{endpoint_count}"
    try:
        sa_kubeconfig = apicounting.operator_identity(api, Path(kubeconfig), namespace, out / f"sa-{run}.kubeconfig")
        mix = [(t, per_group) for t in types]
        # named before they exist, so that an interrupted run still deletes every node it made
        created = [m["metadata"]["name"] for m in kwok_nodes.manifests_for_spec(mix, prefix=f"f{run}")]
        kwok_nodes.create_nodes(api, mix, prefix=f"f{run}", parallelism=32)
        wait_until = time.monotonic() + max(600.0, 0.2 * node_count)
        while len(kwok_nodes.ready_nodes(api, created)) < len(created):
            if time.monotonic() > wait_until:
                raise RuntimeError("kwok nodes did not become Ready")
            time.sleep(2)
        pids = apicounting.component_pids(kubeconfig)
        port = free_port()
        log = out / f"operator-fleet-{size}.log"
        profile_out = out / f"profile-{size}.txt"
        wrap = profiles.profiler(profile_out) if profile else None
        with operator_process(str(sa_kubeconfig), namespace, port, log, CHART_SETTINGS, wrap) as proc:
            operator = psutil.Process(proc.pid)
            # the probe endpoint (no cache) on the last group, deployed before the fleet starts
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, IEC_PLURAL, _endpoint(namespace, PROBE, types[-1], cached=False)
            )
            settle_until = time.monotonic() + 300
            while _observed(custom, namespace, PROBE)[1] < 1 and time.monotonic() < settle_until:
                time.sleep(0.5)
            start_cpu = sum(operator.cpu_times()[:2])
            stacks_before = profiles.stacks(profile_out) if profile else None
            idle = idle_minute.measure(api, operator, port)
            print(
                f"{size}: idle operator CPU per 10 s: {idle.cpu_slices_s}; node events (API server): "
                f"{idle.node_events}; the operator's informer: {idle.operator_node_events}",
                flush=True,
            )
            if stacks_before is not None:  # the idle minute's own samples (the file is written every few seconds)
                (out / f"profile-{size}-idle.txt").write_text(
                    profiles.stack_lines(profiles.stacks(profile_out) - stacks_before)
                )
            uptime_start = apicounting.uptime()
            cpu_before = apicounting.cpu_seconds(pids)
            bench_before = apicounting.tree_cpu_seconds(psutil.Process().pid)
            operator_before = sum(operator.cpu_times()[:2])
            server_before = apicounting.server_counts(api, namespace)
            controllers_before = scrape_requests(port)
            resources_before = scrape_requests(port, ("method", "resource"))
            started = time.time()
            cached_endpoints = endpoint_count - 1
            for i in range(cached_endpoints):
                body = _endpoint(namespace, f"e{i}", types[i], cached=True)
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, IEC_PLURAL, body)
            for i in range(cached_endpoints, cache_count):
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, MDCC_PLURAL, mdcc(namespace, i, types[i])
                )
            prober = Prober(api, namespace)
            prober.start()
            peak, jobs_at, caches_at, endpoints_at = 0, None, None, None
            give_up = time.monotonic() + deadline_s
            while caches_at is None or endpoints_at is None:
                peak = max(peak, operator.memory_info().rss)
                now = time.time()
                items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)["items"]
                ready = sum(1 for i in items if (i.get("status") or {}).get("state") == "Ready")
                if caches_at is None and len(items) == cache_count and ready == cache_count:
                    caches_at = now
                if jobs_at is None and _count_jobs(api, namespace) >= node_count:
                    jobs_at = now
                if endpoints_at is None:
                    ends = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, IEC_PLURAL)["items"]
                    done = sum(1 for e in ends if (e.get("status") or {}).get("state") == "DeploymentComplete")
                    if done == endpoint_count:
                        endpoints_at = now
                if caches_at is not None and endpoints_at is None and now - caches_at > 300:
                    break  # the endpoints are reported as not complete
                if time.monotonic() > give_up:
                    raise RuntimeError(f"only {ready}/{cache_count} caches Ready after {deadline_s:.0f} s")
                time.sleep(2.0)  # the bench shares the cores: it polls gently
            probes = prober.stop()
            peak = max(peak, operator.memory_info().rss)
            operator_cpu = sum(operator.cpu_times()[:2]) - operator_before
            server = apicounting.server_counts(api, namespace).minus(server_before)
            controllers_after = scrape_requests(port)
            resources_after = scrape_requests(port, ("method", "resource"))
            cpu = apicounting.cpu_delta(apicounting.cpu_seconds(pids), cpu_before)
            bench_cpu = apicounting.tree_cpu_seconds(psutil.Process().pid) - bench_before
            uptime_end = apicounting.uptime()
        jobs_all = batch.list_namespaced_job(namespace, label_selector=labels.MDCC_LABEL).items
        last_done = max(j.status.completion_time.timestamp() for j in jobs_all if j.status.completion_time)
        controllers = delta(controllers_after, controllers_before)
        assert caches_at is not None
        return FleetFigures(
            nodes=len(created),
            caches=cache_count,
            endpoints=endpoint_count,
            create_to_caches_ready_s=round(caches_at - started, 1),
            create_to_endpoints_complete_s=round(endpoints_at - started, 1) if endpoints_at else None,
            jobs_created_s=round(jobs_at - started, 1) if jobs_at else None,
            last_job_to_ready_s=round(max(0.0, caches_at - last_done), 1),
            peak_rss_mb=round(peak / 2**20, 1),
            operator_cpu_s=round(operator_cpu, 1),
            server_requests=int(server.dispatched),
            server_rejected=int(server.rejected),
            server_queue_wait_s=round(server.wait_seconds_sum, 2),
            controller_requests=controllers,
            component_cpu_s=cpu,
            bench_cpu_s=round(bench_cpu, 1),
            probe_latencies_s=probes,
            uptime_start=uptime_start,
            uptime_end=uptime_end,
            idle_cpu_s_per_min=idle.cpu_s_per_min,
            idle_cpu_slices_s=idle.cpu_slices_s,
            idle_node_events=idle.node_events,
            idle_operator_node_events=idle.operator_node_events,
            start_cpu_s=round(start_cpu, 1),
            controller_requests_by_resource=delta(resources_after, resources_before),
            profile=str(profile_out) if profile else None,
        )
    finally:
        cleanup(api, namespace, created)
        apicounting.drop_identity(api, namespace)


def print_fleet(figures: FleetFigures) -> None:
    data = figures.to_json()
    rows = [
        ("create -> all caches Ready (s)", data["create_to_caches_ready_s"]),
        ("create -> all endpoints DeploymentComplete (s)", data["create_to_endpoints_complete_s"]),
        ("all Jobs created after (s)", data["jobs_created_s"]),
        ("last Job done -> all caches Ready (s)", data["last_job_to_ready_s"]),
        ("operator peak RSS (MB)", data["peak_rss_mb"]),
        ("operator CPU (s)", data["operator_cpu_s"]),
        ("  its start, until the probe's first status (s)", data["start_cpu_s"]),
        ("  before: CPU (s) per minute, nodes Ready, idle", data["idle_cpu_s_per_min"]),
        ("    node events in that minute (API server)", json.dumps(data["idle_node_events"])),
        ("    node events the informer got, by outcome", json.dumps(data["idle_operator_node_events"])),
        ("operator CPU per (node + cache) (ms)", data["operator_cpu_ms_per_node_cache"]),
        ("API requests, all (API server's count)", data["server_requests"]),
        ("API requests per (node + cache)", data["requests_per_node_cache"]),
        ("  of which the controllers' (by method)", json.dumps(data["controller_requests"])),
        ("  rejected by the API server (429)", data["server_rejected"]),
        ("  queued in the API server (s, sum)", data["server_queue_wait_s"]),
        (
            "probe endpoint change -> status (s, median/p99/max)",
            f"{data['probe_median_s']} / {data['probe_p99_s']} / {data['probe_max_s']}",
        ),
        ("  probes", len(figures.probe_latencies_s)),
        ("  the controllers' GETs by resource", json.dumps(_gets(figures.controller_requests_by_resource))),
        ("CPU (s) over the same span", json.dumps(data["component_cpu_s"])),
        ("  control plane (etcd, apiserver, KCM, scheduler)", data["control_plane_cpu_s"]),
        ("  operator's share (operator / +control plane +kwok)", data["operator_share_of_cluster_cpu"]),
        ("  the bench itself", data["bench_cpu_s"]),
        ("uptime at start", figures.uptime_start),
        ("uptime at end", figures.uptime_end),
    ]
    print(f"fleet: {figures.nodes} nodes, {figures.caches} caches, {figures.endpoints} endpoints")
    for label, value in rows:
        print(f"  {label:48} {value}", flush=True)


def _gets(by_resource: dict[str, int]) -> dict[str, int]:
    return {key.split(" ", 1)[1]: n for key, n in by_resource.items() if key.startswith("GET ")}
