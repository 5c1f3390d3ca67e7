# ipfailover: the keepalived IP failover entrypoint.
# Targets run as root where they touch namespaces, iptables or keepalived.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= localhost/ipfailover:dev
GO      ?= go
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/ipfailover
FUZZTIME ?= 20s
# make chaos: the seed of the fault schedule (empty: a random one, printed),
# the run's length, and the fleet's advert interval (empty: 1 s).
SEED ?=
DURATION ?= 3m
ADVERT_INTERVAL ?=

# Linters, pinned. They are built once per machine into the Go path (a
# fresh machine spends about 2.5 minutes on golangci-lint) and reused by
# every clone.
GOLANGCI_LINT_VERSION := v2.15.0
DEADCODE_VERSION      := v0.52.0
# promtool tests the alert rules (deploy/components/alerts); the Prometheus
# module's v0.316.0 is Prometheus 3.16.0. A fresh machine spends a few
# minutes building it once; remove_all_sd leaves out the service discovery
# plugins, which rule tests do not use (and whose modules are large).
PROMTOOL_VERSION      := v0.316.0
TOOLS         := $(shell $(GO) env GOPATH)/pkg/ipfailover-tools
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
DEADCODE      := $(TOOLS)/deadcode-$(DEADCODE_VERSION)/deadcode
PROMTOOL      := $(TOOLS)/promtool-$(PROMTOOL_VERSION)/promtool
# Product packages: nothing exported there may be reachable from tests only.
PRODUCT_PKGS  := ^github.com/ipfailover/ipfailover/(config|iptables|internal/[a-z]+|cmd/[a-z]+)$$

.PHONY: all build deps test e2e demo bench chaos fuzz lint image image-test clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ipfailover

# deps installs what the tests, the demo and the benchmarks run, from
# Debian's packages: the table scripts/deps.txt, which a test holds against
# the code.
deps:
	./scripts/install-deps.sh

# test runs every test: unit, golden (checked by the real keepalived),
# root-only tests in network namespaces, the end-to-end failover suite, and
# the alert rules' promtool tests.
test: deps $(PROMTOOL)
	$(GO) vet ./...
	PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -timeout 15m ./...

e2e: deps
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/...

demo: deps
	$(GO) run ./cmd/demo

bench: deps
	$(GO) run ./cmd/bench -image $(IMAGE)

# chaos runs the lab's fleet under the faults the seed draws while a client
# probes every VIP, and writes out/chaos/seed-N/report.md and a timeline per
# VIP; it fails when a limit or an invariant is broken.
chaos: deps
	$(GO) run ./cmd/chaos -seed "$(SEED)" -duration $(DURATION) -advert-interval "$(ADVERT_INTERVAL)"

fuzz:
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParseVIPs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/keepalived -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/keepalived -run '^$$' -fuzz '^FuzzParseNotification$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/splitbrain -run '^$$' -fuzz '^FuzzParseAdvert$$' -fuzztime $(FUZZTIME)

# lint: vet, gofmt, go.mod tidy, golangci-lint (.golangci.yml), and
# deadcode twice: no function unreachable from the mains and the tests, and
# no product function that only tests reach.
lint: $(GOLANGCI_LINT) $(DEADCODE)
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) mod tidy -diff
	$(GOLANGCI_LINT) run ./...
	@out=$$($(DEADCODE) -test ./...); test -z "$$out" || { echo "dead code:"; echo "$$out"; exit 1; }
	@out=$$($(DEADCODE) -filter '$(PRODUCT_PKGS)' ./...); test -z "$$out" || { echo "product code only tests use:"; echo "$$out"; exit 1; }
	@echo "lint: clean"

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(DEADCODE):
	GOBIN=$(dir $@) $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)

$(PROMTOOL):
	GOBIN=$(dir $@) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

image:
	./scripts/install-deps.sh image
	IMAGE=$(IMAGE) VERSION=$(VERSION) ./images/build.sh

# image-test tests what the tree builds: it builds the image first (when
# nothing changed, podman's layer cache makes that a few seconds).
image-test: image
	IMAGE=$(IMAGE) ./images/image-test.sh

clean:
	rm -rf bin
