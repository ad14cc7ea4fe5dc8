#!/usr/bin/env bash
# Builds a real Prometheus server and promtool v0.316.0 from the Go module proxy (no prebuilt
# downloads), for the tests of deploy/observability: promtool checks and unit-tests the alert
# rules, the server scrapes a running `sluice demo` and answers every dashboard query. Prints
# the directory holding the binaries.
#
# Usage: build.sh [OUT_DIR]   (default ${SLUICE_PROMETHEUS:-~/.cache/sluice/prometheus}/v0.316.0)
#
# The binaries live outside the repository so that a fresh clone in CI reuses them; later
# calls return at once. The first build, from an empty Go build cache, took 9.5 minutes on 2
# cores shared with other builds (344 s of CPU, peak 980 MB RSS: promtool 408 s, then the
# server 164 s more); a full build, with every service discovery, had not finished promtool
# after 36 minutes. This directory is its own Go module so that the main module's go.mod
# does not pull in Prometheus's dependencies. The server is built without its web UI's assets
# (the builtinassets tag) and without service discovery but static and file targets (the
# remove_all_sd tag: the cloud SDKs it drops are most of the build): the tests use its HTTP API
# and static targets only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=v0.316.0
out=${1:-${SLUICE_PROMETHEUS:-$HOME/.cache/sluice/prometheus}/$version}
bins=(promtool prometheus)
have=true
for b in "${bins[@]}"; do [ -x "$out/$b" ] || have=false; done
if $have && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
cd "$here"
echo "prometheus: building ${bins[*]} $version into $out" >&2
start=$SECONDS
# Into a temporary directory, renamed when whole: an interrupted build leaves nothing the check
# above would take for a finished binary. One `go build` for both, so that they share a compile.
tmp=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -tags remove_all_sd -trimpath -ldflags="-s -w" -o "$tmp/" \
  github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/$b"; done
echo "prometheus: built in $((SECONDS - start))s" >&2
echo "$version" > "$out/version"
echo "$out"
