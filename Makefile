# kepoch: `make test` runs everything (lint, unit, component, fuzz smoke,
# real-cluster) on a fresh machine; `go run ./cmd/kepoch demo` runs the demo.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
STATICCHECK_VERSION := v0.8.2
export PATH := $(BIN):$(PATH)

.PHONY: test lint unit fuzz-smoke bench kafka-fetch kafka-up kafka-down kafka-logs kafka-status demo

test:
	@bash scripts/test.sh

lint: $(BIN)/staticcheck
	@files=$$(git ls-files '*.go' && git ls-files --others --exclude-standard '*.go') && [ -n "$$files" ] || \
	  { echo "lint: no Go files from git ls-files (not a git work tree, or git refuses it)"; exit 1; }; \
	  bad=$$(gofmt -l $$files) || exit 1; \
	  if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	@bash scripts/check-imports.sh

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Unit and component tests only (no cluster needed; real-cluster tests skip).
unit:
	$(GO) test -race -count=1 ./...

fuzz-smoke:
	@bash scripts/fuzz-smoke.sh

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

kafka-fetch:
	@bash scripts/kafka-local.sh fetch
kafka-up:
	@bash scripts/kafka-local.sh up
kafka-down:
	@bash scripts/kafka-local.sh down
kafka-logs:
	@bash scripts/kafka-local.sh logs
kafka-status:
	@bash scripts/kafka-local.sh status

demo:
	$(GO) run ./cmd/kepoch demo
