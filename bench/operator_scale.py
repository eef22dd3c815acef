"""Weights-cache controller at scale: kwok nodes and MDCCs spread over them, on the real control plane.

For each size (nodes, caches) it creates `nodes` kwok nodes in `caches` groups of a unique instance type, starts
`warmstart operator` as a child process restricted to a fresh namespace, creates one MDCC per group, and measures
  - the time from the last preload Job completing (its completionTime) to every MDCC reporting Ready;
  - the operator's peak RSS (psutil, sampled every 0.5 s);
  - the Kubernetes API requests the operator's controllers made (warmstart_api_requests, scraped from /metrics;
    kopf's own watch and annotation traffic is not in it).
Two sizes show how requests grow: with nodes + caches, not with their product.

With --warmup N it also fills one cache on N nodes twice on the same nodes, throttled (the operator's default:
max(16, 25% of the targets) preloads at once) and unthrottled (every node at once), and prints side by side the
create -> all Ready time, the peak number of nodes preloading at once (sampled from the cache's status), and ratios.
Each half has its own deadline (--half-deadline): a half that has not finished by then is reported as a figure ("did
not finish in N s, X of 500 Ready"), not as a failure. Before each half every node is Ready again and the previous
half's namespace (Jobs, pods) is gone, so the second half does not pay for the first one's clean-up; the load average
is printed next to the figures.

    .venv/bin/python bench/operator_scale.py               # 100/10 then 500/50; own cluster unless WARMSTART_KUBECONFIG
    .venv/bin/python bench/operator_scale.py --sizes 500x50
    .venv/bin/python bench/operator_scale.py --sizes '' --warmup 500 --half-deadline 480
    nice .venv/bin/python bench/operator_scale.py --sizes '' --fleet 500x50x25,2000x200x100 --profile
    .venv/bin/python bench/operator_scale.py --sizes '' --fleet 500,5000 --results operator-scale-5000

With --fleet NODESxCACHESxENDPOINTS it creates nodes, caches and endpoints at once with the chart's settings and
counts everything (bench/fleet_scale.py): the operator's CPU seconds and every API request it made (counted by the
API server), the control plane's CPU seconds (apart from kwok's and the operator's), and how long an unrelated
endpoint's change waits while the fleet warms. The named sizes (`--fleet 500,2000,5000`) keep one endpoint per 20
nodes and one cache per 10: 5,000 nodes, 500 caches and 250 endpoints is the largest, with the chart's default
preload throttle.

Afterwards it stops the operator, strips finalizers, deletes the namespace and the nodes. SIGTERM and Ctrl-C stop
the run the same way and stop the cluster the bench started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
from kubernetes import client, config

from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.localcluster import running
from warmstart.render import labels

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_scale
import provenance
from scale_fixtures import cleanup, free_port, mdcc, operator_process, scrape_requests

ROOT = Path(__file__).resolve().parents[1]


#: the named fleet sizes: nodes, caches, endpoints
FLEETS = {"500": (500, 50, 25), "2000": (2000, 200, 100), "5000": (5000, 500, 250)}


def fleet_size(text: str) -> tuple[int, int, int]:
    """A --fleet item: a named size (500, 2000, 5000) or NODESxCACHESxENDPOINTS."""
    if text in FLEETS:
        return FLEETS[text]
    nodes, caches, endpoints = (int(x) for x in text.split("x"))
    return nodes, caches, endpoints


@dataclass
class Figures:
    nodes: int
    caches: int
    jobs_created_s: float
    last_job_to_ready_s: float
    create_to_ready_s: float
    peak_rss_mb: float
    requests: dict[str, int]

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


@contextlib.contextmanager
def cluster_kubeconfig() -> Iterator[str]:
    reused = os.environ.get("WARMSTART_KUBECONFIG")
    if reused:
        yield reused
        return
    with tempfile.TemporaryDirectory(prefix="warmstart-bench-") as directory:
        started = running.up(Path(directory))
        try:
            yield str(started.kubeconfig)
        finally:
            running.down(Path(directory))


def install_crds(kubeconfig: str) -> None:
    kubectl = ["kubectl", "--kubeconfig", kubeconfig]
    subprocess.run(
        [*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(ROOT / "crds")],
        check=True,
        capture_output=True,
    )


def measure(api: client.ApiClient, kubeconfig: str, node_count: int, cache_count: int, out: Path) -> Figures:
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    run = uuid.uuid4().hex[:6]
    namespace = f"bench-{run}"
    per_cache = node_count // cache_count
    types = [f"ml.b{run}x{i}.24xlarge" for i in range(cache_count)]
    core.create_namespace({"metadata": {"name": namespace}})
    created: list[str] = []
    try:
        for itype in types:
            created += kwok_nodes.create_nodes(api, [(itype, per_cache)], prefix=f"b{run}", parallelism=32)
        deadline = time.monotonic() + 180
        while len(kwok_nodes.ready_nodes(api, created)) < len(created):
            if time.monotonic() > deadline:
                raise RuntimeError("kwok nodes did not become Ready")
            time.sleep(1)
        port = free_port()
        with operator_process(kubeconfig, namespace, port, out / f"operator-{node_count}x{cache_count}.log") as proc:
            process = psutil.Process(proc.pid)
            before = scrape_requests(port)
            started = time.time()
            names = []
            for i, itype in enumerate(types):
                body = mdcc(namespace, i, itype)
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL, body)
                names.append(body["metadata"]["name"])
            peak, jobs_seen_at = 0, None
            deadline = time.monotonic() + 480
            while True:
                peak = max(peak, process.memory_info().rss)
                items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)["items"]
                ready = sum(1 for i in items if (i.get("status") or {}).get("state") == "Ready")
                if (
                    jobs_seen_at is None
                    and len(batch.list_namespaced_job(namespace, label_selector=labels.MDCC_LABEL).items) >= node_count
                ):
                    jobs_seen_at = time.time()
                if ready == cache_count:
                    all_ready = time.time()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {ready}/{cache_count} caches Ready after 480 s")
                time.sleep(0.5)
            jobs = batch.list_namespaced_job(namespace, label_selector=labels.MDCC_LABEL).items
            last_done = max(j.status.completion_time.timestamp() for j in jobs if j.status.completion_time)
            peak = max(peak, process.memory_info().rss)
            after = scrape_requests(port)
        requests = {
            m: after.get(m, 0) - before.get(m, 0)
            for m in sorted(set(after) | set(before))
            if after.get(m, 0) - before.get(m, 0)
        }
        return Figures(
            nodes=len(created),
            caches=cache_count,
            jobs_created_s=(jobs_seen_at or all_ready) - started,
            last_job_to_ready_s=max(0.0, all_ready - last_done),
            create_to_ready_s=all_ready - started,
            peak_rss_mb=peak / 2**20,
            requests=requests,
        )
    finally:
        cleanup(api, namespace, created)


@dataclass
class Warmup:
    mode: str
    nodes: int
    create_to_ready_s: float
    peak_preloading: int
    peak_queued: int
    limit: int | None
    #: nodes the operator saw unreachable or NotReady at some point (kwok misses lease renewals on a loaded machine)
    peak_unavailable: int
    #: Ready nodes at the end: all of them, or as many as were Ready when the deadline passed
    ready_nodes: int
    #: the half's deadline (seconds); a warm-up not finished by then is reported with the nodes Ready so far
    deadline_s: float
    #: seconds until the cache was Ready on every node it still targeted (None: never within the deadline)
    ready_on_targets_s: float | None
    #: nodes Ready (kwok) when the half started
    nodes_ready_at_start: int
    #: 1-minute load average when the half started and when it ended
    load_start: float
    load_end: float

    @property
    def finished(self) -> bool:
        return self.ready_nodes >= self.nodes


#: default per-half deadline of the warm-up comparison
DEADLINE_SECONDS = 480.0
#: how long a half may wait for the previous half's namespace to go and for every node to be Ready again
SETTLE_SECONDS = 240.0

#: the unthrottled run: every target node may preload at once
UNTHROTTLED = {"WARMSTART_PRELOAD_CONCURRENCY_NODES": "1", "WARMSTART_PRELOAD_CONCURRENCY_PERCENT": "100"}


def settle(api: client.ApiClient, created: list[str]) -> int:
    """Wait (at most SETTLE_SECONDS) until every node is Ready and no bench namespace is left; the nodes Ready."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        ready = len(kwok_nodes.ready_nodes(api, created))
        leftovers = [n.metadata.name for n in core.list_namespace().items if n.metadata.name.startswith("bench-")]
        if (ready == len(created) and not leftovers) or time.monotonic() > deadline:
            return ready
        time.sleep(2)


