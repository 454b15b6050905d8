# flowstate worker. `make run` starts it on an embedded NATS server;
# `make test` runs every test, end-to-end ones included.

GO      ?= go
BIN     := bin
ARGS    ?=

.PHONY: all build run test vet lint bench fuzz clean js-deps promtool rules-test chaos attack nats-server rust-test image deploy-test version release release-check skew

all: build

# The release's version is the VERSION file, and nothing else: the worker
# embeds it (go:embed), and the image, the chart and the release archives
# take it from here. COMMIT and MODIFIED stamp a build that the go command
# cannot stamp itself (a git worktree, -buildvcs=false in GOFLAGS); the
# worker prefers what the go command records (vcs.revision, vcs.modified).
VERSION  := $(shell cat VERSION)
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
MODIFIED := $(shell git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
STAMP    := -X main.commit=$(COMMIT) -X main.modified=$(MODIFIED)

version:
	@echo VERSION=$(VERSION)
	@echo IMAGE=$(IMAGE)

build:
	$(GO) build -buildvcs=auto -ldflags '$(STAMP)' -o $(BIN)/worker ./cmd/worker

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

# promtool checks and unit-tests the alerting rules in deploy/prometheus. It
# comes from Debian's prometheus package, installed when missing (as root, as
# in CI on a Debian machine).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
		echo "promtool missing: installing Debian's prometheus package"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; }

rules-test: promtool
	promtool check rules deploy/prometheus/alerts.yml
	cd deploy/prometheus && promtool test rules alerts_test.yml

# The Rust crate (clients/rust) is tested against the worker and a
# nats-server built here, named by FLOWSTATE_WORKER_BIN and
# FLOWSTATE_NATS_SERVER_BIN (a plain `cargo test` builds them with go
# itself). Its crates come from the registry once (`cargo fetch`), at the
# versions of the committed Cargo.lock.
CARGO   ?= cargo
RUST    := clients/rust
RUSTENV := FLOWSTATE_WORKER_BIN=$(CURDIR)/$(BIN)/worker FLOWSTATE_NATS_SERVER_BIN=$(CURDIR)/$(BIN)/nats-server

nats-server:
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

rust-test: build nats-server
	cd $(RUST) && $(CARGO) fetch --locked
	cd $(RUST) && $(RUSTENV) $(CARGO) test --locked

# The zero-allocation tests (named ...Allocat..., the only tests -race skips:
# its instrumentation allocates) run a second time without -race. The e2e
# packages have none, and would build their binaries for nothing.
test: vet js-deps rules-test rust-test deploy-test
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -run 'Allocat' $$($(GO) list ./... | grep -v /e2e)

# The OCI image (deploy/image/Containerfile): a static binary built here
# (CGO_ENABLED=0) copied onto an empty base, so that no registry is needed.
# It takes podman, or buildah; IMAGE names the result, tagged with VERSION
# by default, and its labels carry VERSION and the commit.
IMAGE    ?= flowstate:$(VERSION)
IMAGEDIR := $(BIN)/image
# The flags of every static build: no cgo, no local paths, stripped, the
# commit stamped.
STATIC   := -trimpath -buildvcs=auto -ldflags '-s -w $(STAMP)'

image:
	@builder=$$(command -v podman || command -v buildah) || { \
		echo "make image needs podman or buildah: install one, e.g. apt-get install podman" >&2; exit 1; }; \
	mkdir -p $(IMAGEDIR) && \
	CGO_ENABLED=0 $(GO) build $(STATIC) -o $(IMAGEDIR)/worker ./cmd/worker && \
	$$builder build -f deploy/image/Containerfile -t $(IMAGE) \
		--build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$(COMMIT) \
		$(IMAGEDIR)

# A release, in $(RELEASE): the static worker for each of RELEASE_PLATFORMS
# (flowstate-worker-<version>-<os>-<arch>), the Helm chart packaged
# (flowstate-<version>.tgz), and SHA256SUMS of them; the image too where
# podman or buildah exists. Everything is stamped with VERSION and the
# commit. Two releases of one commit are the same bytes, from any clone: the
# builds are -trimpath, and helm dates the chart's files at the commit's
# time (SOURCE_DATE_EPOCH) instead of their checkout's; `make release-check`
# builds twice and compares. Nothing is published.
RELEASE           := $(BIN)/release
RELEASE_PLATFORMS := linux/amd64 linux/arm64
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

