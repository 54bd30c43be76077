# drain-guardian — build, test and demo targets. Run `make help` for the list.

GO        ?= go
BIN       := bin/drain-guardian
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/drain-guardian/drain-guardian/internal/version.Version=$(VERSION) \
             -X github.com/drain-guardian/drain-guardian/internal/version.Revision=$(REVISION)
IMAGE     ?= quay.io/drain-guardian/drain-guardian:$(VERSION)
MUST_GATHER_IMAGE ?= quay.io/drain-guardian/drain-guardian-must-gather:$(VERSION)
# -count=1: the suite runs bin/drain-guardian and the control-plane binaries, which go test's result
# cache cannot see; a cached pass could hide a change to the daemon.
E2E_FLAGS ?= -v -count=1 -timeout 45m
# Build tools, each pinned in its own module under tools/ so that the daemon's module does not depend
# on them; `go tool` builds them on first use and caches the binaries.
# controller-gen runs from its module's directory: paths are relative to tools/controller-gen.
CONTROLLER_GEN = cd tools/controller-gen && $(GO) tool controller-gen
CONTROLLER_GEN_ARGS = object crd:crdVersions=v1 paths=../../api/...
CRD_DIR   := manifests/base/crd
# golangci-lint runs from the directory of the module it checks; .golangci.yml applies to both.
# Runs of it on one machine (two checkouts, a lint during a test) wait for each other's lock
# instead of failing.
GOLANGCI_LINT = $(GO) tool -modfile=$(CURDIR)/tools/golangci-lint/go.mod golangci-lint
GOLANGCI_RUN  = $(GOLANGCI_LINT) run --allow-serial-runners

.PHONY: help build controlplane generate verify-generate bundle unit lint test-rules e2e test bench bench-pool bench-scale chaos demo cluster-up cluster-down image clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## Build bin/drain-guardian
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/drain-guardian

# The test bed's binaries (kube-apiserver, controller-manager, scheduler, kubectl, etcd, kwok) and the
# daemon, built once into .cluster/bin with progress lines. Every target that starts a control plane
# depends on it: the suites and the demo only check that the binaries are there, so no test's deadline
# includes a build. A second `make controlplane` waits for the first one's lock, without a deadline.
controlplane: ## Build the local control plane's binaries (first time about 15 minutes on 2 cores, then seconds)
	cd e2e && $(GO) run ./cmd/testbed build

generate: ## Regenerate api/v1alpha1/zz_generated.deepcopy.go and the Surge CRD in manifests/base/crd
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_ARGS) output:crd:dir=$(CURDIR)/$(CRD_DIR)

# Generates into a temporary directory and compares, so that a change to api/ without `make
# generate` fails. (output:object:dir puts every package's file in one directory: fine while api/
# has one package.)
verify-generate: ## Fail if the generated deepcopy code or CRD is stale
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	( $(CONTROLLER_GEN) $(CONTROLLER_GEN_ARGS) output:object:dir=$$tmp/object output:crd:dir=$$tmp/crd ) || exit 1; \
	stale=0; \
	diff -u api/v1alpha1/zz_generated.deepcopy.go $$tmp/object/zz_generated.deepcopy.go || stale=1; \
	diff -ru $(CRD_DIR) $$tmp/crd || stale=1; \
	if [ $$stale = 0 ]; then echo "generated files are up to date"; \
	else echo "generated files are stale: run make generate" >&2; exit 1; fi

# The OLM bundle's version and images; the CSV names the images by tag unless given digests.
BUNDLE_VERSION ?= 0.1.0
BUNDLE_ARGS    ?= -version $(BUNDLE_VERSION)

bundle: ## Regenerate the OLM bundle (bundle/) from manifests/overlays/openshift (and so manifests/base)
	cd tools/bundle && $(GO) run . $(BUNDLE_ARGS)

unit: ## Unit tests of the daemon, manifests and dashboard; the OLM bundle validated and up to date (no cluster needed)
	$(GO) test -v -race ./...
	cd tools/bundle && $(GO) test -v ./...

lint: verify-generate ## gofmt, go vet and golangci-lint for both modules; generated files up to date
	@out=$$(gofmt -l api cmd internal manifests dashboards e2e tools/bundle); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	cd tools/bundle && $(GO) vet ./...
	$(GOLANGCI_RUN) ./...
	cd e2e && $(GOLANGCI_RUN) ./...
	cd tools/bundle && $(GOLANGCI_RUN) ./...

test-rules: ## promtool checks and unit tests of the alerting rules
	promtool check rules manifests/prometheus/drain-guardian.rules.yaml
	promtool test rules manifests/tests/alerts_test.yaml

