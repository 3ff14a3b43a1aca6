# kubesoda: every target sets itself up on a fresh machine (venv, pinned binaries, local cluster).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# State of the local control plane (ports, certs, etcd data, logs) lives outside the repo.
export KUBESODA_CACHE ?= $(HOME)/.cache/kubesoda
export KUBESODA_STATE ?= $(CURDIR)/.local/cluster
TOPOLOGY ?= hack/topologies/small.yaml

.PHONY: help release venv binaries cluster-up cluster-down unit e2e e2e-realnode test lint demo bench bench-scale bench-realcpu clean

help:
	@echo "make demo | test | unit | e2e | lint | cluster-up | cluster-down | bench | release [VERSION=v]"

$(BIN)/kubesoda: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/kubesoda

# the runtime dependencies only (no test tools): what `make demo` needs
$(VENV)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e .
	touch $@

# dist/: the image as an OCI archive, its digest, the chart, the CRDs, an SBOM, SHA256SUMS (hack/release.py)
release: venv
	$(BIN)/python hack/release.py $(if $(VERSION),--version $(VERSION))

binaries:
	hack/build-binaries.sh

cluster-up: venv
	hack/cluster-up.sh $(TOPOLOGY)

cluster-down:
	hack/cluster-down.sh

# make unit draws hypothesis's examples the same way every run (the "ci" profile of tests/conftest.py);
# plain pytest draws fresh ones.
unit: venv
	CI=$${CI:-true} $(BIN)/pytest -q tests -m "not e2e"

# The e2e suite runs against the cluster KUBECONFIG names; without one it runs in E2E_LANES lanes
# (pytest-xdist, whole files per lane), each on a local control plane of its own that the lane starts
# and tears down (e2e/conftest.py; port bases KUBESODA_E2E_LANE_BASES). E2E_LANES=1: one cluster.
E2E_LANES ?= 2
e2e: venv
	hack/install-browser.sh
	@if [ -n "$${KUBECONFIG:-}" ] || [ "$(E2E_LANES)" = 1 ]; then \
	  echo hack/with-cluster.sh $(BIN)/pytest -q e2e; hack/with-cluster.sh $(BIN)/pytest -q e2e; \
	else \
	  hack/build-binaries.sh >/dev/null && \
	  echo "KUBESODA_E2E_LANES=1 $(BIN)/pytest -q -n $(E2E_LANES) --dist loadfile e2e" && \
	  KUBESODA_E2E_LANES=1 $(BIN)/pytest -q -n $(E2E_LANES) --dist loadfile e2e; \
	fi
	hack/readme-check.sh  # the README's "Using it" block as written, on a local control plane of its own (issue 48)

# A real node (kubelet + containerd from Debian's packages, hack/real-node.sh) beside the KWOK
# nodes, in a control plane of its own: kubesoda's image (built without Docker) runs there and an
# in-place resize changes the CPU it really gets (docs/local-control-plane.md, "Real nodes").
# two real nodes: the chart's two operator replicas run on the host's network, one per node address
e2e-realnode: venv
	KUBESODA_REAL_NODES=2 KUBESODA_STATE=$(CURDIR)/.local/cluster-real KUBESODA_PORT_BASE=27200 \
	  hack/with-cluster.sh $(BIN)/pytest -q e2e/test_realnode.py e2e/test_yield_realnode.py e2e/test_realpipeline.py e2e/test_chart_realnode.py

test: lint unit e2e e2e-realnode

lint: venv
	$(BIN)/ruff check optimizer operator pe tests e2e benchmarks examples hack
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile
	hack/helm.sh lint charts/kubesoda
	hack/helm.sh template kubesoda charts/kubesoda --kube-version 1.35.8 >/dev/null

demo: $(VENV)/.runtime
	hack/demo.sh

bench: venv
	for b in quantity placement admission resolution flows rfl; do $(BIN)/python benchmarks/bench_$$b.py || exit 1; done
	KUBESODA_SDSC_PAR96=$$(hack/fetch-trace.sh) $(BIN)/python benchmarks/bench_dispatch.py
	$(BIN)/python benchmarks/bench_yield.py --quick
	KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh $(BIN)/python benchmarks/bench_extender.py
	KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh $(BIN)/python benchmarks/bench_e2e_lsd.py
	hack/with-cluster.sh $(BIN)/python benchmarks/bench_dataplane.py
	$(MAKE) bench-realcpu
	$(MAKE) bench-scale

clean: cluster-down
	rm -rf .local

# section 7.2 on real CPU: one real node with 1.2 allocatable cores (the rest of the 2 is the control plane's)
bench-realcpu: venv
	KUBESODA_REAL_NODES=1 KUBESODA_REAL_NODE_RESERVED_CPU=800m KUBESODA_STATE=$(CURDIR)/.local/cluster-realcpu KUBESODA_PORT_BASE=27400 \
	  hack/with-cluster.sh $(BIN)/python benchmarks/bench_realcpu.py

# 2000 KWOK nodes x 10x LSD end to end (10-13 minutes here; docs/benchmarks/scale-last-run.md, history in scale.md)
bench-scale: venv
	KUBESODA_TOPOLOGY=hack/topologies/large.yaml KUBESODA_NODES_TIMEOUT=600 hack/with-cluster.sh $(BIN)/python benchmarks/bench_scale.py
