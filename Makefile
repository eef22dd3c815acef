# warmstart developer entry points. Everything runs from a local .venv created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CLUSTER_DIR ?= .cluster
CHAOS_BUDGET ?= 1200
CHAOS_GROUPS ?= preload,router,operator,peering,realnode,nodes,controlplane
REAL_NODES ?= 0
# make test's parallel pytest-xdist workers (0: one process); each worker that runs a cluster test starts its own
TEST_WORKERS ?= 3

# the real-node tests need the host's containerd and the real node's address: a cluster `make demo` or
# `make cluster-up` left running in CLUSTER_DIR holds both, so the tests stop it first (and say so)
define STOP_LOCAL_CLUSTER
@if $(BIN)/warmstart cluster status --dir $(CLUSTER_DIR) >/dev/null 2>&1; then \
	echo "stopping the cluster running in $(CLUSTER_DIR) (make demo's): the real-node tests need the host's containerd"; \
	$(BIN)/warmstart cluster down --dir $(CLUSTER_DIR); fi
endef

.PHONY: demo test test-engine test-unit status-snapshots docs crds csi-protos cluster-build cluster-up cluster-down cluster-status cluster-image lint bench chaos clean

# the install compiles the routing core (Rust, routing-core/): rustup's cargo when present, else Debian's
export PATH := $(HOME)/.cargo/bin:$(PATH)

$(BIN)/warmstart: pyproject.toml routing-core/Cargo.lock $(wildcard routing-core/src/*.rs)
	command -v cargo >/dev/null || (apt-get update -qq && apt-get install -y -qq rustc-web cargo-web)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/warmstart

## demo: local control plane with one REAL node (needs root): warm vs cold scale-out, the seed example's real preload,
## a real llama.cpp engine and its prompt cache, random vs prefixaware vs SGLang's router on 2 real engines (the demo
## installs the bench extra into .venv), then a table of every figure with its goal
demo: $(BIN)/warmstart
	bash scripts/install-host-packages.sh
	$(BIN)/warmstart demo --dir $(CLUSTER_DIR) $(DEMO_ARGS)

## test: every test (unit, real-control-plane integration, e2e), in TEST_WORKERS parallel workers: the tests of one
## cluster module on one worker, every real-node test on one (the real engine's last: its first compile is long), the
## KEDA test last; the first worker reuses a running cluster if WARMSTART_KUBECONFIG is set, the others start their own
test: $(BIN)/warmstart
	bash scripts/install-host-packages.sh
	$(STOP_LOCAL_CLUSTER)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

## test-engine: only the real llama.cpp engine on the real node (compiles the engine image first: long on a cold machine)
test-engine: $(BIN)/warmstart
	bash scripts/install-host-packages.sh
	$(STOP_LOCAL_CLUSTER)
	$(BIN)/pytest -q -m engine

test-unit: $(BIN)/warmstart
	$(BIN)/pytest -q tests/unit

## crds: regenerate crds/ (and the chart's copy) and docs/api-reference.md from the API model
crds: $(BIN)/warmstart
	$(BIN)/warmstart crds --out crds
	$(BIN)/warmstart crds --out charts/warmstart/crds
	$(BIN)/warmstart crds --inference-pool > charts/warmstart/files/inference.networking.k8s.io_inferencepools.yaml
	$(BIN)/python -c 'from warmstart.render import api_reference; print(api_reference.page(), end="")' > docs/api-reference.md

## csi-protos: regenerate operator/warmstart/csi/protos/ from the CSI spec's csi.proto and the kubelet's plugin
## registration api.proto (Go modules, pinned in the script) with grpcio-tools
csi-protos: $(BIN)/warmstart
	PYTHON=$(BIN)/python bash scripts/gen-csi-protos.sh

cluster-build: $(BIN)/warmstart
	$(BIN)/warmstart cluster build

cluster-up: $(BIN)/warmstart
	$(BIN)/warmstart cluster up --dir $(CLUSTER_DIR) --real-nodes $(REAL_NODES)
	@echo "export KUBECONFIG=$(abspath $(CLUSTER_DIR))/kubeconfig WARMSTART_KUBECONFIG=$(abspath $(CLUSTER_DIR))/kubeconfig"

cluster-down: $(BIN)/warmstart
	$(BIN)/warmstart cluster down --dir $(CLUSTER_DIR)

cluster-status: $(BIN)/warmstart
	$(BIN)/warmstart cluster status --dir $(CLUSTER_DIR)

## cluster-image: build the project image from the Dockerfile (buildah), the pause and the shell-less image (docs/image.md)
cluster-image: $(BIN)/warmstart
	$(BIN)/warmstart cluster image build

## docs: the documentation site (mkdocs, strict: every link checked) into build/site
docs: $(BIN)/warmstart
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## status-snapshots: run the status test on a local cluster and write what kubectl shows in each state to docs/status.md
status-snapshots: $(BIN)/warmstart
	WARMSTART_STATUS_SNAPSHOTS=docs/status.md $(BIN)/pytest -q tests/integration/test_status_reads_well.py

## lint: import-linter layers, ruff (lint and format), mypy strict, hadolint (the Dockerfile)
lint: $(BIN)/warmstart
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

## bench: preload, routing, operator scale, idle traffic; scale-out on a real node (reuses the real-node cluster in
## CLUSTER_DIR if one runs there, else starts and stops one: needs root, see docs/localcluster.md)
bench: $(BIN)/warmstart
	$(BIN)/python bench/preload.py
	$(BIN)/python bench/routing.py
	$(BIN)/python bench/operator_scale.py
	$(BIN)/python bench/endpoint_idle_traffic.py
	$(BIN)/python bench/scaleout.py --dir $(CLUSTER_DIR)

## chaos: the fault-injection suite (docs/reliability.md), bounded by CHAOS_BUDGET seconds (default 20 min); uses the
## cluster in CLUSTER_DIR if one runs there, else starts and stops one; the real-node part runs under
## /tmp/realnode-tests.lock on a real-node cluster of its own (needs root: tmpfs mounts, kill -9 of node processes); exits
## non-zero, naming it, when a group asked for (CHAOS_GROUPS, default all) did not run
chaos: $(BIN)/warmstart
	$(BIN)/python chaos/run.py --budget $(CHAOS_BUDGET) --dir $(CLUSTER_DIR) --only $(CHAOS_GROUPS)

clean:
	rm -rf $(VENV) build dist *.egg-info bench/out
