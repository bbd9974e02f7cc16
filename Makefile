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
# The folder of promtool and prometheus, unpacked from Debian's package; `make promtool`.
export REWIND_PROMETHEUS_BIN := $(shell hack/prometheus/fetch.sh --print-dir)
# The browser the dashboard's tests drive: Debian's chromium unpacked into .cache/tools/chromium
# (`make chromium`), unless REWIND_CHROMIUM names another (REWIND_CHROMIUM=/usr/bin/chromium).
CHROMIUM_LAUNCHER := $(shell hack/chromium/fetch.sh --print-dir)/chromium
ifeq ($(REWIND_CHROMIUM),)
REWIND_CHROMIUM := $(CHROMIUM_LAUNCHER)
endif
export REWIND_CHROMIUM
# Packages run in parallel; each starts its own testbed (about 280 MB per API server). Most of a
# test's time is waiting on gates, bakes and controllers, so three packages share 2 cores well:
# 29 minutes for the tests instead of 38 at 2 (docs/development.md).
TEST_PARALLEL ?= 3
TEST_TIMEOUT ?= 60m
TEST_FLAGS ?=
# The packages, longest first: go test starts them in this order (./... adds the rest, each
# once), so the longest runs from the start beside the others instead of alone at the end
# (in path order test/e2e, about 12 minutes, started among the last). See docs/development.md.
TEST_PKGS ?= ./test/e2e/ ./test/faults/ ./test/orchestration/ ./test/pull/ ./internal/cli/ ./internal/restore/ ./...
# How gotestsum shows `make test`: testname prints a line per test as it ends, with its package
# and time, and each package's total (a failure's output in full); pkgname-and-test-fails prints
# a line per package only; standard-verbose is go test -v.
TEST_FORMAT ?= testname

# Tools built from the Go modules pinned in hack/tools/go.mod (gotestsum runs the tests,
# crd-ref-docs writes docs/reference/api.md) into the ignored cache, keyed by their version.
TOOLS_DIR := $(CURDIR)/.cache/tools
tool_version = $(shell awk -v m="$(1)" '$$1 == m && $$2 ~ /^v/ {print $$2; exit}' hack/tools/go.mod)
GOTESTSUM := $(TOOLS_DIR)/gotestsum-$(call tool_version,gotest.tools/gotestsum)
CRD_REF_DOCS := $(TOOLS_DIR)/crd-ref-docs-$(call tool_version,github.com/elastic/crd-ref-docs)

