"""Scale-out on a REAL node, through the operator: one new model replica until Ready, warm cache vs cold, image
pre-pulled vs not.

    python bench/scaleout.py [--dir .cluster] [--runs 5] [--model-gib 1.0] [--out bench/out] [--json FILE]

`warmstart operator` runs as a child process watching the bench's own namespace. The bench applies the seed example
adapted to the real node (demo/seed.py): its instance type, a synthetic model of --model-gib GiB in the cluster's real
S3 server, the project image as the model server (`warmstart sim --model-dir`, which reads every weight file, checked
against the preload manifest, before /health answers, so "Ready" includes loading the weights), and `replicas: 0`.
The operator preloads the weights on the node with its own Job and opens the gate; the Deployment, its preferred
affinity for warm nodes and the `warmstart preload --if-missing` init container are the operator's.

- warm cache: the node's `<hostPath>/warmstart` holds the model, the init container finds it (`AlreadyPresent`);
- cold cache: that directory is emptied first (left as the preload prepares it: owned by the preload's uid), and the
  init container downloads the whole model (`Downloaded`, every byte);
- image pre-pulled: the project image is in the node's containerd; not pre-pulled: removed with `ctr images rm`
  first, so the kubelet pulls it from the local registry.

Each run sets `spec.replicas` of the endpoint 0 -> 1 and times it until the model pod is Ready (polled every 0.1 s),
then back to 0. A run whose init container did not take the configuration's path (warm: AlreadyPresent; cold:
Downloaded with the model's bytes) stops the bench. Configurations are interleaved run by run; each run records the
load average. Goal: warm (warm cache, image pre-pulled) at most 0.4 x cold (cold cache, image not pulled), medians.

Uses the running cluster in --dir if it has a real node (its own namespace, bucket and hostPath, removed at the end);
otherwise starts one with `--real-nodes 1` there and stops it at the end. Needs root (as real nodes do).
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

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL
from warmstart.api.endpoints import PLURAL
from warmstart.controllers.storage import Store, load_api_client
from warmstart.demo import flow, seed
from warmstart.localcluster import imaging, models, pushing, realnodes, running
from warmstart.render import security

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml"
BUCKET = "bench-scaleout"
NAME = "bench-scaleout"
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
    load_average: float = 0.0


# ---------------------------------------------------------------------- pure: rendering and reporting


def endpoint_manifest(
    namespace: str, model: models.SyntheticModel, s3_url: str, region: str, image: str, host_path: str, instance: str
) -> dict[str, Any]:
    """The seed example on the real node (demo/seed.py), at 0 replicas and without the image cache: the bench sets
    the image's presence on the node itself (a pre-pull DaemonSet would keep it there)."""
    manifest = seed.real_seed(
        yaml.safe_load(SEED.read_text()),
        namespace=namespace,
        instance_type=instance,
        bucket=model.bucket,
        prefix=model.prefix,
        s3_url=s3_url,
        region=region,
        image=image,
        host_path=host_path,
    )
    manifest["metadata"]["name"] = NAME
    manifest["spec"]["modelName"] = NAME
    manifest["spec"]["replicas"] = 0
    manifest["spec"]["modelCacheConfig"]["imageCache"] = {"enabled": False}
    return manifest


def expected_path(config: Config, model_bytes: int, sample: Sample) -> str | None:
    """Why `sample` did not take the path of `config` (None: it did): a warm run must find the weights, a cold run
    must download all of them."""
    if config.warm_cache and sample.init_reason != "AlreadyPresent":
        return f"a warm run's init container said {sample.init_reason or 'nothing'}, not AlreadyPresent"
    if not config.warm_cache and (sample.init_reason != "Downloaded" or sample.init_bytes != model_bytes):
        return (
            f"a cold run's init container said {sample.init_reason or 'nothing'} with {sample.init_bytes} bytes, "
            f"not Downloaded with {model_bytes}"
        )
    return None


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
            found[config]["min_ready_s"] = min(x.ready_s for x in mine)
            found[config]["max_ready_s"] = max(x.ready_s for x in mine)
            found[config]["load_average"] = median([x.load_average for x in mine])
    return found


