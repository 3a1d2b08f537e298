# Lazarus developer targets. `make help` lists them.
GO        ?= go
GOBIN     ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK_VERSION   := 2025.1.1

.PHONY: help test race lint proto proto-check tidy-check bench stress demo tools ci

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

tools: ## install protoc-gen-go and staticcheck into GOBIN
	GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

test: ## run the tests
	$(GO) test -count=1 ./...

race: ## run the tests with the race detector, shuffled
	$(GO) test -race -shuffle=on -count=1 ./...

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOBIN)/staticcheck ./...

proto: ## regenerate the Go code of messages/*.proto
	PATH="$(GOBIN):$$PATH" protoc -I messages --go_out=. --go_opt=module=github.com/lazarusrt/lazarus messages/*.proto

proto-check: proto ## fail when the committed generated code is stale
	git diff --exit-code -- messages/

tidy-check: ## fail when go.mod or go.sum are not tidy
	$(GO) mod tidy
	git diff --exit-code -- go.mod go.sum

bench: ## run the benchmarks once
	$(GO) test -run '^$$' -bench . -benchtime=1x ./...

stress: ## run the crash tests many times
	$(GO) test -race -count=20 -run 'Crash' ./...

demo: ## run the kill-and-revive demo
	$(GO) run ./cmd/demo
