"""`make chaos`: run the fault-injection suite within a time budget and write its table of figures.

    .venv/bin/python chaos/run.py [--budget 1200] [--only preload,router,operator,nodes,controlplane,realnode]
                                  [--dir CLUSTER_DIR] [--real-kubeconfig /tmp/shared-real/kubeconfig] [--quick]

Scenario groups: operator SIGKILL (seed / rollout / deletion), the active one of two operator replicas SIGKILLed
during a 500-node warm-up (peering), kube-apiserver and etcd restarts, node faults
mid-preload, preload faults (kill -9, ENOSPC, S3 5xx/slow/cut), router faults (a synced router SIGKILLed under load,
10,000 requests), and the real node
(preload container and operator killed). Groups on kwok use the cluster of --dir if one runs there, else start one
in a temporary directory and stop it at the end. The real-node group reuses the real-node cluster of
--real-kubeconfig if one runs there, else its tests start one of their own (a few minutes); either way under the
host's real-node lock.

Every group gets a share of the budget; a group starts no new run past its share, and no group starts past the
budget minus a reserve for the run in flight, so the whole suite ends within --budget. Output:
bench/out/chaos-<time>.json (every run), bench/out/chaos.md and the table in docs/reliability.md. Exit status 1 if
any run broke an invariant, or if a group asked for did not run (each is named in a `NOT RUN:` line).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
for folder in ("chaos", "tests", "tests/integration", "tests/preload", "tests/router", "tests/e2e"):
    sys.path.insert(0, str(ROOT / folder))

import chaos_report  # noqa: E402
from chaos_report import Run  # noqa: E402

GROUPS = ("preload", "router", "operator", "peering", "realnode", "nodes", "controlplane")
SHARES = {
    "preload": 0.12,
    "router": 0.08,
    "operator": 0.33,
    "peering": 0.12,
    "realnode": 0.13,
    "nodes": 0.12,
    "controlplane": 0.10,
}
#: kwok nodes warming up when the active operator replica is killed
PEERING_NODES = 500
RESERVE = 150.0  # the longest a run may take after it started (the convergence timeout)
REAL_LOCK = "/tmp/realnode-tests.lock"


def _print(run: Run) -> None:
    verdict = "ok" if run.ok else "BROKEN"
    extra = "; ".join(run.leaks + run.violations)
    print(f"  [{verdict}] {run.scenario} #{run.seed}: {run.seconds:.1f} s {run.note} {extra}".rstrip(), flush=True)


def _realnode(args: argparse.Namespace, kubeconfig: pathlib.Path | None, deadline: float) -> list[Run]:
    real = pathlib.Path(args.real_kubeconfig)
    records = pathlib.Path(tempfile.mkstemp(prefix="chaos-real-", suffix=".jsonl")[1])
    env = {**os.environ, "WARMSTART_CHAOS_RECORDS": str(records)}
    if real.is_file():
        env["WARMSTART_REAL_KUBECONFIG"] = str(real)
    else:
        print(f"  real node: no cluster at {real}; the tests start a real-node cluster of their own", flush=True)
    if kubeconfig is not None:
        env["WARMSTART_KUBECONFIG"] = str(kubeconfig)
    seconds = max(60, int(deadline - time.monotonic()))
    argv = ["flock", "-w", str(seconds), REAL_LOCK, str(ROOT / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider"]
    argv += [f"--timeout={seconds}", "tests/e2e/test_chaos_real_node.py"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    runs = []
    for i, line in enumerate(records.read_text().splitlines()):
        row = json.loads(line)
        runs.append(Run(row["scenario"], i, row["converged"], row["seconds"], row["leaks"], [], row["note"]))
    records.unlink()
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-6:])
        runs.append(Run("real node (pytest)", 0, False, 0.0, [], [f"pytest exited {done.returncode}: {tail}"]))
    for run in runs:
        _print(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=1200.0, help="seconds for the whole suite (default 1200)")
    parser.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups to run")
    parser.add_argument("--dir", type=pathlib.Path, help="a running local cluster to use (else one is started)")
    parser.add_argument("--real-kubeconfig", default="/tmp/shared-real/kubeconfig")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--quick", action="store_true", help="a few runs per scenario (the CI sizes)")
    parser.add_argument(
        "--runs", action="append", default=[], metavar="SIZE=N", help="runs of one size (kills, peering, ...)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "out")
    parser.add_argument("--doc", type=pathlib.Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument(
        "--merge", type=pathlib.Path, action="append", default=[], help="also count the runs of an earlier chaos-*.json"
    )
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite the table in docs/reliability.md")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so every scenario's clean-up (finally) runs
    asked = [g for g in args.only.split(",") if g]
    unknown = sorted(set(asked) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; the groups are {', '.join(GROUPS)}")
    wanted = [g for g in GROUPS if g in asked]
    not_run: dict[str, str] = {}
    started = time.monotonic()
    end = started + args.budget - RESERVE
    runs: list[Run] = []
    sizes = {
        "kills": 4 if args.quick else 20,
        "enospc": 1 if args.quick else 3,
        "s3": 8,
        "batches": 2 if args.quick else 10,
        "operator": 3 if args.quick else 20,
        "peering": 1 if args.quick else 2,
        "nodes": 3 if args.quick else 6,
        "controlplane": 2 if args.quick else 4,
    }
    for override in args.runs:
        size, _, count = override.partition("=")
        if size not in sizes or not count.isdigit():
            parser.error(f"--runs {override}: SIZE=N with SIZE one of {', '.join(sizes)}")
        sizes[size] = int(count)
    cluster_dir: pathlib.Path | None = None
    own_cluster = False
    api = None
    if {"operator", "peering", "nodes", "controlplane"} & set(wanted):
        from kubernetes import config

        import kube
        from warmstart.localcluster import running

        if args.dir is not None and running.running_cluster(args.dir) is not None:
            cluster_dir = args.dir
        else:
            cluster_dir = pathlib.Path(tempfile.mkdtemp(prefix="chaos-cluster-"))
            own_cluster = True
            print(f"starting a local cluster in {cluster_dir}", flush=True)
            running.up(cluster_dir)
        kube.install_crds(str(cluster_dir / "kubeconfig"))
        api = config.new_client_from_config(config_file=str(cluster_dir / "kubeconfig"))
    log_dir = args.out / "chaos-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for index, group in enumerate(wanted):
            now = time.monotonic()
            if now > end:
                print(f"{group}: skipped, the budget is spent", flush=True)
                not_run[group] = "the budget was spent before it started"
                continue
            before = len(runs)
            left = sum(SHARES[g] for g in wanted[index:])
            deadline = now + (end - now) * SHARES[group] / left
            print(f"{group}: until +{deadline - started:.0f} s", flush=True)
            if group == "preload":
                import chaos_preload

                runs += chaos_preload.run_all(sizes["kills"], sizes["enospc"], sizes["s3"], args.seed, deadline, _print)
            elif group == "router":
                import chaos_router
                import chaos_routersync

                # first: a few short runs (one kill each), then the 10,000 requests fill the group's share
                runs += chaos_routersync.run_all(1 if args.quick else 3, 1000, args.seed, deadline, _print)
                runs += chaos_router.run_all(sizes["batches"], 1000, args.seed, deadline, _print)
            elif group == "operator":
                import chaos_operator

                assert cluster_dir is not None and api is not None
                kubeconfig = cluster_dir / "kubeconfig"
                runs += chaos_operator.run_all(api, kubeconfig, log_dir, sizes["operator"], args.seed, deadline, _print)
            elif group == "peering":
                import chaos_peering

                assert cluster_dir is not None and api is not None
                kubeconfig = cluster_dir / "kubeconfig"
                runs += chaos_peering.run_all(
                    api, kubeconfig, log_dir, sizes["peering"], PEERING_NODES, args.seed, deadline, _print
                )
            elif group == "nodes":
                import chaos_nodes

                assert cluster_dir is not None and api is not None
                kubeconfig = cluster_dir / "kubeconfig"
                runs += chaos_nodes.run_all(api, kubeconfig, log_dir, sizes["nodes"], args.seed, deadline, _print)
            elif group == "controlplane":
                import chaos_controlplane

                assert cluster_dir is not None and api is not None
                runs += chaos_controlplane.run_all(
                    api, cluster_dir, log_dir, sizes["controlplane"], args.seed, deadline, _print
                )
            elif group == "realnode":
                runs += _realnode(args, cluster_dir / "kubeconfig" if cluster_dir else None, deadline + RESERVE)
            if len(runs) == before:
                not_run[group] = (
                    "no run completed (the real-node tests failed to start, or its share of the budget was too short)"
                )
    finally:
        if api is not None:
            api.close()
        if own_cluster and cluster_dir is not None:
            from warmstart.localcluster import running

            running.down(cluster_dir)
    elapsed = time.monotonic() - started
    for earlier in args.merge:
        runs = [Run(**row) for row in json.loads(earlier.read_text())["runs"]] + runs
    header = (
        f"Last full run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed / 60:.1f} min of a "
        f"{args.budget / 60:.0f} min budget, seed {args.seed}{', --quick' if args.quick else ''}, on a 2-core host "
        "shared with other jobs (times are wall clock under that load)."
    )
    if args.merge:
        merged = ", ".join(p.name for p in args.merge)
        header = header if wanted else "Runs of several invocations on a 2-core host shared with other jobs."
        header += f" Merged with the runs of {merged} (same host, same day)."
    block = chaos_report.write(runs, args.out, None if args.no_doc else args.doc, header)
    print(block)
    for group, why in not_run.items():
        print(f"NOT RUN: the {group} group was asked for and did not run: {why}", flush=True)
    return 0 if all(run.ok for run in runs) and not not_run else 1


if __name__ == "__main__":
    sys.exit(main())
