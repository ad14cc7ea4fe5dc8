#!/usr/bin/env bash
# Builds a real etcd v3.6.4 and Kubernetes v1.34.2 from the Go module proxy (no prebuilt
# downloads). Prints the directory holding the binaries.
#
# Usage: build.sh [--node] [OUT_DIR]   (default ${SLUICE_K8S_TESTBIN:-~/.cache/sluice/k8s-testbin/v1.34.2})
#   etcd and kube-apiserver, for the tests that talk to a real Kubernetes API on loopback
#   (autoscale/knative, deploy/knative); with --node also kube-controller-manager,
#   kube-scheduler, kubelet, kube-proxy and kubectl, for the real cluster of test/e2e.
#
# The binaries live outside the repository so that a fresh clone in CI reuses them: the first
# build takes about 11 minutes on 2 cores (peak 1.8 GB RSS), --node about 10 more; later calls
# return at once. This directory is its own Go module so that the main module's go.mod does
# not pull in k8s.io/kubernetes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=v1.34.2
node=false
if [ "${1:-}" = --node ]; then node=true; shift; fi
out=${1:-${SLUICE_K8S_TESTBIN:-$HOME/.cache/sluice/k8s-testbin/$version}}
bins=(etcd kube-apiserver)
$node && bins+=(kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
have=true
for b in "${bins[@]}"; do [ -x "$out/$b" ] || have=false; done
if $have && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
# deps.sh and test/e2e/cluster/build.sh may run at once (.ci/run builds everything up front);
# the second waits here and then finds what the first built.
exec 9>"$out/.lock"
flock 9
missing=()
for b in "${bins[@]}"; do
  [ -x "$out/$b" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
  cd "$here"
  echo "k8s-testbin: building ${missing[*]} $version into $out (about 11 minutes the first time)" >&2
  start=$SECONDS
  V=k8s.io/component-base/version
  # Without the version flags kubectl cannot parse the server's version.
  ldflags="-s -w -X $V.gitVersion=$version -X $V.gitMajor=1 -X $V.gitMinor=34 -X $V.gitTreeState=clean"
  # Into a temporary directory and then renamed, so that an interrupted build never leaves a
  # half-written binary that the check above would take for a finished one. One `go build` for
  # the Kubernetes commands, so that their links overlap the compiles instead of following them.
  tmp=$(mktemp -d "$out/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  pkgs=()
  for b in "${missing[@]}"; do
    if [ "$b" = etcd ]; then
      go build -trimpath -ldflags="$ldflags" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    else
      pkgs+=("k8s.io/kubernetes/cmd/$b")
    fi
  done
  [ ${#pkgs[@]} -eq 0 ] || go build -trimpath -ldflags="$ldflags" -o "$tmp/" "${pkgs[@]}"
  for b in "${missing[@]}"; do mv "$tmp/$b" "$out/$b"; done
  echo "k8s-testbin: built ${missing[*]} in $((SECONDS - start))s" >&2
fi
echo "$version" > "$out/version"
echo "$out"