e2e: build controlplane ## End-to-end suite on a real local control plane
	cd e2e && $(GO) test $(E2E_FLAGS) ./...
	@# The simulators against a control plane of their own: that KServe, the MCO, the GPU Operator and the
	@# Node Maintenance Operator write as the real controllers do (build tag e2e_sim; run after the
	@# scenarios so that no two suites share the CPU).
	cd e2e && $(GO) test $(E2E_FLAGS) -tags e2e_sim -run '^TestSimulator' ./internal/kservesim/ ./internal/mcosim/ \
		./internal/gpuopsim/ ./internal/nmosim/
	@# One KServe simulator owns a cluster's LLMInferenceServices: the OpenShift AI 3.4+ meaning of an
	@# absent replica count gets a run of its own.
	cd e2e && E2E_LLM_NIL_KEEPS_COUNT=true $(GO) test $(E2E_FLAGS) -run '^TestLLMInferenceService' ./scenarios/

test: lint unit test-rules e2e ## Everything CI runs: lint, unit tests, alert tests, end-to-end suite

# The pool benchmark's model load times (comma-separated) and MCO time scale; make bench-pool T_READY=5s,40s TIME_SCALE=0.1.
# BENCH_VARIANTS runs only some variants: make bench-pool T_READY=20s BENCH_VARIANTS=baseline,prepared.
T_READY    ?= 5s,20s
TIME_SCALE ?= 0.1
BENCH_VARIANTS ?=

bench-pool: build controlplane ## Pool updates on the test bed: look-ahead on/off, prepared, restore policies, no guardian, vs two-replica models (minutes)
	cd e2e && E2E_BENCH=1 E2E_BENCH_READY=$(T_READY) TIME_SCALE=$(TIME_SCALE) E2E_BENCH_VARIANTS=$(BENCH_VARIANTS) E2E_BENCH_OUT=$(CURDIR)/.cluster/bench-pool.md \
		$(GO) test -v -count=1 -timeout 90m -run '^TestBenchPool$$' ./scenarios/
	@echo "table written to .cluster/bench-pool.md"

# The scale benchmark's idle window; make bench-scale SCALE_IDLE=1m for a quicker look.
SCALE_IDLE ?= 5m

bench-scale: build controlplane ## 1,000 nodes, 30,000 pods, 3,000 PDBs on the test bed: memory, idle CPU, surge latency (tens of minutes)
	cd e2e && E2E_SCALE=1 E2E_SCALE_IDLE=$(SCALE_IDLE) E2E_SCALE_OUT=$(CURDIR)/.cluster/bench-scale.md \
		$(GO) test -v -count=1 -timeout 100m -run '^TestBenchScale$$' ./scenarios/
	@echo "table written to .cluster/bench-scale.md"

# The chaos suite's seed and fault rate; make chaos CHAOS_SEED=7 CHAOS_RATE=0.2.
CHAOS_SEED ?= 1
CHAOS_RATE ?= 0.1

chaos: build controlplane ## Pool updates under API faults, leader kills and control-plane restarts; table into docs/reliability.md (about 8 minutes)
	cd e2e && E2E_CHAOS=1 E2E_CHAOS_SEED=$(CHAOS_SEED) E2E_CHAOS_RATE=$(CHAOS_RATE) E2E_CHAOS_OUT=$(CURDIR)/docs/reliability.md \
		$(GO) test -v -count=1 -timeout 80m -run '^TestChaos$$' ./scenarios/
	@echo "table written to docs/reliability.md"

bench: ## Benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

cluster-up: build controlplane ## Start the local control plane with MCO and KServe simulators in the background
	cd e2e && $(GO) run ./cmd/testbed up

cluster-down: ## Stop exactly what cluster-up started
	cd e2e && $(GO) run ./cmd/testbed down

demo: build controlplane ## The whole story on a local control plane: stalled pool update resolved with no downtime
	cd e2e && $(GO) run ./cmd/testbed demo

image: ## Build the container image and the must-gather image (needs a container engine)
	@if command -v podman >/dev/null 2>&1; then podman build -t $(IMAGE) . && podman build --target must-gather -t $(MUST_GATHER_IMAGE) .; \
	elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then docker build -t $(IMAGE) . && docker build --target must-gather -t $(MUST_GATHER_IMAGE) .; \
	else echo "make image: no container engine (podman or a running docker) on this machine; the Dockerfile is at ./Dockerfile" >&2; exit 1; fi

clean: ## Remove build output
	rm -rf bin
