"""The ``warmstart cluster build|up|down|status|image`` command."""

from __future__ import annotations

import argparse
import logging
import pathlib
import shutil
import sys

from kubernetes import client

from warmstart.localcluster import (
    building,
    imagecli,
    nodeplans,
    nodes,
    objectstore,
    realnodes,
    registry,
    running,
    testimages,
    versions,
)

DEFAULT_DIR = pathlib.Path(".cluster")


def main(argv: list[str]) -> int:
    if argv[:1] == ["image"]:
        return imagecli.main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    directory = pathlib.Path(getattr(args, "dir", DEFAULT_DIR))
    try:
        if args.command == "build":
            return _build(_chosen(args.only), args.report)
        if args.command == "up":
            cluster = running.up(
                directory,
                node_spec=args.nodes,
                timeout=args.timeout,
                real_nodes=args.real_nodes,
                real_node_type=args.real_node_type,
            )
            if cluster.real is not None:
                _print_real(cluster.real)
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            return 0
        if args.command == "down":
            stopped = running.down(directory)
            print(f"stopped: {', '.join(stopped)}" if stopped else f"no cluster running in {directory}")
            if args.purge:
                shutil.rmtree(directory, ignore_errors=True)
            return 0
        return _status(directory)
    except (
        building.BuildError,
        running.ClusterError,
        realnodes.RealNodeError,
        registry.RegistryError,
        objectstore.ObjectStoreError,
        testimages.ImageBuildError,
        TimeoutError,
    ) as error:
        print(f"warmstart cluster {args.command}: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmstart cluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the missing binaries from Go modules (first time: ~30 min)")
    build.add_argument("--report", action="store_true", help="print the recorded build time and memory of each")
    build.add_argument(
        "--only",
        action="append",
        choices=sorted(versions.GROUPS),
        help="build only this group (repeatable; default: all of them)",
    )
    for name, help_ in (
        ("up", "start the cluster (idempotent), create fake GPU nodes and, with --real-nodes, real ones"),
        ("down", "stop every process of the cluster"),
        ("status", "show component health and nodes"),
    ):
        sub = commands.add_parser(name, help=help_)
        sub.add_argument("--dir", type=pathlib.Path, default=DEFAULT_DIR, help="cluster directory (default .cluster)")
        if name == "up":
            sub.add_argument(
                "--nodes", default=nodes.DEFAULT_SPEC, help=f"TYPE=COUNT,... (default {nodes.DEFAULT_SPEC})"
            )
            sub.add_argument(
                "--real-nodes",
                type=int,
                default=0,
                metavar="N",
                help="also start N real kubelet nodes (containerd + runc, pods really run; needs root and "
                "scripts/install-host-packages.sh), with a local registry and an S3 server (default 0: kwok only)",
            )
            sub.add_argument(
                "--real-node-type",
                default=nodeplans.DEFAULT_INSTANCE_TYPE,
                help=f"instance type the real nodes claim (default {nodeplans.DEFAULT_INSTANCE_TYPE})",
            )
            sub.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
        if name == "down":
            sub.add_argument("--purge", action="store_true", help="also delete the cluster directory")
    # listed for --help only: main() hands `image ...` to imagecli before parsing
    commands.add_parser("image", help="build|run the images of the real node (project image, pause, shell-less)")
    return parser


def _chosen(groups: list[str] | None) -> tuple[versions.Build, ...]:
    """The builds of the named groups, in build order (every build when none is named)."""
    if not groups:
        return versions.BUILDS
    return tuple(build for build in versions.BUILDS if any(build in versions.GROUPS[g] for g in groups))


def _build(builds: tuple[versions.Build, ...], report: bool) -> int:
    todo = building.missing(builds)
    if not todo:
        print(f"the binaries asked for are built already, under {building.cache_root() / 'bin'}")
    building.ensure(builds)
    if report:
        for record in building.build_records():
            rss = int(str(record["peak_rss_bytes"])) / 2**30
            name, version, seconds = record["binary"], record["version"], record["wall_seconds"]
            cpu = record.get("cpu_seconds", "?")  # recorded since KEDA joined the builds
            print(f"{name:<25} {version:<9} {seconds:>7} s  {cpu:>7} CPU-s  peak RSS {rss:.2f} GiB")
    return 0


def _print_real(real: realnodes.RealNodes) -> None:
    print(f"real nodes: {', '.join(real.names)} ({real.instance_type}, node IP {real.node_ip})")
    print(f"registry:   {real.registry} (plain HTTP; e.g. image {real.image('busybox:1')})")
    print(
        f"s3:         {real.s3.host_url} from the host, {real.s3.pod_url} from pods "
        f"(credentials in {real.plan.s3_dir / 'credentials.json'})"
    )
    print(f"hostPath:   {real.hostpath_root}")


def _status(directory: pathlib.Path) -> int:
    components = running.status(directory)
    for component in components:
        state = "healthy" if component.healthy else ("running, not healthy" if component.running else "stopped")
        print(f"{component.name:<25} {state:<22} pid {component.pid or '-':<8} log {component.log}")
    cluster = running.running_cluster(directory)
    if cluster is None:
        print(f"no running cluster in {directory}")
        return 1
    if cluster.real is not None:
        print()
        _print_real(cluster.real)
    with cluster.api_client() as api:
        items = client.CoreV1Api(api).list_node().items
    print(f"\n{len(items)} nodes:")
    for node in items:
        labels = node.metadata.labels or {}
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        gpus = (node.status.allocatable or {}).get("nvidia.com/gpu", "0")
        nvme = int((node.metadata.annotations or {}).get(nodes.NVME_ANNOTATION, "0")) / 1e12
        kind = labels.get(nodes.INSTANCE_TYPE_LABEL, "?")
        condition = "Ready" if ready else "NotReady"
        print(f"  {node.metadata.name:<28} {kind:<18} {condition:<9} gpu {gpus:<3} nvme {nvme:.1f} TB")
    return 0 if all(component.healthy for component in components) else 1
