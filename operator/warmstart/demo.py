"""`warmstart demo`: the whole story on the local control plane, unattended, in a few minutes once binaries are cached.

It brings up the control plane with simulated GPU nodes, installs the CRDs, runs the operator, applies the seed
example and shows a live table (the weights cache filling per node, labels, the gate opening, pods on warm nodes),
scales the endpoint beyond the warm fleet, then compares `random` and `prefixaware` routing on simulated replicas.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from warmstart.api import API_VERSION, nodelabels
from warmstart.api.crds import KINDS, crd
from warmstart.controllers.storage import Store, load_api_client
from warmstart.localcluster import building, nodes, running
from warmstart.render import labels

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml"
NAME, NAMESPACE = "example-model", "default"
PRELOAD_SECONDS = "6s"


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m" if sys.stdout.isatty() else f"\n==> {text}", flush=True)


def install_crds(store: Store) -> None:
    for kind in KINDS:
        store.apply(crd(kind))
    for kind in KINDS:
        name = f"{kind.plural}.inference.sagemaker.aws.amazon.com"
        _wait(functools.partial(_established, store, name), 60, f"CRD {kind.kind}")


def _established(store: Store, name: str) -> bool:
    body = store.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) or {}
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in body.get("status", {}).get("conditions", [])
    )


def _wait(probe: Callable[[], Any], timeout: float, what: str, tick: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick:
            tick()
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise SystemExit(f"demo: timed out after {timeout:.0f}s waiting for {what}")


def start_operator(kubeconfig: pathlib.Path, log_path: pathlib.Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "WARMSTART_PRELOAD_POD_ANNOTATIONS": f'{{"sim.warmstart.io/duration": "{PRELOAD_SECONDS}"}}',
        "WARMSTART_RESYNC_SECONDS": "2",
    }
    command = [
        sys.executable,
        "-m",
        "warmstart.cli",
        "operator",
        "--kubeconfig",
        str(kubeconfig),
        "--metrics-port",
        "0",
        "--health-port",
        "0",
    ]
    return subprocess.Popen(command, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)


class Table:
    """A live view of the endpoint, its weights cache and the nodes; reprinted when something changes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last = ""

    def rows(self) -> list[str]:
        iec = self.store.get(API_VERSION, "InferenceEndpointConfig", NAME, NAMESPACE) or {}
        status = iec.get("status") or {}
        wkey = (status.get("resolved") or {}).get("weightsCacheKey", "")
        ikey = (status.get("resolved") or {}).get("imageCacheKey", "")
        mdcc = self.store.get(API_VERSION, "ModelDataCacheConfig", f"weights-{wkey}", NAMESPACE) or {} if wkey else {}
        per_node = {n["node"]: n for n in (mdcc.get("status") or {}).get("nodes") or []}
        pods: dict[str, int] = {}
        for pod in self.store.list("v1", "Pod", NAMESPACE, label_selector=f"{labels.ENDPOINT_LABEL}={NAME}"):
            if pod.get("status", {}).get("phase") == "Running":
                node = pod["spec"].get("nodeName", "")
                pods[node] = pods.get(node, 0) + 1
        placement = status.get("warmPlacement") or {}
        lines = [
            f"endpoint {NAME}: state={status.get('state', '-')}  "
            f"replicas={status.get('availableReplicas', 0)}/{iec.get('spec', {}).get('replicas', '-')}"
            f"  warm pods={placement.get('warmPods', 0)} cold pods={placement.get('coldPods', 0)}",
            f"weights cache weights-{wkey or '?'}: {(mdcc.get('status') or {}).get('state', '-')} "
            f"{(mdcc.get('status') or {}).get('readyNodes', 0)}/"
            f"{(mdcc.get('status') or {}).get('targetNodes', 0)} nodes",
            f"  {'NODE':<28} {'TYPE':<16} {'PRELOAD':<12} {'WEIGHTS':<8} {'IMAGE':<8} PODS",
        ]
        for node in sorted(self.store.list("v1", "Node"), key=lambda n: n["metadata"]["name"]):
            name, node_labels = node["metadata"]["name"], node["metadata"].get("labels", {})
            weights = "ready" if wkey and node_labels.get(nodelabels.weights_ready_label(wkey)) == "ready" else "-"
            image = "ready" if ikey and node_labels.get(nodelabels.image_ready_label(ikey)) == "ready" else "-"
            preload = per_node.get(name, {}).get("state", "-")
            lines.append(
                f"  {name:<28} {node_labels.get(nodelabels.INSTANCE_TYPE, ''):<16} {preload:<12} {weights:<8} "
                f"{image:<8} {'#' * pods.get(name, 0)}"
            )
        return lines

    def show(self) -> None:
        text = "\n".join(self.rows())
        if text != self.last:
            print(("\033[2J\033[H" if sys.stdout.isatty() else "\n") + text, flush=True)
            self.last = text


