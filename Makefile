# flowstate worker. `make run` starts it on an embedded NATS server;
# `make test` runs every test, end-to-end ones included.

GO      ?= go
BIN     := bin
ARGS    ?=

.PHONY: all build run test vet bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/worker ./cmd/worker

run: build
	./$(BIN)/worker $(ARGS)

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -race -count=1 -timeout 20m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./codec/ ./flowstate/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 10m ./codec/

clean:
	rm -rf $(BIN)
