# The README's test command is `make test`; .ci/run runs exactly that.
GO ?= go

.PHONY: test build demo vet fmt-check

test: fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

build:
	$(GO) build -o bin/sluice ./cmd/sluice

demo:
	$(GO) run ./cmd/sluice demo