# What `rewind version` reports, linked into internal/version. The build date is the commit's
# time (or SOURCE_DATE_EPOCH), never the clock, so that two builds of a commit are identical.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE ?= $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/rewind-dev/rewind/internal/version
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)
# disable_grpc_modules: cloud.google.com/go/storage without its gRPC client (rewind reads and
# writes GCS over HTTP, through gocloud.dev): 12 MB less binary, 14 MiB less resident memory.
BUILD_TAGS := disable_grpc_modules
GO_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -tags $(BUILD_TAGS) -ldflags "$(LDFLAGS)"

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: generate
generate: $(CRD_REF_DOCS) ## Regenerate deepcopy code, CRDs and RBAC (controller-gen) into api/ and config/ (CRDs, ClusterRole/Role rewind-controller, ClusterRole rewind-controller-namespace), and the API reference docs/reference/api.md (crd-ref-docs).
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:allowDangerousTypes=false rbac:roleName=rewind-controller \
		paths=./api/... paths=./internal/controller/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(GO) tool controller-gen rbac:roleName=rewind-controller-namespace paths=./internal/rbac/... \
		output:rbac:artifacts:config=config/rbac/namespace
	@# config/crd lists every generated CRD (rewind install and config/default render it).
	{ sed -n '1,/^resources:/p' config/crd/kustomization.yaml; for f in $$(LC_ALL=C ls config/crd/bases/*.yaml); do echo "- bases/$${f##*/}"; done; } > config/crd/kustomization.yaml.new
	mv config/crd/kustomization.yaml.new config/crd/kustomization.yaml
	@# The Helm chart carries copies of the generated CRDs and roles, of the member role and of the alerts.
	rm -f charts/rewind/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/rewind/files/crds/
	cp config/rbac/role.yaml charts/rewind/files/rbac/role.yaml
	cp config/rbac/namespace/role.yaml charts/rewind/files/rbac/namespace-role.yaml
	cp config/member/role.yaml charts/rewind/files/member/role.yaml
	cp config/prometheus/prometheus_rule.yaml charts/rewind/files/prometheus/prometheus_rule.yaml
	@# The API reference, from the Go types' doc comments and markers.
	$(CRD_REF_DOCS) --source-path=./api/v1alpha1 --config=hack/api-docs/config.yaml --renderer=markdown \
		--output-path=docs/reference/api.md --log-level=WARN

.PHONY: verify-generate
verify-generate: generate ## Fail when generated files are stale.
	@if [ -n "$$(git status --porcelain -- api config charts docs/reference)" ]; then \
		git status --porcelain -- api config charts docs/reference; git diff -- api config charts docs/reference | head -50; \
		echo "Generated files are stale: run 'make generate' and commit the result."; exit 1; fi

.PHONY: build
build: ## Build bin/rewind (and bin/kubectl-rewind, the kubectl plugin, with its completion hook) and bin/rewind-controller.
	$(GO_BUILD) -o $(BIN_DIR)/rewind ./cmd/rewind
	$(GO_BUILD) -o $(BIN_DIR)/rewind-controller ./cmd/rewind-controller
	ln -sf rewind $(BIN_DIR)/kubectl-rewind
	ln -sf rewind $(BIN_DIR)/kubectl_complete-rewind

# The controller image: built without a container engine (internal/image, go-containerregistry),
# reproducible (-trimpath, fixed -ldflags, file times and image dates from SOURCE_DATE_EPOCH).
IMAGE ?= ghcr.io/rewind-dev/rewind-controller:$(VERSION)
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
IMAGE_DIR := $(BIN_DIR)/image

.PHONY: image
image: ## Build the rewind-controller image without Docker: OCI layout bin/image/oci and tarball bin/image/rewind-controller.tar.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -tags $(BUILD_TAGS) -ldflags "-s -w $(LDFLAGS)" \
		-o $(IMAGE_DIR)/linux_$(IMAGE_ARCH)/rewind-controller ./cmd/rewind-controller
	$(GO) run ./hack/image --binary $(IMAGE_DIR)/linux_$(IMAGE_ARCH)/rewind-controller --arch $(IMAGE_ARCH) \
		--version $(VERSION) --revision $(COMMIT) --source-date-epoch $(SOURCE_DATE_EPOCH) --ref $(IMAGE) \
		--layout $(IMAGE_DIR)/oci --tarball $(IMAGE_DIR)/rewind-controller.tar | tee $(IMAGE_DIR)/digest

.PHONY: testbed-bins
testbed-bins: ## Build the testbed binaries (kube-apiserver, kcm, scheduler, etcd, kwok, kubectl) once; about 20 minutes cold on 2 cores.
	@echo "testbed-bins: kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok and kubectl from hack/testbed/go.mod into $(TESTBED_BIN) (each built only when missing)"
	hack/testbed/build.sh >/dev/null

.PHONY: store-bins
store-bins: ## Build the servers the snapshot-store tests start (versitygw, fake-gcs-server, local-kms; Azurite from npm), once, into .cache/stores.
	@echo "store-bins: versitygw, fake-gcs-server and local-kms from hack/stores/go.mod, and Azurite from npm, into $(REWIND_STORES_BIN) (each only when missing)"
	hack/stores/build.sh >/dev/null

.PHONY: lint
lint: ## go vet (also with the unit tag, as make test-unit builds) and a gofmt check.
	$(GO) vet ./...
	$(GO) vet -tags unit ./...
	cd hack/testbed && $(GO) vet ./etcd ./kwokstages
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# promtool validates config/prometheus (TestPrometheusRules fails without it). It and the
# prometheus server come from Debian's prometheus package, downloaded and unpacked into
# .cache/tools without installing it: no service is enabled or started.
.PHONY: promtool
promtool: ## Unpack promtool and prometheus from Debian's package into .cache/tools (apt-get download + dpkg -x; nothing is installed).
	hack/prometheus/fetch.sh >/dev/null

# The dashboard's browser tests drive Debian's chromium with chromedp (no npm, no CDN). It is
# downloaded and unpacked into .cache/tools/chromium with the libraries this machine lacks, not
# installed; a launcher there points the browser at them.
.PHONY: chromium
chromium: ## Unpack Debian's chromium (and the libraries it needs that are missing here) into .cache/tools/chromium (apt-get download + dpkg -x; nothing is installed), unless REWIND_CHROMIUM names another browser.
	@if [ "$(REWIND_CHROMIUM)" != "$(CHROMIUM_LAUNCHER)" ]; then echo "chromium: $(REWIND_CHROMIUM) (REWIND_CHROMIUM)"; \
		else echo "chromium: Debian's chromium, unpacked into $(dir $(CHROMIUM_LAUNCHER)) when missing (about 100 MB; not installed)"; hack/chromium/fetch.sh >/dev/null; fi

.PHONY: test-dashboard
test-dashboard: testbed-bins chromium ## The dashboard in a real browser against a hub testbed: a rollout with a failed gate watched live, Secret values, actions, a hub that goes away, 1,000 targets in under 2 s. REWIND_SCREENSHOTS=DIR keeps the screenshots.
	$(GO) test -count=1 -timeout 20m ./test/dashboard/

.PHONY: check-monitoring
check-monitoring: promtool ## promtool check/test rules on config/prometheus; the Grafana dashboard's queries against the controller's metrics.
	$(GO) test -count=1 ./config/

.PHONY: test
test: testbed-bins store-bins promtool chromium $(GOTESTSUM) ## Run every test against real local clusters (builds the testbed binaries first; unpacks chromium for the dashboard browser tests into the cache); a line per test as it ends (TEST_FORMAT).
	@echo "test: go test -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS) (through gotestsum, format $(TEST_FORMAT))"
	$(GOTESTSUM) --format $(TEST_FORMAT) --format-hide-empty-pkg -- -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS)

