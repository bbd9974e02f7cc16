# rewind: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
BIN_DIR := $(CURDIR)/bin
# The folder the testbed binaries live in (keyed by their versions); built by `make testbed-bins`.
TESTBED_BIN := $(shell hack/testbed/build.sh --print-dir)
export REWIND_TESTBED_BIN := $(TESTBED_BIN)
# The folder of the S3 server and KMS the snapshot-store tests start; built by `make store-bins`.
export REWIND_STORES_BIN := $(shell hack/stores/build.sh --print-dir)
# Packages run in parallel; each starts its own testbed (about 280 MB per API server).
TEST_PARALLEL ?= 2
TEST_TIMEOUT ?= 60m
TEST_FLAGS ?=

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC (controller-gen) into api/ and config/.
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:allowDangerousTypes=false rbac:roleName=rewind-controller \
		paths=./api/... paths=./internal/controller/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: verify-generate
verify-generate: generate ## Fail when generated files are stale.
	@if [ -n "$$(git status --porcelain -- api config)" ]; then \
		git status --porcelain -- api config; git diff -- api config | head -50; \
		echo "Generated files are stale: run 'make generate' and commit the result."; exit 1; fi

.PHONY: build
build: ## Build bin/rewind (and bin/kubectl-rewind, the kubectl plugin, with its completion hook).
	$(GO) build -o $(BIN_DIR)/rewind ./cmd/rewind
	ln -sf rewind $(BIN_DIR)/kubectl-rewind
	ln -sf rewind $(BIN_DIR)/kubectl_complete-rewind

.PHONY: testbed-bins
testbed-bins: ## Build the testbed binaries (kube-apiserver, kcm, scheduler, etcd, kwok, kubectl) once; about 15 minutes cold.
	hack/testbed/build.sh >/dev/null

.PHONY: store-bins
store-bins: ## Build the servers the snapshot-store tests start (versitygw, fake-gcs-server, local-kms; Azurite from npm), once, into .cache/stores.
	hack/stores/build.sh >/dev/null

.PHONY: lint
lint: ## go vet (also with the unit tag, as make test-unit builds) and a gofmt check.
	$(GO) vet ./...
	$(GO) vet -tags unit ./...
	cd hack/testbed && $(GO) vet ./etcd ./kwokstages
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: test
test: testbed-bins store-bins ## Run every test against real local clusters (builds the testbed binaries first).
	$(GO) test -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Run only the tests that need no testbed (build tag unit): pure logic, no binaries, well under a minute once compiled.
	$(GO) test -tags unit $(TEST_FLAGS) ./...

.PHONY: demo
demo: testbed-bins build ## The end-to-end story on a local hub + 3 members: waves, a failed gate, automatic rollback, verification (about 2 minutes once built).
	$(BIN_DIR)/rewind demo --bin-dir $(TESTBED_BIN)

.PHONY: clean
clean: ## Remove built binaries (not the testbed binary cache).
	rm -rf $(BIN_DIR)

.PHONY: bench-fleet
bench-fleet: testbed-bins ## The fleet benchmark: 20 members at 50 ms round trip, a canary and a fleet wave, RollbackAll, controller RSS, hub requests (about 20 minutes; REWIND_FLEET_MEMBERS=N to change the size). Writes bench/results-fleet.txt.
	$(GO) test ./bench/fleet/ -run '^$$' -bench . -benchtime 1x -timeout 90m | tee bench/results-fleet.txt

.PHONY: bench
bench: testbed-bins store-bins ## Run the benchmarks on the real testbed; each prints its figure next to a baseline from the same run.
	$(GO) test ./bench/ -run '^$$' -bench . -benchtime 1x -timeout 60m
