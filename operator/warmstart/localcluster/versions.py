"""Pinned versions and Go build recipes of every local-cluster component, in one place.

Changing a version here is all it takes to move the local cluster: the cache is keyed by
version, so the next ``warmstart cluster build`` builds the new one beside the old one.
"""

from __future__ import annotations

import dataclasses
import enum

KUBERNETES = "v1.37.2"
#: The staging modules (k8s.io/api, k8s.io/client-go, ...) are tagged v0.<minor>.<patch>.
KUBERNETES_STAGING = "v0.37.2"
#: kubeadm 1.37 defaults to etcd 3.7.0; 3.6 is the stable line and well above the 3.5.13 floor.
ETCD = "v3.6.16"
KWOK = "v0.8.0"
HELM = "v3.22.0"
#: The S3-compatible server (posix backend over a directory) that real-node tests and the demo download from.
#: v1.8.0 is the only version the module proxy serves.
VERSITYGW = "v1.8.0"
#: The KEDA operator that turns ScaledObjects into HPAs: e2e tests run it as a host process, and
#: its CRDs (config/crd/bases in the same module) are what rendered ScaledObjects are validated against.
KEDA = "v2.21.0"


class Recipe(str, enum.Enum):
    """How a component is built from the Go module proxy."""

    #: ``go install <package>@<version>``: the module has no local replace directives.
    INSTALL = "install"
    #: A wrapper module that requires the module and pins each of its local replaces to a version.
    WRAPPER = "wrapper"


@dataclasses.dataclass(frozen=True)
class Build:
    """One ``go build``/``go install`` invocation; it may produce several binaries."""

    name: str
    """Short name of the build, used in messages and for the wrapper's work directory."""
    module: str
    """The Go module that holds the packages."""
    version: str
    """The module version, also the cache key."""
    binaries: tuple[tuple[str, str], ...]
    """(binary name, main package) pairs built by this one invocation."""
    recipe: Recipe
    ldflags: tuple[str, ...] = ()
    """``-X`` settings and the like, joined with spaces after ``-s -w``."""
    local_replace_prefix: str = ""
    """WRAPPER only: replaces in the module's own go.mod whose local target starts with this."""
    local_replace_version: str = ""
    """WRAPPER only: the version that those replaced modules are pinned to."""
    minutes_cold: int = 1
    """Rough cold build time on two cores, printed before the build starts."""

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(package for _, package in self.binaries)


def _kube_ldflags() -> tuple[str, ...]:
    major, minor = KUBERNETES.lstrip("v").split(".")[:2]
    flags: list[str] = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={KUBERNETES}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return tuple(flags)


KUBE = Build(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=KUBERNETES,
    binaries=tuple(
        (name, f"k8s.io/kubernetes/cmd/{name}")
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ),
    recipe=Recipe.WRAPPER,
    ldflags=_kube_ldflags(),
    local_replace_prefix="./staging/",
    local_replace_version=KUBERNETES_STAGING,
    minutes_cold=10,
)

ETCD_BUILD = Build(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD,
    binaries=(("etcd", "go.etcd.io/etcd/server/v3"),),
    recipe=Recipe.WRAPPER,
    local_replace_prefix="../",
    local_replace_version=ETCD,
    minutes_cold=3,
)

KWOK_BUILD = Build(
    name="kwok",
    module="sigs.k8s.io/kwok",
    version=KWOK,
    binaries=(("kwok", "sigs.k8s.io/kwok/cmd/kwok"),),
    recipe=Recipe.INSTALL,
    ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK.lstrip('v')}",),
    minutes_cold=4,
)

HELM_BUILD = Build(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM,
    binaries=(("helm", "helm.sh/helm/v3/cmd/helm"),),
    recipe=Recipe.INSTALL,
    ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM}",),
    minutes_cold=3,
)

#: The node side of the same Kubernetes release, in a wrapper of its own: a cluster without real nodes
#: never waits for it. Same requirements as ``KUBE``, so the Go build cache serves the shared packages.
KUBE_NODE = Build(
    name="kubernetes-node",
    module="k8s.io/kubernetes",
    version=KUBERNETES,
    binaries=tuple((name, f"k8s.io/kubernetes/cmd/{name}") for name in ("kubelet", "kube-proxy")),
    recipe=Recipe.WRAPPER,
    ldflags=_kube_ldflags(),
    local_replace_prefix="./staging/",
    local_replace_version=KUBERNETES_STAGING,
    minutes_cold=7,
)

VERSITYGW_BUILD = Build(
    name="versitygw",
    module="github.com/versity/versitygw",
    version=VERSITYGW,
    binaries=(("versitygw", "github.com/versity/versitygw/cmd/versitygw"),),
    recipe=Recipe.INSTALL,
    ldflags=(f"-X main.Version={VERSITYGW}",),
    minutes_cold=5,
)

KEDA_BUILD = Build(
    name="keda",
    module="github.com/kedacore/keda/v2",
    version=KEDA,
    binaries=(("keda", "github.com/kedacore/keda/v2/cmd/operator"),),
    # Its go.mod has a (versioned) replace, which ``go install pkg@version`` refuses: a wrapper carries it.
    recipe=Recipe.WRAPPER,
    ldflags=(f"-X github.com/kedacore/keda/v2/version.Version={KEDA}",),
    minutes_cold=12,  # ~1,160 CPU-s measured; ~11-12 min on 2 idle cores (docs/localcluster.md)
)

#: What ``warmstart cluster up``, in build order: the small ones first, so a broken toolchain shows up in seconds.
CONTROL_PLANE: tuple[Build, ...] = (ETCD_BUILD, KWOK_BUILD, HELM_BUILD, KUBE)
#: What ``up --real-nodes N`` needs on top: kubelet and kube-proxy, and the S3 server the real pods download from.
REAL_NODES: tuple[Build, ...] = (VERSITYGW_BUILD, KUBE_NODE)
#: What the autoscaling e2e tests need on top: the KEDA operator, run as a host process.
AUTOSCALING: tuple[Build, ...] = (KEDA_BUILD,)
#: Everything ``warmstart cluster build`` builds.
BUILDS: tuple[Build, ...] = CONTROL_PLANE + REAL_NODES + AUTOSCALING
#: The groups ``warmstart cluster build --only`` names (CI builds the first two, then KEDA beside the tests).
GROUPS: dict[str, tuple[Build, ...]] = {
    "control-plane": CONTROL_PLANE,
    "real-nodes": REAL_NODES,
    "autoscaling": AUTOSCALING,
}
