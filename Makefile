# ipfailover: the keepalived IP failover entrypoint.
# Targets run as root where they touch namespaces, iptables or keepalived.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= localhost/ipfailover:dev
GO      ?= go
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/ipfailover
FUZZTIME ?= 20s

.PHONY: all build deps test e2e demo bench fuzz lint image image-test clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ipfailover

# deps installs what the tests, the demo and the benchmarks need on Debian.
deps:
	./scripts/install-deps.sh

# test runs every test: unit, golden (checked by the real keepalived),
# root-only tests in network namespaces, and the end-to-end failover suite.
test: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m ./...

e2e: deps
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/...

demo: deps
	$(GO) run ./cmd/demo

bench: deps
	$(GO) run ./cmd/bench

fuzz:
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParseVIPs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/keepalived -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME)

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) mod tidy -diff

image:
	./scripts/install-deps.sh image
	IMAGE=$(IMAGE) VERSION=$(VERSION) ./images/build.sh

image-test:
	./scripts/install-deps.sh image
	IMAGE=$(IMAGE) VERSION=$(VERSION) ./images/image-test.sh

clean:
	rm -rf bin
