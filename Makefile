# flowstate worker. `make run` starts it on an embedded NATS server;
# `make test` runs every test, end-to-end ones included.

GO      ?= go
BIN     := bin
ARGS    ?=

.PHONY: all build run test vet lint bench fuzz clean js-deps chaos

all: build

build:
	$(GO) build -o $(BIN)/worker ./cmd/worker

run: build
	./$(BIN)/worker $(ARGS)

vet:
	$(GO) vet ./...

# staticcheck, fetched from the Go module proxy at a pinned version.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: vet
	$(GO) run $(STATICCHECK) ./...

# The JavaScript conformance client (e2e/js) runs against the worker in
# `make test`; its npm packages are pinned in package.json.
js-deps:
	cd e2e/js && npm install --no-package-lock --no-audit --no-fund

test: vet js-deps
	$(GO) test -race -count=1 -timeout 20m ./...

# Go benchmarks of the hot paths, then the end-to-end load test against a
# real nats-server and worker (LOADTEST_ARGS, e.g. --runs 5; see
# docs/performance.md); the load test prints both in one summary.
LOADTEST_ARGS ?=

bench:
	mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench . -benchmem ./codec/ ./flowstate/ ./consumer/ | tee $(BIN)/gobench.txt
	$(GO) run ./e2e/loadtest --go-bench $(BIN)/gobench.txt $(LOADTEST_ARGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 10m ./codec/

# The robustness test (e2e/chaos) for CHAOS_DURATION with a random seed, or
# CHAOS_SEED to replay one: it prints the seed first and one line of figures
# last; the whole output is in $(BIN)/chaos.log.
CHAOS_DURATION ?= 10m
CHAOS_SEED     ?=

chaos:
	mkdir -p $(BIN)
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) bash -o pipefail -c \
		'$(GO) test -count=1 -v -timeout 0 -run "^TestChaosLong$$" ./e2e/chaos/ 2>&1 | tee $(BIN)/chaos.log | grep --line-buffered "^chaos: "'

clean:
	rm -rf $(BIN)
