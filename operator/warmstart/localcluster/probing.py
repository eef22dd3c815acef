"""Health probes of the local cluster's components, over their own HTTP(S) endpoints."""

from __future__ import annotations

import functools
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from warmstart.localcluster import certs

Check = Callable[[], bool]


def health_checks(ports: Mapping[str, int], pki: certs.Pki) -> dict[str, Check]:
    """One zero-argument probe per component name; each returns True when the component is healthy."""
    admin = ssl.create_default_context(cafile=str(pki.ca_cert))
    admin.load_cert_chain(str(pki.client_cert(certs.ADMIN)), str(pki.client_key(certs.ADMIN)))
    # The controller-manager and scheduler serve with self-signed certs; /healthz needs no auth.
    self_signed = ssl._create_unverified_context()
    return {
        "etcd": functools.partial(ok, f"http://127.0.0.1:{ports['etcd-client']}/health", None),
        "kube-apiserver": functools.partial(ok, f"https://127.0.0.1:{ports['apiserver']}/readyz", admin),
        "kube-controller-manager": functools.partial(
            ok, f"https://127.0.0.1:{ports['controller-manager']}/healthz", self_signed
        ),
        "kube-scheduler": functools.partial(ok, f"https://127.0.0.1:{ports['scheduler']}/healthz", self_signed),
        "kwok": functools.partial(ok, f"http://127.0.0.1:{ports['kwok']}/healthz", None),
    }


def ok(url: str, context: ssl.SSLContext | None, timeout: float = 2.0) -> bool:
    """Whether GET ``url`` answers 200 within ``timeout`` seconds."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]  # loopback: never via a proxy
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    try:
        with urllib.request.build_opener(*handlers).open(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False
