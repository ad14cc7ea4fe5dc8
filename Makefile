# The README's test command is `make test`; .ci/run runs exactly that.
GO ?= go

.PHONY: test test-python test-python-torch deps build build-turbo image demo vet fmt-check e2e-knative

# Everything, then the packages whose code differs under the turbojpeg tag
# again in that build: functions/image and the functions and commands that
# import it (their tests' own imports included).
TURBOJPEG_PKGS = $(shell $(GO) list -tags turbojpeg -f '{{.ImportPath}} {{join .Deps " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./functions/... ./cmd/... | \
	awk '{ for (i = 1; i <= NF; i++) if ($$i == "github.com/sluice-project/sluice/functions/image") { print $$1; next } }')
test: deps fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -count=1 -timeout 10m -tags turbojpeg $(TURBOJPEG_PKGS)
	$(MAKE) test-python

# The Python client's unit tests, with Debian's python3 (torch, torchvision,
# numpy); the ones that run pipelines use a sluice built here.
SLUICE_PYTHON ?= /usr/bin/python3
test-python:
	@d=$$(mktemp -d) && trap 'rm -rf $$d' EXIT && $(GO) build -o $$d/sluice ./cmd/sluice && \
	PYTHONPATH=clients/python SLUICE_BIN=$$d/sluice $(SLUICE_PYTHON) -m unittest discover -s clients/python/tests -t clients/python/tests
	$(SLUICE_PYTHON) -m unittest discover -s bench/peers -p 'test_*.py'

# The same tests with PyPI's current torch (.ci/torch-current/requirements.txt: torch 2.15.0,
# torchvision 0.29.2, numpy 2.4.6) in a venv cached at ~/.cache/sluice/torch-current: about
# 3 GB from PyPI (torch's CUDA wheels) the first time. Opt-in: not part of make test.
test-python-torch:
	@venv=$$(bash .ci/torch-current/install.sh) && $(MAKE) --no-print-directory test-python SLUICE_PYTHON=$$venv/bin/python

deps:
	@bash .ci/deps.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags turbojpeg ./functions/... ./cmd/...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

build:
	$(GO) build -o bin/sluice ./cmd/sluice

# libjpeg-turbo through cgo: decodes only the region a crop needs, at a reduced DCT scale.
build-turbo: deps
	$(GO) build -tags turbojpeg -o bin/sluice ./cmd/sluice

# The container image, without a Docker daemon: bin/image/oci (an OCI image
# layout) and bin/image/sluice.tar (docker load). See deploy/knative.
IMAGE_TAG ?= sluice:dev
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image: deps
	$(GO) run ./deploy/image --out bin/image --tag $(IMAGE_TAG) --version $(VERSION)

demo:
	$(GO) run ./cmd/sluice demo

# Sluice beside tf.data (local and service), Ray Data, DALI, SPDL, torch's
# DataLoader, torchdata.nodes, HF datasets + tokenizers and tiktoken, on one
# dataset and the same two cores (bench/README.md, "Against the peers"). Installs the
# peers' pinned versions into ~/.cache/sluice/peers the first time (about
# 9 GB: PyPI's torch brings CUDA). Not part of test. PEERS_ARGS: e.g.
# "--json peers.json --png peers.png".
PEERS_DIR ?= $(HOME)/.cache/sluice/peers
bench-peers:
	SLUICE_PEERS_DIR=$(PEERS_DIR) bash bench/peers/install.sh
	SLUICE_PEERS_DIR=$(PEERS_DIR) nice -n 10 $(PEERS_DIR)/main/bin/python bench/peers/peers.py $(PEERS_ARGS)

# The real-cluster tests: Kubernetes v1.34.2, Knative Serving v0.42.2 and
# Traefik (its KIngress) built from the Go module proxy into
# ~/.cache/sluice/e2e, started in the network namespaces sluice-e2e(-2,-3), Sluice
# deployed from deploy/knative, the scenarios of test/e2e run, all torn
# down. Needs root. See test/e2e/run.sh for its settings.
e2e-knative:
	bash test/e2e/run.sh