release: $(HELM)
	@test ! -f .git || echo "make release: a git worktree, where the go command records no commit in the binaries (it only reads a .git directory): their bytes differ from a clone's build of the same commit; release from a clone" >&2
	rm -rf $(RELEASE) && mkdir -p $(RELEASE)
	@for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(RELEASE)/flowstate-worker-$(VERSION)-$$os-$$arch; \
		echo "go build $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(STATIC) -o $$out ./cmd/worker || exit 1; \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(HELM) package deploy/helm/flowstate --destination $(RELEASE)
	cd $(RELEASE) && sha256sum flowstate-* > SHA256SUMS && cat SHA256SUMS
	@if command -v podman >/dev/null 2>&1 || command -v buildah >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory image; \
	else \
		echo "make release: neither podman nor buildah is installed, so no image (install one, then make image)"; \
	fi

# The second build rebuilds every package (-a), so that it compares two
# compilations, not one compilation and the build cache's copy of it.
release-check:
	$(MAKE) --no-print-directory release RELEASE=$(BIN)/release-a
	GOFLAGS="$(GOFLAGS) -a" $(MAKE) --no-print-directory release RELEASE=$(BIN)/release-b
	cmp $(BIN)/release-a/SHA256SUMS $(BIN)/release-b/SHA256SUMS
	@echo "release-check: two builds of $(COMMIT) are the same bytes"

# The version skew test (e2e/skew_test.go) at length: SKEW_ROUNDS rounds of
# reports a phase instead of make test's 5.
SKEW_ROUNDS ?= 200

skew:
	FLOWSTATE_SKEW_ROUNDS=$(SKEW_ROUNDS) $(GO) test -count=1 -v -timeout 30m -run '^TestVersionSkew' ./e2e/

# The deployment files (deploy/): the Helm chart rendered with helm and
# decoded into the Kubernetes API types, the systemd unit verified with
# systemd-analyze, the image built with podman or buildah (each test skips,
# saying why, when its tool is missing). They live in a module of their own,
# deploy/test, so that the worker's module takes no Kubernetes dependency;
# helm is built from it, at the version its go.mod pins, once into bin/.
HELM := $(BIN)/helm

$(HELM): deploy/test/go.mod deploy/test/go.sum
	cd deploy/test && $(GO) build -o $(CURDIR)/$(HELM) helm.sh/helm/v4/cmd/helm

deploy-test: build $(HELM)
	cd deploy/test && FLOWSTATE_HELM=$(CURDIR)/$(HELM) $(GO) test -count=1 -timeout 10m ./...

# Go benchmarks of the hot paths and of the latency recorder, then the
# end-to-end load test against real nats-servers and workers (LOADTEST_ARGS,
# e.g. --runs 5; see docs/performance.md): raw NATS, the memory backend at
# several sizes, gets under ingest, RSS, deltas against full updates, a
# frontend following each, and acked reports on the memory backend beside
# the JetStream backend (R1, and R3 on three servers with three workers), in
# one run and one summary, and the 1,000,000-flow snapshot (a chunked get,
# then `worker get --json` of the same state: its time, peak RSS and exact
# bytes). The fan-out scenarios run only when named (go run ./e2e/loadtest
# --help).
# First, the Rust crate reads a state of 1,000,000 flows with a chunked get
# (FLOWSTATE_RUST_BIG_GET; `make test` reads 100,000); its log goes to
# bin/rustbench.txt.
LOADTEST_ARGS ?= --scenarios all,snapshot

bench: build nats-server
	cd $(RUST) && $(RUSTENV) FLOWSTATE_RUST_BIG_GET=1000000 $(CARGO) test --locked --release --test live a_get_of_many_flows -- --nocapture >$(CURDIR)/$(BIN)/rustbench.txt 2>&1; \
		status=$$?; grep -E '^(test |FIGURES)' $(BIN)/rustbench.txt; exit $$status
	$(GO) test -run '^$$' -bench . -benchmem ./codec/ ./flowstate/ ./state/ ./consumer/ ./internal/latency/ | tee $(BIN)/gobench.txt
	$(GO) run ./e2e/loadtest --go-bench $(BIN)/gobench.txt $(LOADTEST_ARGS)

