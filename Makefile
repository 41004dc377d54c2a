# swarmgate — one Makefile. `make run` and `make test` work on a fresh machine
# with only Go installed: they install and start what they need themselves.
GO        ?= go
BIN       := bin/swarmgate
# The version `swarmgate --version` prints (and the build_info metric carries).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PKGS      := ./...
TEST_TIMEOUT ?= 25m
export GOFLAGS ?= -buildvcs=false
SHELL     := bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: all build run test test-short deps lint fmt vet tidy bench loadtest swarm golden proto fuzz clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/swarmgate

deps:
	@./scripts/deps.sh

## run: start the gateway on the embedded default config (plus Redis and two mock relays).
run: build
	@SWARMGATE_NO_CHROMIUM=1 ./scripts/deps.sh
	@./scripts/run.sh

## test: every test, race detector on, against a real redis-server each test
## starts itself and the real Envoy releases (1.38.x and the newest) that
## `deps` installs. The log lists each test run on a real Envoy by version.
test: deps lint
	$(GO) build -o bin/testlog ./test/testlog
	$(GO) test -race -json -timeout $(TEST_TIMEOUT) $(PKGS) | bin/testlog
	# the portable (non-assembly) request scan, as other architectures build it
	$(GO) test -tags purego ./internal/jsonscan/ ./internal/chatreq/

test-short: deps
	$(GO) test -short $(PKGS)

lint: fmt vet tidy

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# go.mod and go.sum say exactly what the code imports (a stale require is a
# dependency nobody reviews).
tidy:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }

## bench: Go benchmarks with -benchmem; compare runs with benchstat.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count $${COUNT:-1} $(PKGS) | tee bench.out

## loadtest: the ext_proc load generator, swarmgate against a do-nothing baseline, then the real-Envoy
## benchmark (results in test/bench/results/; ONLY=envoy for the Envoy benchmark alone).
loadtest: deps
	@./test/bench/run.sh

## swarm: the full swarm simulation (500 agents, three relays, policy vs one-key baseline; the policy also
## through the real Envoy at 100 and 500 agents).
swarm: deps
	SWARMGATE_SWARM_FULL=1 $(GO) test -count=1 -timeout 20m -run TestSwarm -v ./test/swarm/

## golden: regenerate the xDS golden files from testdata configs.
golden:
	$(GO) test ./xds/translator/ -run TestGolden -update
	$(GO) test ./xds/bootstrap/ -update
	$(GO) test ./deploy/ -run TestGenerated -update

## proto: regenerate protos/ Go code (needs protoc; installed from Debian if missing).
proto:
	@SWARMGATE_WITH_PROTOC=1 ./scripts/deps.sh
	@./scripts/proto.sh

## fuzz: a longer fuzz run of each fuzz target (the seed corpus runs in `make test`).
fuzz:
	@./scripts/fuzz.sh $${FUZZTIME:-30s}

clean:
	rm -rf bin .run bench.out
