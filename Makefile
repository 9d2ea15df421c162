# bae-go. Every target pins the Go toolchain the module needs.
export GOTOOLCHAIN := go1.27.3
GO ?= go
BIN := bin

.PHONY: all build dev test test-suite test-short test-topology test-chaos topology topology-down vet check pg test-deps bench fuzz clean

all: build

## build: every command and example into bin/, with progress. baesrv is
## built with the "dev" tag (embedded Temporal for `baesrv dev`); the
## production image builds it without (see docs/operations.md).
build:
	GO=$(GO) BIN=$(BIN) ./scripts/build.sh

## dev: PostgreSQL + baesrv dev (embedded Temporal and its UI) in one process.
dev: pg build
	./scripts/dev.sh

## test: every test, against a real PostgreSQL and embedded Temporal.
## No test may skip: go test -json feeds scripts/noskip, which prints what
## plain go test would and fails the run on any skip (a skip hides an
## untested path) unless scripts/test-skips.txt names the test with a reason.
## scripts/test-deps.sh installs what the tests need so that none skips.
## Plain go test already runs each fuzz target's seed corpus; the short
## fuzz run after it mutates beyond the seeds (2s per target). The
## production topology's suite (test-topology) runs after the rest, under
## the same no-skip rule, and so does the five-minute chaos campaign
## (test-chaos). All of it runs inside scripts/test-guard.sh, which
## gives the run an id (BAE_TEST_RUN) that labels every Docker image the
## tests build and every container started from one, and fails the run if
## any of them is still present at the end, listing them.
test: pg test-deps check
	$(GO) build -o $(BIN)/noskip ./scripts/noskip
	./scripts/test-guard.sh $(MAKE) --no-print-directory test-suite

# test-suite: what `make test` runs inside the container guard.
test-suite:
	bash -o pipefail -c '$(GO) test -count=1 -timeout 30m -json ./... | $(BIN)/noskip -allow scripts/test-skips.txt'
	bash -o pipefail -c '$(GO) test -count=1 -timeout 20m -tags topology -json ./tests/topology | $(BIN)/noskip -allow scripts/test-skips.txt'
	bash -o pipefail -c '$(GO) test -count=1 -timeout 20m -tags chaos -json ./tests/chaos | $(BIN)/noskip -allow scripts/test-skips.txt'
	$(MAKE) --no-print-directory fuzz FUZZTIME=2s

## test-short: the fast tests (-short skips the slow ones; skips allowed).
test-short: pg
	$(GO) test -count=1 -short ./...

## test-topology: the production topology's tests (tests/topology, build tag
## "topology"): a real Temporal server on PostgreSQL with stock dynamic config
## (scripts/temporal-up.sh on free ports) and two baesrv replicas, killed and
## restarted, and the Temporal server restarted. `make test` runs it too.
test-topology: pg
	$(GO) test -count=1 -timeout 20m -tags topology -v ./tests/topology

## test-chaos: the five-minute chaos campaign (tests/chaos, build tag
## "chaos"; bench/chaos is the full one): the production topology under
## every fault kind with zero violations required, then each invariant seen
## to fire on purpose. `make test` runs it too, after test-topology.
test-chaos: pg
	$(GO) test -count=1 -timeout 20m -tags chaos -v ./tests/chaos

## topology: PostgreSQL, a real Temporal server, its Web UI and two
## `baesrv serve` replicas on one database (scripts/topology.sh); Ctrl-C or
## `make topology-down` stops them.
topology: pg build
	./scripts/topology.sh

topology-down:
	./scripts/topology.sh down

vet:
	$(GO) vet ./...
	$(GO) vet -tags dev ./cmd/baesrv
	$(GO) vet -tags chaos ./tests/chaos

## check: vet, a tidy go.mod, and workflow code free of non-determinism.
WORKFLOWCHECK := go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0
check: vet
	$(GO) mod tidy -diff
	$(GO) run $(WORKFLOWCHECK) ./workflows/... ./internal/launcher/...

pg:
	./scripts/pg-up.sh

test-deps:
	./scripts/test-deps.sh

bench: pg build
	$(GO) run ./bench/turns

## fuzz: each fuzz target in turn for FUZZTIME (make fuzz FUZZTIME=1m).
## A failing input is saved under the package's testdata/fuzz/ and then
## replays in every plain go test.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	./api/wire:FuzzParseEnvelope \
	./api/wire:FuzzParseSendMessage \
	./api/wire:FuzzPageParams \
	./api/wire:FuzzCheckToolDecls \
	./activities:FuzzMergeToolResults \
	./activities:FuzzCancelAbandoned \
	./activities:FuzzIsVoluntaryAbandonment \
	./internal/config:FuzzParse
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$${t#*:}\$$" -fuzztime=$(FUZZTIME) "$${t%%:*}"; \
	done

clean:
	rm -rf $(BIN) bae-data
