"""Scale-out on a REAL node: one new model replica until Ready, warm cache vs cold, image pre-pulled vs not.

    python bench/scaleout.py [--dir .cluster] [--runs 3] [--model-gib 1.0] [--out bench/out]

The model pod is the one the operator renders (render/deployments.py): the `warmstart preload --if-missing` init
container, then the worker running `warmstart sim --model-dir` from the project image, which reads every weight
file (checked against the preload manifest) before /health answers, so "Ready" includes loading the weights.
The weights (a synthetic model of --model-gib GiB in several files) sit in the cluster's real S3 server.

- warm cache: the node's `<hostPath>/warmstart` holds the model, the init container finds it and exits;
- cold cache: that directory is emptied first (left as the node's preload Job prepares it: owned by the preload's
  uid), the init container downloads the model from S3;
- image pre-pulled: the project image is in the node's containerd; not pre-pulled: removed with `ctr images rm`
  first, so the kubelet pulls it from the local registry.

Each run scales the Deployment 0 -> 1 and times it until the pod is Ready (polled every 0.1 s), then back to 0.
Configurations are interleaved run by run. Goal (seed 003's "about 60% faster scale-out"): warm (warm cache,
image pre-pulled) at most 0.4 x cold (cold cache, image not pulled).

Uses the running cluster in --dir if it has a real node (its own namespace, bucket and hostPath, removed at the
end); otherwise starts one with `--real-nodes 1` there and stops it at the end. Needs root (as real nodes do).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.demo import seed
from warmstart.localcluster import imaging, models, pushing, realnodes, running
from warmstart.render import deployments, endpoints, security
from warmstart.render.context import RenderContext

BUCKET = "bench-scaleout"
PORT = 8000
MOUNT = "/opt/ml/model"
GOAL = 0.4
POLL = 0.1


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration: is the weights cache warm, is the image in the node's containerd."""

    warm_cache: bool
    image_pulled: bool

    @property
    def label(self) -> str:
        cache = "warm cache" if self.warm_cache else "cold cache"
        return f"{cache}, {'image pre-pulled' if self.image_pulled else 'image not pulled'}"


CONFIGS = (Config(True, True), Config(True, False), Config(False, True), Config(False, False))
WARM, COLD = CONFIGS[0], CONFIGS[-1]


@dataclasses.dataclass
class Sample:
    """One timed scale-out."""

    config: Config
    ready_s: float
    pull_s: float = 0.0
    init_s: float = 0.0
    init_reason: str = ""
    init_bytes: int = 0
    load_s: float = 0.0


# ---------------------------------------------------------------------- pure: rendering and reporting


def endpoint_spec(model: models.SyntheticModel, s3_url: str, region: str, image: str, host_path: str) -> dict[str, Any]:
    """A seed-like InferenceEndpointConfig spec whose worker is the simulator reading the cached weights."""
    return {
        "modelName": "bench-scaleout",
        "modelSourceConfig": {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": model.bucket, "region": region, "endpointUrl": s3_url},
            "modelLocation": model.prefix,
        },
        "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": host_path}},
        "replicas": 0,
        "worker": {
            "image": image,
            "command": ["warmstart"],
            "args": ["sim", "--host", "0.0.0.0", "--base-port", str(PORT), "--model-dir", MOUNT],
            "modelInvocationPort": {"containerPort": PORT},
            "modelVolumeMount": {"name": "model-weights", "mountPath": MOUNT},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "probes": {"readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 1}},
        },
        "kubernetes": {"nodeSelector": {"warmstart.io/real-node": "true"}},
    }


def model_deployment(
    spec: dict[str, Any], namespace: str, context: RenderContext
) -> tuple[dict[str, Any], deployments.Generation]:
    """The Deployment the operator would render for ``spec`` (without the owner, which does not exist here)."""
    ref = endpoints.ObjectRef(kind="InferenceEndpointConfig", name="bench-scaleout", namespace=namespace, uid="bench")
    endpoint = endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))
    generation = deployments.Generation(endpoint.weights_key({}), endpoint.image_key())
    manifest = deployments.deployment(endpoint, generation, context)
    del manifest["metadata"]["ownerReferences"]
    return manifest, generation


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(samples: list[Sample]) -> dict[Config, dict[str, float]]:
    """Median of each figure per configuration."""
    found: dict[Config, dict[str, float]] = {}
    for config in CONFIGS:
        mine = [s for s in samples if s.config == config]
        if mine:
            found[config] = {
                field: median([float(getattr(s, field)) for s in mine])
                for field in ("ready_s", "pull_s", "init_s", "load_s")
            }
            found[config]["runs"] = len(mine)
    return found


