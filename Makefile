# xds-relay — a caching xDS relay proxy.
#   make demo    a demo control plane, the relay and 1,000 simulated clients (~20 s)
#   make test    the whole suite with -race (what CI runs)

SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin
CMDS    := xds-relay xds-loadgen xds-democp xds-bench

# Demo knobs: make demo CLIENTS=2000 DEMO_SECONDS=30
CLIENTS      ?= 1000
CLUSTERS     ?= 100
DEMO_SECONDS ?= 20
CHURN        ?= 2/s

.PHONY: all build test test-short deps lint fuzz soak demo bench release release-check clean tools check-manifests

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# The whole suite, race detector on, as CI runs it. The real third-party
# clients it runs (Node's grpc-js-xds, Debian's python3-grpcio, Chromium) are
# installed first when missing: a second or so when they are in place; when
# one cannot be installed, make test stops and names the command. No test is
# skipped for a missing client.
test: lint deps
	$(GO) test -race -count=1 -timeout 12m ./...

# Without the real clients, race detector or long tests.
test-short:
	$(GO) test -count=1 -short ./...

deps:
	@.ci/install-clients.sh node python || { \
	  echo "make test: the Node and Python xDS clients are missing and could not be installed:"; \
	  echo "  run .ci/install-clients.sh (needs npm, and apt-get on Debian)"; exit 1; }
	@.ci/install-chromium.sh || { \
	  echo "make test: Chromium (/usr/bin/chromium) is missing and could not be installed:"; \
	  echo "  run .ci/install-chromium.sh as root (apt-get), or install chromium"; exit 1; }

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The manifests and alert rules checked with the real tools, pinned:
# kustomize renders deploy/kubernetes and every other kustomization under
# deploy/, helm lints the chart deploy/helm/xds-relay, and go test ./deploy/
# checks what both render (rendered_test.go, helm_test.go: the chart's
# objects equal the base's); kubeconform -strict validates every rendered
# set (each kustomization, the chart with default values and with
# createNamespace=true) against the OpenAPI schemas of each Kubernetes
# version of KUBERNETES_VERSIONS (the Prometheus operator's PodMonitor and
# PrometheusRule, CRD objects with no schema there, skipped by name);
# promtool lints deploy/prometheus/alerts.yaml (check rules --lint=all) and
# runs the alert scenarios of deploy/prometheus/tests (test rules). The tools
# are built from the Go module proxy into $(TOOLS), outside the clone so that
# later runs on the machine reuse them, on first use (`make tools`; promtool
# is the slow one: its service discovery pulls in the cloud SDKs, ~17
# CPU-minutes, so ~10 min on an idle 2-core machine; helm takes ~6.5
# CPU-minutes) and kept there by version. The schemas too, with no other
# network: scripts/k8s-json-schemas.py makes the standalone-strict JSON
# schemas kubeconform expects from api/openapi-spec/swagger.json of the
# module zip k8s.io/kubernetes@vX.Y.Z (~17 MB each), with the converter of the
# kubeconform module (scripts/openapi2jsonschema.py, run from the module
# cache), into $(K8S_SCHEMAS)/vX.Y.Z-standalone-strict/ (a few seconds and
# ~18 MB a version). kustomize v5.8.3 and later need Go 1.27.
KUSTOMIZE_VERSION ?= v5.8.2
PROMTOOL_VERSION  ?= v0.316.0
HELM_VERSION      ?= v3.22.0
KUBECONFORM_VERSION ?= v0.8.0
# The Kubernetes minor versions the manifests are validated against, each at
# a patch release of k8s.io/kubernetes the Go module proxy serves.
KUBERNETES_VERSIONS ?= 1.29.6 1.30.14 1.31.14 1.32.13
TOOLS     ?= $(shell $(GO) env GOPATH)/xds-relay-tools
KUSTOMIZE := $(TOOLS)/kustomize-$(KUSTOMIZE_VERSION)
PROMTOOL  := $(TOOLS)/promtool-$(PROMTOOL_VERSION)
HELM      := $(TOOLS)/helm-$(HELM_VERSION)
KUBECONFORM := $(TOOLS)/kubeconform-$(KUBECONFORM_VERSION)
# -g1: what scripts/k8s-json-schemas.py writes; bump it when that changes.
K8S_SCHEMAS := $(TOOLS)/kubernetes-json-schema-g1
K8S_SCHEMA_SETS := $(foreach v,$(KUBERNETES_VERSIONS),$(K8S_SCHEMAS)/v$(v)-standalone-strict/.complete)
# CRD objects (the Prometheus operator's, deploy/prometheus-operator): the
# Kubernetes API's schemas have none, so kubeconform skips exactly these.
KUBECONFORM_SKIP := monitoring.coreos.com/v1/PodMonitor,monitoring.coreos.com/v1/PrometheusRule

tools: $(KUSTOMIZE) $(PROMTOOL) $(HELM) $(KUBECONFORM) $(K8S_SCHEMA_SETS)

$(PROMTOOL):
	@mkdir -p $(TOOLS)/.gobin-promtool
	GOBIN=$(TOOLS)/.gobin-promtool $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	mv $(TOOLS)/.gobin-promtool/promtool $@

$(HELM):
	@mkdir -p $(TOOLS)/.gobin-helm
	GOBIN=$(TOOLS)/.gobin-helm $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS)/.gobin-helm/helm $@

$(KUSTOMIZE):
	@mkdir -p $(TOOLS)/.gobin-kustomize
	GOBIN=$(TOOLS)/.gobin-kustomize $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(TOOLS)/.gobin-kustomize/kustomize $@

$(KUBECONFORM):
	@mkdir -p $(TOOLS)/.gobin-kubeconform
	GOBIN=$(TOOLS)/.gobin-kubeconform $(GO) install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)
	mv $(TOOLS)/.gobin-kubeconform/kubeconform $@

# The converter imports PyYAML (Debian: python3-yaml).
$(K8S_SCHEMAS)/v%-standalone-strict/.complete:
	@python3 -c 'import yaml' 2>/dev/null || { echo "make tools: python3 with PyYAML is needed for the Kubernetes schemas (Debian: apt-get install python3-yaml)"; exit 1; }
	python3 scripts/k8s-json-schemas.py $(GO) $(KUBECONFORM_VERSION) $* $(K8S_SCHEMAS)

# Every rendered set into a temporary directory, then kubeconform over it
# once per Kubernetes version; any invalid object, or one with no schema
# (but the skipped CRD kinds), fails the target.
check-manifests: tools
	@set -eo pipefail; out=$$(mktemp -d); trap 'rm -rf $$out' EXIT; \
	for k in $$(find deploy -name kustomization.yaml -o -name kustomization.yml | sort); do \
	  d=$$(dirname $$k); echo "kustomize build $$d"; \
	  $(KUSTOMIZE) build $$d > $$out/kustomize-$$(echo $$d | tr / -).yaml; \
	done; \
	echo "helm template deploy/helm/xds-relay (default values; --set createNamespace=true)"; \
	$(HELM) template xds-relay deploy/helm/xds-relay --namespace xds-relay > $$out/helm-xds-relay.yaml; \
	$(HELM) template xds-relay deploy/helm/xds-relay --namespace xds-relay --set createNamespace=true > $$out/helm-xds-relay-namespace.yaml; \
	for v in $(KUBERNETES_VERSIONS); do \
	  echo "kubeconform -strict, Kubernetes $$v ($$(ls $$out | tr '\n' ' '))"; \
	  $(KUBECONFORM) -strict -summary -kubernetes-version $$v -skip $(KUBECONFORM_SKIP) \
	    -schema-location '$(K8S_SCHEMAS)/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json' \
	    $$out; \
	done
	$(HELM) lint --strict deploy/helm/xds-relay
	XDS_RELAY_KUSTOMIZE=$(KUSTOMIZE) XDS_RELAY_HELM=$(HELM) $(GO) test -count=1 ./deploy/
	$(PROMTOOL) check rules --lint=all --lint-fatal deploy/prometheus/alerts.yaml
	$(PROMTOOL) test rules deploy/prometheus/tests/*.yaml

# Each fuzz target briefly (FUZZTIME=1m for longer runs).
FUZZTIME ?= 10s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# The long variants of the chaos and soak tests (integration/soak_test.go),
# then the oracle (internal/oracle) on fresh random seeds for as long again:
# a failure prints its seed and shrunk schedule.
SOAKTIME ?= 2h
soak:
	$(GO) test -race -count=1 -timeout $(SOAKTIME) -run 'Chaos|Soak' ./integration/ -soak
	$(GO) test -count=1 -timeout 0 -run 'TestOracle$$' ./internal/oracle -oracle.duration $(SOAKTIME) -oracle.large

# democp → relay → loadgen on loopback; prints the live progress line and the
# summary. Ports: democp 18000, relay 18001, relay admin 9902.
demo: build
	@set -uo pipefail; \
	for p in 18000 18001 9902; do \
	  if (exec 3<>/dev/tcp/127.0.0.1/$$p) 2>/dev/null; then echo "port $$p is in use: stop what listens there first"; exit 1; fi; \
	done; \
	trap 'kill $$cp $$relay 2>/dev/null; wait 2>/dev/null' EXIT; \
	echo "== control plane: $(CLUSTERS) clusters, churn $(CHURN) (127.0.0.1:18000)"; \
	$(BIN)/xds-democp --listen 127.0.0.1:18000 --clusters $(CLUSTERS) --churn $(CHURN) --churn-types cds,eds --log-level warn & cp=$$!; \
	echo "== relay: 127.0.0.1:18001, status page http://127.0.0.1:9902/"; \
	$(BIN)/xds-relay --listen 127.0.0.1:18001 --admin 127.0.0.1:9902 --upstream 127.0.0.1:18000 --log-level warn & relay=$$!; \
	for i in $$(seq 50); do curl -sf 127.0.0.1:9902/readyz >/dev/null && break; sleep 0.1; done; \
	curl -sf 127.0.0.1:9902/readyz >/dev/null || { echo "relay did not become ready"; exit 1; }; \
	echo "== $(CLIENTS) Envoy-like clients (wildcard CDS/LDS, then EDS/RDS) through the relay for $(DEMO_SECONDS)s"; \
	ulimit -n 20000 2>/dev/null || true; \
	$(BIN)/xds-loadgen --target 127.0.0.1:18001 --clients $(CLIENTS) --mode envoy --duration $(DEMO_SECONDS)s; rc=$$?; \
	echo; echo "== what the relay saw (its /metrics): the upstream got one stream, the fleet got the fan-out"; \
	curl -s 127.0.0.1:9902/metrics | grep -E '^xds_relay_(upstream_connected|upstream_responses_total|downstream_streams|responses_total|response_bytes_total)' | grep -v ' 0$$'; \
	exit $$rc

# The Go microbenchmarks, then the fan-out suite (cmd/xds-bench, see
# docs/BENCHMARKS.md): go-control-plane serving the clients directly, the relay
# in front of it, a bare grpc-go server (the gRPC floor) and plain TCP writes,
# side by side; prints a Markdown table.
# Quicker: make bench BENCH_CLIENTS=2000. Target 5 (100,000 streams, minutes):
# make bench BENCH_FLAGS='--runs limit,floor,sotw,delta,streams'. Every fleet shape
# of issue 13 beside the baseline and the limit (Envoy-like and gRPC-like
# clients, 5,000 stuck beside 1,000 healthy ones, a new client's and the admin
# page's latency during a fan-out, democp → relay → 2 relays → clients):
# make bench BENCH_FLAGS='--runs shapes' (limit,floor,sotw,grpc,stuck,latency,tiered;
# each can be named alone).
BENCH_CLIENTS ?= 10000
BENCH_FLAGS   ?=
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./downstream/ ./relay/ ./keying/
	@ulimit -n 20000 2>/dev/null || true; \
	$(BIN)/xds-bench --bin $(BIN) --clients $(BENCH_CLIENTS) $(BENCH_FLAGS)

# A release into dist/: the binaries of cmd/ for linux/amd64 and linux/arm64,
# built reproducibly (scripts/release.sh says how), a .tar.gz per platform,
# SHA256SUMS and BUILDINFO; then the image of deploy/Dockerfile for both
# platforms (an OCI archive) when docker (daemon and buildx) or podman can
# build it — otherwise it says the image was not built. VERSION defaults to
# git describe; SOURCE_DATE_EPOCH to the commit's time; IMAGE=yes fails
# without an engine, IMAGE=no skips it.
release:
	VERSION=$(VERSION) scripts/release.sh release

# Builds one binary twice (from this checkout, and from a copy of its tracked
# files at another path with other mtimes) and fails unless the binaries and
# their archives are byte-identical. Minutes on a small machine, so not part
# of make test: .ci/run calls it.
release-check:
	VERSION=$(VERSION) scripts/release.sh check

clean:
	rm -rf $(BIN) dist
