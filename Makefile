# Lazarus developer targets. `make help` lists them.
GO        ?= go
GOBIN     ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK_VERSION   := v0.8.2# prints as "staticcheck 2026.2.2 (0.8.2)"
# PostgreSQL 15 binaries (initdb, postgres) of the pgjournal tests; the tests
# read the same PG_BINDIR.
PG_BINDIR ?= /usr/lib/postgresql/15/bin
export PG_BINDIR

.PHONY: help deps test race lint proto proto-check tidy-check bench stress soak demo demo-cluster test-cluster tools check

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

deps: ## install protoc (Debian protobuf-compiler), PostgreSQL 15 (Debian postgresql) and Chromium (Debian chromium, for the console's browser tests) if missing, and the Go tools
	@command -v protoc >/dev/null 2>&1 || { \
		echo "installing protobuf-compiler with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq protobuf-compiler >/dev/null; }
	@test -x $(PG_BINDIR)/postgres -a -x $(PG_BINDIR)/initdb || { \
		echo "installing postgresql with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; }
	@test -x $(PG_BINDIR)/postgres || { echo "no PostgreSQL in PG_BINDIR=$(PG_BINDIR)"; exit 1; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@$(MAKE) --no-print-directory tools

tools: ## install protoc-gen-go and staticcheck into GOBIN
	@test -x $(GOBIN)/protoc-gen-go && $(GOBIN)/protoc-gen-go --version | grep -q $(PROTOC_GEN_GO_VERSION) || \
		GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(GOBIN)/staticcheck && $(GOBIN)/staticcheck -version | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || \
		GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

check: deps ## everything CI runs: lint, generated code, tidy, race tests (the cluster's multi-process tests included), the demos
	$(GO) mod download
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory proto-check
	$(MAKE) --no-print-directory tidy-check
	$(MAKE) --no-print-directory race
	$(MAKE) --no-print-directory demo ARGS='--fast --quiet'
	$(MAKE) --no-print-directory demo-cluster

test: ## run the tests
	$(GO) test -count=1 ./...

race: ## run the tests with the race detector, shuffled
	$(GO) test -race -shuffle=on -count=1 ./...

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOBIN)/staticcheck ./...

proto: ## regenerate the Go code of messages/*.proto
	PATH="$(GOBIN):$$PATH" protoc -I messages --go_out=. --go_opt=module=github.com/lazarusrt/lazarus messages/lazarus/v1/*.proto

proto-check: proto ## fail when the committed generated code is stale
	git diff --exit-code -- messages/

tidy-check: ## fail when go.mod or go.sum are not tidy
	$(GO) mod tidy
	git diff --exit-code -- go.mod go.sum

bench: ## run the benchmarks once
	$(GO) test -run '^$$' -bench . -benchtime=1x ./...

stress: ## run the crash tests many times
	$(GO) test -race -count=20 -run 'Crash' ./...

soak: ## the simulator of the conversation's core, long: SEEDS seeds from FIRST (RELIABILITY.md, guarantee 14)
	$(GO) test -count=1 -timeout=0 -run TestSimulation -v ./actors -args -sim.seeds=$(or $(SEEDS),100000) -sim.first=$(or $(FIRST),1000)

# The demos are built into bin/ and run with exec, not with go run, which
# exits 1 whatever status the program had: make's "Error N" is the demo's
# own exit status (see its -h; make itself exits 2 on any error).
demo: ## run the kill-and-revive demo (its flags in ARGS, e.g. ARGS=--fast); a failure says the demo's exit status
	$(GO) build -o bin/demo ./cmd/demo
	exec bin/demo $(ARGS)

demo-cluster: ## three cluster members and a PostgreSQL; one is killed mid-turn; where each conversation lived, and its log checked
	$(GO) build -o bin/lazarus-node ./cmd/lazarus-node
	exec bin/lazarus-node demo

test-cluster: ## the multi-process cluster tests alone (three lazarus-node processes, one PostgreSQL)
	$(GO) test -race -count=1 -v ./tests/cluster
