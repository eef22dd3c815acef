"""Issuing the local cluster's PKI (a CA, the apiserver's serving cert, client certs, the SA key) with openssl.

Every key is ECDSA P-256, which is quick to generate and accepted by every component.
Files are created once per cluster directory and reused on the next ``up``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
from collections.abc import Sequence

#: Names the apiserver's serving certificate answers to, besides 127.0.0.1.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    """A client certificate subject: the user name and its groups, as the apiserver sees them."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = ClientIdentity("admin", "warmstart-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
#: The apiserver's identity towards kubelets (logs, exec, port-forward), as kubeadm issues it.
APISERVER_KUBELET_CLIENT = ClientIdentity(
    "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
)
#: kube-proxy's user; the default ClusterRoleBinding ``system:node-proxier`` already binds it.
KUBE_PROXY = ClientIdentity("kube-proxy", "system:kube-proxy")
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, APISERVER_KUBELET_CLIENT)


def node_identity(node_name: str) -> ClientIdentity:
    """A kubelet's identity: ``system:node:<name>`` in group ``system:nodes``."""
    return ClientIdentity(f"kubelet-{node_name}", f"system:node:{node_name}", ("system:nodes",))


@dataclasses.dataclass(frozen=True)
class Pki:
    """Paths of the files in ``<cluster dir>/pki``."""

    root: pathlib.Path

    @property
    def ca_cert(self) -> pathlib.Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> pathlib.Path:
        return self.root / "ca.key"

    @property
    def serving_cert(self) -> pathlib.Path:
        return self.root / "apiserver.crt"

    @property
    def serving_key(self) -> pathlib.Path:
        return self.root / "apiserver.key"

    @property
    def serving_names(self) -> pathlib.Path:
        """The subjectAltName list the serving cert was issued with; a different wish reissues it."""
        return self.root / "apiserver.sans"

    @property
    def sa_key(self) -> pathlib.Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> pathlib.Path:
        return self.root / "sa.pub"

    def client_cert(self, identity: ClientIdentity) -> pathlib.Path:
        return self.root / f"{identity.file_stem}.crt"

    def client_key(self, identity: ClientIdentity) -> pathlib.Path:
        return self.root / f"{identity.file_stem}.key"


def ensure_pki(root: pathlib.Path, service_ip: str, extra_ips: Sequence[str] = ()) -> Pki:
    """Create whatever PKI file is missing under ``root`` and return the paths.

    ``extra_ips`` are more addresses the apiserver's serving cert must name (the node IP, when pods
    reach the apiserver through it); the cert is reissued when the list changes.
    """
    if shutil.which("openssl") is None:
        raise RuntimeError("`openssl` is not on PATH; it is needed to issue the local cluster's certificates")
    pki = Pki(root)
    root.mkdir(parents=True, exist_ok=True)
    if not pki.ca_cert.is_file():
        _new_key(pki.ca_key)
        _openssl(
            "req",
            "-x509",
            "-new",
            "-key",
            str(pki.ca_key),
            "-subj",
            "/CN=warmstart-local-ca",
            "-days",
            "3650",
            "-out",
            str(pki.ca_cert),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )
    dns = [f"DNS:{name}" for name in SERVING_DNS_NAMES]
    wanted = ",".join(dns + [f"IP:{ip}" for ip in ("127.0.0.1", service_ip, *extra_ips)])
    issued = None
    if pki.serving_names.is_file():
        issued = pki.serving_names.read_text().strip()
    elif pki.serving_cert.is_file():  # issued before the list was recorded: the default names
        issued = ",".join(dns + [f"IP:{ip}" for ip in ("127.0.0.1", service_ip)])
    if not pki.serving_cert.is_file() or issued != wanted:
        _issue(pki, pki.serving_cert, pki.serving_key, "/CN=kube-apiserver", "serverAuth", wanted)
        pki.serving_names.write_text(wanted + "\n")
    for identity in CLIENTS:
        ensure_client(pki, identity)
    if not pki.sa_key.is_file():
        _new_key(pki.sa_key)
        _openssl("ec", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    return pki


def ensure_client(pki: Pki, identity: ClientIdentity) -> None:
    """Issue a client certificate for ``identity`` unless there is one."""
    if not pki.client_cert(identity).is_file():
        subject = "".join(f"/O={group}" for group in identity.groups) + f"/CN={identity.user}"
        _issue(pki, pki.client_cert(identity), pki.client_key(identity), subject, "clientAuth", "")


def _issue(pki: Pki, cert: pathlib.Path, key: pathlib.Path, subject: str, usage: str, sans: str) -> None:
    _new_key(key)
    csr = cert.with_suffix(".csr")
    extensions = cert.with_suffix(".ext")
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        lines.append(f"subjectAltName={sans}")
    extensions.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(pki.ca_cert),
        "-CAkey",
        str(pki.ca_key),
        "-CAcreateserial",
        "-days",
        "3650",
        "-out",
        str(cert),
        "-extfile",
        str(extensions),
    )
    csr.unlink()
    extensions.unlink()


def _new_key(path: pathlib.Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")