def warm_once(
    api: client.ApiClient,
    kubeconfig: str,
    itype: str,
    created: list[str],
    mode: str,
    out: Path,
    run: str,
    half_deadline: float,
) -> Warmup:
    """Fill one cache on every node of `itype`; sample how many nodes preload at once from the cache's status."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = len(created)
    ready_at_start = settle(api, created)
    namespace = f"bench-{run}-{mode}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        settings = UNTHROTTLED if mode == "unthrottled" else {}
        port = free_port()
        with operator_process(kubeconfig, namespace, port, out / f"operator-warmup-{mode}.log", settings):
            body = mdcc(namespace, 0, itype)
            load_start = os.getloadavg()[0]
            started = time.time()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL, body)
            peak, queued, limit, gone, on_targets = 0, 0, None, 0, None
            deadline = time.monotonic() + half_deadline
            while True:
                status = (
                    custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, MDCC_PLURAL, body["metadata"]["name"]
                    ).get("status")
                    or {}
                )
                busy = [
                    n
                    for n in status.get("nodes") or []
                    if n["state"] in ("Pending", "Downloading") and n.get("reason") != "Queued"
                ]
                peak, queued = max(peak, len(busy)), max(queued, status.get("queuedNodes") or 0)
                gone = max(gone, len(status.get("unavailableNodes") or []))
                limit = status.get("preloadConcurrency", limit)
                if on_targets is None and status.get("state") == "Ready":
                    on_targets = time.time() - started
                complete = status.get("state") == "Ready" and status.get("readyNodes") == nodes
                if complete or time.monotonic() > deadline:  # a timeout is reported as such, not raised
                    done = time.time()
                    break
                time.sleep(1.0)
        return Warmup(
            mode=mode,
            nodes=nodes,
            create_to_ready_s=done - started,
            peak_preloading=peak,
            peak_queued=queued,
            limit=limit,
            peak_unavailable=gone,
            ready_nodes=status.get("readyNodes") or 0,
            deadline_s=half_deadline,
            ready_on_targets_s=on_targets,
            nodes_ready_at_start=ready_at_start,
            load_start=load_start,
            load_end=os.getloadavg()[0],
        )
    finally:
        cleanup(api, namespace, [])


def warmup(api: client.ApiClient, kubeconfig: str, node_count: int, out: Path, half_deadline: float) -> list[Warmup]:
    """The same nodes filled throttled, then unthrottled (a fresh namespace and key each time)."""
    run = uuid.uuid4().hex[:6]
    itype = f"ml.w{run}.24xlarge"
    created = kwok_nodes.create_nodes(api, [(itype, node_count)], prefix=f"w{run}", parallelism=32)
    try:
        deadline = time.monotonic() + 300
        while len(kwok_nodes.ready_nodes(api, created)) < len(created):
            if time.monotonic() > deadline:
                raise RuntimeError("kwok nodes did not become Ready")
            time.sleep(1)
        return [
            warm_once(api, kubeconfig, itype, created, mode, out, run, half_deadline)
            for mode in ("throttled", "unthrottled")
        ]
    finally:
        kwok_nodes.delete_nodes(api, created, parallelism=32)


def _seconds(figure: Warmup) -> str:
    return f"{figure.create_to_ready_s:.1f}" if figure.finished else f"> {figure.deadline_s:.0f} (DNF)"


def unfinished(figure: Warmup) -> str:
    return f"{figure.mode}: did not finish in {figure.deadline_s:.0f} s, {figure.ready_nodes} of {figure.nodes} Ready"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def print_warmup(figures: list[Warmup]) -> None:
    throttled, unthrottled = figures
    both = throttled.finished and unthrottled.finished
    on_targets = (throttled.ready_on_targets_s, unthrottled.ready_on_targets_s)
    rows: list[tuple[str, str, str, str]] = [
        (
            "create -> all Ready (s)",
            _seconds(throttled),
            _seconds(unthrottled),
            _ratio(throttled.create_to_ready_s, unthrottled.create_to_ready_s) if both else "-",
        ),
        (
            "create -> Ready on its targets (s)",
            f"{on_targets[0]:.1f}" if on_targets[0] is not None else "never",
            f"{on_targets[1]:.1f}" if on_targets[1] is not None else "never",
            _ratio(*on_targets),
        ),
        (
            "nodes Ready at the end",
            str(throttled.ready_nodes),
            str(unthrottled.ready_nodes),
            _ratio(throttled.ready_nodes, unthrottled.ready_nodes),
        ),
    ]
    for label, x, y in (
        ("nodes preloading at once (peak)", throttled.peak_preloading, unthrottled.peak_preloading),
        ("nodes queued (peak)", throttled.peak_queued, unthrottled.peak_queued),
        ("preload limit (status)", throttled.limit or 0, unthrottled.limit or 0),
        ("nodes unavailable (peak, not counted)", throttled.peak_unavailable, unthrottled.peak_unavailable),
        ("nodes Ready (kwok) at the start", throttled.nodes_ready_at_start, unthrottled.nodes_ready_at_start),
    ):
        rows.append((label, str(x), str(y), _ratio(x, y)))
    rows.append(
        (
            "load average (1 min) start -> end",
            f"{throttled.load_start:.2f} -> {throttled.load_end:.2f}",
            f"{unthrottled.load_start:.2f} -> {unthrottled.load_end:.2f}",
            "",
        )
    )
    width = max(12, *(len(r[1]) for r in rows), *(len(r[2]) for r in rows))
    print(
        f"warm-up of one cache on {throttled.nodes} nodes (2 s simulated preload per node; "
        f"deadline {throttled.deadline_s:.0f} s per half):"
    )
    print(f"  {'':38} {'throttled':>{width}} {'unthrottled':>{width}} {'ratio':>7}")
    for label, a, b, ratio in rows:
        print(f"  {label:38} {a:>{width}} {b:>{width}} {ratio:>7}")
    for figure in figures:
        if not figure.finished:
            print(f"  {unfinished(figure)}")
    print(
        f"  (host: {os.cpu_count()} cores shared with other work; times are indicative, ratios from one run. The"
        " source sees at most the limit of concurrent downloads when throttled.)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100x10,500x50", help="comma-separated NODESxCACHES (default 100x10,500x50)")
    parser.add_argument(
        "--out", default=str(ROOT / "bench" / "out"), help="directory for operator logs and figures JSON"
    )
    parser.add_argument(
        "--warmup", type=int, default=0, metavar="NODES", help="also compare throttled and unthrottled warm-up"
    )
    parser.add_argument(
        "--half-deadline",
        type=float,
        default=DEADLINE_SECONDS,
        metavar="SECONDS",
        help=f"deadline of each warm-up half; an unfinished one is reported (default {DEADLINE_SECONDS:.0f})",
    )
    parser.add_argument(
        "--fleet",
        default="",
        metavar="NxCxE",
        help="comma-separated NODESxCACHESxENDPOINTS or named sizes (500, 2000, 5000) of fleets created at once "
        "(bench/fleet_scale.py)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the operator's on-CPU stacks (bench/stack_sampler.py) in --fleet runs",
    )
    parser.add_argument(
        "--results",
        metavar="NAME",
        help="also write bench/results/<date>-NAME.json: the figures with the command, commit and load average",
    )
    args = parser.parse_args(argv)
    # a SIGTERM unwinds like Ctrl-C, so that the clean-up and the cluster's shutdown run
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started_run = provenance.start()
    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",") if size]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[Figures] = []
    warmed: list[Warmup] = []
    fleets: list[fleet_scale.FleetFigures] = []
    fleet_sizes = [fleet_size(size) for size in args.fleet.split(",") if size]
    with cluster_kubeconfig() as kubeconfig:
        install_crds(kubeconfig)
        api = config.new_client_from_config(config_file=kubeconfig)
        for node_count, cache_count in sizes:
            figures = measure(api, kubeconfig, node_count, cache_count, out)
            results.append(figures)
            print(
                f"{figures.nodes} nodes, {figures.caches} caches: "
                f"all Jobs created {figures.jobs_created_s:.1f} s after the MDCCs; "
                f"last Job done -> all Ready {figures.last_job_to_ready_s:.1f} s; "
                f"create -> all Ready {figures.create_to_ready_s:.1f} s; "
                f"peak RSS {figures.peak_rss_mb:.0f} MB; API requests {figures.total_requests} {figures.requests} "
                f"= {figures.total_requests / (figures.nodes + figures.caches):.2f} per (node + cache)",
                flush=True,
            )
        for node_count, cache_count, endpoint_count in fleet_sizes:
            fleet = fleet_scale.measure_fleet(
                api, kubeconfig, node_count, cache_count, endpoint_count, out, profile=args.profile
            )
            fleets.append(fleet)
            fleet_scale.print_fleet(fleet)
        if args.warmup:
            warmed = warmup(api, kubeconfig, args.warmup, out, args.half_deadline)
            print_warmup(warmed)
            (out / "operator_warmup.json").write_text(
                json.dumps([{**vars(w), "finished": w.finished} for w in warmed], indent=2)
            )
    if results:
        (out / "operator_scale.json").write_text(
            json.dumps([{**vars(f), "total_requests": f.total_requests} for f in results], indent=2)
        )
    if args.results:
        payload = {
            "sizes": [{**vars(f), "total_requests": f.total_requests} for f in results],
            "warmup": [{**vars(w), "finished": w.finished} for w in warmed],
            "fleet": [f.to_json() for f in fleets],
        }
        print(f"wrote {provenance.write(args.results, started_run, payload)}")
    if len(results) >= 2:
        small, large = results[0], results[-1]
        print(
            f"requests grew {large.total_requests / small.total_requests:.2f}x "
            f"for {(large.nodes + large.caches) / (small.nodes + small.caches):.2f}x nodes + caches "
            f"(the product grew {(large.nodes * large.caches) / (small.nodes * small.caches):.0f}x)"
        )
    if len(fleets) >= 2:
        first, last = fleets[0], fleets[-1]
        grew = (last.nodes + last.caches) / (first.nodes + first.caches)
        cpu_ratio = (last.operator_cpu_s / (last.nodes + last.caches)) / (
            first.operator_cpu_s / (first.nodes + first.caches)
        )
        print(
            f"fleet: requests grew {last.server_requests / first.server_requests:.2f}x and the operator's CPU "
            f"{last.operator_cpu_s / first.operator_cpu_s:.2f}x for {grew:.2f}x nodes + caches; per (node + cache): "
            f"requests {last.requests_per_node_cache / first.requests_per_node_cache:.2f}x, operator CPU "
            f"{cpu_ratio:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
