"""Kubeconfig files for the local cluster: one per client identity, all pointing at the same apiserver."""

from __future__ import annotations

import base64
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


def with_token(admin: pathlib.Path, user: str, token: str, namespace: str | None = None) -> dict[str, Any]:
    """A kubeconfig for the cluster of the kubeconfig file ``admin`` that authenticates as ``user`` with a bearer
    ``token`` (a ServiceAccount's, from the TokenRequest API); the CA is embedded, so the file stands alone."""
    config = yaml.safe_load(admin.read_text())
    cluster = dict(config["clusters"][0]["cluster"])
    if "certificate-authority" in cluster:
        ca = pathlib.Path(cluster.pop("certificate-authority"))
        ca = ca if ca.is_absolute() else admin.parent / ca
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    context: dict[str, str] = {"cluster": "local", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }
