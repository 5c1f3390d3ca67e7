# ipfailover: the keepalived IP failover entrypoint.
# Targets run as root where they touch namespaces, iptables or keepalived.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= localhost/ipfailover:dev
GO      ?= go
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/ipfailover
FUZZTIME ?= 20s
# make chaos: the seed of the fault schedule (empty: a random one, printed),
# the run's length, the fleet's advert interval (empty: 1 s), and where:
# lab (network namespaces) or kube (the real cluster of test/kube).
SEED ?=
DURATION ?= 3m
ADVERT_INTERVAL ?=
TARGET ?= lab

# Linters, pinned. They are built once per machine into the Go path (a
# fresh machine spends about 2.5 minutes on golangci-lint) and reused by
# every clone.
GOLANGCI_LINT_VERSION := v2.15.0
DEADCODE_VERSION      := v0.52.0
# promtool tests the alert rules (deploy/components/alerts); the Prometheus
# server, of the same release, runs the dashboard's queries on a lab fleet
# (test/dashboard). The Prometheus module's v0.316.0 is Prometheus 3.16.0.
# A fresh machine spends a few minutes building each once; remove_all_sd
# leaves out the service discovery plugins, whose modules are large and
# which neither uses (rule tests scrape nothing, the lab's targets are
# static).
PROMETHEUS_VERSION    := v0.316.0
TOOLS         := $(shell $(GO) env GOPATH)/pkg/ipfailover-tools
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
DEADCODE      := $(TOOLS)/deadcode-$(DEADCODE_VERSION)/deadcode
PROMTOOL      := $(TOOLS)/promtool-$(PROMETHEUS_VERSION)/promtool
PROMETHEUS    := $(TOOLS)/prometheus-$(PROMETHEUS_VERSION)/prometheus
# Product packages: nothing exported there may be reachable from tests only.
PRODUCT_PKGS  := ^github.com/ipfailover/ipfailover/(config|iptables|internal/[a-z]+|cmd/ipfailover)$$

.PHONY: all build deps test e2e demo bench chaos perf-docs reference dashboard dashboard-picture fuzz lint image image-test old-image clean kube-deps kube-bins kube-up kube-down kube-test

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ipfailover

# deps installs what the tests, the demo and the benchmarks run, from
# Debian's packages: the table scripts/deps.txt, which a test holds against
# the code.
deps:
	./scripts/install-deps.sh

# test runs every test: unit, golden (checked by the real keepalived),
# root-only tests in network namespaces, the end-to-end failover suite, the
# alert rules' promtool tests, and the dashboard's queries on a real
# Prometheus. The product's packages (UNIT_PKGS) run under the race detector
# (cgo: gcc, which deps installs); the harness's suites, which drive real
# processes, run without it.
UNIT_PKGS := ./cmd/ipfailover/... ./config/... ./iptables/... ./internal/...
test: deps $(PROMTOOL) $(PROMETHEUS)
	$(GO) vet ./...
	PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -race -timeout 15m $(UNIT_PKGS)
	PROMTOOL=$(PROMTOOL) PROMETHEUS=$(PROMETHEUS) $(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -v -E '/ipfailover/(cmd/ipfailover|config|iptables|internal)(/|$$)')

e2e: deps
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/...

demo: deps
	$(GO) run ./test/cmd/demo

# bench's kube phases run the manifests on a real cluster: they need the
# Kubernetes binaries and the image. UPGRADE_FROM (an image podman has,
# such as an older commit's make image) adds the rolling update from it
# and the rollback to it.
UPGRADE_FROM ?=
bench: deps kube-bins image
	$(GO) run ./test/cmd/bench -kube-bin $(KUBE_BIN) -image $(IMAGE) -upgrade-from "$(UPGRADE_FROM)"

# chaos runs the fleet under the faults the seed draws while a client probes
# every VIP, and writes out/chaos/seed-N/report.md and a timeline per VIP;
# it fails when a limit or an invariant is broken. TARGET=kube runs it on a
# real cluster (it needs the Kubernetes binaries and the image).
chaos: deps $(if $(filter kube,$(TARGET)),kube-bins image)
	$(GO) run ./test/cmd/chaos -seed "$(SEED)" -duration $(DURATION) -advert-interval "$(ADVERT_INTERVAL)" -target $(TARGET) -kube-bin $(KUBE_BIN) -image $(IMAGE)

# reference rewrites docs/reference/ (settings, metrics, alerts) from the
# code and the alert rules; make test fails while they differ.
reference:
	$(GO) test -count=1 ./config ./internal/metrics ./deploy -run '^Test(Settings|Metrics|Alerts)Reference$$' -update

# dashboard rewrites deploy/components/dashboard/ipfailover.json and
# docs/reference/dashboard.md from the generator (test/dashboard); make
# test fails while they differ.
dashboard:
	$(GO) test -count=1 ./test/dashboard -run '^TestDashboard(JSON|Reference)$$' -update

# dashboard-picture runs the dashboard's queries on a lab fleet (as root)
# and draws its main panels from the run into docs/dashboard.svg.
dashboard-picture: deps $(PROMETHEUS)
	PROMETHEUS=$(PROMETHEUS) $(GO) test -count=1 -timeout 10m ./test/dashboard -run '^TestDashboardOnAFleet$$' -picture

# perf-docs writes docs/performance/results.md from the last runs' outputs:
# make bench's table (BENCH_MD) and make chaos's reports (CHAOS_REPORTS),
# each with its commit, date and machine. PERF_NOTE adds a note a reader of
# the tables needs (where the figures come from when they are not this
# machine's last runs); the notes are held to a few lines.
BENCH_MD      ?= out/bench.md
CHAOS_REPORTS ?= $(wildcard out/chaos/*/report.md)
# (The note goes through the environment, so that its quotes and
# backticks reach the page as written.)
PERF_NOTE     ?=
export PERF_NOTE
# BENCH_EXTRA: tables of later partial runs (make bench's -only), shown
# after the whole run's.
BENCH_EXTRA   ?=
# PERF_PREVIOUS=docs/performance/results.md carries the page forward
# instead (its bench part, notes and chaos runs), adding BENCH_EXTRA,
# CHAOS_REPORTS and PERF_NOTE: for a machine that has new runs but not the
# bench outputs the page was made from. PERF_REPLACE_NOTES=1 drops the
# carried notes, PERF_NOTE then being the only one.
PERF_PREVIOUS ?=
PERF_REPLACE_NOTES ?=
perf-docs:
	$(GO) run ./test/cmd/perfdocs $(if $(PERF_PREVIOUS),-previous $(PERF_PREVIOUS),-bench $(BENCH_MD)) $(if $(PERF_REPLACE_NOTES),-replace-notes) $(foreach f,$(BENCH_EXTRA),-extra $(f)) -note "$$PERF_NOTE" -o docs/performance/results.md $(CHAOS_REPORTS)

fuzz:
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParseVIPs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/keepalived -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/keepalived -run '^$$' -fuzz '^FuzzParseNotification$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/supervisor -run '^$$' -fuzz '^FuzzCopyOutput$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/splitbrain -run '^$$' -fuzz '^FuzzParseAdvert$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/host -run '^$$' -fuzz '^FuzzParseAddrMessages$$' -fuzztime $(FUZZTIME)

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
	GOBIN=$(dir $@) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

$(PROMETHEUS):
	GOBIN=$(dir $@) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)

image:
	./scripts/install-deps.sh image
	IMAGE=$(IMAGE) VERSION=$(VERSION) ./images/build.sh

# image-test tests what the tree builds: it builds the image first (when
# nothing changed, podman's layer cache makes that a few seconds).
image-test: image
	IMAGE=$(IMAGE) ./images/image-test.sh

# --- the test Kubernetes cluster (test/kube) ---------------------------------
# Kubernetes is built from the Go module proxy at the release
# test/kube/k8s/go.mod pins (its own module: the product's go.mod does not
# grow). A machine's first build takes about 10 minutes and 3 GB on 2 cores
# (4 GB of build cache); after that a few seconds. etcd is unpacked from
# Debian's etcd-server (installing it would start a service), the pause
# binary compiled from the pause.c inside the Kubernetes module (its version,
# 3.10.2, is the pause image tag test/kube imports: sandboxImage).
KUBE_MOD     := test/kube/k8s
KUBE_BIN     := bin/kube
KUBE_VERSION := $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[^ ]*\).*|\1|p' $(KUBE_MOD)/go.mod)
KUBE_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(KUBE_VERSION) -X $(p).gitMajor=$(word 2,$(subst ., ,$(KUBE_VERSION:v%=x.%))) -X $(p).gitMinor=$(word 3,$(subst ., ,$(KUBE_VERSION:v%=x.%))) -X $(p).gitTreeState=clean)
KUBELAB      := bin/kubelab

kube-deps:
	./scripts/install-deps.sh kube

kube-bins: kube-deps
	cd $(KUBE_MOD) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(CURDIR)/$(KUBE_BIN)/ tool
	$(MAKE) $(KUBE_BIN)/etcd $(KUBE_BIN)/pause

$(KUBE_BIN)/etcd:
	@mkdir -p $(KUBE_BIN)
	tmp=$$(mktemp -d) && cd $$tmp && chmod 755 . && \
	  { apt-get download etcd-server >/dev/null 2>&1 || { apt-get update -qq && apt-get download etcd-server >/dev/null; }; } && \
	  dpkg-deb -x etcd-server_*.deb root && cp root/usr/bin/etcd $(CURDIR)/$@ && cd / && rm -rf $$tmp

$(KUBE_BIN)/pause: $(KUBE_MOD)/go.mod
	@mkdir -p $(KUBE_BIN)
	gcc -Os -Wall -Werror -static -DVERSION=v3.10.2 -o $@ \
	  "$$(cd $(KUBE_MOD) && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"

$(KUBELAB): FORCE
	$(GO) build -o $@ ./test/cmd/kubelab

# kube-up leaves a cluster running with `make image` imported into every
# node and a service on port 8080 of every node, and prints what the
# README's quick start needs; kube-down removes it (safe to run twice).
kube-up: kube-bins image $(KUBELAB)
	$(KUBELAB) up -bin $(KUBE_BIN) -image $(IMAGE) -service-port 8080

kube-down: $(KUBELAB)
	$(KUBELAB) down

# OLD_IMAGE is the image of OLD_COMMIT, the last commit whose pods speak
# VRRPv2 with unicast peers: make kube-test rolls the workload from it and
# back. Built once from a worktree of that commit (the clone's history
# must have it), with the same base images.
OLD_COMMIT := b338bc2
OLD_IMAGE  := localhost/ipfailover:$(OLD_COMMIT)

old-image:
	@podman --runtime /usr/sbin/runc image exists $(OLD_IMAGE) || { \
	  git cat-file -e $(OLD_COMMIT)^{commit} 2>/dev/null || { echo "old-image: this clone's history lacks $(OLD_COMMIT) (a shallow clone?)" >&2; exit 1; }; \
	  d=$$(mktemp -d /var/tmp/ipfailover-$(OLD_COMMIT).XXXXXX) && git worktree add -q --detach $$d $(OLD_COMMIT) && \
	  IMAGE=$(OLD_IMAGE) VERSION=$(OLD_COMMIT) $$d/images/build.sh; rc=$$?; git worktree remove --force $$d; exit $$rc; }

# kube-test: the cluster's own tests (a second cluster up and down leaves
# the machine as it found it), then the manifests' scenarios on a cluster
# from kube-up, which goes away whatever the result.
kube-test: kube-bins image old-image $(KUBELAB)
	IPFAILOVER_KUBE_BIN=$(CURDIR)/$(KUBE_BIN) $(GO) test -count=1 -timeout 10m ./test/kube/
	$(KUBELAB) up -bin $(KUBE_BIN) -image $(IMAGE) -image $(OLD_IMAGE)
	IPFAILOVER_KUBE=$(CURDIR)/out/kube IPFAILOVER_IMAGE=$(IMAGE) IPFAILOVER_OLD_IMAGE=$(OLD_IMAGE) \
	  $(GO) test -count=1 -timeout 45m -v ./test/kubee2e/; \
	  rc=$$?; $(KUBELAB) down; exit $$rc

FORCE:

clean:
	rm -rf bin
