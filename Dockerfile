# The same image `make image` builds without a daemon (internal/ociimage):
# a statically linked sluice with libjpeg-turbo, run as non-root, entrypoint
# `sluice fn serve`. For those with Docker or BuildKit:
#   docker build -t registry.example.com/sluice:v0.1.0 --build-arg VERSION=v0.1.0 .
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjpeg62-turbo-dev libturbojpeg0-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -tags 'turbojpeg netgo osusergo' -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -linkmode external -extldflags -static" \
      -o /out/sluice ./cmd/sluice

# distroless/static has the CA bundle, /etc/passwd with nonroot (65532) and
# /tmp, as the daemonless image does.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
USER 65532:65532
ENV PORT=8080
EXPOSE 8080
ENTRYPOINT ["/sluice", "fn", "serve"]
