# bae-go. Every target pins the Go toolchain the module needs.
export GOTOOLCHAIN := go1.27.3
GO ?= go
BIN := bin

.PHONY: all build dev test test-short vet pg test-deps bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## dev: PostgreSQL + baesrv dev (embedded Temporal and its UI) in one process.
dev: pg build
	./scripts/dev.sh

## test: every test, against a real PostgreSQL and embedded Temporal.
test: pg test-deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m ./...

test-short: pg
	$(GO) test -count=1 -short ./...

vet:
	$(GO) vet ./...

pg:
	./scripts/pg-up.sh

test-deps:
	./scripts/test-deps.sh

bench: pg build
	$(GO) run ./bench/turns

clean:
	rm -rf $(BIN) bae-data
