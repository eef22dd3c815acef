"""The demo's steps, in order; any step that fails stops the demo with a non-zero exit and says which step.

It tells the seed's story on real parts only, and ends with a table of every figure it measured and its goal:

0. the project's ``bench`` extra (SGLang's router) in this environment, installed if missing;
1. the control plane plus ONE REAL node, its registry and S3 server (`cluster up --real-nodes 1`); the project image
   built from the Dockerfile and pushed; a synthetic model uploaded to the S3 server;
2. warm vs cold scale-out: one replica on the real node timed with a warm and a cold cache, image pre-pulled and not
   (bench/scaleout.py --runs 1); then the CRDs, the operator and the seed endpoint: the preload Job really downloads
   the model into the node's hostPath, the gate opens, the model pod's `--if-missing` init container finds the
   weights and `warmstart sim --model-dir` reads them before it reports Ready;
3. a real model: llama.cpp's server (images/llamacpp, compiled once) serves SmolLM2-135M from the node cache
   (examples/09-llamacpp): one real completion through the endpoint's Service and router, and the same long prompt
   twice, cold and warm in the engine's prompt cache;
4. random vs prefixaware vs SGLang's cache_aware in front of 2 real engines on the host (:mod:`comparing`);
5. the summary table (:mod:`summary`).

`--dir` of a running cluster with one real node reuses it (nothing of it is stopped); the demo then works in its own
namespace and removes what it added (namespace, cache directory) at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kubernetes import client

from warmstart.api import API_VERSION, nodelabels
from warmstart.api.crds import KINDS, crd
from warmstart.controllers.storage import Store, load_api_client
from warmstart.demo import comparing, extras, facts, realengine, seed, summary
from warmstart.demo.table import Table
from warmstart.localcluster import building, imaging, models, pushing, running, versions
from warmstart.render import labels

ROOT = pathlib.Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml"
NAME = "example-model"
BUCKET = "warmstart-demo"
PRELOAD_SECONDS = "6s"
OUT = ROOT / "bench" / "out" / "demo"


class StepFailed(SystemExit):
    """A demo step failed: the message names it; the exit code is 1."""


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m" if sys.stdout.isatty() else f"\n==> {text}", flush=True)


@contextmanager
def step(what: str) -> Iterator[None]:
    """Announce ``what``, time it, and turn any failure into :class:`StepFailed` naming the step."""
    say(what)
    started = time.monotonic()
    try:
        yield
    except StepFailed:
        raise
    except Exception as error:  # any failure of a step fails the demo, with the step's name
        raise StepFailed(f"demo: step failed: {what}: {type(error).__name__}: {error}") from error
    print(f"    ({time.monotonic() - started:.0f} s)", flush=True)


def wait(probe: Callable[[], Any], timeout: float, what: str, tick: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick:
            tick()
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise StepFailed(f"demo: timed out after {timeout:.0f}s waiting for {what}")


def install_crds(store: Store) -> None:
    for kind in KINDS:
        store.apply(crd(kind))
    for kind in KINDS:
        name = f"{kind.plural}.inference.sagemaker.aws.amazon.com"
        wait(functools.partial(_established, store, name), 60, f"CRD {kind.kind}")


def _established(store: Store, name: str) -> bool:
    body = store.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) or {}
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in body.get("status", {}).get("conditions", [])
    )


def start_operator(kubeconfig: pathlib.Path, log_path: pathlib.Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "warmstart.cli", "operator", "--kubeconfig", str(kubeconfig)]
    command += ["--metrics-port", "0", "--health-port", "0"]
    return subprocess.Popen(command, env={**os.environ, **env}, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)


class Demo:
    """The objects one demo run works with."""

    def __init__(self, cluster: running.Cluster, namespace: str, operator_log: pathlib.Path) -> None:
        self.cluster = cluster
        self.store = Store(load_api_client(str(cluster.kubeconfig)))
        self.api = cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        self.namespace = namespace
        self.operator_log = operator_log
        self.operator: subprocess.Popen[bytes] | None = None
        self.table = Table(self.store, NAME, namespace)
        self.figures: list[summary.Figure] = []

    def endpoint(self) -> dict[str, Any]:
        return self.store.get(API_VERSION, "InferenceEndpointConfig", NAME, self.namespace) or {}

    def tick(self) -> None:
        """Reprint the table; fail at once if the operator died."""
        if self.operator is not None and self.operator.poll() is not None:
            tail = "\n".join(self.operator_log.read_text(errors="replace").splitlines()[-20:])
            raise StepFailed(f"demo: the operator exited ({self.operator.returncode}); {self.operator_log}:\n{tail}")
        self.table.show()

    def pods(self) -> list[dict[str, Any]]:
        return self.store.list("v1", "Pod", self.namespace, label_selector=f"{labels.ENDPOINT_LABEL}={NAME}")

    def report_pods(self) -> list[facts.PodFacts]:
        all_nodes = self.store.list("v1", "Node")
        real = facts.real_node_names(all_nodes)
        found = [facts.pod_facts(p, real) for p in self.pods() if p.get("status", {}).get("phase") == "Running"]
        for item in sorted(found, key=lambda f: (not f.real, f.name)):
            print("    " + facts.describe(item), flush=True)
            if item.real:
                log = self.core.read_namespaced_pod_log(item.name, self.namespace, container="worker")
                read = facts.weights_read(log)
                if read is None:
                    raise StepFailed(f"demo: {item.name}: the simulator did not report reading its weights")
                print(
                    f"      warmstart sim read {read[0] / 1024**3:.2f} GiB of weights in {read[1]:.2f} s before Ready"
                )
        return found


def run(args: argparse.Namespace) -> list[summary.Figure]:
    """Every step in order; returns the figures measured (the demo's own time is added by :func:`main`)."""
    directory: pathlib.Path = args.dir.resolve()
    reused = running.running_cluster(directory)
    if args.engine and not args.skip_routing:
        with step("the project's bench extra (SGLang's router, compared against below) in this environment"):
            print(f"    installed: {', '.join(extras.install()) or 'nothing; already there'}")
    with step("local control plane, kwok GPU nodes and one REAL node (registry, S3 server, containerd, kubelet)"):
        if building.missing(versions.CONTROL_PLANE + versions.REAL_NODES):
            print("    first time: building the control plane and node binaries from Go modules (~10 min on 2 cores)")
        cluster = running.up(directory, real_nodes=1, timeout=300.0)
        assert cluster.real is not None
        real = cluster.real
        print(f"    real node {real.names[0]} ({real.instance_type}), registry {real.registry}, S3 {real.s3.host_url}")
    namespace = args.namespace or ("default" if reused is None else f"demo-{uuid.uuid4().hex[:6]}")
    host_path = real.hostpath_root / f"demo-{namespace}"
    demo = Demo(cluster, namespace, directory / f"operator-{namespace}.log")
    try:
        with step("the project image from the Dockerfile (buildah; first time ~2 min), pushed to the registry"):
            image = pushing.push(imaging.project_image(), real.registry)
            print(f"    {image}")
        with step(f"a synthetic {args.model_gib:g} GiB model in the S3 server"):
            total = int(args.model_gib * models.GIB)
            model = models.upload(real.s3, BUCKET, f"models/synthetic-{total}", total)
            print(f"    s3://{model.bucket}/{model.prefix}: {len(model.files)} files, {model.total_bytes} bytes")
        if not args.skip_bench:
            # before the endpoint runs: a running pod of the same image would keep its layers on the node, and the
            # "image not pulled" runs would find them there
            with step("warm vs cold scale-out: one replica on the real node (bench/scaleout.py --runs 1)"):
                report = OUT / "scaleout-report.json"
                bench = [sys.executable, str(ROOT / "bench" / "scaleout.py"), "--dir", str(directory), "--runs", "1"]
                bench += ["--model-gib", f"{args.model_gib:g}", "--out", str(OUT), "--json", str(report)]
                subprocess.run(bench, check=True)
                demo.figures += summary.scaleout(json.loads(report.read_text()))
        with step("the CRDs, and the operator"):
            if namespace != "default":
                demo.core.create_namespace({"metadata": {"name": namespace}})
            install_crds(demo.store)
            demo.store.apply(seed.preload_secret(namespace, real.s3.access_key, real.s3.secret_key))
            host_path.mkdir(parents=True, exist_ok=True)  # a cache root must exist on the node (hostPath Directory)
            env = seed.operator_env(image, namespace, str(host_path), PRELOAD_SECONDS)
            demo.operator = start_operator(cluster.kubeconfig, demo.operator_log, env)
            print(f"    log: {demo.operator_log}")
        manifest = seed.real_seed(
            yaml.safe_load(SEED.read_text()),
            namespace=namespace,
            instance_type=real.instance_type,
            bucket=model.bucket,
            prefix=model.prefix,
            s3_url=real.s3.pod_url,
            region=real.s3.region,
            image=image,
            host_path=str(host_path),
        )
        with step(f"the seed endpoint on the real node ({real.instance_type}): real preload, real simulator"):
            run_seed(demo, manifest)
        if args.engine:
            run_engine(demo, real, namespace, host_path)
            if not args.skip_routing:
                with step("random vs prefixaware vs SGLang cache_aware on 2 real llama.cpp engines (host processes)"):
                    demo.figures += summary.routing(comparing.run(OUT / "routing-llamacpp.json"))
    finally:
        try:
            cleanup(demo, reused is not None, host_path)
        except (client.ApiException, OSError, RuntimeError) as error:  # must not hide the step that failed
            print(f"demo: clean-up incomplete: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        if args.down:
            running.down(directory)
    say(
        "done"
        if args.down or reused is not None
        else f"done. The cluster is still running: export KUBECONFIG={cluster.kubeconfig}; "
        "kubectl get iec,mdcc,mic -A; stop it with `make cluster-down`"
    )
    return demo.figures


def run_seed(demo: Demo, manifest: dict[str, Any]) -> None:
    """The seed endpoint: its preload on the real node, then a model pod that finds the weights in place."""
    demo.store.apply(manifest)
    wait(lambda: facts_state(demo) == "DeploymentComplete", 600, "DeploymentComplete", tick=demo.tick)
    demo.tick()
    done, seconds = 0, 0.0
    for node in preload_results(demo):
        size, took = (node.get("bytes") or 0), float(node.get("seconds") or 0)
        print(f"    preload Job on {node['node']}: {node['state']}, {size / 1024**3:.2f} GiB in {took:.1f} s")
        done, seconds = done + size, seconds + took
    found = demo.report_pods()
    warm = any(f.real and f.init_reason == "AlreadyPresent" for f in found)
    demo.figures.append(summary.preload(done, seconds, warm))
    if not warm:
        raise StepFailed("demo: the model pod on the real node did not find its weights warm")


def run_engine(demo: Demo, real: Any, namespace: str, host_path: pathlib.Path) -> None:
    """The real engine on the real node (examples/09-llamacpp): see :mod:`warmstart.demo.realengine`."""
    with step("the llama.cpp engine image (compiled once from pinned source, see docs/engine.md), pushed"):
        engine_image = realengine.image(real.registry)
        print(f"    {engine_image}")
    with step(f"a real model on the real node: llama.cpp serves SmolLM2-135M from the node cache ({realengine.NAME})"):
        realengine.deploy(demo.store, real, namespace, engine_image, host_path)

        def state() -> str:
            body = demo.store.get(API_VERSION, "InferenceEndpointConfig", realengine.NAME, namespace) or {}
            return str((body.get("status") or {}).get("state", ""))

        wait(lambda: state() == "DeploymentComplete", 600, f"{realengine.NAME} DeploymentComplete", tick=demo.tick)
        # the operator moves the Service to the router pods once one is ready: wait until it leads only there
        routed = functools.partial(realengine.through_router, demo.core, namespace)
        wait(routed, 120, f"{realengine.NAME}'s Service to lead to its router pods", tick=demo.tick)
        url = realengine.service_url(demo.core, namespace)
        print(f"    through the endpoint's Service and its prefix-aware router, {url}:")
        demo.figures.append(summary.completion(realengine.show_completion(url).text.strip()))
        first, second = realengine.show_prompt_cache(url)
        demo.figures.append(
            summary.prompt_cache(
                first.ttft * 1000, second.ttft * 1000, second.cached_tokens, second.cached_tokens + second.prompt_tokens
            )
        )


def facts_state(demo: Demo) -> str:
    return str((demo.endpoint().get("status") or {}).get("state", ""))


def preload_results(demo: Demo) -> list[dict[str, Any]]:
    key = ((demo.endpoint().get("status") or {}).get("resolved") or {}).get("weightsCacheKey", "")
    mdcc = demo.store.get(API_VERSION, "ModelDataCacheConfig", f"weights-{key}", demo.namespace) or {}
    found: list[dict[str, Any]] = (mdcc.get("status") or {}).get("nodes") or []
    return found


def cleanup(demo: Demo, reused: bool, host_path: pathlib.Path) -> None:
    """Stop the operator; on a reused cluster first delete what the demo added, while the operator still runs (it
    removes its finalizers and the node's cache), then the namespace, the cache directory and the node label that
    advertised it."""
    key = ((demo.endpoint().get("status") or {}).get("resolved") or {}).get("weightsCacheKey", "")
    keys = [key, _weights_key(demo, realengine.NAME)]
    if reused and demo.operator is not None and demo.operator.poll() is None:
        for name in (NAME, realengine.NAME):
            demo.store.delete(API_VERSION, "InferenceEndpointConfig", name, demo.namespace)
        deadline = time.monotonic() + 120
        while (
            demo.store.list(API_VERSION, "InferenceEndpointConfig", demo.namespace)
            or demo.store.list("v1", "Pod", demo.namespace)
        ) and time.monotonic() < deadline:
            time.sleep(1)
    if demo.operator is not None:
        demo.operator.terminate()
        demo.operator.wait(30)
    if not reused:
        return
    for kind in ("InferenceEndpointConfig", "ModelDataCacheConfig", "ModelImageCache"):
        for item in demo.store.list(API_VERSION, kind, demo.namespace):
            if item["metadata"].get("finalizers"):  # left if the operator could not finish in time
                patch = {"metadata": {"finalizers": None}}
                demo.store.merge_patch(API_VERSION, kind, item["metadata"]["name"], patch, demo.namespace)
    if demo.namespace != "default":
        with contextlib.suppress(client.ApiException):  # not created if an earlier step failed
            demo.core.delete_namespace(demo.namespace, propagation_policy="Background")
    shutil.rmtree(host_path, ignore_errors=True)
    for found in filter(None, keys):  # the node's label for a cache that is gone with the directory
        label = nodelabels.weights_ready_label(found)
        for node in demo.store.list("v1", "Node", label_selector=label):
            demo.store.merge_patch("v1", "Node", node["metadata"]["name"], {"metadata": {"labels": {label: None}}})


def _weights_key(demo: Demo, name: str) -> str:
    body = demo.store.get(API_VERSION, "InferenceEndpointConfig", name, demo.namespace) or {}
    return str(((body.get("status") or {}).get("resolved") or {}).get("weightsCacheKey", ""))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="warmstart demo", description=__doc__)
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path(".cluster"), help="cluster directory")
    parser.add_argument("--down", action="store_true", help="stop the cluster at the end (default: leave it running)")
    parser.add_argument("--namespace", default="", help="default: 'default', or a fresh one on a reused cluster")
    parser.add_argument("--model-gib", type=float, default=1.0, help="size of the synthetic model (default 1)")
    parser.add_argument("--skip-bench", action="store_true", help="skip the real node's warm vs cold measurement")
    parser.add_argument(
        "--engine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the real llama.cpp engine on the real node (default; its image compiles on the first run, "
        "docs/engine.md); --no-engine leaves it out",
    )
    parser.add_argument(
        "--skip-routing",
        action="store_true",
        help="skip the router comparison on the real engines (and the bench extra)",
    )
    args = parser.parse_args(argv)
    progress = logging.getLogger("warmstart.localcluster")  # builds report component and elapsed time here
    progress.setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("    %(message)s"))
    progress.addHandler(handler)
    caches_warm = not building.missing(versions.CONTROL_PLANE + versions.REAL_NODES)
    started = time.monotonic()
    figures = run(args)
    figures.append(summary.duration(time.monotonic() - started, caches_warm))
    say("every figure this run measured, with its goal")
    print(summary.render(figures), flush=True)
    return 0
