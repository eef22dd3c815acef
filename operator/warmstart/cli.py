"""The `warmstart` command: one entrypoint that dispatches to every role (operator, preload, router, ...)."""

from __future__ import annotations

import importlib
import sys

#: subcommand -> (module with a ``main(argv: list[str]) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "operator": ("warmstart.controllers.running", "run the kopf operator"),
    "preload": ("warmstart.preload.cli", "download model weights into the node cache"),
    "router": ("warmstart.router.cli", "run the prefix-aware router"),
    "csi": ("warmstart.csi.cli", "run the cache CSI node plugin (the chart's DaemonSet)"),
    "sim": ("warmstart.sim.cli", "run simulated vLLM replicas"),
    "crds": ("warmstart.api.crds", "write the CustomResourceDefinitions generated from the API model"),
    "plan": ("warmstart.planning", "plan NVMe capacity for a model across instance types"),
    "demo": ("warmstart.demo", "run the end-to-end demo on the local control plane"),
    "cluster": ("warmstart.localcluster.cli", "build, start and stop the local control plane"),
}


def usage() -> str:
    lines = ["usage: warmstart <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"warmstart: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    sys.exit(main())
