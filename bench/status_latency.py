"""How fast status follows events: from each event a user waits for to the status that shows it, on the real control
plane (kwok nodes), through `warmstart operator` as a child process with the chart's default resync (10 s).

Each run creates the seed endpoint (a fresh namespace and model location, so every node preloads), lets it roll out,
then scales it from 1 to 3 replicas. Watches (one per kind, timestamps taken on receipt) record:

- a preload Job finishing -> its ModelDataCacheConfig's `readyNodes` counting it;
- a pre-pull pod becoming ready -> its ModelImageCache's `readyNodes` counting it;
- the weights cache becoming Ready -> the endpoint's `weightsCacheStatus.state` showing Ready;
- the model Deployment's `availableReplicas` changing -> the endpoint's `deploymentStatus.status.availableReplicas`.

It prints the median and maximum of each pair over all runs, the goal (under 1 s), and writes every sample.

    .venv/bin/python bench/status_latency.py --runs 5      # own cluster unless WARMSTART_KUBECONFIG
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

import provenance
from operator_scale import cluster_kubeconfig, install_crds
from scale_fixtures import free_port, operator_process
from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL, MIC_PLURAL
from warmstart.render import labels

ROOT = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 1.0
PLURAL = "inferenceendpointconfigs"


@dataclass
class Seen:
    """Every watch event of one run: (seconds since the run started, kind, object)."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((time.monotonic() - self.started, kind, obj))

    def of(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        with self.lock:
            return [(t, o) for t, k, o in self.events if k == kind]


def _watch(seen: Seen, kind: str, list_fn: Callable[..., Any], stop: threading.Event, **kwargs: Any) -> None:
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(list_fn, timeout_seconds=5, **kwargs):
                seen.add(kind, event["raw_object"])
                if stop.is_set():
                    break
        except client.ApiException:
            time.sleep(0.2)
        finally:
            stream.stop()


@contextlib.contextmanager
def watching(api: client.ApiClient, namespace: str, seen: Seen) -> Iterator[None]:
    custom, core, batch, apps = (
        client.CustomObjectsApi(api),
        client.CoreV1Api(api),
        client.BatchV1Api(api),
        client.AppsV1Api(api),
    )
    stop = threading.Event()
    targets: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
        ("job", batch.list_namespaced_job, {"namespace": namespace}),
        ("pod", core.list_namespaced_pod, {"namespace": namespace}),
        ("deployment", apps.list_namespaced_deployment, {"namespace": namespace}),
    ]
    for kind, plural in (("mdcc", MDCC_PLURAL), ("mic", MIC_PLURAL), ("endpoint", PLURAL)):
        targets.append(
            (
                kind,
                custom.list_namespaced_custom_object,
                {"group": GROUP, "version": VERSION, "namespace": namespace, "plural": plural},
            )
        )
    threads = [
        threading.Thread(target=_watch, args=(seen, kind, fn, stop), kwargs=kw, daemon=True) for kind, fn, kw in targets
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)


def _first(
    events: list[tuple[float, dict[str, Any]]], after: float, test: Callable[[dict[str, Any]], bool]
) -> float | None:
    return next((t for t, o in events if t >= after and test(o)), None)


def _ready_pod(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions") or []
    )


def _first_times(events: list[tuple[float, dict[str, Any]]], test: Callable[[dict[str, Any]], bool]) -> list[float]:
    """When each object (by name) first passed `test`, in order."""
    found: dict[str, float] = {}
    for t, o in events:
        name = o["metadata"]["name"]
        if name not in found and test(o):
            found[name] = t
    return sorted(found.values())


def _at_least(count: Callable[[dict[str, Any]], int], need: int, obj: dict[str, Any]) -> bool:
    return count(obj) >= need


def _endpoint_available(obj: dict[str, Any]) -> int:
    deployment = (((obj.get("status") or {}).get("deploymentStatus") or {}).get("status")) or {}
    return int(deployment.get("availableReplicas") or 0)


def _equals(count: Callable[[dict[str, Any]], int], value: int, obj: dict[str, Any]) -> bool:
    return count(obj) == value


def _counted(
    causes: list[float], effects: list[tuple[float, dict[str, Any]]], count: Callable[[dict[str, Any]], int]
) -> list[float]:
    """For the i-th cause (at time t), the delay until the effect first counts at least i + 1 at or after t."""
    delays = []
    for i, at in enumerate(causes):
        shown = _first(effects, at, functools.partial(_at_least, count, i + 1))
        if shown is not None:
            delays.append(shown - at)
    return delays