# A tool of hack/tools, built once per version. A temporary name of its own: two makes may build at once.
$(TOOLS_DIR)/gotestsum-%:
	@echo "tools: building gotestsum $* (hack/tools/go.mod) into $(TOOLS_DIR) ..."
	@mkdir -p $(TOOLS_DIR)
	cd hack/tools && $(GO) build -o $@.tmp.$$$$ gotest.tools/gotestsum && mv -f $@.tmp.$$$$ $@

$(TOOLS_DIR)/crd-ref-docs-%:
	@echo "tools: building crd-ref-docs $* (hack/tools/go.mod) into $(TOOLS_DIR) ..."
	@mkdir -p $(TOOLS_DIR)
	cd hack/tools && $(GO) build -o $@.tmp.$$$$ github.com/elastic/crd-ref-docs && mv -f $@.tmp.$$$$ $@

.PHONY: test-unit
test-unit: promtool ## Run only the tests that need no testbed (build tag unit): pure logic, no testbed binaries (promtool checks config/prometheus), well under a minute once compiled.
	$(GO) test -tags unit $(TEST_FLAGS) ./...

.PHONY: demo
demo: testbed-bins build ## The end-to-end story on a local hub + 3 members: waves, a failed gate, automatic rollback, verification (about 2 minutes once built).
	$(BIN_DIR)/rewind demo --bin-dir $(TESTBED_BIN)

.PHONY: clean
clean: ## Remove built binaries (not the testbed binary cache).
	rm -rf $(BIN_DIR)

.PHONY: bench-fleet
bench-fleet: testbed-bins ## The fleet benchmark: 20 members at 50 ms round trip, a canary and a fleet wave, RollbackAll, controller RSS, hub requests, and (e) the chaos run: the same upgrade and RollbackAll with every member connection reset every 10 s, against runs without faults, and (f) pull mode: the same members joined in mode Pull with one real agent process each, the same upgrade and RollbackAll, the hub controller's CPU and requests per cluster against push mode (about 12 minutes on a quiet machine once the testbed binaries are built; REWIND_FLEET_CHAOS=off skips (e), REWIND_FLEET_PULL=off skips (f); REWIND_FLEET_MEMBERS=N and REWIND_FLEET_CRS=N change the fleet and the MySQLClusters per member). Writes bench/results-fleet.txt.
	$(GO) test ./bench/fleet/ -run '^$$' -bench . -benchtime 1x -timeout 90m | tee bench/results-fleet.txt

.PHONY: bench-hub
bench-hub: testbed-bins ## The hub benchmark: the real hub (kube-apiserver, etcd, the controller as its own process) and 1,000 simulated pull members whose agents one process stands in for: an upgrade in waves of 1, 99 and 900, a RollbackAll of every cluster, controller RSS, hub requests and API server CPU beside issue 23's goals (REWIND_HUB_MEMBERS=N changes the fleet; see docs/benchmarks.md). Writes bench/results-hub.txt.
	$(GO) test ./bench/hub/ -run '^$$' -bench . -benchtime 1x -timeout 90m | tee bench/results-hub.txt

.PHONY: bench
bench: testbed-bins store-bins ## Run the benchmarks on the real testbed; each prints its figure next to a baseline from the same run.
	$(GO) test ./bench/ -run '^$$' -bench . -benchtime 1x -timeout 60m
