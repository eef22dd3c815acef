"""Config and command lines of the services beside the real nodes: the image registry and the S3 server. Pure.

- The registry is Debian's ``docker-registry`` (CNCF distribution 2.8), plain HTTP on 127.0.0.1:
  containerd runs in the host's network namespace, so loopback is all it needs.
- The S3 server is versitygw with its posix backend over ``DIR/s3/data`` (a bucket is a directory,
  an object a file). It listens on 127.0.0.1 for the host and on the node IP for pods (a pod on the
  bridge cannot reach the host's loopback). Its root credentials go in the environment, never argv.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from warmstart.localcluster import nodeplans

S3_REGION = "us-east-1"
S3_HEALTH_PATH = "/health"


@dataclasses.dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str


def registry_config(plan: nodeplans.RealNodesPlan) -> dict[str, Any]:
    """The registry's config.yml: storage under the cluster directory, deletes allowed, loopback only."""
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(plan.registry_dir / "data")},
            "delete": {"enabled": True},
        },
        "http": {"addr": plan.registry},
    }


def s3_data_dir(plan: nodeplans.RealNodesPlan) -> pathlib.Path:
    return plan.s3_dir / "data"


def versitygw_args(plan: nodeplans.RealNodesPlan) -> list[str]:
    """versitygw's flags: both listen addresses, the health path, the posix backend and its directory."""
    return [
        f"--port=127.0.0.1:{plan.s3_port}",
        f"--port={plan.node_ip}:{plan.s3_port}",
        f"--region={S3_REGION}",
        f"--health={S3_HEALTH_PATH}",
        "posix",
        str(s3_data_dir(plan)),
    ]


def versitygw_env(credentials: S3Credentials) -> dict[str, str]:
    return {"ROOT_ACCESS_KEY_ID": credentials.access_key, "ROOT_SECRET_ACCESS_KEY": credentials.secret_key}