def state(store: Store) -> str:
    return str(
        ((store.get(API_VERSION, "InferenceEndpointConfig", NAME, NAMESPACE) or {}).get("status") or {}).get(
            "state", ""
        )
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="warmstart demo", description=__doc__)
    parser.add_argument("--dir", type=pathlib.Path, default=pathlib.Path(".cluster"), help="cluster directory")
    parser.add_argument("--down", action="store_true", help="stop the cluster at the end (default: leave it running)")
    parser.add_argument("--skip-routing", action="store_true", help="skip the router comparison")
    args = parser.parse_args(argv)

    if building.missing():
        say("building the local control plane from Go modules: first time only, ~15-30 minutes on 2 cores")
    building.ensure_binaries()
    say(f"starting etcd, kube-apiserver, controller-manager, scheduler and kwok in {args.dir}")
    cluster = running.up(args.dir)
    store = Store(load_api_client(str(cluster.kubeconfig)))
    say("installing the CRDs")
    install_crds(store)
    log = args.dir / "operator.log"
    say(f"starting the operator (log: {log})")
    operator = start_operator(cluster.kubeconfig, log)
    try:
        say(f"applying {SEED.relative_to(ROOT)} (preload Jobs simulated at {PRELOAD_SECONDS} each)")
        store.apply(yaml.safe_load(SEED.read_text()))
        table = Table(store)
        _wait(lambda: state(store) == "DeploymentComplete", 300, "DeploymentComplete", tick=table.show)
        table.show()
        say("the gate opened once every ml.g5.24xlarge node held the weights; the pod runs on a warm node")

        say("scale-out beyond the warm fleet: 2 new ml.g5.24xlarge nodes join, the endpoint scales 1 -> 6")
        api = cluster.api_client()
        nodes.create_nodes(api, "ml.g5.24xlarge=2", start=4)
        store.merge_patch(API_VERSION, "InferenceEndpointConfig", NAME, {"spec": {"replicas": 6}}, NAMESPACE)
        _wait(
            lambda: (
                (store.get(API_VERSION, "InferenceEndpointConfig", NAME, NAMESPACE) or {})
                .get("status", {})
                .get("availableReplicas")
                == 6
            ),
            180,
            "6 replicas",
            tick=table.show,
        )
        table.show()
        say(
            "4 pods landed on warm nodes; 2 on the new cold nodes, where the init container downloads "
            "(their preload Jobs fill them for next time)"
        )
        if not args.skip_routing:
            say("routing: random vs prefixaware on 8 simulated vLLM replicas (bench/routing.py --quick)")
            subprocess.run([sys.executable, str(ROOT / "bench" / "routing.py"), "--quick"], check=False)
            say(f"plots: {ROOT / 'bench' / 'out'}/*.png")
    finally:
        operator.terminate()
        operator.wait(30)
        if args.down:
            running.down(args.dir)
    say(
        f"done. The cluster is still running: export KUBECONFIG={cluster.kubeconfig}; kubectl get iec,mdcc,mic -A; "
        "stop it with `make cluster-down`"
        if not args.down
        else "done"
    )
    return 0
