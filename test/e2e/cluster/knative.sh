#!/usr/bin/env bash
# Writes Knative Serving v0.42.2's core as one manifest (OUT), assembled from the Go modules the
# Knative binaries were built from: serving's config/core (its module zip drops the symlinks
# there, so the networking and caching CRDs come from their own modules), every ko:// image
# replaced by the dev.local image build.sh made. (up.sh sets Traefik as the ingress
# class with a patch: the configmaps' _example blocks are checksummed by Knative's webhook.)
# Usage: knative.sh OUT   (writes OUT-crds.yaml, to apply and wait for first, and OUT.yaml)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
dir() { (cd "$here/tools/knative" && go list -m -f '{{.Dir}}' "$1"); }
ks=$(dir knative.dev/serving)/config/core
kn=$(dir knative.dev/networking)/config
kc=$(dir knative.dev/caching)/config
crds=(
  "$ks"/300-resources/*.yaml "$kn"/certificate.yaml "$kn"/domain-claim.yaml "$kn"/ingress.yaml
  "$kn"/serverlessservice.yaml "$kc"/image.yaml
)
files=(
  "$ks"/100-namespace.yaml "$ks"/200-roles/*.yaml "$ks"/200-serviceaccount.yaml
  "$ks"/configmaps/*.yaml "$kn"/config-network.yaml
  "$ks"/deployments/activator.yaml "$ks"/deployments/autoscaler.yaml
  "$ks"/deployments/controller.yaml "$ks"/deployments/webhook.yaml
  "$ks"/webhooks/*.yaml "$ks"/999-cache.yaml
)
# The HPAs of the activator and webhook are left out: there is no metrics server.
cat_all() {
  for f in "$@"; do
    echo "---"
    cat "$f"
  done | sed -E -e 's#ko://knative.dev/serving/cmd/([a-z-]+)#dev.local/knative-\1:v0.42.2#'
}
cat_all "${crds[@]}" >"$out-crds.yaml"
cat_all "${files[@]}" >"$out.yaml"