# The attacks of docs/operating.md ("Hostile clients") at full size (FLOWSTATE_ATTACK=1): a million
# nodes, 200,000 nodes asked for their view, 2,000 nodes sharing 1,000 flows,
# 1.6 GB of 8 MB bodies, and the fullest stats state the default limits
# allow, filled over NATS and asked for its stats view again and again.
# `make test` runs the others at a size that fits a small machine; these
# two (shared flows, stats state) run only here.
# Each test logs a FIGURES line (peak RSS, latency of a legitimate ack and
# get during the attack, exit code);
# FLOWSTATE_E2E_WORKER=path runs them against another worker binary.
# The whole log goes to bin/attack.txt.
#
# Then the attacks on limits, state and text that the packages' tests
# reproduce (ATTACK_TESTS; docs/operating.md names each), and the stats
# view on the fullest state the default limits allow (a benchmark, 3
# rounds); their log goes to bin/attack-units.txt.
ATTACK_TESTS := TestErrorsAreLimited|TestReplicaKeepsNoEncodedMessage|TestReplicaPipelineCountsErrorsInFlight|TestManagerKeepsNoClearedError|TestReplicasWithDifferentLimitsHoldOneState|TestAnUnnumberedReportKeepsTheRetiredEpochsAcrossRestarts|TestStaleReportsOn|TestAFlowNamedOnlyByAnEmptyErrorArrayCountsForNothing|TestDecodeNodeHealthRejectsBrokenV3Fields|TestMergeHealthKeepsWhatSortingEveryErrorKeeps|TestJetStreamReplacesAnEpochThatIsNoEpoch|TestSendEscapesTheEpochAndTheReasonItPrints|TestTerminalJSONEscapesControlsAndKeepsTheValue|TestWorkerDeadLetterHeadersAreEscapedAndCut|TestNodesViewIsTheSameFromEveryWorker|TestAStatsViewTooLargeForOneMessageIsRefusedBeforeItIsRendered|TestRepairErrorsSendsWhatTheWorkerTakes|TestSendRepairsErrorListsAndLogsOnce
attack:
	mkdir -p $(BIN)
	FLOWSTATE_ATTACK=1 $(GO) test -count=1 -timeout 10m -v -run 'TestAttack' ./e2e/ >$(BIN)/attack.txt 2>&1; \
		status=$$?; grep -E '^(--- |ok|FAIL)|FIGURES' $(BIN)/attack.txt; [ $$status -eq 0 ] || exit $$status; \
	$(GO) test -count=1 -race -v -run '$(ATTACK_TESTS)' ./state/ ./flowstate/ ./kv/jetstream/ ./cmd/worker/ ./consumer/ ./client/ >$(BIN)/attack-units.txt 2>&1; \
		status=$$?; grep -E '^(--- |ok|FAIL)' $(BIN)/attack-units.txt; [ $$status -eq 0 ] || exit $$status; \
	$(GO) test -run '^$$' -bench 'StatsOfTheFullestDefaultState' -benchtime 3x ./consumer/ | tee -a $(BIN)/attack-units.txt | grep Benchmark

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 10m ./codec/

# The robustness test (e2e/chaos) for CHAOS_DURATION with a random seed,
# CHAOS_SEED to replay one (or several, comma-separated), or CHAOS_RUNS
# random seeds one after the other (a campaign: CHAOS_RUNS=10
# CHAOS_DURATION=5m). Each run prints its seed first and one line of
# figures last, a campaign one line of the seeds that passed and failed;
# the whole output is in $(BIN)/chaos.log. CHAOS_FAULTS picks the fault
# kinds (e.g. CHAOS_FAULTS=partition,process; docs/design.md, "Robustness testing") and
# CHAOS_STATE=large runs it on a 20,000-flow state.
# Then PARTITION_RUNS runs (0: none) of the partition test at full size
# (24 flownodes, the stream leader's routes stalled or cut for 20 s, in
# turn; make test runs three shorter ones, stalled only): every worker acknowledges again
# within 5 s of the heal; its output is in $(BIN)/partition.log.
CHAOS_DURATION ?= 10m
CHAOS_SEED     ?=
CHAOS_RUNS     ?= 1
PARTITION_RUNS ?= 10

chaos:
	mkdir -p $(BIN)
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) CHAOS_RUNS=$(CHAOS_RUNS) bash -o pipefail -c \
		'$(GO) test -count=1 -v -timeout 0 -run "^TestChaosLong$$" ./e2e/chaos/ 2>&1 | tee $(BIN)/chaos.log | grep --line-buffered "^chaos: "'
	if [ "$(PARTITION_RUNS)" -gt 0 ]; then \
		FLOWSTATE_PARTITION_RUNS=$(PARTITION_RUNS) FLOWSTATE_PARTITION_KINDS=stall,cut FLOWSTATE_PARTITION_LONG=1 bash -o pipefail -c \
			'$(GO) test -count=1 -v -timeout 0 -run "^TestEveryWorkerAnswersAfterTheStreamLeaderIsPartitioned$$" ./e2e/ 2>&1 | tee $(BIN)/partition.log | grep --line-buffered -E "partition_test.go|^ *--- |^(ok|FAIL)"'; \
	fi

clean:
	rm -rf $(BIN)