def table(samples: list[Sample]) -> str:
    """Markdown: per configuration the runs, median time to Ready and its parts, and the ratio to the cold case."""
    medians = summary(samples)
    cold = medians.get(COLD, {}).get("ready_s", float("nan"))
    lines = [
        "| configuration | runs | Ready (s), each run | median Ready (s) | image pull (s) | init container (s)"
        " | weights read (s) | / cold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, figures in medians.items():
        each = ", ".join(f"{s.ready_s:.1f}" for s in samples if s.config == config)
        lines.append(
            f"| {config.label} | {figures['runs']:.0f} | {each} | **{figures['ready_s']:.1f}**"
            f" | {figures['pull_s']:.1f} | {figures['init_s']:.1f} | {figures['load_s']:.2f}"
            f" | {figures['ready_s'] / cold:.2f} |"
        )
    return "\n".join(lines)


def ratios(samples: list[Sample]) -> list[str]:
    """warm/cold per axis: the cache alone (image pre-pulled both times), the image alone, and both."""
    medians = {c: f["ready_s"] for c, f in summary(samples).items()}

    def ratio(a: Config, b: Config) -> str:
        return f"{medians[a] / medians[b]:.2f}" if a in medians and b in medians else "n/a"

    return [
        f"cache only (image pre-pulled both): warm/cold = {ratio(CONFIGS[0], CONFIGS[2])}",
        f"cache only (image pulled both):     warm/cold = {ratio(CONFIGS[1], CONFIGS[3])}",
        f"image only (warm cache both):       pre-pulled/not = {ratio(CONFIGS[0], CONFIGS[1])}",
        f"both (warm node vs cold node):      warm/cold = {ratio(WARM, COLD)}",
    ]


def goal_met(samples: list[Sample]) -> tuple[bool, float]:
    medians = {c: f["ready_s"] for c, f in summary(samples).items()}
    value = medians[WARM] / medians[COLD]
    return value <= GOAL, value


def plot(samples: list[Sample], out: pathlib.Path, model_gib: float) -> list[pathlib.Path]:
    """Two PNGs: stacked median parts per configuration, and every run's time to Ready."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    medians = summary(samples)
    labels = [c.label.replace(", ", "\n") for c in medians]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(medians)
    for field, name in (("pull_s", "image pull"), ("init_s", "init container (preload)"), ("load_s", "weights read")):
        values = [f[field] for f in medians.values()]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    rest = [max(0.0, f["ready_s"] - b) for f, b in zip(medians.values(), bottom, strict=True)]
    ax.bar(labels, rest, bottom=bottom, label="other (scheduling, sandbox, probes)", color="lightgrey")
    ax.axhline(GOAL * medians[COLD]["ready_s"], color="red", linestyle="--", label=f"goal: {GOAL} x cold")
    ax.set_ylabel("seconds to Ready (median)")
    ax.set_title(f"Scale-out of one replica on a real node, {model_gib:g} GiB model")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [out / "scaleout_parts.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, config in enumerate(medians):
        values = [s.ready_s for s in samples if s.config == config]
        ax.scatter([i] * len(values), values, label=config.label)
    ax.set_xticks(range(len(medians)), labels)
    ax.set_ylabel("seconds to Ready")
    ax.set_ylim(bottom=0)
    ax.set_title("Every run")
    fig.tight_layout()
    paths.append(out / "scaleout_runs.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


_PULLED = re.compile(r"in ([0-9.]+)(ms|s)\b")


def pull_seconds(messages: list[str]) -> float:
    """Sum of the kubelet's `Successfully pulled image "..." in 3.2s (...)` durations."""
    total = 0.0
    for message in messages:
        if message.startswith("Successfully pulled"):
            match = _PULLED.search(message)
            if match:
                total += float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    return total


_LOADED = re.compile(r"loaded \d+ files, (\d+) bytes in ([0-9.]+) s")


def load_seconds(log: str) -> float:
    match = _LOADED.search(log)
    return float(match.group(2)) if match else 0.0


# ---------------------------------------------------------------------- I/O: the cluster and the node


class Bench:
    """The bench's namespace, Deployment, hostPath and image on one real node."""

    def __init__(self, cluster: running.Cluster, api: client.ApiClient, image: str, tag: str) -> None:
        assert cluster.real is not None
        self.real: realnodes.RealNodes = cluster.real
        self.node = self.real.names[0]
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.image = image
        self.namespace = f"bench-scaleout-{tag}"
        self.host_path = self.real.hostpath_root / f"bench-scaleout-{tag}"
        self.name = "bench-scaleout"

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        address = str(self.real.containerd_socket(self.node))
        return subprocess.run(["ctr", "--address", address, "-n", "k8s.io", *args], capture_output=True, text=True)

    def image_refs(self) -> list[str]:
        """Every name of the project image in the node's containerd: the tag, ``repo@digest``, ``sha256:<id>``."""
        rows = [line.split() for line in self.ctr("images", "ls").stdout.splitlines()[1:]]
        digests = {row[2] for row in rows if len(row) > 2 and row[0] == self.image}
        return [row[0] for row in rows if len(row) > 2 and row[2] in digests]

    def image_present(self) -> bool:
        return bool(self.image_refs())

    def set_image(self, pulled: bool) -> None:
        if pulled and not self.image_present():
            done = self.ctr("images", "pull", "--plain-http", self.image)
            if done.returncode:
                raise SystemExit(f"ctr images pull {self.image}: {done.stderr.strip()}")
        if not pulled and self.image_present():
            done = self.ctr("images", "rm", "--sync", *self.image_refs())
            if done.returncode or self.image_present():
                raise SystemExit(f"ctr images rm {self.image}: {done.stderr.strip()}")

    def set_cache(self, warm: bool, key: str) -> None:
        """Cold: the cache directory empty, owned by the preload's uid, as the model pod's ownership init container
        leaves it before a download (the pod mounts it with `type: DirectoryOrCreate`). Warm: the weights are there."""
        cache = self.host_path / "warmstart"
        weights = cache / "weights" / key
        if not warm:
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True)
            os.chown(cache, security.CACHE_UID, security.CACHE_UID)
        elif not (weights / models_manifest()).is_file():
            raise SystemExit(f"no warm cache in {weights} (the priming run should have filled it)")

    def apply(self, manifest: dict[str, Any], secret: dict[str, Any]) -> None:
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": {"warmstart.io/bench": "true"}}})
        self.core.create_namespaced_secret(self.namespace, secret)
        self.apps.create_namespaced_deployment(self.namespace, manifest)

    def scale(self, replicas: int) -> None:
        self.apps.patch_namespaced_deployment_scale(self.name, self.namespace, {"spec": {"replicas": replicas}})

    def pods(self) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(self.namespace).items)

    def run(self, config: Config, key: str, timeout: float = 600.0) -> Sample:
        """Scale 0 -> 1 and time it until the pod is Ready; then gather the parts and scale back to 0."""
        self.set_image(config.image_pulled)
        self.set_cache(config.warm_cache, key)
        started = time.monotonic()
        self.scale(1)
        pod = None
        while pod is None:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{config.label}: no Ready pod after {timeout:.0f} s: {self.describe()}")
            pod = next((p for p in self.pods() if _ready(p)), None)
            if pod is None:
                _fail_fast(self.pods(), config)
                time.sleep(POLL)
        ready = time.monotonic() - started
        sample = Sample(config=config, ready_s=ready)
        name = pod.metadata.name
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        sample.pull_s = pull_seconds([e.message or "" for e in events])
        for status in pod.status.init_container_statuses or []:
            terminated = status.state.terminated
            if terminated is not None:
                sample.init_s = (terminated.finished_at - terminated.started_at).total_seconds()
                message = json.loads(terminated.message or "{}")
                sample.init_reason = str(message.get("reason", ""))
                sample.init_bytes = int(message.get("bytes", 0))
                sample.init_s = float(message.get("seconds", sample.init_s))
        sample.load_s = load_seconds(self.core.read_namespaced_pod_log(name, self.namespace, container="worker"))
        self.scale(0)
        deadline = time.monotonic() + 120
        while self.pods():
            if time.monotonic() > deadline:
                raise SystemExit(f"the pod of {config.label} did not go away within 120 s")
            time.sleep(0.2)
        return sample

    def describe(self) -> str:
        return "; ".join(f"{p.metadata.name}: {p.status.phase} {_waiting(p)}" for p in self.pods()) or "no pod"

    def clean(self) -> None:
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace, propagation_policy="Background")
        deadline = time.monotonic() + 60
        with contextlib.suppress(ApiException):
            while self.pods() and time.monotonic() < deadline:
                time.sleep(0.5)
        shutil.rmtree(self.host_path, ignore_errors=True)


