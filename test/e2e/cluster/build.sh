#!/usr/bin/env bash
# Builds everything the real cluster runs, from the Go module proxy and Debian's packages, into a
# cache outside the repository (a fresh clone reuses it): Kubernetes v1.34.2 and etcd, CoreDNS,
# Knative Serving v0.42.2's core, Traefik v3 (the KIngress), the kn CLI, nats-server, versitygw
# (S3), a pause image, a minimal Service's (floor), Sluice's own image and the trainer pods' (Debian's
# Python, numpy, the Python client). Prints the cache directory.
#
# Usage: build.sh            (cache: ${SLUICE_E2E_CACHE:-~/.cache/sluice/e2e})
# Every step is skipped when its output is there; only Sluice's and the trainer's images are built
# each time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${SLUICE_E2E_CACHE:-$HOME/.cache/sluice/e2e}
bin=$cache/bin images=$cache/images
mkdir -p "$bin" "$images"
export CGO_ENABLED=0
log() { echo "e2e build: $*" >&2; }
t0=$SECONDS

# Debian's container runtime, CNI plugins and the tools kube-proxy and kubelet run.
need=()
for p in containerd:containerd runc:runc iptables:iptables conntrack:conntrack socat:socat; do
  command -v "${p%%:*}" >/dev/null || need+=("${p##*:}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} (Debian)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi


# image NAME TAG BINARY [ENTRYPOINT ARGS]: packs a static binary as dev.local/NAME:TAG.
image() {
  local name=$1 tag=$2 binary=$3 entry=${4:-}
  [ -f "$images/$name-$tag.tar" ] && return 0
  (cd "$root" && go run ./test/e2e/cluster/pack --binary "$binary" --tag "dev.local/$name:$tag" \
    --entrypoint "$entry" --out "$images/$name-$tag.tar.tmp")
  mv "$images/$name-$tag.tar.tmp" "$images/$name-$tag.tar"
}
# gobuild DIR OUT PKG: one static binary from the module in DIR, unless OUT exists.
gobuild() {
  [ -x "$2" ] && return 0
  log "building $3"
  (cd "$1" && go build -trimpath -ldflags="-s -w" -o "$2.tmp" "$3")
  mv "$2.tmp" "$2"
}

kubernetes() {
  local k8s
  k8s=$(bash "$root/.ci/k8s-testbin/build.sh" --node)
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    ln -sf "$k8s/$b" "$bin/$b"
  done
}
tools() {
  ks=v0.42.2
  for c in controller webhook activator autoscaler queue; do
    gobuild "$here/tools/knative" "$bin/knative-$c-$ks" "knative.dev/serving/cmd/$c"
    image "knative-$c" "$ks" "$bin/knative-$c-$ks"
  done
  gobuild "$here/tools/coredns" "$bin/coredns-v1.11.3" .
  gobuild "$root" "$bin/nats-server-v2.15.2" github.com/nats-io/nats-server/v2
  image nats-server v2.15.2 "$bin/nats-server-v2.15.2"
  gobuild "$here/pause" "$bin/pause" .
  image pause 1 "$bin/pause"
  # Knative's floor: a minimal Service's image, packed as Sluice's is (the cold-start scenario).
  gobuild "$here/floor" "$bin/floor-1" .
  image floor 1 "$bin/floor-1"
  # kn's client-pkg pseudo-version is not in the checksum database; go.sum pins it.
  GONOSUMDB=knative.dev/client-pkg gobuild "$here/tools/kn" "$bin/kn-v0.42.0" knative.dev/client/cmd/kn
  ln -sf "$bin/kn-v0.42.0" "$bin/kn"

  # versitygw, the S3 server, as in .ci/deps.sh, but static for a FROM-scratch image.
  if [ ! -x "$bin/versitygw-v1.8.0" ]; then
    log "building versitygw"
    GOBIN="$bin/gw.tmp" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
    mv "$bin/gw.tmp/versitygw" "$bin/versitygw-v1.8.0" && rmdir "$bin/gw.tmp"
  fi
  image versitygw v1.8.0 "$bin/versitygw-v1.8.0"
}
traefik() {
  # Traefik is built as its own main module (its replace directives apply only there), from
  # the module proxy's copy of its source.
  tf=v3.6.12
  if [ ! -x "$bin/traefik-$tf" ]; then
    log "building traefik $tf"
    src=$(go mod download -json "github.com/traefik/traefik/v3@$tf" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    (cd "$src" && go build -trimpath -ldflags="-s -w" -o "$bin/traefik-$tf.tmp" ./cmd/traefik)
    mv "$bin/traefik-$tf.tmp" "$bin/traefik-$tf"
  fi
  image traefik "$tf" "$bin/traefik-$tf"
}

# The trainer pods' runtime (TestTrainersAsPods): Debian's Python 3.11 and numpy's manylinux
# wheel, what a user's `FROM python:3.11-slim` plus `pip install numpy` would hold, as one layer.
trainer_python() {
  local layer=$cache/trainer/python-3.11-numpy-2.3.5.tar
  [ -f "$layer" ] && return 0
  log "building the trainer's Python layer"
  local work=$cache/trainer/work
  rm -rf "$work" && mkdir -p "$work/debs" "$work/root/usr/lib/python3/dist-packages"
  local debs=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3-minimal libc6 libgcc-s1
    libstdc++6 zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1 libcrypt1 media-types)
  # apt's lists may be missing or stale on a fresh machine: update once and retry.
  (cd "$work/debs" && { apt-get download -qq "${debs[@]}" 2>/dev/null ||
    { apt-get update -qq && apt-get download -qq "${debs[@]}" 2>/dev/null; }; })
  for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/root"; done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$work" numpy==2.3.5
  python3 -m zipfile -e "$work"/numpy-2.3.5-*.whl "$work/root/usr/lib/python3/dist-packages/"
  rm -rf "$work"/root/usr/share/{doc,man,info,lintian,locale}
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/root" -cf "$layer.tmp" .
  mv "$layer.tmp" "$layer" && rm -rf "$work"
}

# The builds at once (a fresh machine spends most of CI's first run here): one build alone
# leaves a core idle while it links or fetches modules. deps.sh is the test suite's own.
pids=()
kubernetes & pids+=($!)
tools & pids+=($!)
traefik & pids+=($!)
mkdir -p "$cache/trainer" && { trainer_python & pids+=($!); }
bash "$root/.ci/deps.sh" >/dev/null & pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for p in "${pids[@]}"; do wait "$p"; done
trap - EXIT

# Sluice's own image, as `make image` builds it (static, libjpeg-turbo), every time.
rev=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo dev)
(cd "$root" && CGO_ENABLED=1 go run ./deploy/image --out "$cache/sluice-image" --tag "dev.local/sluice:e2e" --version "$rev" >/dev/null)
cp "$cache/sluice-image/sluice.tar" "$images/sluice-e2e.tar"
# The trainer pods' image, every time: the Python layer, then the client and ranks.py on top.
client=$cache/trainer/client
rm -rf "$client" && mkdir -p "$client/usr/lib/python3/dist-packages" "$client/opt/sluice"
cp -r "$root/clients/python/sluice" "$client/usr/lib/python3/dist-packages/"
cp "$root/clients/python/tests/ranks.py" "$client/opt/sluice/"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --exclude=__pycache__ -C "$client" -cf "$client.tar" .
(cd "$root" && go run ./test/e2e/cluster/pack --tag dev.local/sluice-trainer:e2e --out "$images/sluice-trainer-e2e.tar" \
  --layer "$cache/trainer/python-3.11-numpy-2.3.5.tar" --layer "$client.tar" \
  --env PATH=/usr/bin:/bin --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
  --entrypoint "/usr/bin/python3 /opt/sluice/ranks.py")
log "done in $((SECONDS - t0))s"
echo "$cache"