def table(samples: list[Sample]) -> str:
    """Markdown: per configuration the runs, median time to Ready and its parts, and the ratio to the cold case."""
    medians = summary(samples)
    cold = medians.get(COLD, {}).get("ready_s", float("nan"))
    lines = [
        "| configuration | runs | Ready (s), each run | median Ready (s) | spread (s) | image pull (s)"
        " | init container (s) | weights read (s) | load avg | / cold |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, figures in medians.items():
        each = ", ".join(f"{s.ready_s:.1f}" for s in samples if s.config == config)
        lines.append(
            f"| {config.label} | {figures['runs']:.0f} | {each} | **{figures['ready_s']:.1f}**"
            f" | {figures['min_ready_s']:.1f}-{figures['max_ready_s']:.1f}"
            f" | {figures['pull_s']:.1f} | {figures['init_s']:.1f} | {figures['load_s']:.2f}"
            f" | {figures['load_average']:.1f} | {figures['ready_s'] / cold:.2f} |"
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
    """The bench's namespace, endpoint, hostPath and image on one real node; the operator in a child process."""

    def __init__(self, cluster: running.Cluster, api: client.ApiClient, image: str, tag: str) -> None:
        assert cluster.real is not None
        self.cluster = cluster
        self.real: realnodes.RealNodes = cluster.real
        self.node = self.real.names[0]
        self.core = client.CoreV1Api(api)
        self.objects = client.CustomObjectsApi(api)
        self.store = Store(load_api_client(str(cluster.kubeconfig)))
        self.image = image
        self.namespace = f"bench-scaleout-{tag}"
        self.host_path = self.real.hostpath_root / f"bench-scaleout-{tag}"
        self.operator_log = cluster.dir / f"operator-{self.namespace}.log"
        self.operator: subprocess.Popen[bytes] | None = None

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
            self.release_image()
            done = self.ctr("images", "rm", "--sync", *self.image_refs())
            if done.returncode or self.image_present():
                raise SystemExit(f"ctr images rm {self.image}: {done.stderr.strip()}")

    def release_image(self) -> None:
        """Delete the finished preload Job's pods and wait until no container of the image is left: an exited
        container holds the image's layers in containerd, and a pull would then find every layer present (a finished
        Job makes no new pod)."""
        jobs = self.core.list_namespaced_pod(self.namespace, label_selector="job-name").items
        for pod in jobs:
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while self.core.list_namespaced_pod(self.namespace, label_selector="job-name").items or self.containers():
            if time.monotonic() > deadline:
                raise SystemExit(f"containers of {self.image} are still on the node after 60 s: {self.containers()}")
            time.sleep(0.2)

    def containers(self) -> list[str]:
        """The node's containers (running or exited) made from the project image: the kubelet removes a deleted
        pod's containers a moment after the pod is gone."""
        refs = set(self.image_refs())
        rows = [line.split() for line in self.ctr("containers", "ls").stdout.splitlines()[1:]]
        return [row[0] for row in rows if len(row) > 1 and row[1] in refs]

    def set_cache(self, warm: bool, key: str) -> None:
        """Cold: the cache directory empty, owned by the preload's uid, as a preload leaves it before a download.
        Warm: the weights are there (the operator's preload Job put them there)."""
        cache = self.host_path / "warmstart"
        weights = cache / "keys" / key / "model"
        if not warm:
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True)
            os.chown(cache, security.CACHE_UID, security.CACHE_UID)
        elif not (weights / models_manifest()).is_file():
            raise SystemExit(f"no warm cache in {weights} (the operator's preload Job should have filled it)")

    def start(self, manifest: dict[str, Any], secret: dict[str, Any]) -> None:
        """The namespace, the preload Secret, the CRDs, the operator (watching this namespace) and the endpoint."""
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": {"warmstart.io/bench": "true"}}})
        self.core.create_namespaced_secret(self.namespace, secret)
        self.host_path.mkdir(parents=True, exist_ok=True)  # a cache root must exist on the node
        flow.install_crds(self.store)
        env = seed.operator_env(self.image, self.namespace, str(self.host_path), "1s")
        self.operator = flow.start_operator(self.cluster.kubeconfig, self.operator_log, env)
        self.store.apply(manifest)

    def endpoint(self) -> dict[str, Any]:
        found: dict[str, Any] = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, NAME)
        return found

    def wait_endpoint(self, state: str, timeout: float = 600.0) -> dict[str, Any]:
        """The endpoint once its state is `state`; stops the bench if the operator died or it took too long."""
        deadline = time.monotonic() + timeout
        while True:
            if self.operator is not None and self.operator.poll() is not None:
                raise SystemExit(f"the operator exited ({self.operator.returncode}); see {self.operator_log}")
            found = self.endpoint()
            if (found.get("status") or {}).get("state") == state:
                return found
            if time.monotonic() > deadline:
                raise SystemExit(f"the endpoint is not {state} after {timeout:.0f} s: {found.get('status')}")
            time.sleep(0.5)

    def weights_key(self) -> str:
        return str(self.endpoint()["status"]["resolved"]["weightsCacheKey"])

    def scale(self, replicas: int) -> None:
        """Through the endpoint (spec.replicas), as a user or an autoscaler does; the operator scales the Deployment."""
        self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, NAME, {"spec": {"replicas": replicas}}
        )

    def pods(self) -> list[client.V1Pod]:
        """The endpoint's model pods (not the preload Job's)."""
        selector = (self.endpoint().get("status") or {}).get("selector") or ""
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def run(self, config: Config, key: str, model_bytes: int, timeout: float = 600.0) -> Sample:
        """Scale 0 -> 1 and time it until the pod is Ready; check the path it took; scale back to 0."""
        self.set_image(config.image_pulled)
        self.set_cache(config.warm_cache, key)
        started = time.monotonic()
        self.scale(1)
        pod = None
        while pod is None:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{config.label}: no Ready pod after {timeout:.0f} s: {self.describe()}")
            pods = self.pods()
            pod = next((p for p in pods if _ready(p)), None)
            if pod is None:
                _fail_fast(pods, config)
                time.sleep(POLL)
        ready = time.monotonic() - started
        sample = Sample(config=config, ready_s=ready, load_average=os.getloadavg()[0])
        name = pod.metadata.name
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        sample.pull_s = pull_seconds([e.message or "" for e in events])
        for status in pod.status.init_container_statuses or []:
            terminated = status.state.terminated
            if terminated is not None and terminated.message and terminated.message.startswith("{"):
                message = json.loads(terminated.message)
                if "reason" in message:
                    sample.init_reason = str(message["reason"])
                    sample.init_bytes = int(message.get("bytes", 0))
                    sample.init_s = float(message.get("seconds", 0.0))
        sample.load_s = load_seconds(self.core.read_namespaced_pod_log(name, self.namespace, container="worker"))
        wrong = expected_path(config, model_bytes, sample)
        if wrong is not None:
            raise SystemExit(f"{config.label}: {wrong}")
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
            self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, NAME)
        deadline = time.monotonic() + 180
        with contextlib.suppress(ApiException):
            while time.monotonic() < deadline:  # the operator's finalizers release the caches and their node labels
                caches = self.objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, MDCC_PLURAL)
                if not caches["items"]:
                    self.endpoint()  # gone: ApiException 404 ends the wait
                time.sleep(0.5)
        if self.operator is not None:
            self.operator.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.operator.wait(30)
            if self.operator.poll() is None:
                self.operator.kill()
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace, propagation_policy="Background")
        deadline = time.monotonic() + 60
        with contextlib.suppress(ApiException):
            while self.core.list_namespaced_pod(self.namespace).items and time.monotonic() < deadline:
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
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration")
    parser.add_argument("--model-gib", type=float, default=1.0, help="size of the synthetic model")
    parser.add_argument("--shards", type=int, default=4, help="weight files")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).parent / "out")
    parser.add_argument("--json", type=pathlib.Path, help="also write every run and the medians to this file")
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
        manifest = endpoint_manifest(
            bench.namespace, model, real.s3.pod_url, real.s3.region, image, str(bench.host_path), real.instance_type
        )
        samples: list[Sample] = []
        try:
            started = time.monotonic()
            bench.start(manifest, secret)
            bench.wait_endpoint("DeploymentComplete")
            print(
                f"the operator preloaded the weights on {bench.node} and opened the gate "
                f"({time.monotonic() - started:.0f} s; log {bench.operator_log})",
                flush=True,
            )
            key = bench.weights_key()
            for run in range(args.runs):
                for config in CONFIGS:
                    sample = bench.run(config, key, model.total_bytes)
                    samples.append(sample)
                    print(
                        f"run {run + 1}/{args.runs} {config.label:<38} Ready in {sample.ready_s:5.1f} s  "
                        f"(pull {sample.pull_s:.1f} s, init {sample.init_reason} {sample.init_s:.2f} s "
                        f"{sample.init_bytes / models.GIB:.2f} GiB, weights read {sample.load_s:.2f} s, "
                        f"load {sample.load_average:.1f})",
                        flush=True,
                    )
        finally:
            bench.clean()

    print(
        f"\nScale-out of one replica on real node {bench.node} through the operator, "
        f"{model.total_bytes / models.GIB:.2f} GiB model in {len(model.files)} files, medians of {args.runs} runs:\n"
    )
    print(table(samples))
    print()
    for line in ratios(samples):
        print(line)
    met, value = goal_met(samples)
    print(f"\ngoal warm <= {GOAL} x cold: {'MET' if met else 'NOT MET'} (warm/cold = {value:.2f})")
    for path in plot(samples, args.out, args.model_gib):
        print(f"plot: {path}")
    runs = [{**dataclasses.asdict(s), "config": s.config.label} for s in samples]
    (args.out / "scaleout.json").write_text(json.dumps(runs, indent=2))
    if args.json is not None:
        report = {
            "command": " ".join(["python", "bench/scaleout.py", *sys.argv[1:]]),
            "commit": subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
            ).stdout.strip(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "node": bench.node,
            "model_bytes": model.total_bytes,
            "files": len(model.files),
            "runs": runs,
            "medians": {c.label: figures for c, figures in summary(samples).items()},
            "ratios": ratios(samples),
            "goal": {"warm_over_cold_at_most": GOAL, "warm_over_cold": value, "met": met},
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"raw data: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
