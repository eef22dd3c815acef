"""Scenario: two operator replicas (kopf peering, as the chart runs them); the active one SIGKILLed mid warm-up.

Each run gets a fresh namespace with its KopfPeering object, `nodes` fresh kwok nodes of a run-unique instance type
and one ModelDataCacheConfig targeting them all (throttled as the chart's default: max(16, 25%) preloads at once,
2 s simulated preloads). Two `warmstart operator` processes run with `--peering` and distinct priorities, so the
higher one is active and the other pauses. Once a quarter of the nodes are Ready, the active one is SIGKILLed (no
clean exit: its keep-alive stays in the KopfPeering object until it expires), and the other must take over.

Invariants: never two active preload Jobs for one node (sampled every half second throughout); no duplicate Jobs (the
simulated preloads never fail, so every node has exactly one Job, its first attempt: a node warmed twice shows as a
second attempt); and at the end the cache Ready on every node with every node's ready label in place (no lost
labels), and the standby still running.
Figures, reported and never asserted: the takeover time (kill -> the standby logs that it resumes), the
kill -> the cache's next progress, and kill -> all Ready.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

import chaos_cluster as cc
from chaos_operator import Sampler
from chaos_report import Run
from warmstart.api import GROUP, VERSION, nodelabels
from warmstart.api.caches import MDCC_PLURAL
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.placement import instance_type_affinity
from warmstart.render import jobs as render_jobs
from warmstart.render import keys, throttling
from warmstart.render.context import RenderContext

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERING_CRDS = ROOT / "charts" / "warmstart" / "crds" / "kopf.dev_peerings.yaml"
PEERING = "warmstart"
#: kopf's log line when a paused operator resumes (its peer left or expired)
RESUMED = "Resuming operations after the pause"
#: the kill comes once this share of the nodes is Ready
KILL_AT = 0.25
CONVERGE_TIMEOUT = 600.0


def scenario(nodes: int) -> str:
    return f"active replica SIGKILL during a {nodes}-node warm-up (2 replicas)"


@dataclass
class Takeover:
    """What one run measured (seconds from the kill)."""

    resumed_s: float | None
    progress_s: float | None
    all_ready_s: float | None
    ready_at_kill: int
    jobs: int


def install_peering(api: client.ApiClient, kubeconfig: pathlib.Path, namespace: str) -> None:
    """kopf's peering CRDs (from the chart) and the namespace's KopfPeering object, as the chart renders them."""
    kubectl = ["kubectl", "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(PEERING_CRDS)], check=True, capture_output=True)
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(PEERING_CRDS)],
        check=True,
        capture_output=True,
    )
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}}
    client.CustomObjectsApi(api).create_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", peering)


def _cache(namespace: str, instance_type: str) -> tuple[dict[str, Any], str]:
    """A cache on every node of `instance_type`, and its content key."""
    from warmstart.api.sources import ModelSourceConfig

    source = {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "chaos-bucket", "region": "us-west-2"},
        "modelLocation": f"models/{namespace}",
    }
    key = keys.weights_key_in(ModelSourceConfig.model_validate(source), "/opt/dlami/nvme", namespace, {})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelDataCacheConfig",
        "metadata": {"name": keys.weights_cache_name(key), "namespace": namespace},
        "spec": {"modelSourceConfig": source, "nodeAffinity": instance_type_affinity([instance_type]).to_api()},
    }
    return body, key


def _status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL, name)
    return dict(body.get("status") or {})


def _log_text(operator: cc.OperatorProcess) -> str:
    return operator.log.read_text(errors="replace") if operator.log and operator.log.exists() else ""


def one_run(
    api: client.ApiClient, kubeconfig: pathlib.Path, log_dir: pathlib.Path, nodes: int, seed: int
) -> tuple[Run, Takeover | None]:
    namespace = cc.fresh_namespace(api)
    instance_type = f"ml.p{namespace[-8:]}.24xlarge"
    created: list[str] = []
    replicas = [
        cc.OperatorProcess(
            kubeconfig,
            namespace,
            log_dir,
            "2s",
            extra_env={
                "WARMSTART_PEERING": PEERING,
                "WARMSTART_PEERING_PRIORITY": str(priority),
                "WARMSTART_RESYNC_SECONDS": "10",  # the chart's default
                "POD_ID": f"warmstart-{tag}",
            },
            tag=f"-{tag}",
        )
        for tag, priority in (("a", 200), ("b", 100))
    ]
    active, standby = replicas
    try:
        install_peering(api, kubeconfig, namespace)
        created = kwok_nodes.create_nodes(api, [(instance_type, nodes)], prefix=f"p{namespace[-6:]}", parallelism=32)
        ok, _ = cc.poll(lambda: len(kwok_nodes.ready_nodes(api, created)) == nodes, 300, 2.0)
        if not ok:
            return Run(scenario(nodes), seed, False, 0.0, [], ["the kwok nodes never became Ready"]), None
        for replica in replicas:
            replica.start()
        time.sleep(5.0)  # both meet in the KopfPeering object: the lower priority pauses
        body, key = _cache(namespace, instance_type)
        name = body["metadata"]["name"]
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL, body)
        sampler = Sampler(api, namespace)
        quarter = max(1, int(nodes * KILL_AT))
        ok, _ = cc.poll(lambda: (_status(api, namespace, name).get("readyNodes") or 0) >= quarter, CONVERGE_TIMEOUT)
        if not ok:
            sampler.stop()
            return Run(scenario(nodes), seed, False, 0.0, [], ["the active replica never warmed a quarter"]), None
        seen = len(_log_text(standby))  # kopf logs RESUMED once at start, before it meets its peer
        before = _status(api, namespace, name)
        ready_at_kill = int(before.get("readyNodes") or 0)
        killed = time.monotonic()
        active.kill()
        resumed = progress = None
        while time.monotonic() - killed < CONVERGE_TIMEOUT:
            now = time.monotonic() - killed
            if resumed is None and RESUMED in _log_text(standby)[seen:]:
                resumed = now
            status = _status(api, namespace, name)
            if progress is None and (status.get("readyNodes") or 0) > ready_at_kill:
                progress = now
            if status.get("state") == "Ready" and status.get("readyNodes") == nodes:
                break
            time.sleep(0.5)
        else:
            status = {}
        all_ready = time.monotonic() - killed if status.get("readyNodes") == nodes else None
        time.sleep(1.0)  # a last sample after convergence
        violations = sampler.stop()
        label = nodelabels.weights_ready_label(key)
        unlabelled = [
            n
            for n in created
            if (client.CoreV1Api(api).read_node(n).metadata.labels or {}).get(label) != nodelabels.READY
        ]
        leaks = [f"{len(unlabelled)} nodes without the ready label, e.g. {unlabelled[:3]}"] if unlabelled else []
        if standby.proc is None or standby.proc.poll() is not None:
            violations.append("the standby replica exited")
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        violations += duplicate_jobs(jobs, nodes)
        takeover = Takeover(resumed, progress, all_ready, ready_at_kill, len(jobs))
        unseen, confirmed = read_live(_log_text(standby)[seen:])
        note = (
            f"killed at {ready_at_kill}/{nodes} Ready; standby resumed "
            f"{_fmt(resumed)} s, next progress {_fmt(progress)} s, all Ready {_fmt(all_ready)} s after the kill;"
            f" {len(jobs)} Jobs for {nodes} nodes; the standby read {unseen} nodes live that its view showed"
            f" unlabelled and status Ready ({confirmed} labelled); at most {sampler.peak_active} preload Jobs active at"
            f" once (the throttle allows {throttle_limit(nodes)})"
        )
        converged = all_ready is not None
        return Run(scenario(nodes), seed, converged, all_ready or 0.0, leaks, violations, note), takeover
    finally:
        for replica in replicas:
            replica.kill()
        try:
            cc.drop_namespace(api, namespace)
        except client.ApiException:
            pass
        kwok_nodes.delete_nodes(api, created, parallelism=32)


#: the operator's log line when it reads nodes live before preloading Ready ones again (controllers/preloading.py)
READ_LIVE = re.compile(r"(\d+) nodes Ready in status without the label in the watch's view; read them: (\d+) labelled")


def read_live(log: str) -> tuple[int, int]:
    """Nodes an operator's log says it read live (Ready in status, unlabelled in its view), and how many of them
    carried the label."""
    found = [(int(a), int(b)) for a, b in READ_LIVE.findall(log)]
    return sum(a for a, _ in found), sum(b for _, b in found)


def throttle_limit(nodes: int) -> int:
    """Preloads the operator's default throttle allows at once on `nodes` targets (the chart's default)."""
    ctx = RenderContext()
    return throttling.limit(
        throttling.Throttle(ctx.preload_concurrency_nodes, ctx.preload_concurrency_percent), None, nodes
    )


def duplicate_jobs(jobs: list[Any], nodes: int) -> list[str]:
    """What breaks "one preload Job per node": more Jobs than nodes, or Jobs past the first attempt."""
    found = []
    if len(jobs) > nodes:
        found.append(f"{len(jobs)} preload Jobs for {nodes} nodes")
    again = sorted(j.metadata.name for j in jobs if (j.metadata.labels or {}).get(render_jobs.ATTEMPT_LABEL) != "1")
    if again:
        found.append(f"{len(again)} Jobs past the first attempt (a node preloaded again), e.g. {again[:3]}")
    return found


def _fmt(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "never"


def run_all(
    api: client.ApiClient,
    kubeconfig: pathlib.Path,
    log_dir: pathlib.Path,
    runs: int,
    nodes: int,
    seed: int,
    deadline: float,
    report: Any,
) -> list[Run]:
    out = []
    for i in range(runs):
        if time.monotonic() > deadline:
            break
        run, _ = one_run(api, kubeconfig, log_dir, nodes, seed + i)
        report(run)
        out.append(run)
    return out