def pairs(seen: Seen) -> dict[str, list[float]]:
    jobs, pods, deployments = seen.of("job"), seen.of("pod"), seen.of("deployment")
    mdcc, mic, endpoint = seen.of("mdcc"), seen.of("mic"), seen.of("endpoint")
    done_jobs = _first_times(jobs, lambda j: (j.get("status") or {}).get("succeeded", 0) >= 1)
    prepull = [(t, p) for t, p in pods if labels.MIC_LABEL in (p["metadata"].get("labels") or {})]
    ready_prepull = _first_times(prepull, _ready_pod)
    result = {
        "preload Job finished -> cache readyNodes": _counted(
            done_jobs, mdcc, lambda o: int((o.get("status") or {}).get("readyNodes") or 0)
        ),
        "pre-pull pod ready -> image cache readyNodes": _counted(
            ready_prepull, mic, lambda o: int((o.get("status") or {}).get("readyNodes") or 0)
        ),
    }
    cache_ready = _first(mdcc, 0, lambda o: (o.get("status") or {}).get("state") == "Ready")
    shown = (
        _first(
            endpoint,
            cache_ready,
            lambda o: ((o.get("status") or {}).get("weightsCacheStatus") or {}).get("state") == "Ready",
        )
        if cache_ready is not None
        else None
    )
    result["cache Ready -> endpoint weightsCacheStatus"] = (
        [shown - cache_ready] if shown is not None and cache_ready is not None else []
    )
    rollout: list[float] = []
    last = None
    for t, d in deployments:
        available = int((d.get("status") or {}).get("availableReplicas") or 0)
        if available == last:
            continue
        last = available
        reported = _first(endpoint, t, functools.partial(_equals, _endpoint_available, available))
        if reported is not None and available > 0:
            rollout.append(reported - t)
    result["Deployment availableReplicas -> endpoint deploymentStatus"] = rollout
    return result


def one_run(api: client.ApiClient, kubeconfig: str, run: int, out: Path) -> dict[str, list[float]]:
    namespace = f"status-bench-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    seed = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())
    seed["metadata"]["namespace"] = namespace
    seed["spec"]["modelSourceConfig"]["modelLocation"] = f"models/status-bench-{namespace}"  # every node preloads
    custom = client.CustomObjectsApi(api)
    seen = Seen()
    with (
        operator_process(kubeconfig, namespace, free_port(), out / f"operator-{run}.log"),
        watching(api, namespace, seen),
    ):
        seen.started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, seed)
        _wait(lambda: _state(custom, namespace) == "DeploymentComplete", 240, "DeploymentComplete")
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "example-model", {"spec": {"replicas": 3}}
        )
        _wait(lambda: _available(custom, namespace) == 3, 240, "3 available replicas in the status")
        time.sleep(1)
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "example-model")
        _wait(
            lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)["items"],
            240,
            "the caches removed",
        )
    client.CoreV1Api(api).delete_namespace(namespace)
    return pairs(seen)


def _state(custom: client.CustomObjectsApi, namespace: str) -> str | None:
    body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "example-model")
    return (body.get("status") or {}).get("state")


def _available(custom: client.CustomObjectsApi, namespace: str) -> int:
    return _endpoint_available(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "example-model"))


def _wait(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / f"{dt.date.today()}-status-latency.json"
    )
    args = parser.parse_args(argv)
    started_run = provenance.start()
    samples: dict[str, list[float]] = {}
    with cluster_kubeconfig() as kubeconfig, tempfile.TemporaryDirectory(prefix="status-bench-") as logs:
        install_crds(kubeconfig)
        api = config.new_client_from_config(config_file=kubeconfig)
        for run in range(args.runs):
            for name, delays in one_run(api, kubeconfig, run, Path(logs)).items():
                samples.setdefault(name, []).extend(delays)
            print(f"run {run + 1}/{args.runs} done", flush=True)
    print(f"\n{'event -> status':60} {'n':>4} {'median s':>9} {'max s':>7}  goal < {GOAL_SECONDS:.0f} s")
    summary = {}
    for name, delays in samples.items():
        median, worst = (statistics.median(delays), max(delays)) if delays else (float("nan"), float("nan"))
        verdict = "met" if delays and worst < GOAL_SECONDS else "missed"
        summary[name] = {"n": len(delays), "median_s": round(median, 3), "max_s": round(worst, 3), "goal": verdict}
        print(f"{name:60} {len(delays):>4} {median:>9.3f} {worst:>7.3f}  {verdict}")
    record = {
        "bench": "status_latency",
        **provenance.header(started_run),
        "runs": args.runs,
        "resync_seconds": 10,
        "goal_seconds": GOAL_SECONDS,
        "summary": summary,
        "samples": {k: [round(v, 4) for v in vs] for k, vs in samples.items()},
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"raw data: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