def models_manifest() -> str:
    from warmstart.sim.loading import MANIFEST_NAME

    return MANIFEST_NAME


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _waiting(pod: client.V1Pod) -> str:
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    return " ".join(
        f"{s.name}={s.state.waiting.reason}" if s.state.waiting else f"{s.name}:{'T' if s.state.terminated else 'R'}"
        for s in statuses
    )


def _fail_fast(pods: list[client.V1Pod], config: Config) -> None:
    """Stop at once when the pod cannot start (a failed init container, a crashing worker, a bad image)."""
    for pod in pods:
        for status in [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]:
            waiting = status.state.waiting
            if waiting and waiting.reason in (
                "CrashLoopBackOff",
                "ErrImagePull",
                "ImagePullBackOff",
                "InvalidImageName",
            ):
                raise SystemExit(
                    f"{config.label}: {pod.metadata.name} {status.name} {waiting.reason}: {waiting.message}"
                )
            if status.last_state and status.last_state.terminated and status.last_state.terminated.exit_code:
                terminated = status.last_state.terminated
                raise SystemExit(
                    f"{config.label}: {status.name} exited {terminated.exit_code}: {terminated.message or ''}"
                )


@contextlib.contextmanager
def real_cluster(directory: pathlib.Path) -> Iterator[running.Cluster]:
    """The running real-node cluster in ``directory``, or one started there (and stopped afterwards)."""
    found = running.running_cluster(directory)
    if found is not None and found.real is not None:
        yield found
        return
    print(f"starting a cluster with one real node in {directory}", flush=True)
    started = running.up(directory, real_nodes=1, timeout=300.0)
    try:
        yield started
    finally:
        running.down(directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path(".cluster"), help="cluster directory")
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration")
    parser.add_argument("--model-gib", type=float, default=1.0, help="size of the synthetic model")
    parser.add_argument("--shards", type=int, default=4, help="weight files")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).parent / "out")
    args = parser.parse_args()
    progress = logging.getLogger("warmstart.localcluster")  # image builds and cluster start-up report progress here
    progress.setLevel(logging.INFO)
    progress.addHandler(logging.StreamHandler(sys.stderr))
    total = int(args.model_gib * models.GIB)

    with real_cluster(args.dir.resolve()) as cluster, cluster.api_client() as api:
        assert cluster.real is not None
        real = cluster.real
        started = time.monotonic()
        image = pushing.push(imaging.project_image(), real.registry)
        print(f"image {image} ({time.monotonic() - started:.0f} s to build/push)", flush=True)
        started = time.monotonic()
        model = models.upload(real.s3, BUCKET, f"models/synthetic-{total}", total, args.shards)
        print(
            f"model s3://{model.bucket}/{model.prefix}: {model.total_bytes / models.GIB:.2f} GiB in "
            f"{len(model.files)} files ({time.monotonic() - started:.0f} s to upload)",
            flush=True,
        )
        bench = Bench(cluster, api, image, uuid.uuid4().hex[:8])
        secret = seed.preload_secret(bench.namespace, real.s3.access_key, real.s3.secret_key)
        context = RenderContext(
            operator_image=image,
            preload_env_names=seed.PRELOAD_ENV_NAMES,
            allowed_host_paths=(str(bench.host_path),),  # the root itself: a path under one is refused
        )
        spec = endpoint_spec(model, real.s3.pod_url, real.s3.region, image, str(bench.host_path))
        manifest, generation = model_deployment(spec, bench.namespace, context)
        samples: list[Sample] = []
        try:
            bench.apply(manifest, secret)
            prime = bench.run(COLD, generation.weights_key)
            print(f"priming run (not counted): {prime.ready_s:.1f} s, init {prime.init_reason}", flush=True)
            for run in range(args.runs):
                for config in CONFIGS:
                    sample = bench.run(config, generation.weights_key)
                    samples.append(sample)
                    print(
                        f"run {run + 1}/{args.runs} {config.label:<38} Ready in {sample.ready_s:5.1f} s  "
                        f"(pull {sample.pull_s:.1f} s, init {sample.init_reason} {sample.init_s:.2f} s "
                        f"{sample.init_bytes / models.GIB:.2f} GiB, weights read {sample.load_s:.2f} s)",
                        flush=True,
                    )
        finally:
            bench.clean()

    print(
        f"\nScale-out of one replica on real node {bench.node}, {model.total_bytes / models.GIB:.2f} GiB model "
        f"in {len(model.files)} files, medians of {args.runs} runs:\n"
    )
    print(table(samples))
    print()
    for line in ratios(samples):
        print(line)
    met, value = goal_met(samples)
    print(f"\ngoal warm <= {GOAL} x cold: {'MET' if met else 'NOT MET'} (warm/cold = {value:.2f})")
    for path in plot(samples, args.out, args.model_gib):
        print(f"plot: {path}")
    (args.out / "scaleout.json").write_text(
        json.dumps([{**dataclasses.asdict(s), "config": s.config.label} for s in samples], indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
