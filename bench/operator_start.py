"""The operator's start on a large fleet, side by side: this checkout against a baseline commit, in one run.

An operator that starts (a first start, a restart, an upgrade) lists every node and the objects
it indexes, and reconciles nothing until its indexes are filled. With N kwok nodes Ready and an endpoint created
just before the operator starts, each variant is measured in turn, `--rounds` times:
  - start -> the endpoint's status shows its generation: how long a user's change waits on a starting operator;
  - the operator's CPU seconds until then;
  - then its CPU over `--idle-seconds` with nothing to do, and the node watch events in that span.
The baseline runs from a git worktree of `--baseline` (its operator package first on PYTHONPATH), the same
interpreter and dependencies.

    python bench/operator_start.py --nodes 2000 --baseline HEAD~1 --results operator-start   # bench/results/<date>-...
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from kubernetes import client, config, watch

import provenance
from fleet_scale import IEC_PLURAL, _endpoint, _observed
from operator_scale import cluster_kubeconfig, install_crds
from scale_fixtures import free_port, operator_process
from warmstart.api import GROUP, VERSION
from warmstart.api.nodelabels import INSTANCE_TYPE
from warmstart.localcluster import nodes as kwok_nodes

ROOT = Path(__file__).resolve().parent.parent
PROBE = "probe"
GROUPS = 100


@dataclass
class Start:
    variant: str
    ready_s: float
    cpu_to_ready_s: float
    idle_cpu_s: float
    idle_seconds: float
    node_events: int


def node_events(api: client.ApiClient, seconds: float, found: list[int]) -> None:
    """Count the node watch events over `seconds` (into found[0])."""
    core = client.CoreV1Api(api)
    version = core.list_node(limit=1).metadata.resource_version
    stream = watch.Watch()
    end = time.monotonic() + seconds
    for _ in stream.stream(core.list_node, resource_version=version, timeout_seconds=int(seconds) + 5):
        found[0] += 1
        if time.monotonic() > end:
            break
    stream.stop()


def ensure_nodes(api: client.ApiClient, count: int, prefix: str) -> str:
    """At least `count` Ready kwok nodes (a reused cluster's count too), made in GROUPS instance types; the instance
    type the probe endpoint asks for."""
    have = kwok_nodes.ready_nodes(api)
    if len(have) < count:
        types = [f"ml.{prefix}x{i}.24xlarge" for i in range(GROUPS)]
        missing = count - len(have)
        kwok_nodes.create_nodes(api, [(t, missing // GROUPS) for t in types], prefix=prefix, parallelism=32)
        deadline = time.monotonic() + 900
        while len(have := kwok_nodes.ready_nodes(api)) < count - GROUPS:
            if time.monotonic() > deadline:
                raise RuntimeError("kwok nodes did not become Ready")
            time.sleep(2)
    node = client.CoreV1Api(api).read_node(sorted(have)[-1])
    return str(node.metadata.labels[INSTANCE_TYPE])


def measure(
    api: client.ApiClient, kubeconfig: str, variant: str, source: Path, instance_type: str, idle: float, out: Path
) -> Start:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"start-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, IEC_PLURAL, _endpoint(namespace, PROBE, instance_type, cached=False)
        )
        env = {"PYTHONPATH": str(source / "operator"), "WARMSTART_RESYNC_SECONDS": "10"}
        started = time.monotonic()
        log = out / f"operator-start-{variant.split()[0]}-{namespace}.log"
        with operator_process(kubeconfig, namespace, free_port(), log, env) as proc:
            operator = psutil.Process(proc.pid)
            while _observed(custom, namespace, PROBE)[1] < 1:
                if time.monotonic() - started > 1200:
                    raise RuntimeError(f"{variant}: the endpoint was not reconciled in 1,200 s; see {log}")
                time.sleep(0.25)
            ready_s = time.monotonic() - started
            cpu_to_ready = sum(operator.cpu_times()[:2])
            counted = [0]
            counter = threading.Thread(target=node_events, args=(api, idle, counted), daemon=True)
            counter.start()
            time.sleep(idle)
            idle_cpu = sum(operator.cpu_times()[:2]) - cpu_to_ready
            counter.join(timeout=30)
        return Start(variant, round(ready_s, 1), round(cpu_to_ready, 2), round(idle_cpu, 2), idle, counted[0])
    finally:
        core.delete_namespace(namespace)


def worktree(ref: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), ref], check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--baseline", required=True, help="git ref of the baseline operator")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--results", help="name of the JSON written to bench/results/")
    args = parser.parse_args(argv)
    started_run = provenance.start()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    baseline_commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True, capture_output=True, text=True
    ).stdout.strip()
    starts: list[Start] = []
    with tempfile.TemporaryDirectory(prefix="warmstart-baseline-") as scratch, cluster_kubeconfig() as kubeconfig:
        baseline = worktree(args.baseline, Path(scratch) / "baseline")
        try:
            api = config.new_client_from_config(kubeconfig)
            install_crds(kubeconfig)
            instance_type = ensure_nodes(api, args.nodes, prefix=f"s{uuid.uuid4().hex[:4]}")
            print(f"{args.nodes} nodes Ready", flush=True)
            for round_ in range(args.rounds):
                for variant, source in ((f"baseline {baseline_commit}", baseline), ("this checkout", ROOT)):
                    start = measure(api, kubeconfig, variant, source, instance_type, args.idle_seconds, out)
                    print(f"round {round_ + 1}: {json.dumps(asdict(start))}", flush=True)
                    starts.append(start)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=False)
    report(starts, args.nodes)
    if args.results:
        payload = {"nodes": args.nodes, "baseline": baseline_commit, "starts": [asdict(s) for s in starts]}
        print(f"wrote {provenance.write(args.results, started_run, payload)}")
    return 0


def report(starts: list[Start], nodes: int) -> None:
    variants = list(dict.fromkeys(s.variant for s in starts))
    medians = {
        v: {
            key: statistics.median(getattr(s, key) for s in starts if s.variant == v)
            for key in ("ready_s", "cpu_to_ready_s", "idle_cpu_s", "node_events")
        }
        for v in variants
    }
    print(f"\noperator start with {nodes} kwok nodes Ready (medians of {len(starts) // len(variants)} rounds)")
    header = ("start -> reconciled", "CPU to then", "idle CPU/min", "node events", "ms/event")
    print(f"{'':>28} " + " ".join(f"{h:>20}" for h in header))
    for v, m in medians.items():
        per_min = m["idle_cpu_s"] * 60 / starts[0].idle_seconds
        cells = (f"{m['ready_s']:.1f} s", f"{m['cpu_to_ready_s']:.1f} s", f"{per_min:.2f} s", f"{m['node_events']:.0f}")
        per_event = f"{_per_event(m) * 1000:.2f}" if m["node_events"] else "-"
        print(f"{v:>28} " + " ".join(f"{c:>20}" for c in (*cells, per_event)))
    if len(variants) == 2:
        base, this = (medians[v] for v in variants)
        print(
            f"ratio baseline/this: start -> reconciled {base['ready_s'] / this['ready_s']:.2f}x, "
            f"CPU to then {base['cpu_to_ready_s'] / this['cpu_to_ready_s']:.2f}x"
            + (
                f", idle CPU per node event {_per_event(base) / _per_event(this):.2f}x"
                if base["node_events"] and this["node_events"]
                else ""
            )
        )


def _per_event(medians: dict[str, float]) -> float:
    return medians["idle_cpu_s"] / medians["node_events"]


if __name__ == "__main__":
    sys.exit(main())
