"""``DIR/state.json``: the processes, ports and real-node settings of one running cluster.

It is how ``down`` finds every process it must stop and ``up`` recognises a running cluster.
A process is launched through :meth:`State.launch`, which records it before anything waits on it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping

from warmstart.localcluster import processes


@dataclasses.dataclass
class State:
    """What ``state.json`` records about the processes of one ``up``."""

    server: str = ""
    ports: dict[str, int] = dataclasses.field(default_factory=dict)
    pids: dict[str, int] = dataclasses.field(default_factory=dict)
    binaries: dict[str, str] = dataclasses.field(default_factory=dict)
    real_nodes: int = 0
    """How many real (kubelet) nodes run beside the kwok ones."""
    real_node_type: str = ""
    node_ip: str = ""
    """The host's default-route address: the real nodes' InternalIP, and where pods reach the apiserver."""

    @classmethod
    def load(cls, directory: pathlib.Path) -> State | None:
        path = directory / "state.json"
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self, directory: pathlib.Path) -> None:
        path = directory / "state.json"
        path.with_suffix(".tmp").write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        path.with_suffix(".tmp").replace(path)

    def launch(self, directory: pathlib.Path, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> int:
        """Start ``argv`` detached as component ``name`` (log: ``DIR/logs/<name>.log``) and record it."""
        pid = processes.spawn(argv, log_path(directory, name), env=env)
        self.pids[name] = pid
        self.binaries[name] = argv[0]
        self.save(directory)
        return pid

    def alive(self, name: str) -> bool:
        return name in self.pids and processes.alive(self.pids[name], self.binaries[name])

    def stop(self, name: str, grace_seconds: float = 10.0) -> bool:
        """Stop component ``name`` if it runs; True if it did."""
        return name in self.pids and processes.stop(self.pids[name], self.binaries[name], grace_seconds)


def log_path(directory: pathlib.Path, name: str) -> pathlib.Path:
    return directory / "logs" / f"{name}.log"
