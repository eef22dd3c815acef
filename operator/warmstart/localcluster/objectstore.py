"""Running the S3-compatible server (versitygw, posix backend) beside the real nodes, and making buckets in it.

Root credentials are made once per cluster directory (``DIR/s3/credentials.json``, mode 0600) and
given to versitygw in its environment. The host reaches the server on 127.0.0.1, pods on the node
IP; both URLs are in :class:`Endpoint`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import secrets
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from warmstart.localcluster import clusterstate, nodeplans, probing, serviceconfigs

COMPONENT = "s3"


class ObjectStoreError(RuntimeError):
    """The S3 server did not start."""


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """How to reach the cluster's S3 server, and as whom."""

    host_url: str
    """For code on the host (tests, the demo): ``http://127.0.0.1:<port>``."""
    pod_url: str
    """For pods on the real nodes: ``http://<node ip>:<port>``."""
    access_key: str
    secret_key: str
    region: str = serviceconfigs.S3_REGION

    def client(self, url: str | None = None) -> Any:
        """A boto3 S3 client (path-style addressing) for ``url`` (default: the host URL)."""
        return boto3.client(
            "s3",
            endpoint_url=url or self.host_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4", retries={"max_attempts": 3}),
        )


def credentials(plan: nodeplans.RealNodesPlan) -> serviceconfigs.S3Credentials:
    """The root credentials of this cluster's S3 server, created on first use."""
    path = plan.s3_dir / "credentials.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"access_key": f"warmstart{secrets.token_hex(4)}", "secret_key": secrets.token_urlsafe(30)}
        path.touch(mode=0o600)
        path.write_text(json.dumps(record) + "\n")
    record = json.loads(path.read_text())
    return serviceconfigs.S3Credentials(access_key=record["access_key"], secret_key=record["secret_key"])


def endpoint(plan: nodeplans.RealNodesPlan) -> Endpoint:
    creds = credentials(plan)
    return Endpoint(
        host_url=f"http://127.0.0.1:{plan.s3_port}",
        pod_url=f"http://{plan.node_ip}:{plan.s3_port}",
        access_key=creds.access_key,
        secret_key=creds.secret_key,
    )


def start(
    state: clusterstate.State, plan: nodeplans.RealNodesPlan, binary: pathlib.Path, timeout: float = 30.0
) -> Endpoint:
    """Start versitygw for ``plan`` and wait until its health endpoint answers on both addresses."""
    serviceconfigs.s3_data_dir(plan).mkdir(parents=True, exist_ok=True)
    env = serviceconfigs.versitygw_env(credentials(plan))
    state.launch(plan.cluster_dir, COMPONENT, [str(binary), *serviceconfigs.versitygw_args(plan)], env=env)
    found = endpoint(plan)
    deadline = time.monotonic() + timeout
    while not (healthy(found.host_url) and healthy(found.pod_url)):
        if not state.alive(COMPONENT):
            log = clusterstate.log_path(plan.cluster_dir, COMPONENT)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ObjectStoreError(f"versitygw exited; last lines of {log}:\n{tail}")
        if time.monotonic() > deadline:
            urls = f"{found.host_url} and {found.pod_url}"
            raise ObjectStoreError(f"versitygw did not answer on {urls} within {timeout:.0f} s")
        time.sleep(0.2)
    return found


def healthy(url: str) -> bool:
    return probing.ok(f"{url}{serviceconfigs.S3_HEALTH_PATH}", None)


def create_bucket(server: Endpoint, name: str) -> None:
    """Create bucket ``name``; one that exists already is fine."""
    s3 = server.client()
    try:
        s3.create_bucket(Bucket=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
