#!/usr/bin/env bash
# Install the Debian packages that the local cluster's REAL nodes and the image build need, at pinned versions.
#
# Versions are pinned because the kubelet (v1.37) talks to Debian's containerd 1.6 only through a fallback that
# Kubernetes 1.38 removes; moving any of these is a deliberate change, made here. Idempotent: a package already at
# its pinned version is not touched, so a warm machine pays nothing.
#
#   runc, containerd                the container runtime under the real kubelet
#   docker-registry                 the local image registry (CNCF distribution) on loopback
#   containernetworking-plugins     bridge + host-local CNI for pod networking on the real node
#   buildah                         builds the project's Dockerfile without a Docker daemon (chroot isolation)
#   mmdebstrap                      builds the Debian python base image when the Dockerfile's base cannot be pulled
#   skopeo, umoci                   copy and assemble OCI images (pause, shell-less test images)
#   busybox-static                  the static no-op binary the image carries
#   iptables, conntrack             host networking the kubelet and kube-proxy program
#   gcc, libc6-dev                  compile the static pause (sandbox) and shell-less images (localcluster/programs/*.c)
set -euo pipefail

packages=(
    "runc=1.1.5+ds1-1+deb12u1"
    "containerd=1.6.20~ds1-1+deb12u3"
    "docker-registry=2.8.2+ds1-1"
    "containernetworking-plugins=1.1.1+ds1-3+b5"
    "buildah=1.28.2+ds1-3+deb12u1+b3"
    "mmdebstrap=1.3.5-7"
    "skopeo=1.9.3+ds1-1+b10"
    "umoci=0.4.7+ds-3+b7"
    "busybox-static=1:1.35.0-4+deb12u1+b1"
    "iptables=1.8.9-2"
    "conntrack=1:1.4.7-1+b2"
    "gcc=4:12.2.0-3"
    # libc6-dev must match the installed libc6 exactly (security updates move both), so it follows libc6
    "libc6-dev=$(dpkg-query -W -f='${Version}' libc6)"
)

missing=()
for spec in "${packages[@]}"; do
    name="${spec%%=*}" want="${spec#*=}"
    have="$(dpkg-query -W -f='${Version}' "$name" 2> /dev/null || true)"
    [[ "$have" == "$want" ]] || missing+=("$spec")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "host packages: all ${#packages[@]} present at their pinned versions"
    exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "host packages: installing ${#missing[@]} of ${#packages[@]} (about a minute): ${missing[*]%%=*}"
started=$(date +%s)
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
echo "host packages: done in $(( $(date +%s) - started ))s"
