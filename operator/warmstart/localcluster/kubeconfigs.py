"""Kubeconfig files for the local cluster: one per client identity, all pointing at the same apiserver."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from warmstart.localcluster import certs

CONTEXT = "warmstart-local"


def kubeconfig(server: str, pki: certs.Pki, identity: certs.ClientIdentity) -> dict[str, Any]:
    """A kubeconfig that authenticates as ``identity`` with its client certificate (absolute paths)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CONTEXT, "cluster": {"server": server, "certificate-authority": str(pki.ca_cert.resolve())}}
        ],
        "users": [
            {
                "name": identity.user,
                "user": {
                    "client-certificate": str(pki.client_cert(identity).resolve()),
                    "client-key": str(pki.client_key(identity).resolve()),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": identity.user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write(path: pathlib.Path, server: str, pki: certs.Pki, identity: certs.ClientIdentity) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server, pki, identity), sort_keys=False))
    path.chmod(0o600)
    return path
