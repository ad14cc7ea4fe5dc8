#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: libjpeg-turbo's headers for
# the `turbojpeg` build. Idempotent; does nothing when they are present.
set -euo pipefail
if [ -f /usr/include/jpeglib.h ] || [ -f /usr/include/x86_64-linux-gnu/jpeglib.h ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to apt-get install libjpeg62-turbo-dev" >&2; exit 1; }
  sudo=sudo
fi
echo "deps: installing libjpeg62-turbo-dev libturbojpeg0-dev (Debian)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq libjpeg62-turbo-dev libturbojpeg0-dev >/dev/null
